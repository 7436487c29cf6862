"""resume() tells an expired begin version from a damaged one
(spec/transactions.md §6.3)."""

from __future__ import annotations

import pytest

import olympia
from olympia import layout, tree
from olympia.errors import CorruptCatalogError, TransactionExpiredError
from olympia.proto import objects_pb2 as pb


def _distributed(tmp_path, *, expire_first: bool = False) -> tuple[olympia.Catalog, str]:
    cat = olympia.create_catalog(str(tmp_path / "c"))
    for i in range(3):
        with cat.transaction() as t:
            t.create_namespace(f"n{i}")
    if expire_first:
        cat.expire_versions(keep_last=1, grace_seconds=0, allow_short_grace=True)  # floor 3
    txn = cat.begin()
    txn.create_table("n0", "t", "m/t")
    return cat, txn.distribute()


def _set_begin_version(cat: olympia.Catalog, txn_id: str, begin: int) -> None:
    """Damage the catalog object of ``txn_id``: commit it with another begin version."""
    latest = cat.latest()
    key = latest.keys.transaction(txn_id)
    record = pb.DistributedTransaction.FromString(latest.get(key))
    record.begin_version = begin
    base = latest.root
    node = tree.apply(
        base.node, [(key, record.SerializeToString())], base.order, cat.store.load_node
    )
    cat.store.commit(base.version + 1, node, base.definition, "damage", previous_root=base.path)


@pytest.mark.parametrize("begin", [2**64 - 1, 2**63, 2**63 - 1, 1000])
def test_a_begin_version_that_cannot_exist_is_reported_as_damage(tmp_path, begin):
    cat, txn_id = _distributed(tmp_path)
    _set_begin_version(cat, txn_id, begin)
    with pytest.raises(CorruptCatalogError, match=txn_id) as info:
        cat.resume(txn_id)
    assert not isinstance(info.value, TransactionExpiredError)
    assert "expired" not in str(info.value)
    assert str(begin) in str(info.value)


def test_a_missing_root_of_a_kept_begin_version_is_reported_as_damage(tmp_path):
    cat, txn_id = _distributed(tmp_path)
    begin = cat.list_transactions()[0].begin_version
    assert begin >= cat.oldest_version
    latest = cat.version
    cat.store.storage.delete(layout.root_path(begin))
    # A hole below the latest version: the probe must start above it, so the
    # hint (written in the background by the last commit) is set here.
    cat.store.storage.overwrite(layout.LATEST_HINT, layout.encode_counter(latest))
    fresh = olympia.load_catalog(str(tmp_path / "c"))  # nothing cached
    with pytest.raises(CorruptCatalogError, match=txn_id) as info:
        fresh.resume(txn_id)
    assert "missing" in str(info.value) and "expired" not in str(info.value)


def test_a_begin_version_below_the_floor_is_reported_as_expired(tmp_path):
    cat, txn_id = _distributed(tmp_path, expire_first=True)
    assert cat.oldest_version == 3
    _set_begin_version(cat, txn_id, 1)  # below the floor: that version is gone
    fresh = olympia.load_catalog(str(tmp_path / "c"))  # nothing cached
    with pytest.raises(TransactionExpiredError, match=txn_id) as info:
        fresh.resume(txn_id)
    assert "was expired" in str(info.value)
