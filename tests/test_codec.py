from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_spec_conformance import spec_checksum

import olympia
from olympia import arrowfile, layout
from olympia.codec import (
    COMPRESSION_MIN_BYTES,
    MAGIC,
    SCHEMA,
    SUPPORTED_FORMAT_VERSIONS,
    GroupEntry,
    NodeFile,
    RootInfo,
    _checksum,
    _child_lines,
    _children_inline,
    _column_checksum,
    _is_file_path,
    _utf8,
    decode_node,
    encode_node,
)
from olympia.errors import CorruptCatalogError
from olympia.node import DefRef, Node
from olympia.proto.objects_pb2 import CatalogDefinition

keys = st.lists(st.text(min_size=1, max_size=12).map(lambda s: "AAAC" + s), unique=True).map(sorted)


@given(keys, st.sampled_from(["none", "zstd", "lz4"]), st.data())
def test_leaf_round_trip(ks, compression, data):
    values = tuple(
        data.draw(
            st.one_of(
                st.binary(max_size=40),
                st.builds(
                    lambda h: DefRef(f"def/{h}.binpb"),
                    st.text("abcdef0123456789", min_size=1, max_size=8),
                ),
            )
        )
        for _ in ks
    )
    nf = NodeFile(Node(0, tuple(ks), values), created_at_millis=17)
    back = decode_node(encode_node(nf, compression), "node/x.arrow")
    assert back.node.keys == tuple(ks)
    assert back.node.values == values
    assert back.created_at_millis == 17
    assert back.root is None


def test_internal_root_round_trip():
    info = RootInfo(
        version=7,
        catalog_def=b"\x08\x01",
        transaction_id="t1",
        previous_root="vn/" + "0" * 64,
        rollback_from_root="vn/" + "1" * 64,
        actions=(("AAACa", b"act1"), ("AAACb", b"act2")),
    )
    node = Node(2, ("AAACa", "AAACm"), (), ("node/a.arrow", "node/b.arrow"))
    back = decode_node(encode_node(NodeFile(node, 5, info)), "vn/x")
    assert back.root == info
    assert back.node.children == ("node/a.arrow", "node/b.arrow")
    assert back.node.height == 2


def _ipc_compression(data: bytes) -> set[str]:
    """The IPC buffer codecs a node file's record batches use ("none" if none)."""
    import pyarrow.ipc

    reader = pyarrow.ipc.open_file(pa.BufferReader(data))
    batch = reader.get_batch(0)
    plain = pa.BufferOutputStream()
    with pyarrow.ipc.new_file(plain, batch.schema) as w:
        w.write_batch(batch)
    # A compressed file stores a codec in each record batch's message header;
    # comparing with a re-encoding without compression tells them apart
    # without parsing the flatbuffers ourselves.
    # olympia.arrowfile writes only uncompressed files, in a layout of its own.
    ours = arrowfile.read(data, SCHEMA, MAGIC, SUPPORTED_FORMAT_VERSIONS) is not None
    return {"none"} if ours or plain.getvalue().to_pybytes() == data else {"compressed"}


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_small_nodes_are_written_uncompressed_whatever_the_codec(compression):
    """format.md §3: below COMPRESSION_MIN_BYTES of column data a writer uses
    no IPC compression, whatever node_compression says (the codec's setup per
    buffer costs more time than the bytes it saves)."""
    keys = tuple(f"AAACns{i:04d}" + " " * 120 for i in range(100))
    node = Node(0, keys, tuple(b"v" * 60 for _ in keys))
    nf = NodeFile(node, created_at_millis=17)
    data = encode_node(nf, compression)
    assert data == encode_node(nf, "none")
    assert _ipc_compression(data) == {"none"}
    assert decode_node(data, "node/x.arrow").node.keys == keys


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_large_nodes_use_the_catalog_codec(compression):
    n = COMPRESSION_MIN_BYTES // 100 + 1
    keys = tuple(f"AAACns{i:06d}" + " " * 100 for i in range(n))
    node = Node(0, keys, tuple(b"x" * 20 for _ in keys))
    nf = NodeFile(node, created_at_millis=17)
    data = encode_node(nf, compression)
    plain = encode_node(nf, "none")
    assert _ipc_compression(data) == {"compressed"}
    assert len(data) < len(plain) // 4
    back = decode_node(data, "node/x.arrow")
    assert back.node.keys == keys and back.node.values == node.values


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_small_compressed_nodes_of_earlier_writers_are_read(compression):
    """Writers before the size threshold compressed every node: a reader
    takes each file as it is, compressed or not."""
    nf = SAMPLES["leaf"]("none")
    plain = encode_node(nf, "none")
    batch = pa.ipc.open_file(pa.BufferReader(plain)).get_batch(0)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, batch.schema, options=options) as w:
        w.write_batch(batch)
    old = sink.getvalue().to_pybytes()
    assert old != plain and _ipc_compression(old) == {"compressed"}
    assert _same(decode_node(old, "node/x.arrow"), decode_node(plain, "node/x.arrow"))


def _valid() -> bytes:
    return encode_node(NodeFile(Node(0, ("AAACa", "AAACb"), (b"1", b"2")), 1), "none")


def test_truncated_file_names_the_file():
    data = _valid()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(CorruptCatalogError, match=r"node/t\.arrow"):
            decode_node(data[:cut], "node/t.arrow")


def test_flipped_bytes_are_detected():
    data = bytearray(_valid())
    # the value bytes b"1" and b"2" sit in the uncompressed body: damage one
    idx = data.find(b"AAACb")
    data[idx + 4] = ord("c")
    with pytest.raises(CorruptCatalogError, match=r"node/f\.arrow"):
        decode_node(bytes(data), "node/f.arrow")


def test_foreign_arrow_file_is_refused():
    sink = pa.BufferOutputStream()
    table = pa.table({"a": [1, 2]})
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(CorruptCatalogError, match="magic"):
        decode_node(sink.getvalue().to_pybytes(), "node/foreign.arrow")


def test_future_format_version_is_refused():
    schema = SCHEMA.with_metadata(
        {b"olympia.magic": b"olympia-node", b"olympia.format-version": b"3"}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as w:
        w.write_table(pa.table([pa.array([], t.type) for t in SCHEMA], schema=schema))
    with pytest.raises(CorruptCatalogError, match="format version 3"):
        decode_node(sink.getvalue().to_pybytes(), "node/v3.arrow")


def test_random_bytes_are_refused():
    with pytest.raises(CorruptCatalogError, match="unreadable Arrow IPC"):
        decode_node(b"hello world" * 10, "node/r.arrow")


# --- damaged bytes --------------------------------------------------------------------


def _root_file(compression: str) -> NodeFile:
    info = RootInfo(
        version=7,
        catalog_def=b"\x08\x01",
        transaction_id="t\u00e9",
        previous_root="vn/" + "0" * 64,
        rollback_from_root="vn/" + "1" + "0" * 63,
        actions=(("AAACa", b"act1"), ("AAACb\u00e9", b"act2")),
        begin_version=6,
        isolation="serializable",
        serialized_before=(3, 5),
    )
    node = Node(0, ("AAACa\u00e9", "AAACb"), (b"\x00\xff", DefRef("def/1-ab.binpb")))
    return NodeFile(node, 1_700_000_000_000, info)


SAMPLES = {
    "root": _root_file,
    "leaf": lambda c: NodeFile(Node(0, ("AAACa", "AAACb\u00e9"), (DefRef("def/x.binpb"), b"v")), 5),
    "internal": lambda c: NodeFile(
        Node(3, ("AAACa", "AAACm"), (), ("node/a.arrow", "node/b.arrow")), 5
    ),
}


def _same(a: NodeFile, b: NodeFile) -> bool:
    na, nb = a.node, b.node
    return (na.height, na.keys, na.values, na.children, a.created_at_millis, a.root, a.extra) == (
        nb.height, nb.keys, nb.values, nb.children, b.created_at_millis, b.root, b.extra
    )  # fmt: skip


@pytest.mark.parametrize("compression", ["none", "zstd", "lz4"])
@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_damaged_byte_is_refused_or_harmless(kind, compression):
    """Flip bits at every position of the file: the reader either refuses it as
    damaged, naming the file, or (padding, unused bytes) reads the same content.
    Never another exception, never a crash (damaged offsets used to make
    pyarrow read out of bounds)."""
    nf = SAMPLES[kind](compression)
    data = encode_node(nf, compression)
    assert _same(decode_node(data, "p"), nf)
    refused = 0
    for pos in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[pos] ^= mask
            try:
                back = decode_node(bytes(damaged), "node/damaged.arrow")
            except CorruptCatalogError as exc:
                assert "node/damaged.arrow" in str(exc)
                refused += 1
            else:
                assert _same(back, nf), f"byte {pos} ^ {mask:#x} changed the content unnoticed"
    assert refused > len(data)  # most positions matter


def _crc(columns: list[list[bytes | None]]) -> int:
    """format.md §3.1, written out independently of the codec."""
    crc = 0
    for col in columns:
        lengths = b"".join(
            (-1 if v is None else len(v)).to_bytes(4, "little", signed=True) for v in col
        )
        crc = zlib.crc32(lengths, crc)
        crc = zlib.crc32(b"".join(v for v in col if v is not None), crc)
    return crc


Row = tuple[bytes, bytes | None, bytes | None, bytes | None]


def _craft(rows: list[Row], compression: str = "none", format_version: int = 1) -> bytes:
    """A node file with the given raw column bytes and a *correct* checksum, so
    that only the checks after the checksum can refuse it."""
    cols = [list(c) for c in zip(*rows)] if rows else [[], [], [], []]
    schema = SCHEMA.with_metadata(
        {
            b"olympia.magic": b"olympia-node",
            b"olympia.format-version": str(format_version).encode(),
            b"olympia.checksum": f"crc32:{_crc(cols):08x}".encode(),
        }
    )
    arrays = [
        pa.array(col, pa.binary())
        if name == "value"
        else pa.array(col, pa.binary()).view(pa.utf8())
        for name, col in zip(SCHEMA.names, cols)
    ]
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with pa.ipc.new_file(sink, schema, options=options) as w:
        w.write_table(pa.table(arrays, schema=schema))
    return sink.getvalue().to_pybytes()


_ROOT = {"$version": b"7", "$catalog_def": b"\x08\x01", "$transaction_id": b"t", "$n_actions": b"0"}
_LEAF_ROW: Row = (b"AAACa", b"v", None, None)


def _rows(system: dict[str, bytes], *rows: Row, root: bool = False) -> list[Row]:
    """System rows (defaults overridden by ``system``) followed by ``rows``."""
    values = {"$created_at_millis": b"5", "$height": b"0", "$n_keys": b"1"}
    values.update(_ROOT if root else {})
    values.update(system)
    return [
        *((k.encode("utf-8", "surrogateescape"), v, None, None) for k, v in values.items()),
        *rows,
    ]


BAD_UTF8 = b"AAAC\xff\xfe"
CRAFTED = {
    "key not UTF-8": _rows({}, (BAD_UTF8, b"v", None, None)),
    "key a surrogate in UTF-8 form": _rows({}, (b"AAAC\xed\xa0\x80", b"v", None, None)),
    "def not UTF-8": _rows({}, (b"AAACa", None, b"def/\xff.binpb", None)),
    "child not UTF-8": _rows({"$height": b"1"}, (b"AAACa", None, None, b"node/\xc3")),
    "system key not UTF-8": _rows({"$\udcff": b"1"}, _LEAF_ROW),
    "transaction id not UTF-8": _rows({"$transaction_id": b"\xff"}, _LEAF_ROW, root=True),
    "previous root not UTF-8": _rows({"$previous_root": b"vn/\x80"}, _LEAF_ROW, root=True),
    "isolation not UTF-8": _rows({"$isolation": b"\xc0\xaf"}, _LEAF_ROW, root=True),
    "action key not UTF-8": _rows(
        {"$n_actions": b"1"}, _LEAF_ROW, (BAD_UTF8, b"act", None, None), root=True
    ),
    "height not ASCII": _rows({"$height": b"\xd9\xa0"}, _LEAF_ROW),
    "height signed": _rows({"$height": b"+0"}, _LEAF_ROW),
    "n_keys with separator": _rows({"$n_keys": b"0_1"}, _LEAF_ROW),
    "created_at beyond year 9999": _rows({"$created_at_millis": b"99999999999999999"}, _LEAF_ROW),
    "version 2**63": _rows({"$version": str(2**63).encode()}, _LEAF_ROW, root=True),
    "version with spaces": _rows({"$version": b" 7 "}, _LEAF_ROW, root=True),
    "begin version negative": _rows({"$begin_version": b"-1"}, _LEAF_ROW, root=True),
    "serialized_before beyond 2**63": _rows(
        {"$serialized_before": b"1," + str(2**63).encode()}, _LEAF_ROW, root=True
    ),
    "def outside def/": _rows({}, (b"AAACa", None, b"../../etc/passwd", None)),
    "def in a subfolder": _rows({}, (b"AAACa", None, b"def/a/b.binpb", None)),
    "def dot-dot": _rows({}, (b"AAACa", None, b"def/..", None)),
    "child outside node/": _rows({"$height": b"1"}, (b"AAACa", None, None, b"vn/latest")),
    "child absolute": _rows({"$height": b"1"}, (b"AAACa", None, None, b"/node/x.arrow")),
    "child holding two paths": _rows({"$height": b"1"}, (b"AAACa", None, None, b"node/a\nnode/b")),
    "child dot-dot": _rows({"$height": b"1"}, (b"AAACa", None, None, b"node/..")),
    "second child outside node/": _rows(
        {"$height": b"1", "$n_keys": b"2"},
        (b"AAACa", None, None, b"node/a"),
        (b"AAACb", None, None, b"node/b/c"),
    ),
    "internal row with a value": _rows({"$height": b"1"}, (b"AAACa", b"v", None, b"node/a")),
    "internal row without a child": _rows({"$height": b"1"}, (b"AAACa", None, None, None)),
    "leaf row with neither value nor def": _rows({}, (b"AAACa", None, None, None)),
    "leaf row with a child": _rows({}, (b"AAACa", b"v", None, b"node/a")),
    "keys out of order": _rows(
        {"$n_keys": b"2"}, (b"AAACb", b"v", None, None), (b"AAACa", b"v", None, None)
    ),
}


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_damage_behind_a_valid_checksum_is_refused(compression):
    """Files whose checksum holds but whose content breaks format.md §3: bytes
    that are not UTF-8 in every text column and system value, malformed
    integers, paths that leave their folder. Each must be refused as damage to
    the file; the checksum must not be what refused it."""
    good = _rows({}, (b"AAAC\xc3\xa9", None, b"def/x.binpb", None), root=True)
    back = decode_node(_craft(good, compression), "p")  # the helper writes valid files
    assert back.node.keys == ("AAAC\u00e9",)
    assert back.node.values == (DefRef("def/x.binpb"),)
    assert back.root is not None and back.root.transaction_id == "t"
    wrong: dict[str, str] = {}
    for case, rows in sorted(CRAFTED.items()):
        try:
            decode_node(_craft(rows, compression), "node/crafted.arrow")
        except CorruptCatalogError as exc:
            if "node/crafted.arrow" not in str(exc) or "checksum" in str(exc):
                wrong[case] = str(exc)
        except Exception as exc:  # anything else is the bug this test is about
            wrong[case] = f"{type(exc).__name__}: {exc}"
        else:
            wrong[case] = "accepted"
    assert wrong == {}


def test_invalid_utf8_is_reported_as_checksum_damage_when_the_checksum_is_stale():
    data = bytearray(encode_node(SAMPLES["leaf"]("none"), "none"))
    pos = data.find(b"AAACb")
    data[pos + 4] = 0xFF  # the first byte of the key's last character: no longer UTF-8
    with pytest.raises(CorruptCatalogError, match="checksum mismatch"):
        decode_node(bytes(data), "node/x.arrow")


# --- damaged roots, through the catalog API ----------------------------------------------


def _catalog_with_one_commit(tmp_path: Path) -> tuple[str, Path]:
    uri = str(tmp_path / "c")
    with olympia.create_catalog(uri, node_compression="none") as cat, cat.transaction() as t:
        t.create_namespace("n", {"k": "v\u00e9"})
        t.create_table("n", "t", "m/t")
    return uri, tmp_path / "c" / layout.root_path(1)


def _observe(uri: str) -> tuple[object, ...]:
    cat = olympia.load_catalog(uri)
    view = cat.latest()
    seen = (
        cat.version,
        view.describe_namespace("n"),
        view.describe_table("n", "t"),
        [(h.version, h.transaction_id, h.isolation, h.actions) for h in cat.history()],
    )
    cat.close()
    return seen


def test_every_damaged_byte_of_a_root_is_refused_through_the_catalog(tmp_path):
    uri, root = _catalog_with_one_commit(tmp_path)
    data = root.read_bytes()
    expected = _observe(uri)
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0xFF
        root.write_bytes(bytes(damaged))
        try:
            seen = _observe(uri)
        except CorruptCatalogError as exc:
            assert root.name in str(exc), f"byte {pos}: {exc}"
        else:
            assert seen == expected, f"byte {pos} changed what the catalog shows, unnoticed"


def test_unusable_catalog_definition_in_a_root_is_refused(tmp_path):
    """A root whose checksum holds but whose definition this reader cannot use
    (it would fail later, inside pyarrow or the key codec) is damage to that root."""
    uri, root = _catalog_with_one_commit(tmp_path)
    good = decode_node(root.read_bytes(), "vn/x")
    assert good.root is not None
    bad_definitions = {
        "unknown compression": CatalogDefinition(
            format_version=1, node_order=8, node_compression="gzip"
        ),
        "node order 2": CatalogDefinition(format_version=1, node_order=2),
        "zero name size": CatalogDefinition(
            format_version=1, node_order=8, namespace_name_max_size=0
        ),
        "unknown isolation": CatalogDefinition(
            format_version=1, node_order=8, default_isolation="x"
        ),
    }
    accepted = []
    for case, definition in bad_definitions.items():
        info = replace(good.root, catalog_def=definition.SerializeToString())
        root.write_bytes(encode_node(replace(good, root=info), "none"))
        try:
            olympia.load_catalog(uri).latest()
        except CorruptCatalogError as exc:
            assert root.name in str(exc) and "definition" in str(exc)
        else:
            accepted.append(case)
    assert accepted == []


def _group_root() -> RootInfo:
    return RootInfo(
        version=9,
        catalog_def=b"\x08\x02",
        transaction_id="holder",
        actions=(("AAACa", b"a1"), ("AAACb", b"b1"), ("AAACb", b"b2"), ("AAACc", b"c1")),
        begin_version=5,
        isolation="snapshot",
        group=(
            GroupEntry("holder", 7, "snapshot", 1),
            GroupEntry("m-1", 5, "serializable", 2),
            GroupEntry("m_2", 8, "snapshot", 1),
        ),
    )


def test_a_root_of_several_transactions_round_trips():
    info = _group_root()
    data = encode_node(NodeFile(Node(0, (), ()), 5, info), "none", format_version=2)
    back = decode_node(data, "vn/x")
    assert back.root == info
    assert back.root.transaction_ids == ("holder", "m-1", "m_2")
    assert replace(info, group=()).transaction_ids == ("holder",)
    with pytest.raises(ValueError, match="format version 2"):
        encode_node(NodeFile(Node(0, (), ()), 5, info), "none", format_version=1)


_GROUP_ROOT = {
    "$begin_version": b"5",
    "$isolation": b"snapshot",
    "$n_actions": b"0",
    "$group": b"t:5:snapshot:0,u:6:serializable:0",
}
GROUP_DAMAGE = {
    "entry without a count": b"t:5:snapshot,u:6:serializable:0",
    "unknown isolation": b"t:5:snapshot:0,u:6:repeatable:0",
    "id with a space": b"t:5:snapshot:0,u v:6:snapshot:0",
    "one transaction": b"t:5:snapshot:0",
    "empty": b"",
    "first is not the root's transaction": b"u:5:snapshot:0,t:6:snapshot:0",
    "first has another isolation": b"t:5:serializable:0,u:6:snapshot:0",
    "a transaction twice": b"t:5:snapshot:0,t:6:snapshot:0",
    "begin not below the version": b"t:5:snapshot:0,u:7:snapshot:0",
    "begin version not the smallest": b"t:6:snapshot:0,u:6:snapshot:0",
    "counts do not add up": b"t:5:snapshot:1,u:6:snapshot:0",
    "count with a sign": b"t:5:snapshot:+0,u:6:snapshot:0",
}


def test_a_damaged_group_is_refused():
    good = _rows(_GROUP_ROOT, _LEAF_ROW, root=True)
    back = decode_node(_craft(good, format_version=2), "vn/g")
    assert back.root is not None and back.root.transaction_ids == ("t", "u")
    wrong: dict[str, str] = {}
    for case, value in GROUP_DAMAGE.items():
        rows = _rows({**_GROUP_ROOT, "$group": value}, _LEAF_ROW, root=True)
        try:
            decode_node(_craft(rows, format_version=2), "vn/g")
        except CorruptCatalogError as exc:
            if "vn/g" not in str(exc) or ("$group" not in str(exc) and "$begin" not in str(exc)):
                wrong[case] = str(exc)
        except Exception as exc:  # anything else is a bug
            wrong[case] = f"{type(exc).__name__}: {exc}"
        else:
            wrong[case] = "accepted"
    assert wrong == {}
    with pytest.raises(CorruptCatalogError, match="format version 1"):
        decode_node(_craft(good, format_version=1), "vn/g")


_VN = "vn/" + "01" * 31 + "00"  # a root file name: 63 binary digits then 0
BAD_CHILD_REFS = {
    "name ending in 1": "vn/" + "0" * 63 + "1/0",
    "name too short": "vn/" + "0" * 63 + "/0",
    "index with a leading zero": _VN + "/01",
    "index of ten digits": _VN + "/1234567890",
    "index missing": _VN + "/",
    "line break": _VN + "/1\n",
    "the hint file": "vn/latest",
    "node path with a subfolder": "node/a/b",
}


@pytest.mark.parametrize("case", sorted(BAD_CHILD_REFS))
def test_children_of_a_format_2_node_are_node_files_or_inline_references(case):
    good = [b"node/a.arrow", (_VN + "/0").encode(), (_VN + "/123456789").encode()]

    def internal(children: list[bytes]) -> bytes:
        rows = [(f"AAAC{i}".encode(), None, None, child) for i, child in enumerate(children)]
        return _craft(
            _rows({"$height": b"1", "$n_keys": str(len(rows)).encode()}, *rows), format_version=2
        )

    back = decode_node(internal(good), "node/n")
    assert back.node.children == tuple(c.decode() for c in good)
    bad = [*good[:2], BAD_CHILD_REFS[case].encode()]
    with pytest.raises(CorruptCatalogError, match="inline node reference"):
        decode_node(internal(bad), "node/n")
    # In a format version 1 file, only node files are children.
    with pytest.raises(CorruptCatalogError, match="node/"):
        decode_node(
            _craft(
                _rows(
                    {"$height": b"1", "$n_keys": b"2"},
                    (b"AAAC0", None, None, good[0]),
                    (b"AAAC1", None, None, good[1]),
                )
            ),
            "node/n",
        )


# --- the fast paths of encoding and decoding agree with the rules they shortcut ---

_text_row = st.one_of(st.text(max_size=5), st.text("ab./=-\n", max_size=5))
#: Columns as writers and readers hold them: nulls anywhere, or all leading
#: (system rows of a text column) or all trailing (values of an internal node).
_text_col = st.one_of(
    st.lists(st.one_of(st.none(), _text_row), max_size=10),
    st.tuples(st.integers(0, 4), st.lists(_text_row, max_size=6), st.integers(0, 4)).map(
        lambda t: [None] * t[0] + t[1] + [None] * t[2]
    ),
)
_bytes_col = st.one_of(
    st.lists(st.one_of(st.none(), st.binary(max_size=5)), max_size=10),
    st.tuples(st.integers(0, 4), st.lists(st.binary(max_size=5), max_size=6)).map(
        lambda t: [None] * t[0] + t[1]
    ),
    st.tuples(st.lists(st.binary(max_size=5), max_size=6), st.integers(0, 4)).map(
        lambda t: t[0] + [None] * t[1]
    ),
)


@given(st.one_of(_text_col, _bytes_col))
def test_checksum_a_writer_takes_from_its_arrays_is_the_checksum_of_the_rows(rows):
    """A writer's checksum, taken from the Arrow arrays it builds, is the
    checksum of the rows' bytes (format.md §3.1) for text that is not ASCII
    too: lengths are UTF-8 byte lengths, not characters."""
    text = any(isinstance(r, str) for r in rows)
    column = pa.array(rows, pa.utf8() if text else pa.binary())
    as_bytes = _utf8(rows) if text else rows
    assert _column_checksum(column.view(pa.binary()), 0) == _checksum([as_bytes])
    assert _checksum([as_bytes]) == spec_checksum([as_bytes])


@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=6)), max_size=40),
    st.integers(0, 3),
    st.integers(0, 3),
    st.booleans(),
)
def test_checksum_from_arrow_buffers_is_the_checksum_of_the_rows(rows, cut, tail, padded):
    """The checksum read from a column's Arrow buffers (no step per row) is
    the checksum of its rows (format.md §3.1) for any column: nulls in runs
    anywhere, an array that is a slice of a larger one (its offsets do not
    start at 0), and null rows whose offsets span bytes (allowed by Arrow,
    not part of the checksum)."""
    whole = pa.array([b"x"] * cut + rows + [b"y"] * tail, pa.binary())
    if padded:  # give every null row bytes: rebuild with the nulls' slots non-empty
        filled = pa.array([b"zz" if r is None else r for r in whole.to_pylist()], pa.binary())
        whole = pa.Array.from_buffers(
            pa.binary(), len(whole), [whole.buffers()[0], *filled.buffers()[1:]], whole.null_count
        )
        whole.validate(full=True)
    column = whole.slice(cut, len(rows))
    assert _column_checksum(column, 0) == _checksum([column.to_pylist()]) == spec_checksum([rows])


_path_piece = st.sampled_from(
    ["node/", "vn/", "node/a", "a.arrow", ".", "..", "/", "\n", "é", "=", "-", "_", "0", " "]
)
_child_refs = st.lists(
    st.one_of(
        st.lists(_path_piece, min_size=1, max_size=4).map("".join),
        st.text("abc.=-_09", min_size=1, max_size=6).map(lambda s: "node/" + s),
        st.builds(layout.inline_ref, st.integers(0, 2**63 - 1), st.integers(0, 10**9 - 1)),
        st.builds(layout.inline_ref, st.integers(0, 9), st.integers(0, 3)).map(lambda r: r + "\n"),
    ),
    max_size=8,
)


@given(_child_refs, st.sampled_from([1, 2]))
def test_children_are_checked_together_as_one_by_one(paths, format_version):
    """The checks of a node's children that look at all of them at once
    accept exactly what checking each against format.md §2 and §3.6 accepts,
    and find exactly the inline references among them."""

    def one(p: str) -> bool:
        inline_ok = format_version >= 2 and layout.parse_inline_ref(p) is not None
        return _is_file_path(p, "node/") or inline_ok

    inline = [p for p in paths if layout.parse_inline_ref(p) is not None]
    together = _child_lines(paths, format_version >= 2)
    if together is not None:  # the fast check never accepts what one by one refuses
        assert all(map(one, paths)) and together == inline
    if all(map(one, paths)):
        assert _children_inline(paths, format_version, CorruptCatalogError) == inline
        if not any(p.startswith("node/.") for p in paths):
            assert together == inline  # and it takes every list without such names
    else:
        with pytest.raises(CorruptCatalogError, match="is not a path in node/"):
            _children_inline(paths, format_version, CorruptCatalogError)


def test_definitions_are_read_from_their_own_bytes_every_time(tmp_path):
    """Parsed definitions are kept by their bytes (store._DEFINITIONS): a root
    gets the definition its own bytes say, and bytes found damaged once are
    refused again, never answered from what was read before."""
    from olympia.store import parse_definition

    _, root = _catalog_with_one_commit(tmp_path)
    good = decode_node(root.read_bytes(), "vn/x")
    assert good.root is not None
    first = parse_definition(good.root.catalog_def, "vn/a")
    other = CatalogDefinition()
    other.CopyFrom(first)
    other.commit_time_limit_millis = int(first.commit_time_limit_millis or 60_000) + 1
    second = parse_definition(other.SerializeToString(), "vn/b")
    assert second.commit_time_limit_millis == other.commit_time_limit_millis
    assert parse_definition(good.root.catalog_def, "vn/c") == first
    assert first.commit_time_limit_millis != second.commit_time_limit_millis
    broken = CatalogDefinition()
    broken.CopyFrom(first)
    broken.node_order = 2
    for where in ("vn/d", "vn/e"):
        with pytest.raises(CorruptCatalogError, match=where):
            parse_definition(broken.SerializeToString(), where)


@pytest.mark.parametrize("format_version", [1, 2])
def test_inline_node_rows_outside_a_root_are_refused(format_version):
    """Only a root of format version 2 carries ``$node.<i>`` rows (format.md
    §3.6): a node without ``$version`` that carries one, in either format
    version, is damage, and a root of format version 1 carrying one too."""
    node = NodeFile(Node(0, ("a",), (b"x",)), 5, None, extra={"$node.0": b"zz"})
    data = encode_node(node, "none", format_version=format_version)
    with pytest.raises(CorruptCatalogError, match=r"node/x .*\$node\.\* rows outside a root"):
        decode_node(data, "node/x")
    if format_version == 1:
        root = NodeFile(
            Node(0, (), ()), 5, replace(_group_root(), group=()), extra={"$node.0": b"zz"}
        )
        data = encode_node(root, "none", format_version=1)
        with pytest.raises(CorruptCatalogError, match=r"\$node\.\* rows outside a root"):
            decode_node(data, "vn/x")
