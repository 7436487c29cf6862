"""Node files: encoding and decoding Arrow IPC bytes. No I/O here.

spec/format.md, "Node files", is the normative description. In short: an
Arrow IPC file with columns ``key`` (utf8), ``value`` (binary), ``def``
(utf8) and ``child`` (utf8); rows are the system keys (``$...``), then the
pivot table, then (root only) the committed actions. The schema metadata
carries a magic string, the format version and a CRC-32 of the content.
Action files (format version 2) use the same schema with another magic and
hold the action records of one transaction.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from olympia import arrowfile
from olympia.arrowfile import META_CHECKSUM as META_CHECKSUM
from olympia.arrowfile import META_MAGIC as META_MAGIC
from olympia.arrowfile import META_VERSION as META_VERSION
from olympia.errors import CorruptCatalogError, InvalidArgumentError, InvalidArgumentTypeError
from olympia.layout import MAX_VERSION, parse_inline_ref
from olympia.node import DefRef, Node, Value
from olympia.proto import actions_pb2 as apb

#: A node file whose column data (the ``nbytes`` of its four Arrow columns)
#: is smaller than this is written without IPC buffer compression, whatever
#: the catalog's ``node_compression`` (spec/format.md §3): for a node of a few
#: tens of KiB the codec's setup per buffer costs more time, at both ends,
#: than its bytes cost to store and move.
COMPRESSION_MIN_BYTES = 64 * 1024

MAGIC = b"olympia-node"
ACTIONS_MAGIC = b"olympia-actions"
#: The format version writers of new catalogs use; readers take 1 and 2.
FORMAT_VERSION = 2
SUPPORTED_FORMAT_VERSIONS = (1, 2)
#: A format version 2 root keeps its actions inline only up to these bounds
#: (spec/format.md §3.2); beyond them they go to an action file.
INLINE_ACTIONS_MAX = 64
INLINE_ACTION_BYTES_MAX = 16 * 1024
MAX_HEIGHT = 64

SCHEMA = pa.schema(
    [
        pa.field("key", pa.utf8(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("def", pa.utf8(), nullable=True),
        pa.field("child", pa.utf8(), nullable=True),
    ]
)

# System keys.
K_CREATED_AT = "$created_at_millis"
K_HEIGHT = "$height"
K_N_KEYS = "$n_keys"
K_VERSION = "$version"
K_CATALOG_DEF = "$catalog_def"
K_PREVIOUS_ROOT = "$previous_root"
K_ROLLBACK_FROM_ROOT = "$rollback_from_root"
K_N_ACTIONS = "$n_actions"
K_TRANSACTION_ID = "$transaction_id"
K_BEGIN_VERSION = "$begin_version"
K_ISOLATION = "$isolation"
K_SERIALIZED_BEFORE = "$serialized_before"
K_ACTIONS = "$actions"
K_GROUP = "$group"
K_ROLLBACK_TO_VERSION = "$rollback_to_version"
K_COMMIT_INFO = "$commit_info"
#: Prefix of the system keys of inline nodes: ``$node.0``, ``$node.1``, ...
K_NODE_PREFIX = "$node."
_INT_KEYS = {
    K_CREATED_AT,
    K_HEIGHT,
    K_N_KEYS,
    K_VERSION,
    K_N_ACTIONS,
    K_BEGIN_VERSION,
    K_ROLLBACK_TO_VERSION,
}
_TEXT_KEYS = {
    K_ACTIONS,
    K_PREVIOUS_ROOT,
    K_ROLLBACK_FROM_ROOT,
    K_TRANSACTION_ID,
    K_ISOLATION,
    K_SERIALIZED_BEFORE,
    K_GROUP,
}
_ROOT_KEYS = {K_VERSION, K_CATALOG_DEF, K_N_ACTIONS, K_TRANSACTION_ID}
#: The system keys a node file may carry other than ``$node.<i>``.
_KNOWN_KEYS = frozenset(_INT_KEYS | _TEXT_KEYS | {K_CATALOG_DEF, K_COMMIT_INFO})
#: System keys only a root may carry: a node file is a root exactly when it
#: has ``$version``, and a non-root node with any of these is damaged.
_ROOT_ONLY_KEYS = _ROOT_KEYS | {
    K_PREVIOUS_ROOT,
    K_ROLLBACK_FROM_ROOT,
    K_BEGIN_VERSION,
    K_ISOLATION,
    K_SERIALIZED_BEFORE,
    K_ACTIONS,
    K_GROUP,
    K_ROLLBACK_TO_VERSION,
    K_COMMIT_INFO,
}
#: Upper bounds of integer system values; the default is MAX_VERSION.
_INT_MAX = {K_CREATED_AT: 253_402_300_799_999}  # 9999-12-31T23:59:59.999Z


@dataclass(frozen=True)
class GroupEntry:
    """One transaction of a version that holds several (``$group``,
    spec/format.md §3.2): its id, begin version, isolation and how many of
    the version's action records, taken in order, are its own."""

    transaction_id: str
    begin_version: int
    isolation: str
    n_actions: int

    def encode(self) -> str:
        return f"{self.transaction_id}:{self.begin_version}:{self.isolation}:{self.n_actions}"


def transaction_ids(first: str, group: Sequence[GroupEntry]) -> tuple[str, ...]:
    """The ids of a version's transactions: its ``$group`` entries', or the
    one transaction it names when it has no ``$group``."""
    return tuple(e.transaction_id for e in group) if group else (first,)


#: Bounds of commit metadata (spec/format.md §3.7), in UTF-8 bytes: writers
#: refuse larger values before anything is written; readers take what they find.
COMMIT_MESSAGE_MAX_BYTES = 64 * 1024
COMMIT_AUTHOR_MAX_BYTES = 1024
COMMIT_PROPERTIES_MAX = 100
COMMIT_PROPERTY_KEY_MAX_BYTES = 256
COMMIT_PROPERTY_VALUE_MAX_BYTES = 4096

_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class CommitInfo:
    """The commit metadata of one transaction: a message, an author and
    string properties (spec/format.md §3.7). ``None`` means not given; an
    empty string is a value."""

    message: str | None = None
    author: str | None = None
    properties: Mapping[str, str] = field(default_factory=lambda: _NO_PROPERTIES)

    @property
    def empty(self) -> bool:
        """Whether nothing is given (such metadata is not stored)."""
        return self.message is None and self.author is None and not self.properties

    def to_proto(self, transaction_id: str = "") -> apb.CommitInfo:
        info = apb.CommitInfo(transaction_id=transaction_id, properties=dict(self.properties))
        if self.message is not None:
            info.message = self.message
        if self.author is not None:
            info.author = self.author
        return info

    @staticmethod
    def from_proto(info: apb.CommitInfo) -> CommitInfo:
        return CommitInfo(
            info.message if info.HasField("message") else None,
            info.author if info.HasField("author") else None,
            MappingProxyType(dict(sorted(info.properties.items()))),
        )

    @staticmethod
    def checked(
        message: object = None, author: object = None, properties: object = None
    ) -> CommitInfo:
        """Commit metadata from arguments ``message``, ``author`` and
        ``properties``, within the bounds above.

        Raises:
            InvalidArgumentTypeError: a value is not a string (``properties``:
                not a mapping of strings to strings).
            InvalidArgumentError: a value is too long, or not encodable as
                UTF-8; an empty property key; too many properties.
        """
        _commit_text("message", message, COMMIT_MESSAGE_MAX_BYTES)
        _commit_text("author", author, COMMIT_AUTHOR_MAX_BYTES)
        props: dict[str, str] = {}
        if properties is not None:
            if not isinstance(properties, Mapping):
                raise InvalidArgumentTypeError(
                    f"argument 'properties' must be a mapping of strings to strings or None, "
                    f"got {type(properties).__name__}"
                )
            if len(properties) > COMMIT_PROPERTIES_MAX:
                raise InvalidArgumentError(
                    f"argument 'properties' holds {len(properties)} commit properties; at most "
                    f"{COMMIT_PROPERTIES_MAX} are allowed"
                )
            for key, value in properties.items():
                _commit_text("properties", key, COMMIT_PROPERTY_KEY_MAX_BYTES, "key")
                if not key:
                    raise InvalidArgumentError("argument 'properties' has an empty key")
                _commit_text("properties", value, COMMIT_PROPERTY_VALUE_MAX_BYTES, f"{key!r}")
                props[key] = value
        return CommitInfo(
            message,  # type: ignore[arg-type]  # checked above
            author,  # type: ignore[arg-type]
            MappingProxyType(dict(sorted(props.items()))) if props else _NO_PROPERTIES,
        )


def _commit_text(argument: str, value: object, limit: int, what: str = "") -> None:
    """Check one text of commit metadata (None passes, except as a property)."""
    where = f"argument {argument!r}" + (f" ({what})" if what else "")
    if value is None and not what:
        return
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(
            f"{where} must be a string{'' if what else ' or None'}, got {type(value).__name__}"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{where} holds a lone surrogate (not UTF-8)") from None
    if size > limit:
        raise InvalidArgumentError(f"{where} is {size} bytes of UTF-8; at most {limit} are allowed")


def encode_commit_infos(infos: Iterable[tuple[str, CommitInfo | None]]) -> bytes | None:
    """The value of ``$commit_info`` for the (transaction id, metadata) pairs
    of a version, in serial order; None when none has any (no row then)."""
    entries = [
        info.to_proto(txn_id) for txn_id, info in infos if info is not None and not info.empty
    ]
    if not entries:
        return None
    return apb.VersionCommitInfo(transactions=entries).SerializeToString(deterministic=True)


def _commit_infos(
    data: bytes, txn_ids: Sequence[str], bad: Callable[[str], CorruptCatalogError]
) -> tuple[tuple[str, CommitInfo], ...]:
    """The entries of ``$commit_info``, checked against the root's
    transactions (``txn_ids``, in serial order)."""
    try:
        value = apb.VersionCommitInfo.FromString(data)
    except Exception as exc:  # DecodeError, or text that is not UTF-8
        raise bad(f"{K_COMMIT_INFO} is not a VersionCommitInfo ({type(exc).__name__})") from None
    order = {txn_id: i for i, txn_id in enumerate(txn_ids)}
    out: list[tuple[str, CommitInfo]] = []
    last = -1
    for entry in value.transactions:
        position = order.get(entry.transaction_id)
        if position is None:
            raise bad(
                f"{K_COMMIT_INFO} names transaction {entry.transaction_id[:80]!r}, which the "
                f"version does not hold"
            )
        if position <= last:
            raise bad(f"{K_COMMIT_INFO} names its transactions out of order or twice")
        last = position
        out.append((entry.transaction_id, CommitInfo.from_proto(entry)))
    if not out:
        raise bad(f"{K_COMMIT_INFO} holds no entry")
    return tuple(out)


_GROUP_ENTRY = re.compile(
    r"([A-Za-z0-9_-]{1,64}):([0-9]{1,20}):(snapshot|serializable):([0-9]{1,20})"
)


@dataclass(frozen=True)
class RootInfo:
    """What only a root node file carries."""

    version: int
    catalog_def: bytes
    transaction_id: str
    previous_root: str | None = None
    rollback_from_root: str | None = None
    #: (object key, serialized olympia.v1.Action) per committed action held
    #: inline as action rows; empty when ``action_file`` is set.
    actions: tuple[tuple[str, bytes], ...] = ()
    #: The version the committing transaction read from (its snapshot).
    begin_version: int | None = None
    #: "snapshot" or "serializable"; empty for catalog maintenance commits.
    isolation: str = ""
    #: Committed versions this one is serialized before (transactions.md).
    serialized_before: tuple[int, ...] = ()
    #: Format version 2: path (``act/...``) of the action file that holds
    #: the actions instead of ``actions`` (spec/format.md §3.5).
    action_file: str | None = None
    #: With ``action_file``: how many actions the file holds.
    action_file_count: int = 0
    #: Format version 2: complete non-root node files carried inside the
    #: root (system rows ``$node.<i>``), which children name as
    #: ``vn/<root file name>/<i>`` (spec/format.md §3.6).
    inline_nodes: tuple[bytes, ...] = ()
    #: Format version 2: the transactions of a version that holds more than
    #: one (group commit), in serial order; empty for a version of one
    #: transaction (spec/format.md §3.2, ``$group``).
    group: tuple[GroupEntry, ...] = ()
    #: Rollback roots: the version whose tree this one restored
    #: (``$rollback_to_version``; None in roots written before it existed).
    rollback_to_version: int | None = None
    #: The commit metadata of the version's transactions that have any, in
    #: serial order: (transaction id, metadata) (``$commit_info``, §3.7).
    commit_infos: tuple[tuple[str, CommitInfo], ...] = ()

    @property
    def n_actions(self) -> int:
        """How many actions the committing transaction(s) recorded."""
        return self.action_file_count if self.action_file is not None else len(self.actions)

    @property
    def transaction_ids(self) -> tuple[str, ...]:
        """The ids of every transaction this version holds, in serial order."""
        return transaction_ids(self.transaction_id, self.group)


@dataclass(frozen=True)
class NodeFile:
    """The decoded content of a node file. Children are paths."""

    node: Node
    created_at_millis: int
    root: RootInfo | None = None
    extra: dict[str, bytes] = field(default_factory=dict)
    #: The ``olympia.format-version`` the file was read with (decoding only).
    format_version: int = FORMAT_VERSION


def _checksum(columns: Sequence[Sequence[bytes | None]]) -> int:
    """The CRC of spec/format.md §3.1 of columns given as rows."""
    return arrowfile.rows_checksum(columns)


def _data_size(arrays: Sequence[pa.Array]) -> int:
    """Bytes in the buffers of ``arrays`` (``Array.nbytes`` costs far more)."""
    return sum(b.size for a in arrays for b in a.buffers() if b is not None)


def _utf8(values: Sequence[str | None]) -> list[bytes | None]:
    return [None if v is None else v.encode("utf-8") for v in values]


def encode_node(
    nf: NodeFile, compression: str | None = "zstd", format_version: int = FORMAT_VERSION
) -> bytes:
    """Serialize a node whose children are all paths, as a file of ``format_version``.

    Raises:
        ValueError: a child is not a path (write children first), or an
            action file named in a format version 1 root.
    """
    node = nf.node
    # The system rows; the node's entries and the action rows follow as runs.
    keys: list[str] = []
    values: list[bytes | None] = []

    def system(key: str, value: bytes) -> None:
        keys.append(key)
        values.append(value)

    system(K_CREATED_AT, str(nf.created_at_millis).encode())
    system(K_HEIGHT, str(node.height).encode())
    system(K_N_KEYS, str(len(node.keys)).encode())
    root = nf.root
    if root is not None:
        system(K_VERSION, str(root.version).encode())
        system(K_CATALOG_DEF, root.catalog_def)
        system(K_TRANSACTION_ID, root.transaction_id.encode())
        system(K_N_ACTIONS, str(root.n_actions).encode())
        if root.action_file is not None:
            if format_version < 2 or root.actions:
                raise ValueError("an action file needs format version 2 and no inline actions")
            system(K_ACTIONS, root.action_file.encode())
        if root.previous_root is not None:
            system(K_PREVIOUS_ROOT, root.previous_root.encode())
        if root.rollback_from_root is not None:
            system(K_ROLLBACK_FROM_ROOT, root.rollback_from_root.encode())
        if root.rollback_to_version is not None:
            if root.rollback_from_root is None:
                raise ValueError("a rollback target needs a rollback root")
            system(K_ROLLBACK_TO_VERSION, str(root.rollback_to_version).encode())
        if root.begin_version is not None:
            system(K_BEGIN_VERSION, str(root.begin_version).encode())
        if root.isolation:
            system(K_ISOLATION, root.isolation.encode())
        if root.serialized_before:
            system(K_SERIALIZED_BEFORE, ",".join(map(str, root.serialized_before)).encode())
        if root.group:
            if format_version < 2:
                raise ValueError("a version of several transactions needs format version 2")
            system(K_GROUP, ",".join(e.encode() for e in root.group).encode())
        commit_info = encode_commit_infos(root.commit_infos)
        if commit_info is not None:
            system(K_COMMIT_INFO, commit_info)
        if root.inline_nodes and format_version < 2:
            raise ValueError("inline nodes need format version 2")
        for i, blob in enumerate(root.inline_nodes):
            system(f"{K_NODE_PREFIX}{i}", blob)
    for k in sorted(nf.extra):
        system(k, nf.extra[k])

    # Each column as runs (arrowfile.column_of_runs): the system rows, the
    # node's entries, the action rows.
    s = len(keys)
    n = len(node.keys)
    a = len(root.actions) if root is not None else 0
    action_keys = [k for k, _ in root.actions] if root is not None else []
    action_values = [v for _, v in root.actions] if root is not None else []
    entry_values: arrowfile.Run
    entry_defs: arrowfile.TextRun
    entry_children: arrowfile.TextRun
    if not node.is_leaf:
        if set(map(type, node.children)) - {str} and not all(
            isinstance(c, str) for c in node.children
        ):
            raise ValueError("encode_node needs every child written first")
        entry_values, entry_defs, entry_children = n, n, node.children  # type: ignore[assignment]
    elif DefRef not in set(map(type, node.values)):  # every value inline: no step per row
        entry_values, entry_defs, entry_children = node.values, n, n  # type: ignore[assignment]
    else:
        entry_values = [None if isinstance(v, DefRef) else v for v in node.values]
        entry_defs = [v.path if isinstance(v, DefRef) else None for v in node.values]
        entry_children = n

    # Inline nodes are node files already, each compressed by its own size:
    # they do not count towards the root's compression threshold.
    inline_bytes = sum(map(len, root.inline_nodes)) if root is not None else 0
    return _write_file(
        MAGIC,
        format_version,
        [keys, node.keys, action_keys],
        [values, entry_values, action_values],
        [s, entry_defs, a],
        [s, entry_children, a],
        compression,
        inline_bytes,
    )


def _rows(runs: Sequence[Any]) -> list[Any]:
    """The rows of a column given as runs (arrowfile.column_of_runs)."""
    out: list[Any] = []
    for run in runs:
        out.extend([None] * run if isinstance(run, int) else run)
    return out


def _write_file(
    magic: bytes,
    format_version: int,
    keys: Sequence[arrowfile.TextRun],
    values: Sequence[arrowfile.Run],
    defs: Sequence[arrowfile.TextRun],
    children: Sequence[arrowfile.TextRun],
    compression: str | None,
    uncounted: int = 0,
) -> bytes:
    """A node file of the columns, each given as runs."""
    if arrowfile.ENABLED:
        laid_out = [
            arrowfile.text_column_of_runs(keys),
            arrowfile.column_of_runs(values),
            arrowfile.text_column_of_runs(defs),
            arrowfile.text_column_of_runs(children),
        ]
        if compression == "none" or (
            sum(c.size for c in laid_out) - uncounted < COMPRESSION_MIN_BYTES
        ):
            crc_ = arrowfile.checksum(laid_out)
            written = arrowfile.write(SCHEMA, magic, format_version, laid_out, crc_)
            if written is not None:
                return written
    return _write_with_pyarrow(
        magic,
        format_version,
        (_rows(keys), _rows(values), _rows(defs), _rows(children)),
        compression,
        uncounted,
    )


def _write_with_pyarrow(
    magic: bytes,
    format_version: int,
    columns: tuple[list[str | None], list[bytes | None], list[str | None], list[str | None]],
    compression: str | None,
    uncounted: int,
) -> bytes:
    keys, values, defs, children = columns
    arrays = [
        pa.array(keys, pa.utf8()),
        pa.array(values, pa.binary()),
        pa.array(defs, pa.utf8()),
        pa.array(children, pa.utf8()),
    ]
    crc: int | None = 0
    for array_ in arrays:
        crc = None if crc is None else _column_checksum(_as_binary(array_), crc)
    if crc is None:  # a column of many runs, or a big-endian machine
        crc = _checksum([_utf8(keys), values, _utf8(defs), _utf8(children)])
    schema = SCHEMA.with_metadata(
        {
            META_MAGIC: magic,
            META_VERSION: str(format_version).encode(),
            META_CHECKSUM: f"crc32:{crc:08x}".encode(),
        }
    )
    if compression == "none" or _data_size(arrays) - uncounted < COMPRESSION_MIN_BYTES:
        compression = None
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, schema, options=options) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))
    return bytes(sink.getvalue().to_pybytes())


def _int_list(text: str, bad: Callable[[str], CorruptCatalogError]) -> tuple[int, ...]:
    if not text:
        return ()
    parts = text.split(",")
    if not all(_is_decimal(p) and int(p) <= MAX_VERSION for p in parts):
        raise bad("$serialized_before is not a list of versions")
    return tuple(int(p) for p in parts)


def _group(
    text: str,
    root: tuple[str, str, int, int | None, int],
    bad: Callable[[str], CorruptCatalogError],
) -> tuple[GroupEntry, ...]:
    """The entries of ``$group``, checked against the rest of the root:
    ``root`` is its (transaction id, isolation, version, begin version,
    ``$n_actions``)."""
    transaction_id, isolation, version, begin_version, n_actions = root
    entries: list[GroupEntry] = []
    for part in text.split(","):
        m = _GROUP_ENTRY.fullmatch(part)
        if m is None:
            raise bad(f"{K_GROUP} entry {part[:80]!r} is not <id>:<begin>:<isolation>:<count>")
        entries.append(GroupEntry(m[1], int(m[2]), m[3], int(m[4])))
    if len(entries) < 2:
        raise bad(f"{K_GROUP} names fewer than two transactions")
    if len({e.transaction_id for e in entries}) != len(entries):
        raise bad(f"{K_GROUP} names a transaction twice")
    first = entries[0]
    if (first.transaction_id, first.isolation) != (transaction_id, isolation):
        raise bad(f"{K_GROUP} does not start with the root's transaction and isolation")
    if any(e.begin_version >= version for e in entries):
        raise bad(f"{K_GROUP} names a begin version not below the root's version")
    if begin_version != min(e.begin_version for e in entries):
        raise bad(f"$begin_version is not the smallest begin version of {K_GROUP}")
    if sum(e.n_actions for e in entries) != n_actions:
        raise bad(f"the action counts of {K_GROUP} do not add up to $n_actions")
    return tuple(entries)


def _check_inline_refs(
    inline: Sequence[str],
    root_version: int | None,
    path: str,
    bad: Callable[[str], CorruptCatalogError],
) -> None:
    """Refuse an inline node reference (``inline``: the node's, already
    checked as references) to a version later than the one whose
    root this node is (``root_version``) or carries it (``path`` is then the
    node's own reference): a version's tree is built before any later version
    exists, so such a reference could only serve another version's data
    (spec/format.md §3.6). A node file does not say which version wrote it,
    so its references are not checked here."""
    carrier = root_version
    if carrier is None:
        own = parse_inline_ref(path)
        if own is None:
            return
        carrier = own[0]
    # A reference's version is its 64 binary digits, least significant
    # first: read backwards they compare as text the way the numbers do, so
    # only a reference that may be later is parsed.
    limit = format(carrier, "064b")
    for c in inline:
        if c[66:2:-1] > limit:
            ref = parse_inline_ref(c)
            if ref is not None and ref[0] > carrier:
                raise bad(
                    f"child {c!r} names an inline node of version {ref[0]}, later than "
                    f"version {carrier}, whose tree this node is part of"
                )


_FILE_NAME = re.compile(r"[A-Za-z0-9._=-]+")


_NAME_NO_DOT = r"[A-Za-z0-9_=-][A-Za-z0-9._=-]*"
_INLINE_CHILD = r"vn/[01]{63}0/(?:0|[1-9][0-9]{0,8})"
#: Children joined with a line break before each: node file paths whose
#: names do not start with "." (format.md §2), and inline node references
#: (§3.6) where the format version allows them.
_NODE_LINES = re.compile(rf"(?:\nnode/{_NAME_NO_DOT})+")
_CHILD_LINES = re.compile(rf"(?:\n(?:node/{_NAME_NO_DOT}|{_INLINE_CHILD}))+")
#: The inline node references among children joined as above.
_INLINE_LINES = re.compile(r"\n(vn/[^\n]*)")


def _child_lines(paths: Sequence[str], inline_allowed: bool) -> list[str] | None:
    """The inline node references among ``paths`` when every one of them is
    ``node/`` followed by a file name that does not start with "." or (with
    ``inline_allowed``) an inline node reference; None otherwise, also when
    a name starts with "." (rare: the caller then checks one by one).

    One regular expression over all paths joined (a node has up to a few
    hundred children) rather than one match per path."""
    n = len(paths)
    if n == 0:
        return []
    text = "\n" + "\n".join(paths)
    lines = _CHILD_LINES if inline_allowed else _NODE_LINES
    # A path holding a line break would make more lines than paths.
    if lines.fullmatch(text) is None or text.count("\n") != n:
        return None
    return _INLINE_LINES.findall(text) if "\nvn/" in text else []


def _children_inline(
    paths: Sequence[str], format_version: int, bad: Callable[[str], CorruptCatalogError]
) -> list[str]:
    """Check the children of an internal node (format.md §2, §3.6) and return
    its inline node references; raise ``bad`` for any other child."""
    inline = _child_lines(paths, format_version >= 2)
    if inline is not None:
        return inline
    inline = []
    for c in paths:
        if _is_file_path(c, "node/"):
            continue
        if format_version >= 2 and parse_inline_ref(c) is not None:
            inline.append(c)
            continue
        if format_version >= 2:
            raise bad(f"child {c[:80]!r} is not a path in node/ or an inline node reference")
        raise bad(f"child {c[:80]!r} is not a path in node/")
    return inline


def _is_file_path(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` followed by one allowed file name (format.md §2)."""
    name = path[len(folder) :]
    return (
        path.startswith(folder)
        and name not in (".", "..")
        and _FILE_NAME.fullmatch(name) is not None
    )


def _is_decimal(text: str) -> bool:
    """ASCII digits only (``int()`` would also take signs, spaces and ``_``)."""
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def _raw_column(
    table: pa.Table, name: str, bad: Callable[[str], CorruptCatalogError]
) -> list[bytes | None]:
    """The rows of column ``name`` as bytes, after checking the Arrow buffers.

    Text columns are read as binary (the same layout), so no byte is
    interpreted as UTF-8 before the checksum has been verified, and the full
    validation refuses offsets that point outside the buffers before any row
    is converted (pyarrow would read out of bounds).
    """
    rows: list[bytes | None] = []
    try:
        for chunk in table.column(name).chunks:
            raw = _as_binary(chunk)
            raw.validate(full=True)
            rows.extend(raw.to_pylist())
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise bad(f"column {name} is malformed ({type(exc).__name__}: {exc})") from None
    return rows


def _text_column(
    rows: list[bytes | None], name: str, bad: Callable[[str], CorruptCatalogError]
) -> list[str | None]:
    nulls = rows.count(None)
    if nulls == len(rows):  # a column the node does not use
        return [None] * nulls
    try:
        if not nulls:
            # Usually ASCII without line breaks: one decode for the whole column.
            joined = b"\n".join(rows)  # type: ignore[arg-type]
            if joined.isascii() and joined.count(b"\n") == len(rows) - 1:
                return joined.decode("ascii").split("\n")  # type: ignore[return-value]
        return [None if b is None else b.decode("utf-8") for b in rows]
    except UnicodeDecodeError as exc:
        raise bad(f"column {name} holds bytes that are not UTF-8 ({exc.reason})") from None


def _column_checksum(raw: pa.Array, crc: int) -> int | None:
    """``crc`` continued over one column's part of the checksum (format.md
    §3.1), read straight from the Arrow buffers of ``raw`` (the column
    viewed as binary, already validated in full) by
    :func:`arrowfile.buffer_checksum`; None where that module is not enabled
    (the caller then takes the rows one by one)."""
    validity, offsets, data = raw.buffers()[:3]
    return arrowfile.buffer_checksum(
        crc, len(raw), raw.null_count, validity, offsets, data, raw.offset
    )


def _single_batch_rows(
    batch: pa.RecordBatch,
    meta: Mapping[bytes, bytes],
    checksum: bool,
    bad: Callable[[str], CorruptCatalogError],
) -> tuple[list[str | None], list[bytes | None], list[str | None], list[str | None]] | None:
    """The rows of a file of one record batch (every node file a writer of
    this format makes), text decoded, after checking the Arrow buffers and
    (with ``checksum``) the checksum; None when the general path must decide
    (a column with nulls in its middle, text that is not UTF-8), which
    reaches the same verdict.

    Decoding before the checksum is checked is safe: valid UTF-8 decodes to
    one string, which encodes back to the same bytes, and text that does not
    decode goes to the general path, which checks the checksum first."""
    crc = 0
    columns: list[list[Any]] = []
    for i, name in enumerate(SCHEMA.names):
        column = batch.column(i)
        raw = _as_binary(column)
        try:
            raw.validate(full=True)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise bad(f"column {name} is malformed ({type(exc).__name__}: {exc})") from None
        if checksum:
            crc_or_none = _column_checksum(raw, crc)
            if crc_or_none is None:
                return None
            crc = crc_or_none
        if raw.null_count == len(raw):  # a column the node does not use
            columns.append([None] * len(raw))
            continue
        try:
            columns.append(column.to_pylist())
        except UnicodeDecodeError:
            return None
    if checksum and meta.get(META_CHECKSUM) != f"crc32:{crc:08x}".encode():
        raise bad("checksum mismatch")
    keys, values, defs, children = columns
    return keys, values, defs, children


_UTF8 = pa.utf8()


def _as_binary(array_: pa.Array) -> pa.Array:
    """A text column viewed as binary (the same buffers): what the checksum
    and the buffer checks read, before any byte is taken as UTF-8."""
    return array_.view(pa.binary()) if array_.type == _UTF8 else array_


_Rows = tuple[int, list[str | None], list[bytes | None], list[str | None], list[str | None]]


def _read_rows(
    data: bytes,
    magic: bytes,
    versions: Sequence[int],
    bad: Callable[[str], CorruptCatalogError],
    *,
    checksum: bool = True,
    system_only: bool = False,
) -> _Rows:
    """Open an Arrow IPC file of the node schema and verify magic, version,
    schema, buffers and (with ``checksum``) the CRC; return (format version,
    keys, values, defs, children). With ``system_only``, the rows may stop
    after the leading system rows (arrowfile.read)."""
    laid_out = arrowfile.read(data, SCHEMA, magic, versions, system_only=system_only)
    if laid_out is not None:  # laid out as this implementation writes (arrowfile)
        version, stated, crc, (keys, values, defs, children) = laid_out
        if checksum and crc != stated:
            raise bad("checksum mismatch")
        if None in keys:
            raise bad("null key")
        return version, keys, values, defs, children
    try:
        reader = pa.ipc.open_file(pa.BufferReader(data))
        schema = reader.schema
        if reader.num_record_batches == 1:
            batch: pa.RecordBatch | None = reader.get_batch(0)
        else:
            batch, table = None, reader.read_all()
    except Exception as exc:  # pyarrow raises several unrelated types here
        raise bad(f"unreadable Arrow IPC file ({type(exc).__name__}: {exc})") from None
    meta = schema.metadata or {}
    if meta.get(META_MAGIC) != magic:
        raise bad(f"missing magic {magic.decode()}")
    try:
        version = int(meta.get(META_VERSION, b""))
    except ValueError:
        raise bad("unreadable format version") from None
    if version not in versions:
        known = " and ".join(map(str, versions))
        raise bad(f"format version {version} is not supported (this reader knows {known})")
    try:  # a damaged field name is not UTF-8, which pyarrow reports as UnicodeDecodeError
        names = schema.names
        types = schema.types
    except (UnicodeDecodeError, pa.ArrowException) as exc:
        raise bad(f"unreadable schema ({type(exc).__name__}: {exc})") from None
    if names != SCHEMA.names or types != SCHEMA.types:
        raise bad(f"unexpected schema {names}")
    if batch is not None:
        fast = _single_batch_rows(batch, meta, checksum, bad)
        if fast is not None:
            keys, values, defs, children = fast
            if None in keys:
                raise bad("null key")
            return version, keys, values, defs, children
        table = pa.Table.from_batches([batch])
    raw_keys, values, raw_defs, raw_children = (_raw_column(table, n, bad) for n in SCHEMA.names)
    if checksum:
        crc = _checksum([raw_keys, values, raw_defs, raw_children])
        if meta.get(META_CHECKSUM) != f"crc32:{crc:08x}".encode():
            raise bad("checksum mismatch")
    # Only now, with the content known to be what the writer wrote, is text decoded.
    keys = _text_column(raw_keys, "key", bad)
    defs = _text_column(raw_defs, "def", bad)
    children = _text_column(raw_children, "child", bad)
    if None in keys:
        raise bad("null key")
    return version, keys, values, defs, children


def _system_rows(
    keys: Sequence[str | None],
    values: Sequence[bytes | None],
    bad: Callable[[str], CorruptCatalogError],
) -> dict[str, bytes]:
    system: dict[str, bytes] = {}
    for k, v in zip(keys, values):
        assert k is not None
        if not k.startswith("$"):
            break
        if v is None or k in system:
            raise bad(f"system key {k} is null or repeated")
        system[k] = v
    return system


def inline_nodes_of(data: bytes, path: str, version: int) -> tuple[bytes, ...]:
    """The inline nodes (``$node.<i>`` rows, in order) of the root file
    ``data`` of ``version``, after the checks a reader makes before it takes
    one (spec/format.md §3.6, "Readers"): a node file (§3.1: magic, format
    version, schema, buffers, checksum) whose system rows say it is the root
    of ``version`` and number its inline nodes 0 to n-1. The rest of the root
    is not decoded: the checksum covers the nodes' bytes, and each node is
    checked in full when it is decoded.

    Raises:
        CorruptCatalogError: naming ``path``.
    """

    def bad(why: str) -> CorruptCatalogError:
        return CorruptCatalogError(f"root file {path} is damaged or not an olympia root: {why}")

    file_version, keys, values, _, _ = _read_rows(
        data, MAGIC, SUPPORTED_FORMAT_VERSIONS, bad, system_only=True
    )
    system = _system_rows(keys, values, bad)
    stated = system.get(K_VERSION, b"").decode("latin-1")
    if not _is_decimal(stated) or int(stated) != version:
        raise CorruptCatalogError(f"root file {path} does not hold the root of version {version}")
    return _inline_rows(system, True, file_version, bad)


def _inline_rows(
    system: dict[str, bytes],
    is_root: bool,
    file_version: int,
    bad: Callable[[str], CorruptCatalogError],
) -> tuple[bytes, ...]:
    """The ``$node.<i>`` rows of a node file's ``system`` rows, in order,
    after checking that only a root of format version 2 carries them and
    that they are numbered 0 to n-1 (spec/format.md §3.6)."""
    found = [k for k in system if k.startswith(K_NODE_PREFIX)]
    if not found:
        return ()
    if not is_root or file_version < 2:
        raise bad(f"{K_NODE_PREFIX}* rows outside a root of format version 2")
    names = [f"{K_NODE_PREFIX}{i}" for i in range(len(found))]
    if set(found) != set(names):
        raise bad(f"{K_NODE_PREFIX}* rows are not numbered 0 to {len(found) - 1}")
    return tuple(system[name] for name in names)


def decode_node(data: bytes, path: str) -> NodeFile:
    """Parse and validate a node file.

    Raises:
        CorruptCatalogError: naming ``path``, for anything that is not a valid
            node file of a supported format version.
    """

    def bad(why: str) -> CorruptCatalogError:
        return CorruptCatalogError(f"node file {path} is damaged or not an olympia node: {why}")

    version, keys, values, defs, children = _read_rows(data, MAGIC, SUPPORTED_FORMAT_VERSIONS, bad)
    system = _system_rows(keys, values, bad)
    n_system = len(system)  # the leading rows: each system key appears once
    ints: dict[str, int] = {}
    for k in _INT_KEYS & system.keys():
        text = system[k].decode("latin-1")
        if not _is_decimal(text) or int(text) > _INT_MAX.get(k, MAX_VERSION):
            raise bad(f"system key {k} is not a non-negative integer in range")
        ints[k] = int(text)
    texts: dict[str, str] = {}
    for k in _TEXT_KEYS & system.keys():
        try:
            texts[k] = system[k].decode("utf-8")
        except UnicodeDecodeError:
            raise bad(f"system key {k} is not UTF-8") from None
    for k in (K_CREATED_AT, K_HEIGHT, K_N_KEYS):
        if k not in ints:
            raise bad(f"missing system key {k}")
    height, n_keys = ints[K_HEIGHT], ints[K_N_KEYS]
    if not 0 <= height <= MAX_HEIGHT:
        raise bad(f"height {height} out of range")
    is_root = K_VERSION in system
    if is_root and not system.keys() >= _ROOT_KEYS:
        raise bad(f"root node lacks {sorted(_ROOT_KEYS - system.keys())}")
    if not is_root and system.keys() & _ROOT_ONLY_KEYS:
        raise bad(f"node without $version has root keys {sorted(system.keys() & _ROOT_ONLY_KEYS)}")
    n_actions = ints.get(K_N_ACTIONS, 0)
    action_file = texts.get(K_ACTIONS)
    if action_file is not None:
        if version < 2:
            raise bad(f"{K_ACTIONS} in a format version {version} file")
        if not _is_file_path(action_file, "act/"):
            raise bad(f"{K_ACTIONS} {action_file[:80]!r} is not a path in act/")
    n_rows = 0 if action_file is not None else n_actions
    if n_keys < 0 or n_actions < 0 or n_system + n_keys + n_rows != len(keys):
        raise bad("row counts do not add up")

    pivot = slice(n_system, n_system + n_keys)
    node_keys: tuple[str, ...] = tuple(keys[pivot])  # type: ignore[arg-type]  # no None (above)
    if not all(map(operator.lt, node_keys, node_keys[1:])):
        raise bad("pivot keys are not strictly increasing")
    pivot_defs, pivot_children = defs[pivot], children[pivot]
    pivot_values = values[pivot]
    if height == 0 and pivot_defs.count(None) == pivot_children.count(None) == n_keys:
        # Every value inline (the common case): no row holds a def or a child.
        if None in pivot_values:
            raise bad("leaf row must hold exactly one of value or def and no child")
        node = Node(height=0, keys=node_keys, values=tuple(pivot_values))  # type: ignore[arg-type]
    elif height == 0:
        leaf_values: list[Value] = []
        for v, d, c in zip(pivot_values, pivot_defs, pivot_children):
            if c is not None or (v is None) == (d is None):
                raise bad("leaf row must hold exactly one of value or def and no child")
            if d is not None and not _is_file_path(d, "def/"):
                raise bad(f"def {d[:80]!r} is not a path in def/")
            leaf_values.append(DefRef(d) if d is not None else v)  # type: ignore[arg-type]
        node = Node(height=0, keys=node_keys, values=tuple(leaf_values))
    else:
        if (
            pivot_values.count(None) != n_keys
            or pivot_defs.count(None) != n_keys
            or None in pivot_children
        ):
            raise bad("internal row must hold a child and nothing else")
        kids: list[str] = pivot_children  # type: ignore[assignment]
        inline_refs = _children_inline(kids, version, bad)
        node = Node(height=height, keys=node_keys, children=tuple(kids))
        if inline_refs:
            _check_inline_refs(inline_refs, ints.get(K_VERSION), path, bad)

    inline = _inline_rows(system, is_root, version, bad)
    extra = {
        k: v
        for k, v in system.items()
        if k not in _KNOWN_KEYS and not (inline and k.startswith(K_NODE_PREFIX))
    }
    root: RootInfo | None = None
    if is_root:
        acts = slice(n_system + n_keys, len(keys))
        actions: list[tuple[str, bytes]] = []
        for action_key, action in zip(keys[acts], values[acts]):
            if action_key is None or action is None:
                raise bad("action row without key or value")
            actions.append((action_key, action))
        begin = ints.get(K_BEGIN_VERSION)
        if begin is not None and begin >= ints[K_VERSION]:
            # Conflict checks examine the versions above it: one too high
            # would hide conflicts (spec/format.md §3.2, "What readers check").
            raise bad(f"{K_BEGIN_VERSION} {begin} is not below $version {ints[K_VERSION]}")
        target = ints.get(K_ROLLBACK_TO_VERSION)
        if target is not None:
            if K_ROLLBACK_FROM_ROOT not in texts:
                raise bad(f"{K_ROLLBACK_TO_VERSION} in a root without {K_ROLLBACK_FROM_ROOT}")
            if target >= ints[K_VERSION]:
                raise bad(f"{K_ROLLBACK_TO_VERSION} {target} is not below $version")
        transaction_id = texts[K_TRANSACTION_ID]
        isolation = texts.get(K_ISOLATION, "")
        group: tuple[GroupEntry, ...] = ()
        if K_GROUP in texts:
            if version < 2:
                raise bad(f"{K_GROUP} in a format version {version} file")
            group = _group(
                texts[K_GROUP],
                (transaction_id, isolation, ints[K_VERSION], begin, n_actions),
                bad,
            )
        commit_infos: tuple[tuple[str, CommitInfo], ...] = ()
        if K_COMMIT_INFO in system:
            ids = transaction_ids(transaction_id, group)
            commit_infos = _commit_infos(system[K_COMMIT_INFO], ids, bad)
        root = RootInfo(
            version=ints[K_VERSION],
            catalog_def=system[K_CATALOG_DEF],
            transaction_id=transaction_id,
            previous_root=texts.get(K_PREVIOUS_ROOT),
            rollback_from_root=texts.get(K_ROLLBACK_FROM_ROOT),
            actions=tuple(actions),
            begin_version=begin,
            isolation=isolation,
            serialized_before=_int_list(texts.get(K_SERIALIZED_BEFORE, ""), bad),
            action_file=action_file,
            action_file_count=n_actions if action_file is not None else 0,
            rollback_to_version=target,
            inline_nodes=inline,
            group=group,
            commit_infos=commit_infos,
        )
    return NodeFile(
        node=node,
        created_at_millis=ints[K_CREATED_AT],
        root=root,
        extra=extra,
        format_version=version,
    )


#: Rows per record batch of an action file: the writer holds one batch of
#: uncompressed rows at a time.
ACTION_BATCH_ROWS = 32768


def encode_actions(
    transaction_id: str,
    actions: Iterable[tuple[str, bytes]],
    count: int,
    created_at_millis: int,
    compression: str | None = "zstd",
) -> bytes:
    """An action file (spec/format.md §3.5) holding the ``count`` ``actions``,
    written one record batch at a time.

    Raises:
        ValueError: ``actions`` does not yield ``count`` items.
    """
    schema = SCHEMA.with_metadata({META_MAGIC: ACTIONS_MAGIC, META_VERSION: b"2"})
    sink = pa.BufferOutputStream()
    written = 0

    def batch(keys: list[bytes], values: list[bytes]) -> pa.RecordBatch:
        nulls = pa.nulls(len(keys), pa.utf8())
        return pa.record_batch(
            [
                pa.array(keys, pa.binary()).view(pa.utf8()),
                pa.array(values, pa.binary()),
                nulls,
                nulls,
            ],
            schema=schema,
        )

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal written
        keys = [k.encode() for k in (K_CREATED_AT, K_TRANSACTION_ID, K_N_ACTIONS)]
        values = [str(created_at_millis).encode(), transaction_id.encode(), str(count).encode()]
        for key, value in actions:
            keys.append(key.encode("utf-8"))
            values.append(value)
            written += 1
            if len(keys) >= ACTION_BATCH_ROWS:
                yield batch(keys, values)
                keys, values = [], []
        if keys:
            yield batch(keys, values)

    parts = batches()
    first = next(parts)  # never empty: it starts with the system rows
    # The rule of node files (spec/format.md §3, §3.5): compressed only from
    # 64 KiB of column data. A file of more than one batch has a full first
    # batch, whose offsets alone are past that, so the first batch decides.
    codec = None if compression in (None, "none") else compression
    if _data_size(first.columns) < COMPRESSION_MIN_BYTES:
        codec = None
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_file(sink, schema, options=options) as writer:
        writer.write_batch(first)
        for part in parts:
            writer.write_batch(part)
    if written != count:
        raise ValueError(f"encode_actions was promised {count} actions and got {written}")
    return bytes(sink.getvalue().to_pybytes())


@dataclass(frozen=True)
class ActionFile:
    """The decoded content of an action file."""

    transaction_id: str
    created_at_millis: int
    actions: tuple[tuple[str, bytes], ...]


def decode_actions(data: bytes, path: str) -> ActionFile:
    """Parse and validate an action file.

    Raises:
        CorruptCatalogError: naming ``path``, for anything that is not a valid
            action file.
    """

    def bad(why: str) -> CorruptCatalogError:
        return CorruptCatalogError(f"action file {path} is damaged or not an action file: {why}")

    _, keys, values, defs, children = _read_rows(data, ACTIONS_MAGIC, (2,), bad, checksum=False)
    system = _system_rows(keys, values, bad)
    ints: dict[str, int] = {}
    for k in (K_CREATED_AT, K_N_ACTIONS):
        text = system.get(k, b"").decode("latin-1")
        if not _is_decimal(text) or int(text) > _INT_MAX.get(k, MAX_VERSION):
            raise bad(f"system key {k} is missing or not a non-negative integer in range")
        ints[k] = int(text)
    try:
        txn_id = system.get(K_TRANSACTION_ID, b"").decode("utf-8")
    except UnicodeDecodeError:
        raise bad(f"system key {K_TRANSACTION_ID} is not UTF-8") from None
    if not txn_id:
        raise bad(f"missing system key {K_TRANSACTION_ID}")
    start = len(system)
    if start + ints[K_N_ACTIONS] != len(keys):
        raise bad("row counts do not add up")
    if defs.count(None) != len(defs) or children.count(None) != len(children):
        raise bad("an action row holds a def or a child")
    action_values = values[start:]
    if None in action_values:  # (keys are never null: _read_rows refuses that)
        raise bad("action row without key or value")
    return ActionFile(
        txn_id,
        ints[K_CREATED_AT],
        tuple(zip(keys[start:], action_values)),  # type: ignore[arg-type]  # no None (above)
    )
