"""The S3 request counter of tests/s3_requests.py (used by benchmarks/bench_api.py)."""

from __future__ import annotations

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
        assert [(r.operation, r.key, r.status) for r in m.waited] == [
            ("PutObject", f"{moto_server.bucket}/{prefix}/a", 200),
            ("PutObject", f"{moto_server.bucket}/{prefix}/b", 200),
            ("GetObject", f"{moto_server.bucket}/{prefix}/a", 200),
        ]
        assert m.background == []
        assert m.rounds == 3  # each call waited for the previous one's reply
        assert m.operations() == "GetObject 1, PutObject 2"

        def head_missing() -> None:
            try:
                client.head_object(Bucket=moto_server.bucket, Key=f"{prefix}/missing")
            except Exception as exc:
                assert "404" in str(exc)

        _, m = log.measure(head_missing)
        assert [(r.operation, r.status) for r in m.waited] == [("HeadObject", 404)]
    # closed: nothing more is logged, and botocore is unpatched
    client.head_object(Bucket=moto_server.bucket, Key=f"{prefix}/a")
    assert len(log.requests) == 4


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
