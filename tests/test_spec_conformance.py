"""The library against spec/format.md and spec/transactions.md.

The first half reads catalogs the library wrote with a small reader built from
the spec alone (pyarrow, zlib, hashlib and the protos; nothing from the
package), following the conformance list of spec/format.md §10. The second
half covers the places where the library used to disagree with its spec or
protos.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import olympia
from olympia import layout, maintenance, tree
from olympia.codec import NodeFile, decode_node, encode_node
from olympia.conflicts import Footprint, write_overlap
from olympia.errors import (
    CatalogNotFoundError,
    CorruptCatalogError,
    InvalidNameError,
    TableAlreadyExistsError,
)
from olympia.keys import validate_name
from olympia.node import Node
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb

A = apb.ActionType
#: The read action types (transactions.md §1): they are recorded, never applied.
READ_TYPES = {
    A.NAMESPACE_EXISTS, A.NAMESPACE_DESCRIBE, A.NAMESPACES_LIST,
    A.TABLE_EXISTS, A.TABLE_DESCRIBE, A.TABLES_LIST, A.TABLE_SELECT,
    A.VIEW_EXISTS, A.VIEW_DESCRIBE, A.VIEWS_LIST, A.TRANSACTION_EXISTS,
}  # fmt: skip
ROOT_DIR = Path(__file__).resolve().parent.parent

# --- a reader written from the spec ---------------------------------------------------


def spec_name(version: int) -> str:
    """format.md §2.1: 64 binary digits, least significant first."""
    return "".join("1" if version >> i & 1 else "0" for i in range(64))


def spec_version(file_name: str) -> int | None:
    """format.md §2.1 backwards: the version of a root file name, else None."""
    if len(file_name) != 64 or set(file_name) - {"0", "1"}:
        return None
    return int(file_name[::-1], 2)


def spec_counter(data: bytes | None) -> int | None:
    """format.md §2.2: ASCII digits, surrounding space/tab/CR/LF ignored."""
    if data is None:
        return None
    text = data.strip(b" \t\r\n")
    if not re.fullmatch(rb"[0-9]{1,20}", text):
        return None
    return int(text) if int(text) < 1 << 64 else None


def spec_checksum(columns: list[list[bytes | None]]) -> int:
    """format.md §3.1."""
    crc = 0
    for col in columns:
        for v in col:
            crc = zlib.crc32(struct.pack("<i", -1 if v is None else len(v)), crc)
        for v in col:
            if v is not None:
                crc = zlib.crc32(v, crc)
    return crc


@dataclass
class SpecNode:
    system: dict[str, bytes]
    pivots: list[tuple[str, bytes | None, str | None, str | None]]
    actions: list[tuple[str, apb.Action]] = field(default_factory=list)

    @property
    def is_root(self) -> bool:
        return "$version" in self.system  # format.md §3.3

    @property
    def height(self) -> int:
        return int(self.system["$height"])


def spec_rows(
    data: bytes, magic: bytes = b"olympia-node"
) -> tuple[bytes, list[tuple[Any, ...]], dict[str, bytes], int]:
    """format.md §3.1: (format version, rows, system rows, index of the first
    row after them), the checksum verified."""
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = table.schema.metadata
    assert meta[b"olympia.magic"] == magic
    assert meta[b"olympia.format-version"] in (b"1", b"2")
    assert [(f.name, f.type) for f in table.schema] == [
        ("key", pa.utf8()),
        ("value", pa.binary()),
        ("def", pa.utf8()),
        ("child", pa.utf8()),
    ]
    cols = [table.column(n).to_pylist() for n in ("key", "value", "def", "child")]
    as_bytes = [
        [None if v is None else v.encode() if isinstance(v, str) else v for v in col]
        for col in cols
    ]
    if magic == b"olympia-node":  # action files rely on the digest in their name (§3.5)
        assert meta[b"olympia.checksum"] == f"crc32:{spec_checksum(as_bytes):08x}".encode()
    rows = list(zip(*cols, strict=True))
    system: dict[str, bytes] = {}
    i = 0
    while i < len(rows) and rows[i][0].startswith("$"):
        key, value, d, c = rows[i]
        assert value is not None and d is None and c is None and key not in system
        system[key] = value
        i += 1
    return meta[b"olympia.format-version"], rows, system, i


def spec_actions(rows: Sequence[tuple[Any, ...]]) -> list[tuple[str, apb.Action]]:
    """format.md §3.2, "Action rows"."""
    actions = []
    for key, value, d, c in rows:
        assert d is None and c is None
        action = apb.Action()
        action.ParseFromString(value)
        actions.append((key, action))
    return actions


def spec_node(data: bytes, read: Callable[[str], bytes | None] | None = None) -> SpecNode:
    """format.md §3; ``read`` fetches the action file a root names (§3.5)."""
    version, rows, system, i = spec_rows(data)
    n_keys = int(system["$n_keys"])
    n_actions = int(system.get("$n_actions", b"0"))
    action_file = system.get("$actions")
    assert action_file is None or version == b"2"
    assert i + n_keys + (0 if action_file else n_actions) == len(rows)
    pivots = rows[i : i + n_keys]
    keys = [r[0].encode() for r in pivots]
    assert keys == sorted(set(keys))
    if "$version" in system and "$begin_version" in system:
        # §3.2, "What readers check of a root's other keys"
        assert int(system["$begin_version"]) < int(system["$version"]), "damaged"
    # §3.6: $node.<i> numbered 0 .. n-1, no leading zero, no gap
    indexes = [k[len("$node.") :] for k in system if k.startswith("$node.")]
    assert sorted(indexes) == sorted(str(n) for n in range(len(indexes))), "damaged"
    if action_file is None:
        actions = spec_actions(rows[i + n_keys :])
    else:
        m = re.fullmatch(r"act/([0-9]{13,})-([0-9a-f]{32})\.arrow", action_file.decode())
        assert m is not None and read is not None
        file = read(action_file.decode())
        assert file is not None and hashlib.sha256(file).hexdigest()[:32] == m.group(2)
        _, act_rows, act_system, j = spec_rows(file, b"olympia-actions")
        # §3.5: all three system rows required
        assert re.fullmatch(rb"[0-9]{1,20}", act_system["$created_at_millis"])
        assert act_system["$transaction_id"] == system["$transaction_id"]
        assert int(act_system["$n_actions"]) == n_actions == len(act_rows) - j
        actions = spec_actions(act_rows[j:])
    return SpecNode(system, pivots, actions)


class SpecReader:
    """Everything a reader needs, from format.md only."""

    def __init__(self, root_dir: Path) -> None:
        self.dir = root_dir

    def read(self, path: str) -> bytes | None:
        file = self.dir / path
        return file.read_bytes() if file.exists() else None

    def latest(self) -> int:
        """format.md §2.2, step by step."""
        oldest = spec_counter(self.read("vn/oldest")) or 0
        h = max(spec_counter(self.read("vn/latest")) or 0, oldest)

        def exists(v: int) -> bool:
            return (self.dir / "vn" / spec_name(v)).exists()

        if not exists(h):
            if h == oldest or not exists(oldest):
                # The fallback: list vn/ (no root: no catalog; roots only
                # below the floor: damage).
                listed = [spec_version(p.name) for p in (self.dir / "vn").iterdir()]
                listed = [v for v in listed if v is not None]
                if not listed:
                    raise LookupError("no catalog")
                low, step = max(listed), 1
                while exists(low + step):
                    low += step
                    step *= 2
                high = low + step
                while high - low > 1:
                    mid = (low + high) // 2
                    low, high = (mid, high) if exists(mid) else (low, mid)
                if low < oldest:
                    raise ValueError("damaged: no root at or above the floor")
                return low
            low, high = oldest, h
        else:
            low, step = h, 1
            while exists(low + step):
                low += step
                step *= 2
            high = low + step
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if exists(mid) else (low, mid)
        return low

    def open_version(self, version: int) -> SpecNode:
        """format.md §2.2, "Opening a version": the floor first, then the root."""
        if version < (spec_counter(self.read("vn/oldest")) or 0):
            raise LookupError(f"version {version} was expired")
        data = self.read(f"vn/{spec_name(version)}")
        if data is None or data == b"olympia-expired-root\n":
            raise LookupError(f"version {version} was expired")
        return self.root(version)

    def root(self, version: int) -> SpecNode:
        data = self.read(f"vn/{spec_name(version)}")
        assert data is not None
        node = spec_node(data, self.read)
        assert node.is_root and int(node.system["$version"]) == version
        return node

    def child(self, path: str, carrier: int | None = None) -> SpecNode:
        """The node ``path`` names, from a node that is the root of version
        ``carrier`` or is carried by it (None: a node file)."""
        inline = re.fullmatch(r"vn/([01]{63}0)/(0|[1-9][0-9]{0,8})", path)
        if inline is not None:
            # format.md §3.6: never a version above the one whose tree this is
            assert carrier is None or spec_version(inline.group(1)) <= carrier, "damaged"
            # format.md §3.6: inline node i of the root of version w, read
            # whatever the floor says
            data = self.read(f"vn/{inline.group(1)}")
            assert data is not None
            carrier = spec_node(data, self.read)
            assert carrier.is_root
            blob = carrier.system[f"$node.{inline.group(2)}"]
            node = spec_node(blob)
            assert not node.is_root
            return node
        m = re.fullmatch(r"(node|def)/([0-9]{13,})-([0-9a-f]{32})\.(arrow|binpb)", path)
        assert m is not None
        data = self.read(path)
        assert data is not None
        assert hashlib.sha256(data).hexdigest()[:32] == m.group(3)
        node = spec_node(data)
        assert not node.is_root
        return node

    def value(self, row: tuple[str, bytes | None, str | None, str | None]) -> bytes:
        _, value, d, c = row
        assert c is None and (value is None) != (d is None)
        if value is not None:
            return value
        assert d is not None
        data = self.read(d)
        assert data is not None and hashlib.sha256(data).hexdigest()[:32] in d
        return data

    def entries(self, node: SpecNode, carrier: int | None = None) -> list[tuple[str, bytes]]:
        """Every (key, value) of the tree under ``node``, in order; ``carrier``
        as for :meth:`child` (a root is its own)."""
        if node.is_root:
            carrier = int(node.system["$version"])
        if node.height == 0:
            return [(row[0], self.value(row)) for row in node.pivots]
        out: list[tuple[str, bytes]] = []
        for key, value, d, c in node.pivots:
            assert value is None and d is None and c is not None
            kid = self.child(c, carrier)
            assert kid.height == node.height - 1
            inline = re.fullmatch(r"vn/([01]{63}0)/[0-9]+", c)
            sub = self.entries(kid, None if inline is None else spec_version(inline.group(1)))
            assert sub and sub[0][0] == key
            out.extend(sub)
        return out


def prefix(type_id: int) -> str:
    """format.md §5: base64 of the type id as 3 big-endian bytes."""
    return base64.b64encode(type_id.to_bytes(3, "big")).decode()


def spec_key(type_id: int, *parts: str) -> str:
    """format.md §5, format version 2: the parts after the prefix, one space between."""
    return prefix(type_id) + " ".join(parts)


def spec_key_parts(key: str, widths: tuple[int, ...]) -> list[str]:
    """format.md §5, format version 2: split on single spaces, each part 1..width."""
    parts = key[4:].split(" ")
    assert len(parts) == len(widths)
    assert all(0 < len(p) <= w for p, w in zip(parts, widths))
    return parts


# --- the library's catalogs, read by the spec reader ----------------------------------


@pytest.fixture
def written(tmp_path: Path) -> tuple[olympia.Catalog, SpecReader]:
    cat = olympia.create_catalog(
        str(tmp_path / "c"),
        namespace_name_max_size=6,
        table_name_max_size=10,
        view_name_max_size=7,
        node_order=3,
        inline_value_max_bytes=64,
    )
    with cat.transaction() as t:  # v1
        t.create_namespace("ns", {"owner": "x"})
        for i in range(6):
            t.create_table("ns", f"t{i}", f"s3://b/t{i}/m.json")
        t.create_table("ns", "wide_table", "s3://b/" + "w" * 80)
        t.create_view("ns", "v", sql_text="select 1")
    with cat.transaction() as t:  # v2
        t.alter_namespace("ns", set={"b": "2", "a": "1"}, unset=["owner"])
        t.rename_table("ns", "t0", "ns", "renamed")
    with cat.transaction(isolation="serializable") as t:  # v3
        t.describe_table("ns", "t1")
        t.drop_table("ns", "t1")
    cat.rollback_to(2)  # v4
    return cat, SpecReader(Path(cat.store.storage.location))


def test_spec_reader_sees_what_the_library_sees(written):
    cat, spec = written
    assert spec.latest() == cat.version == 4
    for version in range(5):
        root = spec.root(version)
        view = cat.at_version(version)
        assert spec.entries(root) == list(view.scan(""))
        assert pb.CatalogDefinition.FromString(root.system["$catalog_def"]) == view.definition
        assert root.system["$transaction_id"].decode() == cat.history()[version].transaction_id
        if version:
            assert root.system["$previous_root"].decode() == f"vn/{spec_name(version - 1)}"
    tables = [
        spec_key_parts(key, (6, 10))[1]
        for key, _ in spec.entries(spec.root(4))
        if key.startswith(prefix(2) + "ns ")
    ]
    assert tables == cat.latest().list_tables("ns")


def test_value_name_fields_equal_their_key(written):
    cat, spec = written
    widths = {1: (6,), 2: (6, 10), 3: (6, 7)}
    messages = {1: pb.Namespace, 2: pb.Table, 3: pb.View}
    for key, value in spec.entries(spec.root(cat.version)):
        type_id = int.from_bytes(base64.b64decode(key[:4]), "big")
        parts = spec_key_parts(key, widths[type_id])
        msg: Any = messages[type_id].FromString(value)
        names = [msg.name] if type_id == 1 else [msg.namespace, msg.name]
        assert names == parts


def test_action_rows_as_specified(written):
    _, spec = written
    for version in range(1, 5):
        for key, action in spec.root(version).actions:
            assert key == action.object_key
    ns_key = spec_key(1, "ns")
    # Writes are preceded by the precondition reads they evaluated (transactions.md §1).
    writes = [a for _, a in spec.root(2).actions if a.type not in READ_TYPES]
    alter, rename = writes
    reads = [
        (a.type, a.object_key, a.found) for _, a in spec.root(2).actions if a.type in READ_TYPES
    ]
    # Only the check on a key the transaction does not itself write: no view
    # may be named like the rename's target.
    assert [
        (t, k.startswith(prefix(3)), k.rstrip().endswith("renamed"), f) for t, k, f in reads
    ] == [(A.VIEW_EXISTS, True, True, False)]
    assert alter.type == A.NAMESPACE_ALTER and alter.object_key == ns_key
    assert list(alter.set_properties) == ["a", "b"]
    assert list(alter.unset_properties) == ["owner"]
    assert dict(alter.namespace.properties) == {"a": "1", "b": "2"}
    assert rename.type == A.TABLE_RENAME
    assert rename.object_key == spec_key(2, "ns", "t0")
    assert rename.target_key == spec_key(2, "ns", "renamed")
    assert (rename.table.namespace, rename.table.name) == ("ns", "renamed")
    serializable = spec.root(3)
    assert serializable.system["$isolation"] == b"serializable"
    assert serializable.system["$begin_version"] == b"2"
    assert [a.type for _, a in serializable.actions if a.type not in READ_TYPES] == [A.TABLE_DROP]
    assert next(a.type for _, a in serializable.actions) == A.TABLE_DESCRIBE
    rollback = spec.root(4)
    assert [(k, a.type) for k, a in rollback.actions] == [("", A.CATALOG_ROLLBACK)]
    assert rollback.system["$begin_version"] == b"3"
    assert rollback.system["$rollback_from_root"] == rollback.system["$previous_root"]
    assert "$isolation" not in rollback.system
    assert rollback.pivots == spec.root(2).pivots
    assert "$begin_version" not in spec.root(0).system


def test_latest_version_probe_agrees_with_the_spec(written):
    cat, spec = written
    storage = cat.store.storage
    for hint, oldest in [(b"0", None), (b"4\n", None), (b"2 \r\n", b"1\n"), (b"99", None)]:
        storage.overwrite(layout.LATEST_HINT, hint)
        if oldest is not None:
            storage.overwrite(layout.OLDEST_FLOOR, oldest)
        assert cat.store.latest_version() == spec.latest() == 4
    # Neither the hint's root nor the floor's root exists, but roots do, all
    # below the floor: damage, never "no catalog".
    storage.overwrite(layout.OLDEST_FLOOR, b"7")
    storage.overwrite(layout.LATEST_HINT, b"9")
    with pytest.raises(ValueError, match="damaged"):
        spec.latest()
    # A reader that opens the catalog reads the floor and sees the damage. (One
    # that has seen version 4 probes from it and needs no floor in a format-2
    # catalog, format.md §2.2: it answers 4, the latest root there is.)
    with pytest.raises(CorruptCatalogError, match="no root at or above its oldest version 7"):
        olympia.store.CatalogStore(storage).latest_version()
    assert cat.store.latest_version() == 4
    # No root at all: no catalog.
    for path in storage.list(layout.VERSION_DIR):
        if path not in (layout.OLDEST_FLOOR, layout.LATEST_HINT):
            storage.delete(path)
    with pytest.raises(LookupError):
        spec.latest()
    with pytest.raises(CatalogNotFoundError):
        cat.store.latest_version()


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"12", 12),
        (b"12\n", 12),
        (b" \t12\r\n", 12),
        (b"", None),
        (b"1 2", None),
        (b"+12", None),
        (b"\x0b12", None),
        (b"\xd9\xa12", None),
        (b"1" * 21, None),
        (str(1 << 64).encode(), None),
    ],
)
def test_counter_files(data, value):
    assert layout.decode_counter(data) == spec_counter(data) == value


def test_root_is_told_by_version_key_and_non_roots_carry_no_root_keys():
    leaf = Node(0, ("AAABx",), (b"v",))
    plain = encode_node(NodeFile(leaf, 1_700_000_000_000))
    assert decode_node(plain, "node/x").root is None
    assert not spec_node(plain).is_root
    for key in ("$begin_version", "$isolation", "$n_actions", "$catalog_def"):
        value = b"0" if key in ("$begin_version", "$n_actions") else b"serializable"
        data = encode_node(NodeFile(leaf, 1_700_000_000_000, extra={key: value}))
        with pytest.raises(CorruptCatalogError, match="without \\$version has root keys"):
            decode_node(data, "node/x")


def test_generated_protos_use_the_documented_import_path():
    """spec/format.md §11: proto/ is compiled as olympia/proto/."""
    assert apb.DESCRIPTOR.name == "olympia/proto/actions.proto"
    assert list(apb.DESCRIPTOR.dependencies) == [pb.DESCRIPTOR]
    assert pb.DESCRIPTOR.name == "olympia/proto/objects.proto"
    assert "--proto_path=olympia/proto=proto" in (ROOT_DIR / "spec" / "format.md").read_text()


# --- library fixes ----------------------------------------------------------------------


def test_alter_namespace_records_the_keys_it_sets(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns", {"old": "1"})
    with cat.transaction() as t:
        t.alter_namespace("ns", set={"z": "1", "k": "2"}, unset=["old"])
        (action,) = t.actions
        assert list(action.set_properties) == ["k", "z"]
    (committed,) = cat.history()[-1].actions
    assert list(committed.set_properties) == ["k", "z"]
    assert list(committed.unset_properties) == ["old"]


def test_conflict_check_reads_set_properties():
    """A writer that fills only the documented field is still checked."""
    key = "AAABns"

    def alter(set_keys: list[str], values: dict[str, str]) -> apb.Action:
        return apb.Action(
            type=A.NAMESPACE_ALTER,
            object_key=key,
            namespace=pb.Namespace(name="ns", properties=values),
            set_properties=set_keys,
        )

    documented_only = Footprint.of(2, 1, [alter(["p"], {})])
    ours = Footprint.of(3, 1, [alter(["p"], {"p": "1"})])
    assert write_overlap(documented_only, ours) == key
    # Roots written before set_properties was filled: the value's keys count.
    old_form = Footprint.of(2, 1, [alter([], {"p": "1"})])
    assert write_overlap(old_form, ours) == key
    disjoint = Footprint.of(2, 1, [alter(["q"], {"q": "1"})])
    assert write_overlap(disjoint, ours) is None


def test_concurrent_alters_of_one_property_conflict_end_to_end(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    first, second = cat.begin(), cat.begin()
    first.alter_namespace("ns", set={"p": "1"})
    second.alter_namespace("ns", unset=["p"])
    first.commit()
    with pytest.raises(olympia.CommitConflictError) as err:
        second.commit()
    assert err.value.rule == "write-write"


def test_action_has_no_transaction_id_field(tmp_path):
    assert "transaction_id" not in apb.Action.DESCRIPTOR.fields_by_name
    assert 12 not in apb.Action.DESCRIPTOR.fields_by_number
    proto = (ROOT_DIR / "proto" / "actions.proto").read_text()
    assert re.search(r"reserved 12;", proto)
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    entry = cat.history()[-1]
    raw = cat.store.load_root(1).info
    assert raw.transaction_id == entry.transaction_id and len(entry.transaction_id) == 32


@pytest.mark.parametrize(("table_width", "view_width"), [(8, 6), (6, 8)])
def test_table_and_view_widths_are_independent(tmp_path, table_width, view_width):
    cat = olympia.create_catalog(
        str(tmp_path / "c"), table_name_max_size=table_width, view_name_max_size=view_width
    )
    wide, narrow = "y" * 7, "x" * 6
    with cat.transaction() as t:
        t.create_namespace("n")
        if table_width > view_width:
            t.create_table("n", wide, "s3://b/m.json")
            with pytest.raises(InvalidNameError, match="view name .* allows 6"):
                t.create_view("n", wide, sql_text="select 1")
            t.create_table("n", "a", "s3://b/a.json")
            t.rename_table("n", "a", "n", "z" * 8)
        else:
            t.create_view("n", wide, sql_text="select 1")
            with pytest.raises(InvalidNameError, match="table name .* allows 6"):
                t.create_table("n", wide, "s3://b/m.json")
        t.create_view("n", narrow, sql_text="select 2")
        with pytest.raises(TableAlreadyExistsError, match="a view named n.xxxxxx"):
            t.create_table("n", narrow, "s3://b/x.json")
    latest = cat.latest()
    if table_width > view_width:
        assert latest.list_tables("n") == [wide, "z" * 8]
        assert latest.describe_table("n", wide).name == wide
    else:
        assert latest.list_views("n") == [narrow, wide]


@pytest.mark.parametrize(
    ("char", "allowed"),
    [
        ("\u0021", True),  # '!', the lowest allowed code point
        ("\u0020", False),
        ("\u007e", True),
        ("\u007f", False),
        ("\u009f", False),
        ("\u00a0", False),  # no-break space (White_Space)
        ("\u00a1", True),
        ("\u0378", True),  # unassigned in Unicode 15: allowed, by a version-free rule
        ("\u1680", False),
        ("\u180e", True),  # was whitespace before Unicode 6.3, never in the list
        ("\u200a", False),
        ("\u200b", True),  # zero width space is Cf, not White_Space
        ("\u2028", False),
        ("\u2029", False),
        ("\u3000", False),
        ("\ue000", True),  # private use
        ("\ufdcf", True),
        ("\ufdd0", False),  # noncharacter
        ("\ufdef", False),
        ("\ufffd", True),
        ("\ufffe", False),
        ("\U0001f600", True),
        ("\U0002fffe", False),
        ("\U000e01ef", True),
        ("\U0010fffd", True),
        ("\U0010ffff", False),
        ("/", True),  # allowed since names may hold "/" (Iceberg)
        ("\\", False),
    ],
)
def test_name_characters_follow_a_version_free_list(char, allowed):
    name = f"a{char}b"
    if allowed:
        assert validate_name("table", name, 8) == name
    else:
        with pytest.raises(InvalidNameError, match="forbidden character"):
            validate_name("table", name, 8)


# --- what readers verify ------------------------------------------------------------------


def _commit_raw(cat: olympia.Catalog, changes: dict[str, bytes | None], **kw: Any) -> None:
    base = cat.store.load_root(cat.version)
    new = tree.apply(base.node, sorted(changes.items()), base.order, cat.store.load_node)
    cat.store.commit(
        base.version + 1,
        new,
        kw.pop("definition", base.definition),
        "raw",
        previous_root=base.path,
        **kw,
    )


def test_value_whose_names_differ_from_its_key_is_damage(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"), namespace_name_max_size=4)
    with cat.transaction() as t:
        t.create_namespace("ns")
    table_key = cat.latest().keys.table("ns", "t")
    wrong = pb.Table(namespace="ns", name="other", metadata_location="s3://b/m.json")
    _commit_raw(cat, {table_key: wrong.SerializeToString()})
    latest = cat.latest()
    assert latest.list_tables("ns") == ["t"]  # the key is authoritative
    with pytest.raises(CorruptCatalogError, match="names 'ns.other'"):
        latest.describe_table("ns", "t")
    ns_key = latest.keys.namespace("ns")
    _commit_raw(cat, {ns_key: pb.Namespace(name="nz").SerializeToString()})
    with pytest.raises(CorruptCatalogError, match="names 'nz'"):
        cat.latest().describe_namespace("ns")


def test_unknown_type_prefix_is_ignored_and_preserved(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    unknown = prefix(5) + "something from a later writer"
    _commit_raw(cat, {unknown: b"\x01\x02"})
    with cat.transaction() as t:
        assert t.list_namespaces() == ["ns"]
        t.create_table("ns", "t", "s3://b/m.json")
    latest = cat.latest()
    assert latest.get(unknown) == b"\x01\x02"
    assert latest.list_namespaces() == ["ns"] and latest.list_tables("ns") == ["t"]


@pytest.mark.parametrize(
    ("field_name", "value", "message"),
    [
        ("table_name_max_size", 0, "table_name_max_size = 0"),
        ("node_compression", "", "node_compression = ''"),
        ("default_isolation", "", "default_isolation = ''"),
        ("distributed_txn_ttl_millis", 0, "distributed_txn_ttl_millis = 0"),
        ("format_version", 0, "no format_version"),
        ("node_order", 2, "node_order = 2"),
    ],
)
def test_stored_definition_defaults_are_not_substituted(tmp_path, field_name, value, message):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    definition = pb.CatalogDefinition()
    definition.CopyFrom(cat.definition)
    setattr(definition, field_name, value)
    _commit_raw(cat, {}, definition=definition)
    with pytest.raises(CorruptCatalogError, match=message):
        olympia.load_catalog(str(tmp_path / "c"))


@pytest.mark.parametrize("mode", ["full", "minimal"])
def test_spec_reader_reads_exports(written, tmp_path, mode):
    cat, _ = written
    target = tmp_path / f"export-{mode}"
    cat.export_snapshot("e", str(target), mode=mode)
    spec = SpecReader(target)
    exported = olympia.load_catalog(str(target))
    latest = spec.latest()
    assert latest == exported.version == (4 if mode == "full" else 0)
    assert spec.entries(spec.root(latest)) == list(cat.latest().scan(""))
    if mode == "minimal":
        root = spec.root(0).system
        assert "$begin_version" not in root and "$isolation" not in root
        assert root["$n_actions"] == b"0" and "$previous_root" not in root


def test_spec_reader_reads_actions_from_an_action_file(tmp_path):
    """format.md §3.2, §3.5: a transaction with more actions than a root keeps
    inline has them in an action file the root names; small ones stay inline."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    with cat.transaction() as t:
        for i in range(100):
            t.create_table("ns", f"t{i}", f"s3://b/{i}.json")
    spec = SpecReader(tmp_path / "c")
    small, big = spec.root(1), spec.root(2)
    assert "$actions" not in small.system and len(small.actions) == 1
    assert big.system["$actions"].startswith(b"act/")
    # one NAMESPACE_EXISTS, then a VIEW_EXISTS and the create per table
    assert int(big.system["$n_actions"]) == len(big.actions) == 201
    assert [a.SerializeToString() for _, a in big.actions] == [
        a.SerializeToString() for a in cat.history()[2].actions
    ]
    assert [a.table.name for _, a in big.actions if a.type == A.TABLE_CREATE] == [
        f"t{i}" for i in range(100)
    ]


def spec_group(node: SpecNode) -> list[tuple[str, int, str, list[tuple[str, apb.Action]]]]:
    """format.md §3.2, "Versions of several transactions": each transaction of
    a version with ``$group`` (id, begin version, isolation, its actions)."""
    entries = []
    start = 0
    for part in node.system["$group"].decode().split(","):
        txn_id, begin, isolation, count = part.split(":")
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", txn_id) and isolation in (
            "snapshot",
            "serializable",
        )
        own = node.actions[start : start + int(count)]
        entries.append((txn_id, int(begin), isolation, own))
        start += int(count)
    assert len(entries) >= 2 and start == int(node.system["$n_actions"]) == len(node.actions)
    first = entries[0]
    assert first[0].encode() == node.system["$transaction_id"]
    assert first[2].encode() == node.system["$isolation"]
    assert min(e[1] for e in entries) == int(node.system["$begin_version"])
    return entries


def _listing(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:  # made by the first request
        return []


def test_spec_reader_reads_a_version_of_several_transactions(tmp_path):
    """Writers waiting for the publish lock are published by its holder in its
    version (transactions.md §3.2); a reader written from format.md alone
    finds each transaction and its actions."""
    import threading
    import time

    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    with cat.begin() as t:
        for w in range(3):
            t.create_namespace(f"w{w}")
            t.create_table(f"w{w}", "t", f"s3://b/w{w}/0.json")
    base = cat.version
    txns = []
    for w in range(3):
        txn = olympia.load_catalog(uri).begin("serializable" if w == 1 else "snapshot")
        txn.update_table(f"w{w}", "t", metadata_location=f"s3://b/w{w}/1.json")
        txns.append(txn)
    folder = cat.store.storage.group_dir()
    lock = cat.store.storage.publish_lock()
    assert lock.held and folder is not None
    threads = [threading.Thread(target=t.commit) for t in txns]
    try:
        for th in threads:
            th.start()
        end = time.monotonic() + 30
        while len([n for n in _listing(folder) if n.endswith(".req")]) < 3:
            assert time.monotonic() < end, "the waiting writers left no requests"
            time.sleep(0.005)
    finally:
        lock.release()
    for th in threads:
        th.join(timeout=60)
    assert cat.version == base + 1
    spec = SpecReader(Path(cat.store.storage.location))
    group = spec_group(spec.root(base + 1))
    assert sorted(g[0] for g in group) == sorted(t.id for t in txns)
    by_id = {t.id: t for t in txns}
    for txn_id, begin, isolation, actions in group:
        assert (begin, isolation) == (base, by_id[txn_id].isolation)
        writes = [a for _, a in actions if not a.read_only]
        assert [a.type for a in writes] == [apb.TABLE_UPDATE]
        assert writes[0].table.metadata_location.endswith("/1.json")
    # The library's history agrees, transaction by transaction.
    (info,) = cat.history(since=base + 1)
    assert [r.transaction_id for r in info.transactions] == [g[0] for g in group]
    assert [list(r.actions) for r in info.transactions] == [[a for _, a in g[3]] for g in group]


# --- issue 23: what a second reader no longer has to guess ------------------------------


def _records(actions: Any) -> list[tuple[int, str, bool]]:
    return [(a.type, a.object_key, a.found) for a in actions]


def test_listings_record_their_namespace_check_as_a_precondition(tmp_path):
    """transactions.md §1: list_tables/list_views record NAMESPACE_EXISTS once
    per transaction and namespace, and none for a namespace the transaction
    wrote; the listing itself is recorded at every call."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
        t.create_table("ns", "x", "s3://b/x.json")
    keys = cat.latest().keys
    txn = cat.begin("serializable")
    assert txn.list_tables("ns") == ["x"] and txn.list_views("ns") == []
    assert txn.list_tables("ns") == ["x"]
    txn.create_namespace("new")
    assert txn.list_tables("new") == []
    assert _records(txn.actions) == [
        (A.NAMESPACE_EXISTS, keys.namespace("ns"), True),
        (A.TABLES_LIST, keys.tables_prefix("ns"), True),
        (A.VIEWS_LIST, keys.views_prefix("ns"), False),
        (A.TABLES_LIST, keys.tables_prefix("ns"), True),
        (A.NAMESPACE_CREATE, keys.namespace("new"), False),
        (A.TABLES_LIST, keys.tables_prefix("new"), False),
    ]
    version = txn.commit()
    spec = SpecReader(tmp_path / "c")
    assert [(a.type, a.object_key, a.found) for _, a in spec.root(version).actions] == _records(
        txn.actions
    )


def test_listing_found_says_whether_the_prefix_held_a_key(tmp_path):
    """format.md §3.4: ``found`` of a list action, explicit or a precondition,
    is whether anything was under the prefix (it used to be always true for
    an explicit listing)."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    txn = cat.begin("serializable")
    assert txn.list_namespaces() == []
    txn.create_namespace("ns")
    assert txn.list_namespaces() == ["ns"]
    assert txn.list_views("ns") == []
    assert [(a.type, a.found) for a in txn.actions if a.type in READ_TYPES] == [
        (A.NAMESPACES_LIST, False),
        (A.NAMESPACES_LIST, True),
        (A.VIEWS_LIST, False),
    ]


def _raw_root(cat: olympia.Catalog, **kw: Any) -> int:
    """Publish the latest tree again as a new version with the root keys ``kw``."""
    base = cat.store.load_root(cat.version)
    kw.setdefault("previous_root", base.path)
    cat.store.commit(base.version + 1, base.node, base.definition, kw.pop("txn_id", "raw"), **kw)
    return base.version + 1


def test_a_begin_version_not_below_the_version_is_damage(tmp_path):
    """format.md §3.2-§3.3: conflict checks trust $begin_version, so one at or
    above $version is refused (earlier builds read it)."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    version = _raw_root(cat, begin_version=1)
    assert version == 1
    with pytest.raises(CorruptCatalogError, match=r"\$begin_version 1 is not below \$version 1"):
        olympia.load_catalog(uri).at_version(1)
    with pytest.raises(AssertionError, match="damaged"):
        SpecReader(tmp_path / "c").root(1)


def test_root_keys_that_are_only_reported_are_not_refused(tmp_path):
    """format.md §3.2: the values of $isolation, $previous_root and
    $rollback_from_root, and the syntax of $transaction_id, are ignored by
    readers; history() reports what it can (it used to refuse a rollback
    source that is not a root path)."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("ns")
    odd = _raw_root(
        cat,
        txn_id="not an id!",
        isolation="repeatable-read",
        previous_root="vn/elsewhere",
        rollback_from_root="somewhere else",
        begin_version=0,
    )
    again = olympia.load_catalog(uri)
    assert again.version == odd and again.latest().list_namespaces() == ["ns"]
    info = again.history()[odd]
    assert (info.transaction_id, info.isolation, info.rollback_from) == (
        "not an id!",
        "repeatable-read",
        None,
    )
    spec = SpecReader(tmp_path / "c")
    assert spec.entries(spec.root(odd)) == list(again.latest().scan(""))


def test_transaction_ids_the_library_writes_have_the_stated_syntax(written):
    """format.md §3.2: `$transaction_id` is 1 to 64 of A-Z a-z 0-9 _ -."""
    cat, spec = written
    cat.expire_versions(keep_last=4, grace_seconds=600)  # a maintenance commit or none
    for version in range(cat.store.oldest_version(), cat.version + 1):
        txn_id = spec.root(version).system["$transaction_id"].decode()
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", txn_id), txn_id


def _tall_catalog(tmp_path: Path) -> olympia.Catalog:
    cat = olympia.create_catalog(str(tmp_path / "c"), node_order=3)
    with cat.transaction() as t:  # v1: a tree of height 2, its new nodes inline
        t.create_namespace("ns")
        for i in range(6):
            t.create_table("ns", f"t{i}", f"s3://b/{i}.json")
    with cat.transaction() as t:  # v2
        t.update_table("ns", "t5", metadata_location="s3://b/5-new.json")
    return cat


def _rewrite_root(cat: olympia.Catalog, version: int, change: Callable[[NodeFile], NodeFile]):
    path = layout.root_path(version)
    storage = cat.store.storage
    nf = change(decode_node(storage.read(path), path))
    storage.overwrite(path, encode_node(nf, format_version=nf.format_version))


def test_an_inline_reference_to_a_later_version_is_damage(tmp_path):
    """format.md §3.6: the tree of version 1 naming a node that the root of
    version 2 carries would serve version 2's data as version 1's (earlier
    builds did)."""
    import dataclasses

    cat = _tall_catalog(tmp_path)
    before = list(cat.at_version(1).scan(""))

    def point_at_v2(nf: NodeFile) -> NodeFile:
        kids = list(nf.node.children)
        assert all(layout.parse_inline_ref(k) is not None for k in kids)
        kids[-1] = layout.inline_ref(2, 0)
        return dataclasses.replace(
            nf, node=Node(nf.node.height, nf.node.keys, children=tuple(kids))
        )

    _rewrite_root(cat, 1, point_at_v2)
    fresh = olympia.load_catalog(str(tmp_path / "c"))
    with pytest.raises(CorruptCatalogError, match="names an inline node of version 2, later"):
        list(fresh.at_version(1).scan(""))
    assert not fresh.fsck().ok
    spec = SpecReader(tmp_path / "c")
    with pytest.raises(AssertionError, match="damaged"):
        spec.entries(spec.root(1))
    assert before != list(cat.at_version(2).scan(""))  # it would have been other data


@pytest.mark.parametrize("name", ["$node.01", "$node.4", "$node.x"])
def test_inline_node_rows_must_be_numbered_without_gaps(tmp_path, name):
    """format.md §3.3, §3.6."""
    import dataclasses

    cat = _tall_catalog(tmp_path)

    def renumber(nf: NodeFile) -> NodeFile:
        assert nf.root is not None and len(nf.root.inline_nodes) >= 2
        return dataclasses.replace(nf, extra={name: nf.root.inline_nodes[0]})

    _rewrite_root(cat, 1, renumber)
    with pytest.raises(CorruptCatalogError, match="not numbered 0 to"):
        olympia.load_catalog(str(tmp_path / "c")).at_version(1)
    with pytest.raises(AssertionError, match="damaged"):
        SpecReader(tmp_path / "c").root(1)


def test_non_root_nodes_of_either_format_version_are_read(tmp_path):
    """format.md §3.1: a reader does not compare a non-root node's format
    version with the catalog's; an inline node or a node file that says 1
    in a catalog of version 2 is read by its own version."""
    import dataclasses

    cat = _tall_catalog(tmp_path)
    expected = list(cat.at_version(1).scan(""))
    storage = cat.store.storage

    def as_version_1(nf: NodeFile) -> NodeFile:
        assert nf.root is not None
        inline = list(nf.root.inline_nodes)
        ref = f"{layout.root_path(1)}/"
        nodes = [decode_node(blob, f"{ref}{i}") for i, blob in enumerate(inline)]
        first, second = [i for i, n in enumerate(nodes) if n.node.height == 0][:2]
        # one leaf carried again, as a node of format version 1 ...
        inline[first] = encode_node(nodes[first], format_version=1)
        assert decode_node(inline[first], f"{ref}{first}").format_version == 1
        # ... and one written out as a node file of version 1, which the
        # root (of version 2) now names
        data = encode_node(nodes[second], format_version=1)
        path = layout.node_path(data)
        storage.put_if_absent(path, data)
        assert f"{ref}{second}" in nf.node.children
        kids = tuple(path if c == f"{ref}{second}" else c for c in nf.node.children)
        return dataclasses.replace(
            nf,
            node=Node(nf.node.height, nf.node.keys, children=kids),
            root=dataclasses.replace(nf.root, inline_nodes=tuple(inline)),
        )

    _rewrite_root(cat, 1, as_version_1)
    fresh = olympia.load_catalog(str(tmp_path / "c"))
    assert list(fresh.at_version(1).scan("")) == expected
    spec = SpecReader(tmp_path / "c")
    assert spec.entries(spec.root(1)) == expected


def _is_compressed(data: bytes) -> bool:
    """Whether an Arrow IPC file's buffers are compressed: written again
    without compression, batch by batch, it would have other bytes."""
    reader = pa.ipc.open_file(pa.BufferReader(data))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, reader.schema) as writer:
        for i in range(reader.num_record_batches):
            writer.write_batch(reader.get_batch(i))
    return bytes(sink.getvalue().to_pybytes()) != data


def test_action_files_are_compressed_only_from_64_kib(tmp_path):
    """format.md §3.5: the rule of node files (earlier builds compressed
    every action file with node_compression)."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    with cat.transaction() as t:  # 201 actions: an action file of a few KiB
        for i in range(100):
            t.create_table("ns", f"t{i}", f"s3://b/{i}.json")
    with cat.transaction() as t:  # 6001 actions: hundreds of KiB
        for i in range(3000):
            t.create_table("ns", f"u{i}", f"s3://b/u{i}.json")
    spec = SpecReader(tmp_path / "c")
    small, large = (spec.root(v).system["$actions"].decode() for v in (2, 3))
    small_file, large_file = spec.read(small), spec.read(large)
    assert small_file is not None and large_file is not None
    assert not _is_compressed(small_file)
    assert _is_compressed(large_file)
    assert len(cat.history()[2].actions) == 201 and len(cat.history()[3].actions) == 6001


def test_an_action_file_without_its_creation_time_is_damage(tmp_path):
    """format.md §3.5: `$created_at_millis` is required, as in a node file."""
    from olympia.codec import decode_actions

    schema = pa.schema(
        [("key", pa.utf8()), ("value", pa.binary()), ("def", pa.utf8()), ("child", pa.utf8())],
        metadata={b"olympia.magic": b"olympia-actions", b"olympia.format-version": b"2"},
    )
    batch = pa.record_batch(
        [
            pa.array(["$transaction_id", "$n_actions"], pa.utf8()),
            pa.array([b"t", b"0"], pa.binary()),
            pa.nulls(2, pa.utf8()),
            pa.nulls(2, pa.utf8()),
        ],
        schema=schema,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(batch)
    with pytest.raises(CorruptCatalogError, match=r"\$created_at_millis is missing"):
        decode_actions(sink.getvalue().to_pybytes(), "act/x")


def test_readers_refuse_a_version_below_the_floor_even_when_its_root_is_whole(tmp_path):
    """format.md §2.2, "Opening a version": the floor decides, not the root
    file (a pinned root, or one carrying inline nodes, stays whole)."""
    cat = _tall_catalog(tmp_path)
    storage = cat.store.storage
    storage.overwrite(layout.OLDEST_FLOOR, b"2")
    fresh = olympia.load_catalog(str(tmp_path / "c"))
    assert storage.read(layout.root_path(1))[:6] == b"ARROW1"  # whole
    with pytest.raises(olympia.VersionNotFoundError, match="expired"):
        fresh.at_version(1)
    with pytest.raises(LookupError, match="expired"):
        SpecReader(tmp_path / "c").open_version(1)
    assert SpecReader(tmp_path / "c").open_version(2).is_root


def test_markers_count_as_root_files_when_vn_is_listed(tmp_path):
    """format.md §2.2, "Listing vn/": a catalog whose floor names a missing
    root and whose other roots are all markers is damaged, not absent."""
    cat = _tall_catalog(tmp_path)
    storage = cat.store.storage
    for version in range(cat.version + 1):
        storage.overwrite(layout.root_path(version), layout.EXPIRED_ROOT)
    storage.overwrite(layout.OLDEST_FLOOR, b"5")
    storage.overwrite(layout.LATEST_HINT, b"5")
    with pytest.raises(CorruptCatalogError, match="no root at or above its oldest version 5"):
        olympia.store.CatalogStore(storage).latest_version()
    with pytest.raises(ValueError, match="damaged"):
        SpecReader(tmp_path / "c").latest()


def test_a_group_may_be_headed_by_a_transaction_with_an_action_file(tmp_path):
    """transactions.md §3.2, "Who heads a version": a version of several
    transactions whose first needs an action file of its own reads like any
    other; nothing tells (or needs to tell) holder from request."""
    from olympia.codec import GroupEntry
    from olympia.store import ChainLink, PreparedActions

    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    base = cat.store.load_root(cat.version)
    keys = cat.latest().keys
    changes: list[tuple[str, bytes | None]] = []
    own: dict[str, list[tuple[str, bytes]]] = {"head": [], "next": []}
    for i in range(70):  # more than a root keeps inline
        name = f"h{i:02d}"
        value = pb.Table(namespace="ns", name=name, metadata_location=f"s3://b/{name}.json")
        action = apb.Action(type=A.TABLE_CREATE, object_key=keys.table("ns", name), table=value)
        changes.append((keys.table("ns", name), value.SerializeToString()))
        own["head"].append((action.object_key, action.SerializeToString()))
    value = pb.Table(namespace="ns", name="z", metadata_location="s3://b/z.json")
    action = apb.Action(type=A.TABLE_CREATE, object_key=keys.table("ns", "z"), table=value)
    changes.append((keys.table("ns", "z"), value.SerializeToString()))
    own["next"].append((action.object_key, action.SerializeToString()))
    new_tree = tree.apply(base.node, sorted(changes), base.order, cat.store.load_node)
    entries = (
        GroupEntry("head", base.version, "snapshot", 70),
        GroupEntry("next", base.version, "serializable", 1),
    )
    link = ChainLink(
        "head",
        new_tree,
        PreparedActions(lambda: own["head"] + own["next"], 71, "head", base.definition),
        base.version,
        "snapshot",
        group=entries,
    )
    outcome = cat.store.publish_chain(base, [link])
    (published,) = outcome.published
    spec = SpecReader(tmp_path / "c")
    root = spec.root(published.version)
    assert root.system["$actions"].startswith(b"act/")
    group = spec_group(root)
    assert [(g[0], len(g[3])) for g in group] == [("head", 70), ("next", 1)]
    (info,) = olympia.load_catalog(str(tmp_path / "c")).history(since=published.version)
    assert [(r.transaction_id, len(r.actions)) for r in info.transactions] == [
        ("head", 70),
        ("next", 1),
    ]


def test_a_catalog_whose_old_markers_went_reads_by_the_spec(tmp_path, monkeypatch):
    """Issue 23 item 12 (format.md §2.3, transactions.md §8.6): once
    expiration has deleted the markers below a matured horizon, a reader
    written from the spec still finds the latest version, refuses the
    expired ones, and reads `vn/horizon` as `<h> <w>` in ASCII decimal."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    for i in range(6):
        with cat.transaction() as t:
            t.create_namespace(f"n{i}")
    short = {"grace_seconds": 0, "allow_short_grace": True}
    now = 4_000_000_000_000
    monkeypatch.setattr(maintenance, "expiration_clock_millis", lambda: now)
    cat.expire_versions(keep_last=2, **short)  # writes the horizon at the floor, 5
    horizon = (tmp_path / "c" / "vn" / "horizon").read_bytes()
    assert re.fullmatch(rb"[0-9]+ [0-9]+", horizon), horizon
    h, w = (int(x) for x in horizon.split())
    assert h == 5 and w == now
    later = now + 4 * 300_000 + 1  # matured: 4 commit time limits after its clock
    monkeypatch.setattr(maintenance, "expiration_clock_millis", lambda: later)
    cat.expire_versions(keep_last=2, **short)
    names = {p.name for p in (tmp_path / "c" / "vn").iterdir()}
    assert [v for v in range(5) if spec_name(v) in names] == []  # the markers went
    reader = SpecReader(tmp_path / "c")
    assert reader.latest() == cat.version == 6
    with pytest.raises(LookupError, match="expired"):
        reader.open_version(3)
    assert reader.open_version(5).is_root


def test_an_inline_node_is_taken_from_an_old_root_without_decoding_that_root(tmp_path):
    """format.md §3.6, "Readers": a reader takes `$node.<i>` from the root
    of `w` after checking it as a node file that is the root of `w` with its
    inline nodes numbered 0 to n-1; the rest of that root is not decoded."""
    cat = _tall_catalog(tmp_path)
    expected = {n: cat.latest().describe_table("ns", n).metadata_location for n in ("t0", "t5")}
    fresh = olympia.load_catalog(str(tmp_path / "c"))
    latest = fresh.latest()
    assert latest.version == 2
    assert latest.describe_table("ns", "t0").metadata_location == expected["t0"]
    assert latest.describe_table("ns", "t5").metadata_location == expected["t5"]
    old = layout.root_path(1)
    assert fresh.store._roots.get(old) is None  # never decoded as a root
    assert fresh.store._inline_blobs.get(old) is not None


def _fresh_read_of_t0(tmp_path: Path):
    return olympia.load_catalog(str(tmp_path / "c")).latest().describe_table("ns", "t0")


def test_an_old_root_read_for_its_inline_nodes_is_still_checked(tmp_path):
    """What a reader checks before taking an inline node (format.md §3.6):
    the checksum, that the file is the root of the version named, and the
    numbering of its `$node.<i>` rows; each refused naming the root file."""
    import dataclasses

    cat = _tall_catalog(tmp_path)
    storage = cat.store.storage
    path = layout.root_path(1)
    good = storage.read(path)
    assert _fresh_read_of_t0(tmp_path).metadata_location == "s3://b/0.json"

    # A changed byte inside the rows: the checksum fails.
    nf = decode_node(good, path)
    assert nf.root is not None
    at = good.index(nf.root.transaction_id.encode())
    storage.overwrite(path, good[:at] + bytes([good[at] ^ 0x01]) + good[at + 1 :])
    with pytest.raises(CorruptCatalogError, match=f"{path}.*checksum"):
        _fresh_read_of_t0(tmp_path)

    # The root of another version in its place.
    storage.overwrite(path, storage.read(layout.root_path(2)))
    with pytest.raises(CorruptCatalogError, match=f"{path} does not hold the root of version 1"):
        _fresh_read_of_t0(tmp_path)

    # Inline nodes numbered with a gap.
    storage.overwrite(path, good)
    _rewrite_root(
        cat,
        1,
        lambda nf: dataclasses.replace(
            nf,
            root=dataclasses.replace(nf.root, inline_nodes=()),
            extra={f"$node.{i + 1}": b for i, b in enumerate(nf.root.inline_nodes)},
        ),
    )
    with pytest.raises(CorruptCatalogError, match="not numbered 0 to"):
        _fresh_read_of_t0(tmp_path)
