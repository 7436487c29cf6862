"""Shared fixtures: an S3 server (moto, over real HTTP) and storage locations.

* ``moto_server`` (session): a running moto S3 server with one bucket.
* ``s3_location`` (function): ``(uri, storage_options)`` of a fresh, empty
  prefix in that bucket.
* ``any_storage_location`` (function, parametrized ``local`` / ``memory`` /
  ``s3``): ``(uri, storage_options)`` of a fresh, empty catalog location on
  each backend; moto only starts when an ``s3`` case runs.

No AWS credentials or settings are read from the environment: every client
gets explicit fake credentials and the endpoint.
"""

from __future__ import annotations

import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

StorageLocation = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class MotoS3:
    """A running moto S3 server and the bucket created on it."""

    endpoint_url: str
    bucket: str

    @property
    def storage_options(self) -> dict[str, Any]:
        """Fresh fsspec/s3fs storage options for this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }

    def location(self, name: str = "") -> StorageLocation:
        """``(uri, storage_options)`` of a new, unique, empty prefix."""
        label = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:40]
        return f"s3://{self.bucket}/{uuid.uuid4().hex[:12]}-{label or 'x'}", self.storage_options

    def boto3_client(self) -> Any:
        """A plain boto3 S3 client for this server (for inspection in tests)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _make_moto_put_atomic(mp: pytest.MonkeyPatch) -> None:
    """Serialize moto's PutObject handler.

    moto checks ``If-None-Match: *`` and stores the object in two steps
    without a lock, so two concurrent requests could in theory both pass the
    check. Real S3 makes the conditional put atomic; so must the test double.
    """
    from moto.s3.responses import S3Response

    original: Callable[..., Any] = S3Response.put_object
    lock = threading.Lock()

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    mp.setattr(S3Response, "put_object", put_object)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoS3]:
    """A moto S3 server over HTTP on a free local port, with one bucket."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        # A profile named in the environment but missing from ~/.aws makes
        # botocore fail even with explicit keys; these tests need none of it.
        for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            mp.delenv(var, raising=False)
        _make_moto_put_atomic(mp)
        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            moto = MotoS3(endpoint_url=f"http://127.0.0.1:{port}", bucket="olympia-test")
            moto.boto3_client().create_bucket(Bucket=moto.bucket)
            yield moto
        finally:
            server.stop()


@pytest.fixture
def s3_location(moto_server: MotoS3, request: pytest.FixtureRequest) -> StorageLocation:
    """``(uri, storage_options)`` of a fresh prefix on the moto server."""
    return moto_server.location(request.node.name)


@pytest.fixture(params=["local", "memory", "s3"])
def any_storage_location(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[StorageLocation]:
    """``(uri, storage_options)`` of a fresh catalog location on each backend.

    ``memory`` locations exist in this process only; tests that spawn
    processes must skip them.
    """
    if request.param == "local":
        yield str(tmp_path / "catalog"), {}
    elif request.param == "memory":
        name = f"olympia-test-{uuid.uuid4().hex}"
        yield f"memory://{name}", {}
        # The memory store is process-wide: free what the test put there.
        from fsspec.implementations.memory import MemoryFileSystem

        store = MemoryFileSystem.store
        for key in [k for k in tuple(store) if k.startswith(f"/{name}/")]:
            store.pop(key, None)
    else:
        yield request.getfixturevalue("s3_location")
