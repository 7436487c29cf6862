"""Small node files without pyarrow's per-file set-up (spec/format.md §3.1,
"How this implementation lays out a file").

A node file is an Arrow IPC file of one fixed schema (four binary-layout
columns) holding one record batch. Opening a writer or a reader in pyarrow
costs more than the rows of a one-object commit's nodes: building the
schema with its metadata, the writer and its options, the arrays, then on
the way back the footer, the schema and each array's Python objects. This
module writes such a file directly, from bytes it lays out itself, and reads
back exactly the files it writes; everything else (a compressed file, a file
pyarrow wrote, one of several batches, anything damaged) is left to the
general path in :mod:`olympia.codec`, which reaches its own verdict.

The parts of a file that never change for a given magic and format version
(the schema message and the footer, apart from the checksum text and the
body length) come from a file pyarrow writes once per process, so the
schema's encoding is pyarrow's own; the record batch message is a fixed
FlatBuffers layout built here (:func:`_batch_header`). The result is a valid
Arrow IPC file that any Arrow reader opens (the tests read every file both
ways).
"""

from __future__ import annotations

import array
import re
import struct
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any

import pyarrow as pa

#: Written and read here only on a little-endian machine whose C int is 32
#: bits (Arrow's offsets and FlatBuffers are little-endian).
ENABLED = sys.byteorder == "little" and array.array("i").itemsize == 4

#: The schema's metadata keys (spec/format.md §3.1).
META_MAGIC = b"olympia.magic"
META_VERSION = b"olympia.format-version"
META_CHECKSUM = b"olympia.checksum"

_FILE_MAGIC = b"ARROW1"
_CONTINUATION = b"\xff\xff\xff\xff"
#: Written after the last message, before the footer, as pyarrow does.
_END_OF_STREAM = _CONTINUATION + bytes(4)
_CHECKSUM_PLACEHOLDER = b"crc32:00000000"
#: A null row's length in the checksum of spec/format.md §3.1: -1 as an int32,
#: the same four bytes in either byte order.
NULL_LENGTH = b"\xff\xff\xff\xff"
#: Turns a row's presence flag into its lane of a mask over the lengths.
_NULL_LANES = str.maketrans({"0": NULL_LENGTH.decode("latin-1"), "1": "\0" * 4})
#: A run of set rows in a column's flags (one character per row).
_SET_ROWS = re.compile("1+")
_COLUMNS = 4
_BUFFERS = 3 * _COLUMNS  # validity, offsets, data per column

# The record batch message's FlatBuffers bytes (spec/format.md §3.1): a
# Message table (version V5, header RecordBatch, bodyLength) and its
# RecordBatch (length, nodes, buffers), each after its vtable, every 8-byte
# scalar on an 8-byte boundary of the message.
_HEADER_SIZE = 352
_FIXED = struct.Struct(
    "<I"  # 0: root table at 16
    "6H"  # 4: Message vtable: size 12, table 24; version @6, header_type @4, header @16, bodyLength @8
    "iBxh"  # 16: Message table: vtable 12 bytes back, header_type 3, pad, version 4 (V5)
)
_MESSAGE_PREFIX = _FIXED.pack(16, 12, 24, 6, 4, 16, 8, 12, 3, 4)  # bytes 0..24
# 24: bodyLength (q); 32: header -> 56 (I = 24), pad; 40: RecordBatch vtable
# (size 10, table 24; length @8, nodes @4, buffers @16), pad to 56; 56: the
# RecordBatch table (vtable 16 bytes back, nodes -> 84), then length (q) at 64.
_MIDDLE = struct.pack("<I4x5H6xiI", 24, 10, 24, 8, 4, 16, 16, 24)  # bytes 32..64
# 72: buffers -> 156 (I = 84), pad; 80: pad; 84: 4 nodes; 88: the nodes.
_NODES_PREFIX = struct.pack("<I4x4xI", 84, _COLUMNS)  # bytes 72..88
_BUFFERS_PREFIX = struct.pack("<4xI", _BUFFERS)  # bytes 152..160
_NODES = struct.Struct("<" + "q" * (2 * _COLUMNS))
_BUFFER_SPANS = struct.Struct("<" + "q" * (2 * _BUFFERS))
_Q = struct.Struct("<q")
_I = struct.Struct("<i")
_MESSAGE_LENGTH = struct.pack("<i", _HEADER_SIZE)
_METADATA_LENGTH = 8 + _HEADER_SIZE  # what the footer's block says


def _batch_header(body_length: int, rows: int, nodes: Sequence[int], spans: Sequence[int]) -> bytes:
    return b"".join(
        (
            _CONTINUATION,
            _MESSAGE_LENGTH,
            _MESSAGE_PREFIX,
            _Q.pack(body_length),
            _MIDDLE,
            _Q.pack(rows),
            _NODES_PREFIX,
            _NODES.pack(*nodes),
            _BUFFERS_PREFIX,
            _BUFFER_SPANS.pack(*spans),
        )
    )


@dataclass(frozen=True)
class _Template:
    """The unchanging parts of a file of one magic and format version."""

    #: The 8 file-magic bytes and the schema message, split around the 8 hex
    #: digits of the checksum.
    head: tuple[bytes, bytes]
    #: The footer split around the 8 hex digits of the checksum and the 8
    #: bytes of the block's body length.
    foot: tuple[bytes, bytes, bytes]
    checksum_first: bool  # in the footer, the checksum comes before the body length


_templates: dict[tuple[bytes, int], _Template | None] = {}


def _template(schema: pa.Schema, magic: bytes, version: int) -> _Template | None:
    key = (magic, version)
    if key not in _templates:
        _templates[key] = _make_template(schema, magic, version)
    return _templates[key]


def _make_template(schema: pa.Schema, magic: bytes, version: int) -> _Template | None:
    """Cut the file pyarrow writes for one row into its unchanging parts;
    None (so: the general path always) when its layout is not the one
    expected."""
    meta = {
        META_MAGIC: magic,
        META_VERSION: str(version).encode(),
        META_CHECKSUM: _CHECKSUM_PLACEHOLDER,
    }
    with_meta = schema.with_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, with_meta) as writer:
        writer.write_batch(
            pa.record_batch([pa.array([b"k"], t) for t in with_meta.types], schema=with_meta)
        )
    data = sink.getvalue().to_pybytes()
    if data[:6] != _FILE_MAGIC or data[-6:] != _FILE_MAGIC or data[8:12] != _CONTINUATION:
        return None
    schema_end = 16 + _I.unpack_from(data, 12)[0]
    footer_length = _I.unpack_from(data, len(data) - 10)[0]
    footer_start = len(data) - 10 - footer_length
    batch_meta = _I.unpack_from(data, schema_end + 4)[0]
    body_end = footer_start - len(_END_OF_STREAM)
    if data[body_end:footer_start] != _END_OF_STREAM:
        return None
    body = body_end - (schema_end + 8 + batch_meta)
    head, foot = data[:schema_end], _END_OF_STREAM + data[footer_start:]
    block = struct.pack("<qi4xq", schema_end, 8 + batch_meta, body)
    if (
        schema_end % 8
        or head.count(_CHECKSUM_PLACEHOLDER) != 1
        or foot.count(_CHECKSUM_PLACEHOLDER) != 1
        or foot.count(block) != 1
    ):
        return None
    at = head.index(_CHECKSUM_PLACEHOLDER) + 6
    fat = foot.index(_CHECKSUM_PLACEHOLDER) + 6
    # The block is (offset, metadata length, padding, body length).
    bat = foot.index(block)
    foot = foot[:bat] + struct.pack("<qi4x", schema_end, _METADATA_LENGTH) + foot[bat + 16 :]
    bat += 16
    if fat < bat:
        parts = (foot[:fat], foot[fat + 8 : bat], foot[bat + 8 :])
    else:
        parts = (foot[:bat], foot[bat + 8 : fat], foot[fat + 8 :])
    return _Template(head=(head[:at], head[at + 8 :]), foot=parts, checksum_first=fat < bat)


@dataclass(frozen=True)
class Column:
    """One column laid out as Arrow lays out a binary column."""

    nulls: int
    validity: bytes  # empty when no row is null
    offsets: bytes
    data: bytes
    crc_lengths: bytes  # the checksum's lengths (-1 for null)

    @property
    def size(self) -> int:
        return len(self.validity) + len(self.offsets) + len(self.data)


def column(rows: Sequence[bytes | None]) -> Column:
    """Lay out ``rows`` (bytes or None)."""
    n = len(rows)
    nulls = rows.count(None)
    if nulls == n:
        return Column(n, bytes((n + 7) // 8), bytes(4 * (n + 1)), b"", NULL_LENGTH * n)
    if nulls:
        lengths = [-1 if r is None else len(r) for r in rows]
        data = b"".join([r for r in rows if r is not None])
        bits = 0
        for i, r in enumerate(rows):
            if r is not None:
                bits |= 1 << i
        validity = bits.to_bytes((n + 7) // 8, "little")
        offsets = array.array("i", accumulate((0 if x < 0 else x for x in lengths), initial=0))
        return Column(nulls, validity, offsets.tobytes(), data, _le_int32(lengths))
    lengths_ = array.array("i", map(len, rows))  # type: ignore[arg-type]
    offsets = array.array("i", accumulate(lengths_, initial=0))
    return Column(0, b"", offsets.tobytes(), b"".join(rows), _le_int32(lengths_))  # type: ignore[arg-type]


def text_column(rows: Sequence[str | None]) -> Column:
    """Lay out text rows as their UTF-8 bytes."""
    if None not in rows:
        joined = "".join(rows)  # type: ignore[arg-type]
        if joined.isascii():  # one encode for the whole column
            lengths = array.array("i", map(len, rows))  # type: ignore[arg-type]
            offsets = array.array("i", accumulate(lengths, initial=0))
            return Column(0, b"", offsets.tobytes(), joined.encode("ascii"), lengths.tobytes())
    return column([None if r is None else r.encode("utf-8") for r in rows])


#: A column given as runs: a sequence of rows, or a count of null rows.
Run = Sequence[bytes | None] | int
TextRun = Sequence[str | None] | int
#: One run laid out: a count of null rows, the (sizes, bytes) of set rows,
#: or a column of set and null rows.
_Part = int | tuple["array.array[int]", bytes] | Column


def _coalesced(runs: Sequence[Any]) -> list[Any]:
    """``runs`` with empty runs left out and neighbouring runs of one kind
    (null rows; set rows) made one."""
    out: list[Any] = []
    for run in runs:
        if not run:
            continue
        last = out[-1] if out else None
        if isinstance(run, int):
            if isinstance(last, int):
                out[-1] = last + run
                continue
        elif (
            last is not None and not isinstance(last, int) and None not in run and None not in last
        ):
            out[-1] = [*last, *run]
            continue
        out.append(run)
    return out


def column_of_runs(runs: Sequence[Run]) -> Column:
    """Lay out the rows of ``runs`` one after another, exactly as :func:`column`
    lays out the same rows in one list. A run of null rows or of set rows
    costs a step per run rather than per row (a node's columns are such runs:
    its system rows, its entries, its action rows)."""
    return _of_runs(runs, column, _set_bytes)


def text_column_of_runs(runs: Sequence[TextRun]) -> Column:
    """:func:`column_of_runs` of text rows, laid out as their UTF-8 bytes."""
    return _of_runs(runs, text_column, _set_text)


def _set_bytes(run: Sequence[bytes]) -> tuple[array.array[int], bytes]:
    """(sizes, bytes) of a run of set rows."""
    return array.array("i", map(len, run)), b"".join(run)


def _set_text(run: Sequence[str]) -> tuple[array.array[int], bytes]:
    joined = "".join(run)
    if joined.isascii():  # one encode for the run; a character is a byte
        return array.array("i", map(len, run)), joined.encode("ascii")
    return _set_bytes([r.encode() for r in run])


def _of_runs(
    runs: Sequence[Any], whole: Callable[[Any], Column], set_part: Callable[[Any], _Part]
) -> Column:
    """The column of ``runs``: ``whole`` lays out a run holding null rows
    (or the only run), ``set_part`` a run of set rows."""
    runs = _coalesced(runs)
    if len(runs) == 1 and not isinstance(runs[0], int):
        return whole(runs[0])
    return _joined(
        [
            run if isinstance(run, int) else whole(run) if None in run else set_part(run)
            for run in runs
        ]
    )


def _joined(parts: Sequence[_Part]) -> Column:
    n = nulls = bits = base = 0
    offsets = array.array("i", [0])
    lengths: list[bytes] = []
    data: list[bytes] = []
    for part in parts:
        if isinstance(part, int):  # null rows: no bytes, the offset stays
            offsets.extend(array.array("i", [base]) * part)
            lengths.append(NULL_LENGTH * part)
            n, nulls = n + part, nulls + part
            continue
        if isinstance(part, Column):  # set and null rows (one null at least): a step per row
            rows = len(part.offsets) // 4 - 1
            bits |= int.from_bytes(part.validity, "little") << n
            shifted = array.array("i")
            shifted.frombytes(part.offsets[4:])
            offsets.extend(x + base for x in shifted)
            nulls += part.nulls
            lengths.append(part.crc_lengths)
            chunk = part.data
        else:
            sizes, chunk = part
            rows = len(sizes)
            offsets.extend(accumulate(sizes, initial=base))
            del offsets[len(offsets) - rows - 1]  # the ``initial`` was there already
            bits |= ((1 << rows) - 1) << n
            lengths.append(sizes.tobytes())
        data.append(chunk)
        n += rows
        base += len(chunk)
    if nulls == n:
        return Column(n, bytes((n + 7) // 8), bytes(4 * (n + 1)), b"", NULL_LENGTH * n)
    validity = bits.to_bytes((n + 7) // 8, "little") if nulls else b""
    return Column(nulls, validity, offsets.tobytes(), b"".join(data), b"".join(lengths))


def checksum(columns: Sequence[Column]) -> int:
    """The CRC of spec/format.md §3.1 over laid-out columns (their
    ``crc_lengths`` and ``data``: the parts :func:`_crc_parts` takes from a
    file's buffers)."""
    crc = 0
    for c in columns:
        crc = zlib.crc32(c.crc_lengths, crc)
        crc = zlib.crc32(c.data, crc)
    return crc


def _padded(n: int) -> int:
    return (n + 7) & ~7


def write(
    schema: pa.Schema, magic: bytes, version: int, columns: Sequence[Column], crc: int
) -> bytes | None:
    """The Arrow IPC file of ``columns`` (uncompressed), or None when this
    module cannot write it (the caller then uses pyarrow)."""
    if not ENABLED or len(columns) != _COLUMNS or any(len(c.data) >= 2**31 for c in columns):
        return None  # (int32 offsets: pyarrow says what is wrong with such a file)
    template = _template(schema, magic, version)
    if template is None:
        return None
    rows = len(columns[0].offsets) // 4 - 1
    nodes: list[int] = []
    spans: list[int] = []
    body: list[bytes] = []
    at = 0
    for c in columns:
        nodes += (rows, c.nulls)
        for buffer in (c.validity, c.offsets, c.data):
            spans += (at, len(buffer))
            pad = _padded(len(buffer)) - len(buffer)
            body.append(buffer)
            if pad:
                body.append(bytes(pad))
            at += len(buffer) + pad
    hex_digits = b"%08x" % crc
    length = _Q.pack(at)
    first, second = (hex_digits, length) if template.checksum_first else (length, hex_digits)
    foot = template.foot
    footer = b"".join((foot[0], first, foot[1], second, foot[2]))  # after the end of stream
    return b"".join(
        (
            template.head[0],
            hex_digits,
            template.head[1],
            _batch_header(at, rows, nodes, spans),
            *body,
            footer,
            _I.pack(len(footer) - len(_END_OF_STREAM)),
            _FILE_MAGIC,
        )
    )


#: Which columns hold text (decoded here) rather than bytes.
_TEXT = (True, False, True, True)


def read(
    data: bytes,
    schema: pa.Schema,
    magic: bytes,
    versions: Sequence[int],
    *,
    system_only: bool = False,
) -> tuple[int, int, int, list[list[Any]]] | None:
    """(format version, the checksum the file states, the checksum of its
    content, the rows of each column: text decoded in the text columns) of a
    file laid out as :func:`write` lays it out, after checking every offset
    and length against the file; None for any other file, valid or not, and
    for text that is not UTF-8, which the caller then reads the general way
    (and refuses).

    With ``system_only``, only the leading rows whose key starts with ``$``
    (the system rows, spec/format.md §3.2) are made, in every column; the
    other rows are still checked against the file and counted in the
    checksum, but their text is not decoded (nor checked to be UTF-8)."""
    if not ENABLED or not isinstance(data, bytes):
        return None
    for version in versions:
        template = _template(schema, magic, version)
        if template is None:
            continue
        head0, head1 = template.head
        at = len(head0)
        if data.startswith(head0) and data.startswith(head1, at + 8):
            return _read(data, template, version, system_only)
    return None


def _read(
    data: bytes, template: _Template, version: int, system_only: bool = False
) -> tuple[int, int, int, list[list[Any]]] | None:
    head0, head1 = template.head
    hex_at = len(head0)
    hex_digits = data[hex_at : hex_at + 8]
    at = hex_at + 8 + len(head1)  # the record batch message
    n = len(data)
    if n < at + 8 + _HEADER_SIZE + 10 or not _is_hex(hex_digits):
        return None
    if (
        data[at : at + 8] != _CONTINUATION + _MESSAGE_LENGTH
        or data[at + 8 : at + 32] != _MESSAGE_PREFIX
        or data[at + 40 : at + 72] != _MIDDLE
        or data[at + 80 : at + 96] != _NODES_PREFIX
        or data[at + 160 : at + 168] != _BUFFERS_PREFIX
        or data[-6:] != _FILE_MAGIC
    ):
        return None
    body_length = _Q.unpack_from(data, at + 32)[0]
    rows = _Q.unpack_from(data, at + 72)[0]
    nodes = _NODES.unpack_from(data, at + 96)
    spans = _BUFFER_SPANS.unpack_from(data, at + 168)
    body_at = at + 8 + _HEADER_SIZE
    footer_length = _I.unpack_from(data, n - 10)[0]
    footer_at = body_at + body_length
    if (
        body_length < 0
        or footer_length <= 0
        or footer_at + len(_END_OF_STREAM) + footer_length + 10 != n
        or not 0 <= rows < 2**31
    ):
        return None
    foot = template.foot
    length = _Q.pack(body_length)
    first, second = (hex_digits, length) if template.checksum_first else (length, hex_digits)
    if data[footer_at : n - 10] != b"".join((foot[0], first, foot[1], second, foot[2])):
        return None
    body = memoryview(data)[body_at:footer_at]
    out: list[list[Any]] = []
    crc = 0
    limit: int | None = None
    for c in range(_COLUMNS):
        length_, nulls = nodes[2 * c], nodes[2 * c + 1]
        if length_ != rows or not 0 <= nulls <= rows:
            return None
        got = _column_rows(body, rows, nulls, spans[6 * c : 6 * c + 6], _TEXT[c], limit)
        if got is None:
            return None
        values, crc_lengths, crc_data = got
        crc = zlib.crc32(crc_data, zlib.crc32(crc_lengths, crc))
        if system_only and c == 0:  # the key column: the system rows lead it
            limit = _leading_system_rows(values)
            del values[limit:]
        out.append(values)
    return version, int(hex_digits, 16), crc, out


def _is_hex(digits: bytes) -> bool:
    return len(digits) == 8 and all(48 <= b <= 57 or 97 <= b <= 102 for b in digits)


def _leading_system_rows(keys: Sequence[str | None]) -> int:
    """How many keys, from the first, are system keys (start with ``$``)."""
    for i, key in enumerate(keys):
        if key is None or not key.startswith("$"):
            return i
    return len(keys)


def _column_rows(
    body: memoryview,
    rows: int,
    nulls: int,
    spans: Sequence[int],
    text: bool,
    limit: int | None = None,
) -> tuple[list[Any], bytes, bytes] | None:
    """(rows, the checksum's lengths, the checksum's bytes) of one column;
    with ``limit``, only its first ``limit`` rows are made (the text of the
    others is not decoded), the checksum's parts still cover all of them."""
    size = len(body)
    for i in range(0, 6, 2):
        if min(spans[i], spans[i + 1]) < 0 or spans[i] + spans[i + 1] > size:
            return None
    (v_at, v_len, o_at, o_len, d_at, d_len) = spans
    if o_len < 4 * (rows + 1):
        return None
    raw_offsets = body[o_at : o_at + 4 * (rows + 1)]
    offsets = array.array("i")
    offsets.frombytes(raw_offsets)
    positions = offsets.tolist()
    # Checked in every column, used or not: malformed buffers are damage (§3.3).
    if positions[0] < 0 or positions[-1] > d_len or positions != sorted(positions):
        return None
    if nulls == rows:  # a column the node does not use
        if nulls and v_len < (rows + 7) // 8:
            return None
        if any(body[v_at : v_at + (rows + 7) // 8]):
            return None  # a bit says a row is there (the general path decides)
        return [None] * min(rows, rows if limit is None else limit), NULL_LENGTH * rows, b""
    data = body[d_at : d_at + d_len].tobytes()
    made_rows = rows if limit is None else min(limit, rows)
    flags = None
    if nulls:
        if v_len < (rows + 7) // 8:
            return None
        bits = int.from_bytes(body[v_at : v_at + (rows + 7) // 8], "little") & ((1 << rows) - 1)
        if rows - bits.bit_count() != nulls:
            return None
        flags = _flags(bits, rows)
    try:
        if made_rows >= _PYARROW_ROWS:
            validity = body[v_at : v_at + (rows + 7) // 8] if nulls else None
            values = _made_by_pyarrow(made_rows, validity, raw_offsets, data, text)
        else:
            values = _made_here(positions[: made_rows + 1], data, text, flags)
    except UnicodeDecodeError:
        return None
    return (values, *_crc_parts(rows, raw_offsets, positions, data, flags))


#: From this many rows, a column's rows are made by pyarrow (one call into
#: its C++ over the buffers already checked) rather than a slice each here:
#: a call costs about as much as 15-20 slices.
_PYARROW_ROWS = 24
_BINARY = pa.binary()
_UTF8 = pa.utf8()


def _made_by_pyarrow(
    rows: int, validity: Any, raw_offsets: Any, data: bytes, text: bool
) -> list[Any]:
    """The first ``rows`` rows of a column whose buffers have been checked
    (offsets ascending inside ``data``, a bitmap of the stated nulls), made
    by pyarrow; text that is not UTF-8 raises UnicodeDecodeError."""
    buffers = [
        None if validity is None else pa.py_buffer(validity),
        pa.py_buffer(raw_offsets),
        pa.py_buffer(data),
    ]
    made: list[Any] = pa.Array.from_buffers(_UTF8 if text else _BINARY, rows, buffers).to_pylist()
    return made


def _made_here(made: list[int], data: bytes, text: bool, flags: str | None) -> list[Any]:
    """The rows between the positions ``made`` (one more than the rows), a
    run of set rows at a time, with no step per null row; text that is not
    UTF-8 raises UnicodeDecodeError."""
    if text and data.isascii():  # one decode (of the rows made); a byte is a character
        source: str | bytes = data[: made[-1]].decode("ascii")
        decode = False
    else:
        source, decode = data, text
    if flags is None:
        if decode:
            return [data[a:b].decode("utf-8") for a, b in pairwise(made)]
        return [source[a:b] for a, b in pairwise(made)]
    values: list[Any] = []
    done = 0
    made_rows = len(made) - 1
    for match in _SET_ROWS.finditer(flags, 0, made_rows):
        first, end = match.span()
        values += [None] * (first - done)
        run_spans = pairwise(made[first : end + 1])
        if decode:
            values += [data[a:b].decode("utf-8") for a, b in run_spans]
        else:
            values += [source[a:b] for a, b in run_spans]
        done = end
    values += [None] * (made_rows - done)
    return values


def _flags(bits: int, rows: int) -> str:
    """One character per row, row 0 first: "1" present, "0" null."""
    return format(bits, f"0{rows}b")[::-1] if rows else ""


def _crc_parts(
    rows: int, raw_offsets: Any, positions: list[int], data: Any, flags: str | None
) -> tuple[bytes, bytes]:
    """The two parts of a column's checksum (spec/format.md §3.1): its rows'
    lengths as int32 little-endian (-1 for a null row), then the bytes of its
    set rows, from its Arrow buffers: ``raw_offsets`` (the ``rows + 1``
    offsets, checked never to decrease, as little-endian bytes) and their
    ``positions``, ``data`` and (None when no row is null) ``flags``. This
    is the checksum every reader and writer of this implementation takes
    from buffers; :func:`column` gives the same parts of rows it lays out.

    Ascending offsets: read as one little-endian integer and subtracted from
    themselves shifted by a row, each 32-bit lane of the difference is one
    row's length (no lane borrows from the next)."""
    run = int.from_bytes(raw_offsets[4:], "little") - int.from_bytes(raw_offsets[:-4], "little")
    if flags is None:
        return run.to_bytes(4 * rows, "little"), data[positions[0] : positions[-1]]
    lanes = int.from_bytes(flags.translate(_NULL_LANES).encode("latin-1"), "little")
    if not run & lanes:
        # Null rows hold no bytes (as every writer here lays them out): their
        # lanes of the lengths are 0 and become -1, and the bytes of the
        # present rows are one run.
        return (run | lanes).to_bytes(4 * rows, "little"), data[positions[0] : positions[-1]]
    # A null row spanning bytes (Arrow allows it): they are no row's, so
    # they are left out of the checksum, one row at a time.
    spans = pairwise(positions)
    lengths = [b - a if f == "1" else -1 for (a, b), f in zip(spans, flags, strict=True)]
    present = b"".join(
        [data[a:b] for (a, b), f in zip(pairwise(positions), flags, strict=True) if f == "1"]
    )
    return _le_int32(lengths), present


def _le_int32(values: Sequence[int]) -> bytes:
    """``values`` as int32 little-endian, whatever the machine."""
    out = values if isinstance(values, array.array) else array.array("i", values)
    if sys.byteorder == "big":
        out = array.array("i", out)
        out.byteswap()
    return out.tobytes()


def buffer_checksum(
    crc: int, rows: int, nulls: int, validity: Any, offsets: Any, data: Any, offset: int = 0
) -> int | None:
    """``crc`` continued over one column (spec/format.md §3.1) read from its
    Arrow buffers (``validity`` may be None when no row is null; ``offset``
    is the column's first row in them, as in a slice of an Arrow array),
    which the caller has validated in full. None on a machine where this
    module is not :data:`ENABLED` (the caller then takes the rows)."""
    if nulls == rows:
        return zlib.crc32(NULL_LENGTH * rows, crc)
    if not ENABLED:
        return None
    raw_offsets = memoryview(offsets)[4 * offset : 4 * (offset + rows + 1)]
    positions = array.array("i", raw_offsets.tobytes()).tolist()
    flags = None
    if nulls:
        bits = (int.from_bytes(memoryview(validity), "little") >> offset) & ((1 << rows) - 1)
        flags = _flags(bits, rows)
    body = memoryview(data if data is not None else b"")  # no data buffer: no bytes
    lengths, present = _crc_parts(rows, raw_offsets, positions, body, flags)
    return zlib.crc32(present, zlib.crc32(lengths, crc))


def rows_checksum(columns: Sequence[Sequence[bytes | None]]) -> int:
    """The checksum of spec/format.md §3.1 of columns given as rows (bytes
    or None), as :func:`column` lays them out."""
    return checksum([column(rows) for rows in columns])
