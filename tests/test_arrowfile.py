"""olympia.arrowfile: node files laid out without pyarrow's writer are valid
Arrow IPC files that pyarrow reads back to the same rows, and the reader of
that layout agrees with the general one on every file, valid or damaged."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olympia import arrowfile
from olympia.codec import (
    ACTION_BATCH_ROWS,
    ACTIONS_MAGIC,
    MAGIC,
    META_CHECKSUM,
    META_MAGIC,
    META_VERSION,
    SCHEMA,
    SUPPORTED_FORMAT_VERSIONS,
    NodeFile,
    _checksum,
    _read_rows,
    _utf8,
    _write_file,
    decode_actions,
    decode_node,
    encode_actions,
    encode_node,
)
from olympia.errors import CorruptCatalogError
from olympia.node import Node

pytestmark = pytest.mark.skipif(not arrowfile.ENABLED, reason="big-endian machine")

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_rows = st.integers(0, 70).flatmap(
    lambda n: st.tuples(
        st.lists(_text, min_size=n, max_size=n),
        st.lists(st.none() | st.binary(max_size=20), min_size=n, max_size=n),
        st.lists(st.none() | _text, min_size=n, max_size=n),
        st.lists(st.none() | _text, min_size=n, max_size=n),
    )
)


def _runs(rows: list, cuts: list[int] | None = None) -> list:
    """``rows`` as runs (arrowfile.column_of_runs): each stretch of null rows
    a count, each stretch of set rows a list, further cut at ``cuts``."""
    runs: list = []
    for i, row in enumerate(rows):
        cut = bool(cuts) and i in cuts
        if row is None:
            if runs and isinstance(runs[-1], int) and not cut:
                runs[-1] += 1
            else:
                runs.append(1)
        elif runs and isinstance(runs[-1], list) and not cut:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def _rows_of(runs: list) -> list:
    return [row for run in runs for row in ([None] * run if isinstance(run, int) else run)]


def _bad(why: str) -> CorruptCatalogError:
    return CorruptCatalogError(why)


def _pyarrow_file(keys, values, defs, children, version=2):
    """The same rows written by pyarrow's own writer (earlier builds)."""
    crc = _checksum([_utf8(keys), values, _utf8(defs), _utf8(children)])
    schema = SCHEMA.with_metadata(
        {
            META_MAGIC: MAGIC,
            META_VERSION: str(version).encode(),
            META_CHECKSUM: f"crc32:{crc:08x}".encode(),
        }
    )
    arrays = [
        pa.array(keys, pa.utf8()),
        pa.array(values, pa.binary()),
        pa.array(defs, pa.utf8()),
        pa.array(children, pa.utf8()),
    ]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))
    return sink.getvalue().to_pybytes()


@settings(max_examples=150, deadline=None)
@given(_rows, st.sampled_from(SUPPORTED_FORMAT_VERSIONS))
def test_pyarrow_reads_the_rows_and_metadata_of_a_file_laid_out_here(rows, version):
    keys, values, defs, children = rows
    data = _write_file(MAGIC, version, [keys], [values], [defs], [children], "zstd")
    assert arrowfile.read(data, SCHEMA, MAGIC, SUPPORTED_FORMAT_VERSIONS) is not None

    reader = pa.ipc.open_file(pa.BufferReader(data))
    assert reader.num_record_batches == 1
    table = reader.read_all()
    for col in table.columns:
        for chunk in col.chunks:
            chunk.validate(full=True)
    assert table.column("key").to_pylist() == keys
    assert table.column("value").to_pylist() == values
    assert table.column("def").to_pylist() == defs
    assert table.column("child").to_pylist() == children
    crc = _checksum([_utf8(keys), values, _utf8(defs), _utf8(children)])
    assert reader.schema.metadata == {
        META_MAGIC: MAGIC,
        META_VERSION: str(version).encode(),
        META_CHECKSUM: f"crc32:{crc:08x}".encode(),
    }
    assert reader.schema.remove_metadata() == SCHEMA


@settings(max_examples=150, deadline=None)
@given(_rows, st.sampled_from(SUPPORTED_FORMAT_VERSIONS))
def test_both_readers_give_the_same_rows(rows, version):
    """Our layout through the reader of this module; pyarrow's layout of the
    same rows through the general reader: the same version and rows."""
    keys, values, defs, children = rows
    ours = _write_file(MAGIC, version, [keys], [values], [defs], [children], "none")
    theirs = _pyarrow_file(keys, values, defs, children, version)
    assert arrowfile.read(theirs, SCHEMA, MAGIC, SUPPORTED_FORMAT_VERSIONS) is None
    expected = (version, keys, values, defs, children)
    if None in keys:  # pragma: no cover - keys are never null here
        raise AssertionError
    assert _read_rows(ours, MAGIC, SUPPORTED_FORMAT_VERSIONS, _bad) == expected
    assert _read_rows(theirs, MAGIC, SUPPORTED_FORMAT_VERSIONS, _bad) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(65, 300), st.floats(0.0, 1.0), st.randoms(use_true_random=False))
def test_columns_of_many_rows_mostly_null_read_alike_both_ways(n, null_share, rnd):
    """A root's or an internal node's value column is null in most rows and
    set in a few (system rows, actions): more rows than a machine word has
    bits, nulls anywhere. This module's reader and the general one give the
    same rows; pyarrow reads the file to the same rows too."""
    keys = sorted({f"k{rnd.randrange(10**6):07d}" for _ in range(n)})
    n = len(keys)
    values = [None if rnd.random() < null_share else b"v" * rnd.randrange(0, 40) for _ in keys]
    children = [None if v is not None else f"node/{i:013d}-ab.arrow" for i, v in enumerate(values)]
    defs: list[str | None] = [None] * n
    ours = _write_file(MAGIC, 2, _runs(keys), _runs(values), _runs(defs), _runs(children), "none")
    theirs = _pyarrow_file(keys, values, defs, children)
    assert arrowfile.read(ours, SCHEMA, MAGIC, SUPPORTED_FORMAT_VERSIONS) is not None
    expected = (2, keys, values, defs, children)
    assert _read_rows(ours, MAGIC, SUPPORTED_FORMAT_VERSIONS, _bad) == expected
    assert _read_rows(theirs, MAGIC, SUPPORTED_FORMAT_VERSIONS, _bad) == expected
    table = pa.ipc.open_file(pa.BufferReader(ours)).read_all()
    assert table.column("value").to_pylist() == values
    assert table.column("child").to_pylist() == children


@pytest.mark.parametrize("n", [5, arrowfile._PYARROW_ROWS - 1, arrowfile._PYARROW_ROWS, 60])
@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("limit", [None, 3])
def test_rows_made_either_way_are_the_rows_and_bad_utf8_goes_to_the_general_path(n, nulls, limit):
    """A column's rows are made one by one when it is short and by pyarrow
    from _PYARROW_ROWS rows: either way they are the rows written (text not
    ASCII too, nulls in runs, only the first ``limit``), and a row of text
    that is not UTF-8 makes the column the general path's (None here)."""
    rows: list[bytes | None] = [f"ré{i}".encode() if i % 3 else b"ab" * i for i in range(n)]
    if nulls:
        rows = [None if i % 4 == 1 else r for i, r in enumerate(rows)]
    col = arrowfile.column(rows)
    body = memoryview(col.validity + bytes(-len(col.validity) % 8) + col.offsets + col.data)
    v_len, o_at = len(col.validity), len(col.validity) + (-len(col.validity) % 8)
    spans = (0, v_len, o_at, len(col.offsets), o_at + len(col.offsets), len(col.data))
    made = rows if limit is None else rows[:limit]
    text = [None if r is None else r.decode() for r in made]
    for as_text, expected in ((True, text), (False, made)):
        got = arrowfile._column_rows(body, n, col.nulls, spans, as_text, limit)
        assert got is not None
        assert got[0] == expected
        assert got[1] == col.crc_lengths and got[2] == col.data
    broken = list(rows)
    broken[2] = b"\xff\xfe"  # row 2 is made whatever the limit
    col = arrowfile.column(broken)
    body = memoryview(col.validity + bytes(-len(col.validity) % 8) + col.offsets + col.data)
    spans = (0, v_len, o_at, len(col.offsets), o_at + len(col.offsets), len(col.data))
    assert arrowfile._column_rows(body, n, col.nulls, spans, True, limit) is None
    assert arrowfile._column_rows(body, n, col.nulls, spans, False, limit) is not None


_run_rows = st.lists(st.none() | st.binary(max_size=6), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_run_rows, st.lists(st.integers(0, 40), max_size=6), st.booleans(), st.booleans())
def test_a_column_given_as_runs_is_laid_out_as_its_rows(rows, cuts, as_text, mixed):
    """column_of_runs / text_column_of_runs lay out exactly what column /
    text_column lay out for the same rows in one list, however the rows are
    cut into runs: runs of null rows given as counts, empty runs, runs of
    set rows, and (``mixed``) runs that hold both."""
    if as_text:
        rows = [None if r is None else r.decode("latin-1") + "é" * (len(r) % 2) for r in rows]
    runs = _runs(rows, cuts)
    if mixed:  # each two neighbouring runs made one list of their rows
        runs = [_rows_of(runs[i : i + 2]) for i in range(0, len(runs), 2)]
    runs = [0, *runs, [], 0]  # empty runs change nothing
    assert _rows_of(runs) == rows
    if as_text:
        assert arrowfile.text_column_of_runs(runs) == arrowfile.text_column(rows)
    else:
        assert arrowfile.column_of_runs(runs) == arrowfile.column(rows)


@settings(max_examples=100, deadline=None)
@given(_rows, st.integers(0, 8))
def test_a_file_read_for_its_system_rows_alone_has_the_checksum_of_all_rows(rows, n_system):
    """arrowfile.read(system_only=True) makes the leading $ rows and nothing
    else, and its checksum is the whole file's: a changed byte in any row
    after them is still found."""
    keys, values, defs, children = rows
    system = [f"$s{i}" for i in range(n_system)]
    keys = [*system, *(k.lstrip("$") or "k" for k in keys), "last"]
    values = [*(b"x%d" % i for i in range(n_system)), *values, b"<the last value>"]
    defs = [None] * n_system + defs + [None]
    children = [None] * n_system + children + [None]
    data = _write_file(MAGIC, 2, [keys], [values], [defs], [children], "none")
    full = arrowfile.read(data, SCHEMA, MAGIC, (2,))
    part = arrowfile.read(data, SCHEMA, MAGIC, (2,), system_only=True)
    assert full is not None and part is not None
    assert part[:3] == full[:3] and part[1] == part[2]
    lead = next((i for i, k in enumerate(keys) if not k.startswith("$")), len(keys))
    assert part[3] == [column[:lead] for column in full[3]]
    # A changed byte in the last row's value (after the system rows) is seen.
    assert data.count(b"<the last value>") == 1
    damaged = data.replace(b"<the last value>", b"<the last valuE>")
    again = arrowfile.read(damaged, SCHEMA, MAGIC, (2,), system_only=True)
    assert again is not None and again[2] != again[1]


def _leaf_file() -> tuple[NodeFile, bytes]:
    keys = tuple(f"AAACns{i:04d}" for i in range(40))
    nf = NodeFile(Node(0, keys, tuple(b"v%d" % i for i in range(40))), created_at_millis=5)
    return nf, encode_node(nf, "none")


def _message_at(data: bytes) -> int:
    """Where the record batch message of a file laid out here starts."""
    template = arrowfile._template(SCHEMA, MAGIC, 2)
    assert template is not None
    return len(template.head[0]) + 8 + len(template.head[1])


def test_a_node_file_written_here_is_read_back_by_this_module_and_equals_pyarrows():
    nf, data = _leaf_file()
    assert arrowfile.read(data, SCHEMA, MAGIC, (2,)) is not None
    node = decode_node(data, "node/x").node
    assert node.keys == nf.node.keys and node.values == nf.node.values
    # An earlier build's file of the same node decodes to the same node.
    rows = _read_rows(data, MAGIC, (2,), _bad)
    theirs = _pyarrow_file(*rows[1:])
    assert decode_node(theirs, "node/x").node.keys == node.keys
    assert decode_node(theirs, "node/x").node.values == node.values


def _with(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


@pytest.mark.parametrize(
    "what",
    [
        "offset past the data",
        "offsets descending",
        "offsets of an unused column descending",
        "negative first offset",
        "buffer past the body",
        "null count not the bitmap's",
        "rows more than the offsets",
        "body length",
    ],
)
def test_hostile_lengths_and_offsets_are_refused_naming_the_file(what):
    """Each lie about the layout, in a file whose checksum still holds: the
    reader of this module passes it to the general reader, which refuses it
    with a CorruptCatalogError naming the file (never a pyarrow error or an
    out-of-bounds read)."""
    _, data = _leaf_file()
    at = _message_at(data)
    spans = at + 168  # the buffers: (offset, length) x 12
    body = at + 8 + arrowfile._HEADER_SIZE
    key_offsets = body + struct.unpack_from("<q", data, spans + 16)[0]
    if what == "offset past the data":
        bad = _with(data, key_offsets + 4 * 20, "<i", 1 << 20)
    elif what == "offsets descending":
        bad = _with(data, key_offsets + 4 * 20, "<i", 1)
    elif what == "offsets of an unused column descending":
        # the def column: every row null, offsets all 0; the bytes are no
        # row's, but malformed buffers are damage all the same (§3.3)
        def_offsets = body + struct.unpack_from("<q", data, spans + 16 * 7)[0]
        bad = _with(data, def_offsets + 4 * 20, "<i", 8)
    elif what == "negative first offset":
        bad = _with(data, key_offsets, "<i", -4)
    elif what == "buffer past the body":
        bad = _with(data, spans + 16 * 2 + 8, "<q", 1 << 30)
    elif what == "null count not the bitmap's":
        bad = _with(data, at + 96 + 8, "<q", 3)  # the key column says 3 nulls
    elif what == "rows more than the offsets":
        bad = _with(data, at + 72, "<q", 1000)
    else:
        bad = _with(data, at + 32, "<q", struct.unpack_from("<q", data, at + 32)[0] + 8)
    assert bad != data
    assert arrowfile.read(bad, SCHEMA, MAGIC, (2,)) is None
    with pytest.raises(CorruptCatalogError, match="node/hostile"):
        decode_node(bad, "node/hostile")


def test_every_byte_of_the_header_and_footer_is_refused_or_harmless():
    """Each byte outside the column data replaced: the file is refused as
    damaged, or it still holds the same rows (padding, bytes pyarrow ignores)."""
    nf, data = _leaf_file()
    at = _message_at(data)
    body = at + 8 + arrowfile._HEADER_SIZE
    body_length = struct.unpack_from("<q", data, at + 32)[0]
    positions = list(range(body)) + list(range(body + body_length, len(data)))
    for i in positions:
        for value in (data[i] ^ 0x01, data[i] ^ 0x80):
            damaged = data[:i] + bytes([value]) + data[i + 1 :]
            try:
                got = decode_node(damaged, "node/d")
            except CorruptCatalogError as exc:
                assert "node/d" in str(exc)
                continue
            assert got.node.keys == nf.node.keys, i
            assert got.node.values == nf.node.values, i


@pytest.mark.parametrize("text", [False, True])
def test_a_null_row_that_covers_bytes_is_left_out_of_rows_and_checksum(text):
    """Arrow lets a null row's offsets span bytes, which are no row's: the
    reader here leaves them out of the rows and of the checksum's bytes, as
    the general reader does (pyarrow's writer never makes such a row; a
    hostile one might)."""
    validity = bytes([0b101])
    offsets = struct.pack("<4i", 0, 2, 4, 6)
    data = b"aaXXbb"
    body = memoryview(validity + bytes(7) + offsets + data)
    spans = (0, 1, 8, 16, 24, 6)
    values, lengths, present = arrowfile._column_rows(body, 3, 1, spans, text)
    expected = ["aa", None, "bb"] if text else [b"aa", None, b"bb"]
    assert values == expected
    array_ = pa.Array.from_buffers(
        pa.binary(), 3, [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)], 1
    )
    assert array_.to_pylist() == [b"aa", None, b"bb"]
    assert lengths == struct.pack("<3i", 2, -1, 2)
    assert present == b"aabb"


def test_bytes_like_input_other_than_bytes_is_read_the_general_way():
    """A memoryview or bytearray of a node file decodes like its bytes."""
    nf, data = _leaf_file()
    for view in (bytearray(data), memoryview(data)):
        assert arrowfile.read(view, SCHEMA, MAGIC, (2,)) is None  # type: ignore[arg-type]
        assert decode_node(view, "node/v").node.keys == nf.node.keys  # type: ignore[arg-type]


# --- action files (spec/format.md §3.5): no checksum, so always pyarrow's
# layout (for the hundreds of rows an action file holds, pyarrow writes and
# reads them faster than this module) ----------------------------------------


def _actions(n: int, value_size: int = 40) -> list[tuple[str, bytes]]:
    return [(f"t/ns/täble{i}", bytes([i % 251]) * value_size) for i in range(n)]


def test_action_files_of_one_batch_or_several_compressed_or_not_read_back_alike():
    """From 64 KiB of column data the file is compressed (§3.5), and past
    ACTION_BATCH_ROWS rows it has several batches: each reads back to the
    actions it was given, with no olympia.checksum in its schema."""
    big = _actions(2000, value_size=60)  # about 150 KiB
    data = encode_actions("t", iter(big), len(big), 1, compression="zstd")
    meta = pa.ipc.open_file(pa.BufferReader(data)).schema.metadata
    assert meta == {META_MAGIC: ACTIONS_MAGIC, META_VERSION: b"2"}
    assert list(decode_actions(data, "act/x").actions) == big
    same = encode_actions("t", iter(big), len(big), 1, compression="none")
    assert len(same) > len(data)
    assert decode_actions(same, "act/y") == decode_actions(data, "act/x")
    many = [(f"k{i}", b"") for i in range(ACTION_BATCH_ROWS)]
    data = encode_actions("t", iter(many), len(many), 1, compression="none")
    assert pa.ipc.open_file(pa.BufferReader(data)).num_record_batches == 2
    assert list(decode_actions(data, "act/z").actions) == many
    with pytest.raises(ValueError, match="promised 3 actions and got 2"):
        encode_actions("t", iter(_actions(2)), 3, 1)


def test_every_byte_of_a_small_action_file_is_refused_or_read_as_rows():
    """Each byte of a small action file, flipped: decoding refuses it
    as damage naming the file, or reads rows (a flipped byte of the column
    data changes a row: the digest in the file's name, which the store
    checks, is what catches that), never another exception."""
    actions = _actions(5, value_size=3)
    data = encode_actions("t", iter(actions), 5, 1)
    changed = 0
    for i in range(len(data)):
        damaged = data[:i] + bytes([data[i] ^ 0x41]) + data[i + 1 :]
        try:
            got = decode_actions(damaged, "act/d")
        except CorruptCatalogError as exc:
            assert "act/d" in str(exc)
            continue
        changed += got.actions != tuple(actions)
        assert len(got.actions) == 5, i
    assert changed > 0  # some flips land in the rows' bytes
