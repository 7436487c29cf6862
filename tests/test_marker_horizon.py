"""Expired-root markers below a matured horizon are deleted (issue 23 item
12, spec/transactions.md §8.6): the cost of expiration and fsck follows the
versions kept and the recent window, not every version ever published, and
no stale writer can publish a version whose marker went."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import MotoS3
from s3_requests import record_s3_requests

import olympia
from olympia import layout, maintenance
from olympia import store as store_module
from olympia.errors import CommitConflictError, VersionNotFoundError
from olympia.storage import Storage

SHORT = {"grace_seconds": 0, "allow_short_grace": True}
#: The default commit time limit: a horizon matures 4 of them after its stamp
#: when the grace period is short.
LIMIT = 300_000
MATURE = 4 * LIMIT + 1


def _clock_at(monkeypatch: pytest.MonkeyPatch, millis: int) -> None:
    """Expiration's clock reads ``millis``: horizons mature without waiting."""
    monkeypatch.setattr(maintenance, "expiration_clock_millis", lambda: millis)


def _versions(cat: olympia.Catalog, count: int, prefix: str) -> None:
    for i in range(count):
        with cat.transaction() as t:
            t.create_namespace(f"{prefix}{i}")


def _present(storage: Storage, versions: range) -> dict[int, bytes | None]:
    out: dict[int, bytes | None] = {}
    for v in versions:
        try:
            out[v] = storage.read(layout.root_path(v))
        except olympia.errors.StorageFileNotFoundError:
            out[v] = None
    return out


def _expired_history(uri: str, opts: dict[str, Any], expired: int) -> olympia.Catalog:
    """A catalog whose versions ``0 .. expired - 1`` were published and
    expired long ago, made below the API: version 0's tree republished as
    version ``expired``, markers written at every version below it, and the
    floor and hint set there (as the benchmark does)."""
    cat = olympia.create_catalog(uri, storage_options=opts)
    store = cat.store
    root = store.load_latest()
    store.commit(
        expired,
        root.node,
        root.definition,
        store.new_transaction_id(),
        previous_root=layout.root_path(expired - 1),
    )
    storage = store.storage
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda v: storage.overwrite(layout.root_path(v), layout.EXPIRED_ROOT),
                range(expired),
            )
        )
    storage.overwrite(layout.OLDEST_FLOOR, layout.encode_counter(expired))
    storage.overwrite(layout.LATEST_HINT, layout.encode_counter(expired))
    cat.close()
    return olympia.load_catalog(uri, storage_options=opts)


def test_markers_below_a_matured_horizon_are_deleted(any_storage_location, monkeypatch):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, storage_options=opts)
    storage = cat.store.storage
    _versions(cat, 10, "a")  # versions 1-10
    t0 = int(time.time() * 1000)
    _clock_at(monkeypatch, t0)
    first = cat.expire_versions(keep_last=1, **SHORT)
    assert first.oldest_version == 10 and first.deleted_markers == 0
    assert layout.decode_horizon(storage.read(layout.MARKER_HORIZON)) == (10, t0)
    assert all(data == layout.EXPIRED_ROOT for data in _present(storage, range(10)).values())
    _versions(cat, 5, "b")  # versions 11-15
    # Not matured yet: markers are written, none deleted, the horizon stays.
    _clock_at(monkeypatch, t0 + MATURE - 2)
    second = cat.expire_versions(keep_last=1, **SHORT)
    assert second.deleted_roots == 5 and second.deleted_markers == 0
    assert layout.decode_horizon(storage.read(layout.MARKER_HORIZON)) == (10, t0)
    assert set(_present(storage, range(15)).values()) == {layout.EXPIRED_ROOT}
    # Matured: the markers below the horizon go, the newer ones stay, and
    # the floor of this run becomes the next candidate.
    _clock_at(monkeypatch, t0 + MATURE)
    dry = cat.expire_versions(keep_last=1, dry_run=True, **SHORT)
    assert dry.deleted_markers == 10
    assert {layout.root_path(v) for v in range(10)} <= set(dry.paths)
    third = cat.expire_versions(keep_last=1, **SHORT)
    assert third.deleted_markers == 10
    after = _present(storage, range(16))
    assert [v for v, data in after.items() if data is None] == list(range(10))
    assert {after[v] for v in range(10, 15)} == {layout.EXPIRED_ROOT}
    assert after[15] not in (None, layout.EXPIRED_ROOT)
    assert layout.decode_horizon(storage.read(layout.MARKER_HORIZON)) == (15, t0 + MATURE)
    # Readers still find the latest version, fresh or not, and refuse old ones.
    assert olympia.load_catalog(uri, storage_options=opts).version == 15
    assert cat.latest().version == 15
    with pytest.raises(VersionNotFoundError):
        cat.at_version(3)
    # fsck: nothing missing, damaged or orphaned; the deleted markers are not missed.
    check = cat.fsck()
    assert check.clean, check
    assert check.kept_versions == (15,)


def test_a_marker_above_a_whole_root_is_kept(tmp_path, monkeypatch):
    """A pinned root below the floor stays whole; the marker right above it
    stays too, so a reader that saw that version probes past it."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    storage = cat.store.storage
    _versions(cat, 3, "a")  # versions 1-3
    cat.export_snapshot("snap", str(tmp_path / "x"), mode="minimal")  # pins version 3
    reader = olympia.load_catalog(uri)
    assert reader.version == 3  # this reader has seen version 3 (and holds its root)
    _versions(cat, 4, "b")  # versions 4-7
    t0 = int(time.time() * 1000)
    _clock_at(monkeypatch, t0)
    cat.expire_versions(keep_last=1, **SHORT)
    _versions(cat, 2, "c")  # versions 8-9
    _clock_at(monkeypatch, t0 + MATURE)
    result = cat.expire_versions(keep_last=1, **SHORT)
    after = _present(storage, range(10))
    assert result.deleted_markers == 5  # 0-2 and 5-6; 4 stays above the pinned root 3
    assert after[3] not in (None, layout.EXPIRED_ROOT)
    assert after[4] == layout.EXPIRED_ROOT
    assert [v for v, data in after.items() if data is None] == [0, 1, 2, 5, 6]
    assert reader.latest().version == 9
    assert cat.fsck().ok
    cat.drop_export("snap")
    cat.expire_versions(keep_last=1, **SHORT)  # marks 3
    _clock_at(monkeypatch, t0 + 2 * MATURE)
    cat.expire_versions(keep_last=1, **SHORT)
    assert [v for v, d in _present(storage, range(10)).items() if d is not None] == [9]
    assert cat.fsck().clean


def test_a_stale_writer_cannot_publish_a_version_whose_marker_was_deleted(
    any_storage_location, monkeypatch
):
    uri, opts = any_storage_location
    cat = olympia.create_catalog(uri, storage_options=opts)
    _versions(cat, 2, "a")  # versions 1-2
    stale = olympia.load_catalog(uri, storage_options=opts)
    t = stale.begin()  # reads version 2 as the latest: its commit puts version 3
    t.create_namespace("late")
    _versions(cat, 6, "b")  # versions 3-8
    t0 = int(time.time() * 1000)
    _clock_at(monkeypatch, t0)
    cat.expire_versions(keep_last=1, **SHORT)
    _clock_at(monkeypatch, t0 + MATURE)
    assert cat.expire_versions(keep_last=1, **SHORT).deleted_markers == 8
    storage = cat.store.storage
    assert not storage.exists(layout.root_path(3))
    # Much later (more than the commit time limit) the stale writer commits.
    real = store_module._now_millis
    monkeypatch.setattr(store_module, "_now_millis", lambda: real() + LIMIT + 60_000)
    try:
        t.commit()
    except CommitConflictError as exc:
        assert exc.rule == "history-expired"
    else:  # rebased on the latest version instead: then it is there
        assert olympia.load_catalog(uri, storage_options=opts).latest().namespace_exists("late")
    # Never published below the floor, where nobody would read it.
    assert not storage.exists(layout.root_path(3))
    assert olympia.load_catalog(uri, storage_options=opts).version >= 8
    assert cat.fsck().ok


def test_a_put_at_an_old_version_number_is_refused_without_writing(tmp_path, monkeypatch):
    """The writer rule at its lowest level: a store that never learnt the
    version was free reads the floor before putting."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    _versions(cat, 4, "a")
    t0 = int(time.time() * 1000)
    _clock_at(monkeypatch, t0)
    cat.expire_versions(keep_last=1, **SHORT)
    _versions(cat, 1, "b")
    _clock_at(monkeypatch, t0 + MATURE)
    cat.expire_versions(keep_last=1, **SHORT)
    storage = cat.store.storage
    assert not storage.exists(layout.root_path(2))
    writer = olympia.load_catalog(uri).store  # fresh: it has seen no version
    base = cat.store.load_root(5)
    with pytest.raises(CommitConflictError) as err:
        writer.commit(
            2,
            base.node,
            base.definition,
            writer.new_transaction_id(),
            previous_root=layout.root_path(1),
        )
    assert err.value.rule == "version-taken"
    assert not storage.exists(layout.root_path(2))
    assert cat.fsck().ok


def _counts(log: Any, fn: Any) -> Counter[str]:
    _, measured = log.measure(fn)
    return Counter(r.operation for r in measured.waited + measured.background)


def test_s3_requests_of_expiration_and_fsck_do_not_grow_with_history(
    moto_server: MotoS3, monkeypatch
):
    t0 = int(time.time() * 1000)
    # The first round of a probe for the latest version reads as many roots
    # as the pace of new versions suggests (format.md §2.2), a matter of
    # timing: held at one width here, so that the counts tell history alone.
    monkeypatch.setattr(store_module, "_PROBE_WIDTH_MIN", store_module._PROBE_WIDTH)
    monkeypatch.setattr(store_module, "_PROBE_WIDTH_MAX", store_module._PROBE_WIDTH)
    seen: dict[int, tuple[Counter[str], Counter[str], Counter[str]]] = {}
    for expired in (150, 2150):  # one page of vn/ against three
        uri, opts = moto_server.location(f"horizon-{expired}")
        cat = _expired_history(uri, opts, expired)
        _clock_at(monkeypatch, t0)
        cat.expire_versions(keep_last=1, **SHORT)  # writes the first horizon
        _versions(cat, 3, "a")
        _clock_at(monkeypatch, t0 + MATURE)
        with record_s3_requests() as log:
            matured = _counts(log, lambda c=cat: c.expire_versions(keep_last=1, **SHORT))
            _versions(cat, 3, "b")
            _clock_at(monkeypatch, t0 + MATURE + 1000)
            steady = _counts(log, lambda c=cat: c.expire_versions(keep_last=1, **SHORT))
            check = _counts(log, lambda c=cat: c.fsck())
        assert cat.fsck().clean
        # The matured run deleted the history in batches of 1,000 keys.
        assert matured["DeleteObjects"] == -(-expired // 1000)
        seen[expired] = (matured, steady, check)
    small, large = seen[150], seen[2150]
    assert small[1] == large[1], (small[1], large[1])  # the next expiration
    assert small[2] == large[2], (small[2], large[2])  # fsck


def test_a_reader_idle_since_a_version_whose_successor_marker_went_finds_the_latest(
    tmp_path, monkeypatch
):
    """A reader holds the root of version 4 and probes from it much later:
    4 is then a marker (kept above the whole, pinned root 3) and the marker
    of 5 is gone. Existence of 4 alone must not make it the latest."""
    uri = str(tmp_path / "c")
    cat = olympia.create_catalog(uri)
    _versions(cat, 3, "a")  # versions 1-3
    cat.export_snapshot("snap", str(tmp_path / "x"), mode="minimal")  # pins 3
    _versions(cat, 1, "b")  # version 4
    reader = olympia.load_catalog(uri)
    assert reader.version == 4
    _versions(cat, 3, "c")  # versions 5-7
    t0 = int(time.time() * 1000)
    _clock_at(monkeypatch, t0)
    cat.expire_versions(keep_last=1, **SHORT)
    _clock_at(monkeypatch, t0 + MATURE)
    cat.expire_versions(keep_last=1, **SHORT)
    storage = cat.store.storage
    assert storage.read(layout.root_path(4)) == layout.EXPIRED_ROOT
    assert not storage.exists(layout.root_path(5))
    real = store_module._now_millis
    monkeypatch.setattr(store_module, "_now_millis", lambda: real() + MATURE)
    assert reader.latest().version == 7
    assert reader.store.latest_version() == 7
