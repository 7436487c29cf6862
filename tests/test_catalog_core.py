"""Create, open, commit and re-open catalogs on every storage backend."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import olympia
from olympia import layout, tree
from olympia.errors import (
    CatalogAlreadyExistsError,
    CatalogNotFoundError,
    CommitConflictError,
    CorruptCatalogError,
    InvalidArgumentError,
    InvalidDefinitionError,
    VersionNotFoundError,
)
from olympia.node import DefRef
from olympia.storage import open_storage


def _commit(cat: olympia.Catalog, changes: dict[str, bytes | None]) -> int:
    """Commit raw key changes on top of the latest version (test helper)."""
    base = cat.store.load_root(cat.version)
    new = tree.apply(base.node, sorted(changes.items()), base.order, cat.store.load_node)
    root = cat.store.commit(base.version + 1, new, base.definition, "test", previous_root=base.path)
    return root.version


def test_create_then_load(any_storage_location):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, opts, node_order=4)
    assert cat.version == 0
    again = olympia.load_catalog(uri, opts)
    assert again.version == 0
    assert again.definition.node_order == 4
    assert again.definition.namespace_name_max_size == 64
    assert list(again.latest().scan("")) == []


def test_create_twice_is_refused(any_storage_location):
    uri, opts = any_storage_location
    olympia.create_catalog(uri, opts)
    with pytest.raises(CatalogAlreadyExistsError, match="already exists"):
        olympia.create_catalog(uri, opts)


@pytest.mark.parametrize("folder", ["pins", "exports", "node", "def", "act", "dtxn", "vn"])
def test_a_catalog_inside_another_catalogs_folder_is_refused(any_storage_location, folder):
    """A catalog made in ``<other>/pins/x`` had its files read as the other
    catalog's pin records (every expiration of the other failed), and in
    ``<other>/node/x`` listed as the other's orphans, which a clean-up
    deletes. Refused in both orders, before anything is written."""
    uri, opts = any_storage_location
    outer = olympia.create_catalog(uri, opts)
    txn = outer.begin()
    txn.create_namespace("ns")
    txn.commit()
    inner_uri = f"{uri}/{folder}/inner"
    with pytest.raises(InvalidArgumentError, match=f"folder {folder}/ of the catalog at"):
        olympia.create_catalog(inner_uri, opts)
    assert open_storage(inner_uri, opts).list("vn") == []
    assert outer.expire_versions(keep_last=1).oldest_version >= 0  # still works
    assert olympia.load_catalog(uri, opts).latest().list_namespaces() == ["ns"]
    # Beside the catalog's folders, or in a folder of a plain folder: fine.
    olympia.create_catalog(f"{uri}/{folder}x/inner", opts)
    olympia.create_catalog(f"{uri}-not-a-catalog/{folder}/inner", opts)


@pytest.mark.parametrize("folder", ["pins", "node", "exports"])
def test_a_catalog_holding_another_in_its_folders_is_refused(any_storage_location, folder):
    uri, opts = any_storage_location
    olympia.create_catalog(f"{uri}/{folder}/inner", opts)
    with pytest.raises(InvalidArgumentError, match=f"its folder {folder}/ already holds files"):
        olympia.create_catalog(uri, opts)
    assert olympia.load_catalog(f"{uri}/{folder}/inner", opts).version == 0
    with pytest.raises(CatalogNotFoundError):
        olympia.load_catalog(uri, opts)


def test_a_catalog_inside_another_through_a_symbolic_link_is_refused(tmp_path):
    olympia.create_catalog(str(tmp_path / "outer"))
    (tmp_path / "outer" / "pins").mkdir(exist_ok=True)
    (tmp_path / "link").symlink_to(tmp_path / "outer" / "pins", target_is_directory=True)
    with pytest.raises(InvalidArgumentError, match="folder pins/ of the catalog at"):
        olympia.create_catalog(str(tmp_path / "link" / "inner"))


def test_load_missing_catalog(any_storage_location):
    uri, opts = any_storage_location
    with pytest.raises(CatalogNotFoundError, match="no olympia catalog"):
        olympia.load_catalog(uri, opts)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"node_order": 2}, "node_order"),
        ({"node_order": "8"}, "node_order"),
        ({"colour": "red"}, "unknown catalog definition option"),
        ({"node_compression": "gzip"}, "node_compression"),
        ({"properties": {"a": 1}}, "properties"),
    ],
)
def test_bad_definition_is_refused_before_writing(tmp_path, options, message):
    with pytest.raises(InvalidDefinitionError, match=message):
        olympia.create_catalog(str(tmp_path / "c"), **options)
    assert not (tmp_path / "c" / "vn").exists()


def test_versions_and_time_travel(any_storage_location):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, opts, node_order=3)
    for i in range(1, 8):
        assert _commit(cat, {f"AAAC{i:03d}": f"v{i}".encode()}) == i
    assert cat.version == 7
    for v in range(8):
        view = cat.at_version(v)
        assert [k for k, _ in view.scan("AAAC")] == [f"AAAC{i:03d}" for i in range(1, v + 1)]
    with pytest.raises(VersionNotFoundError, match="version 8"):
        cat.at_version(8)


def test_probe_past_a_stale_or_damaged_hint(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    for i in range(40):
        _commit(cat, {f"AAAC{i:03d}": b"x"})
    storage = open_storage(uri)
    storage.overwrite(layout.LATEST_HINT, b"3")
    assert olympia.load_catalog(uri).version == 40
    storage.overwrite(layout.LATEST_HINT, b"garbage")
    assert olympia.load_catalog(uri).version == 40
    storage.delete(layout.LATEST_HINT)
    assert olympia.load_catalog(uri).version == 40
    storage.overwrite(layout.LATEST_HINT, b"1000")  # ahead of the roots
    assert olympia.load_catalog(uri).version == 40


def test_root_files_use_bit_reversed_names(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    for i in range(100):
        _commit(cat, {"AAAC": str(i).encode()})
    assert (tmp_path / "c" / "vn" / ("0010011" + "0" * 57)).is_file()
    assert layout.parse_version_file_name("0010011" + "0" * 57) == 100


def test_losing_a_version_race_changes_nothing(any_storage_location):
    uri, opts = any_storage_location
    a = olympia.create_catalog(uri, opts)
    b = olympia.load_catalog(uri, opts)
    base = a.store.load_root(0)
    new_a = tree.apply(base.node, [("AAACa", b"from a")], base.order, a.store.load_node)
    new_b = tree.apply(base.node, [("AAACb", b"from b")], base.order, b.store.load_node)
    a.store.commit(1, new_a, base.definition, "ta", previous_root=base.path)
    with pytest.raises(CommitConflictError, match="version 1") as info:
        b.store.commit(1, new_b, base.definition, "tb", previous_root=base.path)
    assert info.value.rule == "version-taken" and info.value.version == 1
    fresh = olympia.load_catalog(uri, opts)
    assert fresh.version == 1
    assert list(fresh.latest().scan("")) == [("AAACa", b"from a")]


def test_big_values_go_to_definition_files_once(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, inline_value_max_bytes=16, node_order=3)
    _commit(cat, {"AAACbig": b"x" * 100, "AAACsmall": b"y"})
    defs = sorted((tmp_path / "c" / "def").iterdir())
    assert len(defs) == 1 and defs[0].read_bytes() == b"x" * 100
    for i in range(10):  # neighbours change; the big value is not rewritten
        _commit(cat, {f"AAACn{i}": b"z"})
    assert sorted((tmp_path / "c" / "def").iterdir()) == defs
    fresh = olympia.load_catalog(uri)
    assert fresh.latest().get("AAACbig") == b"x" * 100
    root = fresh.store.load_root(fresh.version)
    assert isinstance(tree.get(root.node, "AAACbig", fresh.store.load_node), DefRef)


def test_single_object_commit_writes_one_path(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, node_order=8)
    _commit(cat, {f"AAAC{i:06d}": b"v" for i in range(5000)})
    height = cat.store.load_root(cat.version).node.height
    assert height >= 3
    _commit(cat, {"AAAC002500": b"changed"})
    # One file: the root carries the new node of each level below it inline.
    assert cat.store.last_write.files == 1
    root = cat.store.load_root(cat.version)
    assert len(root.info.inline_nodes) == height
    fresh = olympia.load_catalog(uri)
    assert fresh.latest().get("AAAC002500") == b"changed"
    assert fresh.latest().get("AAAC004999") == b"v"


def test_single_object_commit_of_a_format_1_catalog_writes_one_node_file_per_level(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, node_order=8, format_version=1)
    _commit(cat, {f"AAAC{i:06d}": b"v" for i in range(5000)})
    height = cat.store.load_root(cat.version).node.height
    _commit(cat, {"AAAC002500": b"changed"})
    assert cat.store.last_write.files == height + 1  # the path below the root, plus the root
    assert cat.store.load_root(cat.version).info.inline_nodes == ()


def test_a_big_commit_carries_at_most_eight_nodes_inline(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, node_order=8)
    _commit(cat, {f"AAAC{i:06d}": b"v" for i in range(5000)})
    root = cat.store.load_root(cat.version)
    assert len(root.info.inline_nodes) == 8
    node_files = list((tmp_path / "c" / "node").iterdir())
    assert len(node_files) > 100
    fresh = olympia.load_catalog(uri)
    assert [k for k, _ in fresh.latest().scan("AAAC")] == [f"AAAC{i:06d}" for i in range(5000)]


def _damage(tmp_path, cat):
    root = cat.store.load_root(cat.version)
    # a child held in a node file (the root may carry some inline)
    child = next(c for c in root.node.children if isinstance(c, str) and c.startswith("node/"))
    return child, tmp_path / "c" / child


def test_damaged_node_file_names_the_file(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, node_order=3, node_compression="none")
    _commit(cat, {f"AAAC{i:03d}": b"v" for i in range(30)})
    child, path = _damage(tmp_path, cat)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = olympia.load_catalog(uri)
    with pytest.raises(CorruptCatalogError, match=child):
        list(fresh.latest().scan(""))


def test_truncated_and_missing_node_files(tmp_path):
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri, node_order=3)
    _commit(cat, {f"AAAC{i:03d}": b"v" for i in range(30)})
    child, path = _damage(tmp_path, cat)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CorruptCatalogError, match=child):
        list(olympia.load_catalog(uri).latest().scan(""))
    path.unlink()
    with pytest.raises(CorruptCatalogError, match=f"{child} is missing"):
        list(olympia.load_catalog(uri).latest().scan(""))


def test_damaged_root_file(tmp_path):
    uri = str(tmp_path / "c")
    olympia.create_catalog(uri)
    (tmp_path / "c" / "vn" / layout.version_file_name(0)).write_bytes(b"not arrow")
    with pytest.raises(CorruptCatalogError, match=layout.version_file_name(0)):
        olympia.load_catalog(uri)


batches = st.lists(
    st.dictionaries(
        st.integers(0, 300).map(lambda i: f"AAAC{i:04d}"),
        st.one_of(st.none(), st.binary(min_size=1, max_size=40)),
        max_size=40,
    ),
    min_size=1,
    max_size=12,
)


@pytest.mark.parametrize("backend", ["local", "memory"])
@pytest.mark.parametrize("order", [3, 4, 9])
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=batches, reopen=st.lists(st.booleans(), min_size=12, max_size=12))
def test_commits_and_reopenings_match_a_dict(tmp_path_factory, backend, order, batches, reopen):
    if backend == "local":
        uri = str(tmp_path_factory.mktemp("c") / "cat")
    else:
        import uuid

        uri = f"memory://prop-{uuid.uuid4().hex}"
    cat = olympia.create_catalog(uri, node_order=order, inline_value_max_bytes=20)
    ref: dict[str, bytes] = {}
    history = [dict(ref)]
    for batch, again in zip(batches, reopen):
        _commit(cat, batch)
        for k, v in batch.items():
            if v is None:
                ref.pop(k, None)
            else:
                ref[k] = v
        history.append(dict(ref))
        if again:
            cat = olympia.load_catalog(uri)  # cold caches: every file is read again
        root = cat.store.load_root(cat.version)
        assert cat.store.check_tree(root) == len(ref)  # loads every referenced node file
        assert dict(cat.latest().scan("")) == ref
    fresh = olympia.load_catalog(uri)
    for v, expected in enumerate(history):
        assert dict(fresh.at_version(v).scan("")) == expected


def test_s3_commits_and_reopen(s3_location):
    uri, opts = s3_location
    cat = olympia.create_catalog(uri, opts, node_order=3)
    for i in range(12):
        _commit(cat, {f"AAAC{i:03d}": b"v", f"AAAC{i - 5:03d}": None})
    fresh = olympia.load_catalog(uri, opts)
    assert fresh.version == 12
    root = fresh.store.load_root(12)
    assert fresh.store.check_tree(root) == 5
    assert [k for k, _ in fresh.latest().scan("AAAC")] == [f"AAAC{i:03d}" for i in range(7, 12)]
