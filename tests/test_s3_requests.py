"""The S3 request counter of tests/s3_requests.py (used by benchmarks/bench_api.py)."""

from __future__ import annotations

import time
from typing import Any

from conftest import MotoS3
from s3_requests import Request, record_s3_requests, sequential_rounds

import olympia


def _req(start: float, end: float, op: str = "GetObject") -> Request:
    return Request(op, "k", start, end, 200)


def test_sequential_rounds_counts_the_longest_chain_of_non_overlapping_requests() -> None:
    assert sequential_rounds([]) == 0
    # three requests in flight together: one round
    assert sequential_rounds([_req(0, 3), _req(0.1, 2), _req(0.2, 2.5)]) == 1
    # each sent after the previous reply: three rounds
    assert sequential_rounds([_req(0, 1), _req(1.5, 2), _req(2.5, 3)]) == 3
    # two parallel, then one after both, then two parallel again: three rounds
    batch = [_req(0, 1), _req(0, 1.2), _req(1.3, 2), _req(2.1, 3), _req(2.2, 3.1)]
    assert sequential_rounds(batch) == 3
    # a long request overlapping a chain of two does not add to it
    assert sequential_rounds([_req(0, 10), _req(1, 2), _req(3, 4)]) == 2


def test_counter_logs_each_request_with_operation_key_and_status(moto_server: MotoS3) -> None:
    client = moto_server.boto3_client()
    prefix = moto_server.location("counter")[0].split("/", 3)[3]
    with record_s3_requests() as log:
        (_, m) = log.measure(
            lambda: [
                client.put_object(Bucket=moto_server.bucket, Key=f"{prefix}/a", Body=b"1"),
                client.put_object(Bucket=moto_server.bucket, Key=f"{prefix}/b", Body=b"2"),
                client.get_object(Bucket=moto_server.bucket, Key=f"{prefix}/a")["Body"].read(),
            ]
        )
        ours = f"{moto_server.bucket}/{prefix}/"
        assert [(r.operation, r.key, r.status) for r in m.waited if r.key.startswith(ours)] == [
            ("PutObject", f"{moto_server.bucket}/{prefix}/a", 200),
            ("PutObject", f"{moto_server.bucket}/{prefix}/b", 200),
            ("GetObject", f"{moto_server.bucket}/{prefix}/a", 200),
        ]
        assert [r for r in m.background if r.key.startswith(ours)] == []
        assert m.rounds == 3  # each call waited for the previous one's reply
        assert m.operations() == "GetObject 1, PutObject 2"

        def head_missing() -> None:
            try:
                client.head_object(Bucket=moto_server.bucket, Key=f"{prefix}/missing")
            except Exception as exc:
                assert "404" in str(exc)

        _, m = log.measure(head_missing)
        assert [(r.operation, r.status) for r in m.waited] == [("HeadObject", 404)]
    # closed: nothing more is logged, and botocore is unpatched (requests of
    # other keys may be logged too: an earlier test's catalog can still be
    # writing its `vn/latest` hint in the background, through the shared client)
    client.head_object(Bucket=moto_server.bucket, Key=f"{prefix}/a")
    assert len([r for r in log.requests if f"/{prefix}/" in r.key]) == 4


def test_counter_sees_olympia_s3_requests_through_s3fs(moto_server: MotoS3) -> None:
    uri, options = moto_server.location("olympia")
    cat = olympia.create_catalog(uri, options)
    with record_s3_requests() as outer, record_s3_requests() as inner:
        txn, m = inner.measure(cat.begin)
        assert m.total >= 1 and m.rounds >= 1
        assert all(r.key.startswith(uri[len("s3://") :]) for r in m.waited)
        txn.create_namespace("ns")
        version, m = inner.measure(txn.commit)
        assert version == 1
        ops = {r.operation for r in m.waited + m.background}
        assert "PutObject" in ops  # the root of version 1, put-if-absent
        assert any(r.key.endswith("vn/" + _bitrev_name(cat, 1)) for r in m.waited)
    assert len(outer.requests) == len(inner.requests) > 0
    cat.close()


def _bitrev_name(cat: olympia.Catalog, version: int) -> str:
    """The file name of ``version``'s root, as the store names it."""
    path: str = cat.store.load_root(version).path
    return path.rsplit("/", 1)[1]


# --- sequential rounds of a lost race and of a listing (issue 24) -----------------


def _race_catalogs(moto_server: MotoS3) -> tuple[olympia.Catalog, olympia.Catalog]:
    uri, options = moto_server.location("race")
    mine = olympia.create_catalog(uri, options)
    with mine.transaction() as txn:
        txn.create_namespace("ns")
        for t in ("a", "b", "c"):
            txn.create_table("ns", t, f"s3://lake/ns/{t}/v1.metadata.json")
    return mine, olympia.load_catalog(uri, options)


def _root_puts(requests: list[Request]) -> list[Request]:
    """The puts of roots (not of the ``vn/latest`` hint, written in the background)."""
    return [
        r
        for r in requests
        if r.operation == "PutObject" and "/vn/" in r.key and not r.key.endswith("/latest")
    ]


def _update(cat: olympia.Catalog, table: str, generation: int) -> int:
    txn = cat.begin()
    txn.update_table("ns", table, metadata_location=f"s3://lake/ns/{table}/v{generation}.json")
    return txn.commit()


def test_commit_that_lost_one_race_takes_two_rounds(moto_server: MotoS3) -> None:
    # The put of the root reads that root along with it: the loser has the
    # winner's root without another round, and puts again at once.
    mine, other = _race_catalogs(moto_server)
    txn = mine.begin()
    txn.update_table("ns", "a", metadata_location="s3://lake/ns/a/v2.json")
    won = _update(other, "b", 2)
    with record_s3_requests() as log:
        version, m = log.measure(txn.commit)
    assert version == won + 1
    assert [r.status for r in _root_puts(m.waited)] == [412, 200]
    assert m.rounds == 2, m.operations()
    latest = mine.latest()
    assert latest.describe_table("ns", "a").metadata_location == "s3://lake/ns/a/v2.json"
    assert latest.describe_table("ns", "b").metadata_location == "s3://lake/ns/b/v2.json"
    mine.close()
    other.close()


def test_commit_that_lost_two_races_to_older_versions_takes_three_rounds(
    moto_server: MotoS3,
) -> None:
    # Two versions landed before the commit started: the retry's put reads
    # the roots above it too, which is the probe for the latest version.
    mine, other = _race_catalogs(moto_server)
    txn = mine.begin()
    txn.update_table("ns", "a", metadata_location="s3://lake/ns/a/v2.json")
    _update(other, "b", 2)
    won = _update(other, "c", 2)
    with record_s3_requests() as log:
        version, m = log.measure(txn.commit)
    assert version == won + 1
    assert [r.status for r in _root_puts(m.waited)] == [412, 412, 200]
    assert m.rounds == 3, m.operations()
    mine.close()
    other.close()


def test_commit_that_lost_a_second_race_while_retrying_takes_three_rounds(
    moto_server: MotoS3,
) -> None:
    mine, other = _race_catalogs(moto_server)
    txn = mine.begin()
    txn.update_table("ns", "a", metadata_location="s3://lake/ns/a/v2.json")
    _update(other, "b", 2)
    store = mine.store
    original = store.commit
    gap: list[float] = []
    winners: list[int] = []

    def commit(*args: Any, **kwargs: Any) -> Any:
        if len(gap) == 0 and args[0] > txn.begin_version + 1:
            # The retry, about to put: another writer takes its version first.
            gap.append(time.perf_counter())
            winners.append(_update(other, "c", 2))
            other.store.wait_for_background_writes()
            gap.append(time.perf_counter())
        return original(*args, **kwargs)

    store.commit = commit  # type: ignore[method-assign]
    with record_s3_requests() as log:
        version, m = log.measure(txn.commit)
    del store.commit
    assert winners and version == winners[0] + 1
    own = [r for r in m.waited if not gap[0] <= r.start <= gap[1]]
    assert [r.status for r in _root_puts(own)] == [412, 412, 200]
    assert sequential_rounds(own) == 3
    mine.close()
    other.close()


def test_listing_10000_tables_reads_the_leaves_in_one_round(moto_server: MotoS3) -> None:
    uri, options = moto_server.location("listing")
    cat = olympia.create_catalog(uri, options)
    with cat.transaction() as txn:
        txn.create_namespace("ns")
        txn.create_namespace("big")
        for j in range(10_000):
            txn.create_table("big", f"tbl_{j:08d}", f"s3://lake/big/{j}/v1.metadata.json")
    with cat.transaction() as txn:  # a small version on top: its tree names
        txn.create_table("ns", "a", "s3://lake/ns/a/v1.metadata.json")  # inline nodes
    cat.close()
    fresh = olympia.load_catalog(uri, options)
    view = fresh.latest()
    with record_s3_requests() as log:
        names, m = log.measure(lambda: view.list_tables("big"))
    assert len(names) == 10_000
    # The namespace's own key, then every leaf under it together.
    assert m.rounds <= 2, m.operations()
    assert len(m.waited) > 60
    fresh.close()


def test_second_load_catalog_builds_no_s3_client(moto_server: MotoS3) -> None:
    import s3fs

    uri, options = moto_server.location("client")
    olympia.create_catalog(uri, options).close()
    first = olympia.load_catalog(uri, options)
    built: list[object] = []
    init = s3fs.S3FileSystem.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        init(self, *args, **kwargs)

    pyiceberg_keys = {
        "s3.endpoint": options["endpoint_url"],
        "s3.access-key-id": options["key"],
        "s3.secret-access-key": options["secret"],
        "s3.region": options["client_kwargs"]["region_name"],
    }
    s3fs.S3FileSystem.__init__ = counting  # type: ignore[method-assign]
    try:
        same = olympia.load_catalog(uri, pyiceberg_keys)  # the same options, other words
        assert built == []
        assert same.store.storage._fs is first.store.storage._fs  # type: ignore[attr-defined]
        other_key = olympia.load_catalog(uri, {**options, "key": "other", "secret": "other"})
        assert len(built) == 1  # other credentials never share a client
        assert other_key.store.storage._fs is not first.store.storage._fs  # type: ignore[attr-defined]
    finally:
        s3fs.S3FileSystem.__init__ = init  # type: ignore[method-assign]
    for cat in (first, same, other_key):
        cat.close()


def test_put_staged_reading_sends_the_put_and_the_reads_in_one_round(
    moto_server: MotoS3,
) -> None:
    from olympia.errors import StorageFileNotFoundError
    from olympia.storage import open_storage

    storage = open_storage(*moto_server.location("put-reading"))
    storage.put_if_absent("vn/a", b"theirs")
    storage.put_if_absent("vn/b", b"next")
    with record_s3_requests() as log:
        lost, m = log.measure(
            lambda: storage.put_staged_reading(
                "vn/a", storage.stage(b"mine"), ["vn/a", "vn/b", "vn/c"]
            )
        )
        assert m.rounds == 1 and len(m.waited) == 4, m.operations()
        assert lost.taken and lost.existing == b"theirs"
        assert lost.replies[:2] == [b"theirs", b"next"]
        assert isinstance(lost.replies[2], StorageFileNotFoundError)
        # identical bytes already there (a resent PUT of this very call): success
        same = storage.put_staged_reading("vn/a", storage.stage(b"theirs"), ["vn/a"])
        assert not same.taken
        won, m = log.measure(
            lambda: storage.put_staged_reading("vn/c", storage.stage(b"mine"), ["vn/c"])
        )
        assert not won.taken and m.rounds == 1
    assert storage.read("vn/c") == b"mine"
