"""Format version 2: a large transaction's actions live in an action file the
root names (spec/format.md §3.2, §3.5), read only when they are needed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from faulty_storage import FaultyStorage

import olympia
from olympia import layout
from olympia.codec import INLINE_ACTIONS_MAX, decode_node, encode_node
from olympia.errors import CommitConflictError, CorruptCatalogError
from olympia.proto import actions_pb2 as apb
from olympia.storage import open_storage

A = apb.ActionType
N = 400  # tables of the large transaction: 801 actions, far above the inline bound


def _catalog(path: Path, **options: object) -> olympia.Catalog:
    cat = olympia.create_catalog(str(path), **options)
    with cat.transaction() as t:
        t.create_namespace("ns")
    return cat


def _bulk(cat: olympia.Catalog, n: int = N, prefix: str = "t") -> int:
    txn = cat.begin()
    for i in range(n):
        txn.create_table("ns", f"{prefix}{i}", f"s3://b/{prefix}{i}.json")
    return txn.commit()


def _root_size(path: Path, version: int) -> int:
    return (path / layout.root_path(version)).stat().st_size


def _action_files(path: Path) -> list[str]:
    folder = path / layout.ACT_DIR
    return sorted(f"act/{p.name}" for p in folder.iterdir()) if folder.exists() else []


def _clean(check: object) -> bool:
    """fsck found nothing wrong and no stray catalog file (a temporary file
    of the background hint writer may be in flight)."""
    return bool(
        check.ok  # type: ignore[attr-defined]
        and not [o for o in check.orphans if not o.startswith(".olympia-tmp/")]  # type: ignore[attr-defined]
    )


def test_opening_a_version_reads_no_action_records(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    big = _bulk(cat)
    with cat.transaction() as t:
        t.create_table("ns", "one", "s3://b/one.json")
    small = cat.version
    # The root of the large transaction is no bigger than that of a one-table
    # one, but for the nodes each carries inline (format.md §3.6, bounded).
    store = cat.store
    big_root, small_root = store.load_root(big), store.load_root(small)
    assert big_root.info.actions == () and big_root.info.action_file is not None
    own = [
        _root_size(path, v) - sum(map(len, r.info.inline_nodes))
        for v, r in ((big, big_root), (small, small_root))
    ]
    assert own[0] <= own[1] + 512
    assert sum(map(len, big_root.info.inline_nodes)) <= 512 * 1024
    [act] = _action_files(path)
    storage = FaultyStorage(open_storage(str(path)))
    fresh = olympia.load_catalog(storage)
    version = fresh.at_version(big)
    assert version.describe_table("ns", "t7").metadata_location == "s3://b/t7.json"
    assert len(version.list_tables("ns")) == N
    assert not [c for c in storage.calls if c.path.startswith("act/")]
    # History needs them: then, and only then, the file is read.
    entry = fresh.history(since=big)[0]
    assert [c.path for c in storage.calls if c.path.startswith("act/")] == [act]
    creates = [a.table.name for a in entry.actions if a.type == A.TABLE_CREATE]
    assert creates == [f"t{i}" for i in range(N)]
    assert len(entry.actions) == 2 * N + 1  # a VIEW_EXISTS read and the create per table


def test_small_transactions_keep_their_actions_inline(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    _bulk(cat, n=(INLINE_ACTIONS_MAX - 1) // 2)
    assert _action_files(path) == []
    root = decode_node((path / layout.root_path(cat.version)).read_bytes(), "vn/x").root
    assert root is not None and root.action_file is None
    assert len(root.actions) == root.n_actions == INLINE_ACTIONS_MAX - 1


def test_conflict_checks_read_the_action_file(tmp_path):
    cat = _catalog(tmp_path / "c")
    early = cat.begin()
    early.create_table("ns", f"t{N - 1}", "s3://b/mine.json")
    other = cat.begin()
    other.create_table("ns", "elsewhere", "s3://b/elsewhere.json")
    _bulk(cat)
    with pytest.raises(CommitConflictError) as info:
        early.commit()
    assert info.value.rule == "write-write"
    assert other.commit() == cat.version  # disjoint: rebased over the big version
    assert (
        cat.latest().describe_table("ns", "elsewhere").metadata_location.endswith("elsewhere.json")
    )


def test_a_lost_race_publishes_the_same_action_file(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    txn = cat.begin()
    for i in range(N):
        txn.create_table("ns", f"t{i}", f"s3://b/t{i}.json")
    with cat.transaction() as t:  # published first: txn must rebase
        t.create_table("ns", "first", "s3://b/first.json")
    version = txn.commit()
    assert version == cat.version
    root = decode_node((path / layout.root_path(version)).read_bytes(), "vn/x").root
    assert root is not None and root.action_file is not None
    assert root.action_file in _action_files(path)
    assert len(cat.history(since=version)[0].actions) == 2 * N + 1


def test_expiration_keeps_action_files_of_kept_roots_only(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    _bulk(cat, prefix="a")
    [first] = _action_files(path)
    _bulk(cat, prefix="b")
    second = next(p for p in _action_files(path) if p != first)
    assert _clean(cat.fsck())
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert _action_files(path) == [second]
    check = cat.fsck()
    assert _clean(check) and check.missing == ()
    with cat.transaction() as t:
        t.drop_table("ns", "a0")
    cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)
    assert _action_files(path) == []  # the latest version (one table) has none
    assert len(cat.latest().list_tables("ns")) == 2 * N - 1


def test_fsck_reports_missing_and_damaged_action_files(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    _bulk(cat)
    [act] = _action_files(path)
    data = (path / act).read_bytes()
    (path / act).unlink()
    check = cat.fsck()
    assert check.missing == (act,) and not check.ok
    fresh = olympia.load_catalog(str(path))
    with pytest.raises(CorruptCatalogError, match="act/"):
        fresh.history()
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF
    (path / act).write_bytes(bytes(damaged))
    check = cat.fsck()
    assert [d.split(":")[0] for d in check.damaged] == [act]
    (path / act).write_bytes(data)
    assert _clean(cat.fsck())


def test_an_action_file_of_another_root_is_damage(tmp_path):
    """The action file must belong to the transaction of the root naming it."""
    path = tmp_path / "c"
    cat = _catalog(path)
    _bulk(cat, prefix="a")
    [first] = _action_files(path)
    _bulk(cat, prefix="b")
    second = next(p for p in _action_files(path) if p != first)
    # Put the first transaction's file under the second one's name (digest
    # and all hold for that content only if the name is recomputed).
    data = (path / first).read_bytes()
    (path / second).unlink()
    renamed = f"act/{second.split('/')[1].split('-')[0]}-{layout.content_digest(data)}.arrow"
    (path / renamed).write_bytes(data)
    root_file = path / layout.root_path(cat.version)
    nf = decode_node(root_file.read_bytes(), "vn/x")
    assert nf.root is not None
    from dataclasses import replace

    info = replace(nf.root, action_file=renamed)
    root_file.write_bytes(encode_node(replace(nf, root=info), "zstd"))
    fresh = olympia.load_catalog(str(path))
    with pytest.raises(CorruptCatalogError, match="belongs to transaction"):
        fresh.history(since=cat.version)
    assert any(d.startswith(renamed) for d in fresh.fsck().damaged)


def test_full_export_copies_action_files(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    big = _bulk(cat)
    cat.export_snapshot("e", str(tmp_path / "copy"), mode="full")
    assert _action_files(tmp_path / "copy") == _action_files(path)
    copy = olympia.load_catalog(str(tmp_path / "copy"))
    assert len(copy.history(since=big)[0].actions) == 2 * N + 1
    assert _clean(copy.fsck())


def test_format_version_1_catalogs_keep_inline_action_rows(tmp_path):
    """A catalog created in format version 1 is still written as version 1:
    every node file says version 1 and roots hold every action inline."""
    path = tmp_path / "c"
    cat = _catalog(path, format_version=1)
    assert cat.definition.format_version == 1
    big = _bulk(cat)
    assert _action_files(path) == []
    for folder in ("vn", "node"):
        for file in (path / folder).iterdir():
            if file.name in ("latest", "oldest"):
                continue
            meta = pa.ipc.open_file(pa.BufferReader(file.read_bytes())).schema.metadata
            assert meta[b"olympia.format-version"] == b"1"
    root = decode_node((path / layout.root_path(big)).read_bytes(), "vn/x").root
    assert root is not None and root.action_file is None and len(root.actions) == 2 * N + 1
    fresh = olympia.load_catalog(str(path))
    assert len(fresh.history(since=big)[0].actions) == 2 * N + 1
    assert fresh.latest().describe_table("ns", "t3").metadata_location == "s3://b/t3.json"
    assert _clean(fresh.fsck())


def test_new_catalogs_are_format_version_2(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "c"))
    assert cat.definition.format_version == 2
    data = (tmp_path / "c" / layout.root_path(0)).read_bytes()
    meta = pa.ipc.open_file(pa.BufferReader(data)).schema.metadata
    assert meta[b"olympia.format-version"] == b"2"
    with pytest.raises(olympia.errors.InvalidDefinitionError, match="format_version"):
        olympia.create_catalog(str(tmp_path / "d"), format_version=3)


def test_action_file_key_in_a_version_1_file_is_damage(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path, format_version=1)
    nf = decode_node((path / layout.root_path(cat.version)).read_bytes(), "vn/x")
    assert nf.root is not None
    from dataclasses import replace

    info = replace(nf.root, actions=(), action_file="act/0000000000000-x.arrow")
    data = encode_node(replace(nf, root=info), "none", 2)
    # the same content labelled version 1
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = dict(table.schema.metadata)
    meta[b"olympia.format-version"] = b"1"
    sink = pa.BufferOutputStream()
    schema = table.schema.with_metadata(meta)
    with pa.ipc.new_file(sink, schema) as w:
        w.write_table(table.replace_schema_metadata(meta))
    with pytest.raises(CorruptCatalogError, match=r"\$actions in a format version 1 file"):
        decode_node(sink.getvalue().to_pybytes(), "vn/x")


@pytest.mark.parametrize("found", [False, True])
@pytest.mark.parametrize(
    "key", ["", "AAAC" + "ns".ljust(64) + "t".ljust(128), "AAAB\u00e9\U0001f600" * 40]
)
@pytest.mark.parametrize("action_type", [A.TABLE_EXISTS, A.VIEW_EXISTS, A.TABLES_LIST, 200])
def test_read_records_serialize_as_protobuf_does(action_type, key, found):
    """Reads are kept as (type, key, found) and serialized by hand for the
    root or action file: byte for byte what protobuf writes."""
    from olympia.transaction import _read_bytes

    expected = apb.Action(
        type=action_type, object_key=key, read_only=True, found=found
    ).SerializeToString(deterministic=True)
    assert _read_bytes(action_type, key, found) == expected


def test_a_catalog_of_a_newer_format_version_is_refused_as_unsupported(tmp_path):
    path = tmp_path / "c"
    cat = _catalog(path)
    root_file = path / layout.root_path(cat.version)
    nf = decode_node(root_file.read_bytes(), "vn/x")
    assert nf.root is not None
    definition = olympia.proto.objects_pb2.CatalogDefinition()
    definition.CopyFrom(cat.definition)
    definition.format_version = 3
    from dataclasses import replace

    info = replace(nf.root, catalog_def=definition.SerializeToString(deterministic=True))
    root_file.write_bytes(encode_node(replace(nf, root=info), "zstd"))
    with pytest.raises(CorruptCatalogError, match="has format version 3; this olympia reads"):
        olympia.load_catalog(str(path))


FORMAT_1_FIXTURE = Path(__file__).parent / "fixtures" / "format1-catalog"


def test_a_catalog_written_in_format_version_1_stays_readable_and_writable(tmp_path):
    """tests/fixtures/format1-catalog was written by the release before format
    version 2 (node_order 8; versions: create, a namespace with a table and a
    view, 40 tables in one transaction, an update and a drop)."""
    import shutil

    path = tmp_path / "c"
    shutil.copytree(FORMAT_1_FIXTURE, path)
    cat = olympia.load_catalog(str(path))
    assert cat.definition.format_version == 1 and cat.version == 3
    latest = cat.latest()
    assert latest.describe_table("ns", "t1").metadata_location == "s3://b/t1/v2.json"
    assert latest.list_views("ns") == ["v1"]
    assert len(latest.list_tables("ns")) == 40  # t1 and bulk01..bulk39
    history = cat.history()
    assert len(history[2].actions) == 81  # a NAMESPACE_EXISTS, then 2 per table: inline
    assert [a.type for a in history[3].actions if a.type in (A.TABLE_UPDATE, A.TABLE_DROP)] == [
        A.TABLE_UPDATE,
        A.TABLE_DROP,
    ]
    assert cat.fsck().ok
    assert cat.at_version(1).list_tables("ns") == ["t1"]
    # Writing keeps format version 1: more than 64 actions stay inline.
    _bulk(cat, n=50, prefix="more")
    assert _action_files(path) == []
    root = decode_node((path / layout.root_path(cat.version)).read_bytes(), "vn/x")
    assert root.format_version == 1 and root.root is not None
    assert len(root.root.actions) == 101
    table = olympia.load_catalog(str(path)).latest().describe_table("ns", "more7")
    assert table.metadata_location == "s3://b/more7.json"
    # Its keys stay padded (spec/format.md §5), old ones and new ones alike.
    widths = (cat.definition.namespace_name_max_size, cat.definition.table_name_max_size)
    table_keys = [k for k, _ in cat.latest().scan("AAAC")]
    assert len(table_keys) == 90
    assert all(len(k) == 4 + sum(widths) for k in table_keys)
    assert "AAAC" + "ns".ljust(widths[0]) + "more7".ljust(widths[1]) in table_keys


def test_format_version_2_catalogs_use_compact_keys(tmp_path):
    """spec/format.md §5: one space after each part but the last, no padding."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
        t.create_namespace("ns2")
        t.create_table("ns", "t1", "s3://b/t1.json")
        t.create_view("ns", "v1", sql_text="select 1")
    open_txn = cat.begin()
    txn_id = open_txn.distribute()
    keys = [k for k, _ in cat.latest().scan("")]
    assert keys == ["AAABns", "AAABns2", "AAACns t1", "AAADns v1", "AAAE" + txn_id]
    assert [t.id for t in cat.list_transactions()] == [txn_id]
    open_txn.rollback()
    assert cat.latest().list_tables("ns") == ["t1"]
    assert cat.latest().list_tables("ns2") == []
    assert [a.object_key for a in cat.history()[1].actions if a.type == A.TABLE_CREATE] == [
        "AAACns t1"
    ]


def test_a_format_2_catalog_with_padded_keys_is_refused_when_opened(tmp_path):
    """A pre-release build of format version 2 wrote padded keys. This build
    opened such a catalog, did not find its objects by name, and committed
    a second `sales` and `sales.orders` beside them (fsck then said ok). It
    is now refused when opened, naming the cause; a catalog whose keys are
    compact, or of format version 1 (padded by rule), opens as before."""
    path = tmp_path / "c"
    old = olympia.create_catalog(str(path), format_version=1)
    with old.transaction() as t:
        t.create_namespace("sales")
        t.create_table("sales", "orders", "s3://b/orders.json")
    # What the pre-release build left: format version 2, padded keys.
    store = old._store
    latest = store.load_latest()
    definition = type(latest.definition)()
    definition.CopyFrom(latest.definition)
    definition.format_version = 2
    store.commit(
        latest.version + 1, latest.node, definition, "prerelease", previous_root=latest.path
    )
    with pytest.raises(CorruptCatalogError, match="pre-release build of format version 2"):
        olympia.load_catalog(str(path))
    fine = olympia.create_catalog(str(tmp_path / "fine"))
    with fine.transaction() as t:
        t.create_namespace("sales")
        t.create_table("sales", "orders", "s3://b/orders.json")
    assert olympia.load_catalog(str(tmp_path / "fine")).latest().list_tables("sales") == ["orders"]
    one = olympia.create_catalog(str(tmp_path / "one"), format_version=1)
    with one.transaction() as t:
        t.create_namespace("sales")
    assert olympia.load_catalog(str(tmp_path / "one")).latest().list_namespaces() == ["sales"]


def test_an_old_action_file_name_is_renewed_before_it_is_published_again(monkeypatch):
    """A commit retried long after it named its action file names it anew
    (same content, fresh time), so that expiration's grace period, which goes
    by the time in the name, covers it (transactions.md §3)."""
    from olympia import store as store_module
    from olympia.definition import build_definition

    definition = build_definition({})
    actions = [(f"AAAC{i}", b"\x08\x0a") for i in range(INLINE_ACTIONS_MAX + 1)]
    prepared = store_module.PreparedActions(lambda: actions, len(actions), "t", definition)
    assert prepared.inline == () and prepared.data is not None
    limit = 300_000
    first = prepared.name(limit)
    assert first is not None and first.startswith("act/")
    assert prepared.name(limit) == first  # soon after: the same name
    now = store_module._now_millis()
    monkeypatch.setattr(store_module, "_now_millis", lambda: now + 61_000)
    renewed = prepared.name(limit)
    assert renewed is not None and renewed != first
    assert layout.created_millis(renewed) == now + 61_000
    assert renewed.split("-")[1] == first.split("-")[1]  # same digest: same content
    assert layout.content_matches(renewed, prepared.data)
    # A short commit time limit renames sooner: after half of it (§8.5).
    monkeypatch.setattr(store_module, "_now_millis", lambda: now + 61_000 + 999)
    assert prepared.name(2_000) == renewed
    monkeypatch.setattr(store_module, "_now_millis", lambda: now + 61_000 + 1_001)
    sooner = prepared.name(2_000)
    assert sooner is not None and layout.created_millis(sooner) == now + 62_001
