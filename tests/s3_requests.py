"""Counting the S3 requests an operation makes, and how many of them were sequential.

:func:`record_s3_requests` wraps the one method of botocore (and of
aiobotocore, which s3fs uses) that sends one HTTP attempt,
``Endpoint._do_get_response``, for every client in this process, while the
context is open. Each attempt is logged as a :class:`Request`: the S3
operation name (``GetObject``, ``HeadObject``, ``PutObject``,
``ListObjectsV2``, ...), the key, the HTTP status, and the client-side times
at which it was sent and its reply (headers, and the body for non-streaming
operations) came back. Retries of botocore or s3fs are separate attempts and
count separately.

**Sequential rounds.** A request sent after another's reply arrived may
depend on that reply; requests in flight together may not. The number of
sequential rounds of a set of requests is the length of the longest chain
``r1, r2, ...`` in which each request was sent after the previous one's
reply came back. For intervals this equals the largest number of pairwise
non-overlapping requests, found greedily by earliest end
(:func:`sequential_rounds`). N requests sent together and awaited together
are one round; N requests each waiting for the previous are N rounds. The
times are taken in the client, so a server that answers quickly cannot make
requests that were in flight together look sequential. (Caveat: requests
sent one after another from one thread without dependence, e.g. a loop of
independent GETs, are counted as rounds, which is right: the caller waited
for each.)

Requests still in flight, or sent, after the measured call returned (a
best-effort hint written by a background thread) are reported apart as
*background* by :meth:`S3RequestLog.measure`: the caller did not wait for
them.

Used by ``benchmarks/bench_api.py``; tests import it as ``s3_requests`` (the
``tests`` folder is on ``sys.path`` under pytest).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """One HTTP attempt to S3, as the client saw it."""

    operation: str
    key: str
    start: float
    end: float
    status: int  # 0: no HTTP reply (connection error)


def sequential_rounds(requests: Sequence[Request]) -> int:
    """The longest chain of requests each sent after the previous one's reply
    (the most pairwise non-overlapping requests; greedy by earliest end)."""
    rounds = 0
    last_end = float("-inf")
    for r in sorted(requests, key=lambda r: r.end):
        if r.start > last_end:
            rounds += 1
            last_end = r.end
    return rounds


@dataclass
class Measured:
    """The requests of one measured call."""

    #: requests that ended before the call returned: the caller waited for them
    waited: list[Request]
    #: requests sent or still in flight after the call returned
    background: list[Request]
    elapsed: float

    @property
    def total(self) -> int:
        return len(self.waited) + len(self.background)

    @property
    def rounds(self) -> int:
        """Sequential rounds the caller waited for."""
        return sequential_rounds(self.waited)

    def operations(self) -> str:
        """E.g. ``"GetObject 2, HeadObject 3"`` (background ones marked ``bg``)."""
        counts = Counter(r.operation for r in self.waited)
        counts.update(f"{r.operation} (bg)" for r in self.background)
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


@dataclass
class S3RequestLog:
    """Every S3 request attempt made in this process while recording."""

    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _in_flight: int = 0

    def _add(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _sent(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def settle(self, quiet: float = 0.1, timeout: float = 5.0) -> None:
        """Wait until no request is in flight and none started for ``quiet`` seconds."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            n = len(self.requests)
            if self.in_flight == 0 and n == seen:
                return
            seen = n
            time.sleep(quiet)

    def measure(self, fn: Callable[[], T], settle: bool = True) -> tuple[T, Measured]:
        """Call ``fn`` and return its result and its requests.

        Waits for in-flight background requests before and (if ``settle``)
        after the call, so that each measurement sees only its own."""
        self.settle()
        with self._lock:
            first = len(self.requests)
        t0 = time.perf_counter()
        result = fn()
        t1 = time.perf_counter()
        if settle:
            self.settle()
        with self._lock:
            mine = self.requests[first:]
        waited = [r for r in mine if r.end <= t1]
        background = [r for r in mine if r.end > t1]
        return result, Measured(waited, background, t1 - t0)


_active: list[S3RequestLog] = []
_patch_lock = threading.Lock()
_originals: list[tuple[type, Any]] = []


def _key_of(request: Any) -> str:
    try:
        path = urlsplit(str(request.url)).path
    except Exception:
        return "?"
    return unquote(path.lstrip("/"))


def _status_of(result: Any) -> int:
    with contextlib.suppress(Exception):
        success, _exc = result
        if success is not None:
            return int(success[0].status_code)
    return 0


def _endpoint_classes() -> list[type]:
    classes: list[type] = []
    with contextlib.suppress(ImportError):
        from botocore.endpoint import Endpoint

        classes.append(Endpoint)
    with contextlib.suppress(ImportError):
        from aiobotocore.endpoint import AioEndpoint

        classes.append(AioEndpoint)
    return classes


def _install() -> None:
    for cls in _endpoint_classes():
        original = cls.__dict__["_do_get_response"]
        _originals.append((cls, original))
        if cls.__name__.startswith("Aio"):

            async def wrapped_async(
                self: Any, request: Any, operation_model: Any, context: Any, _o: Any = original
            ) -> Any:
                logs, t0 = _start()
                result = None
                try:
                    result = await _o(self, request, operation_model, context)
                    return result
                finally:
                    _record(logs, request, operation_model, t0, result)

            cls._do_get_response = wrapped_async  # type: ignore[attr-defined]
        else:

            def wrapped(
                self: Any, request: Any, operation_model: Any, context: Any, _o: Any = original
            ) -> Any:
                logs, t0 = _start()
                result = None
                try:
                    result = _o(self, request, operation_model, context)
                    return result
                finally:
                    _record(logs, request, operation_model, t0, result)

            cls._do_get_response = wrapped  # type: ignore[attr-defined]


def _start() -> tuple[list[S3RequestLog], float]:
    """The logs a request goes to, told it is in flight, and its send time."""
    logs = list(_active)
    for log in logs:
        log._sent(1)
    return logs, time.perf_counter()


def _record(
    logs: Sequence[S3RequestLog], request: Any, operation_model: Any, t0: float, result: Any
) -> None:
    t1 = time.perf_counter()
    entry = Request(
        str(getattr(operation_model, "name", "?")), _key_of(request), t0, t1, _status_of(result)
    )
    for log in logs:
        log._add(entry)
        log._sent(-1)


def _uninstall() -> None:
    while _originals:
        cls, original = _originals.pop()
        cls._do_get_response = original  # type: ignore[attr-defined]


@contextlib.contextmanager
def record_s3_requests() -> Iterator[S3RequestLog]:
    """Log every botocore / aiobotocore request attempt of this process while open.

    Nestable; each context gets its own log."""
    log = S3RequestLog()
    with _patch_lock:
        if not _active:
            _install()
        _active.append(log)
    try:
        yield log
    finally:
        with _patch_lock:
            _active.remove(log)
            if not _active:
                _uninstall()


# --- a moto S3 server in a child process -------------------------------------------


def _moto_main(
    port: int,
    bucket: str,
    ready: Any,
    latency: tuple[float, float] | None = None,
    setup: Callable[[Any], None] | None = None,
    control: Any = None,
) -> None:
    """Child process: serve S3 on 127.0.0.1:``port`` until terminated.

    ``latency`` (seconds, low and high): every request waits a uniformly
    random time in that range before moto handles it, in the server's
    request thread, so requests in flight together wait together (a
    simulated distance to S3). ``setup``: a module-level function run in
    this process once the server is up, given ``control`` (this end of a
    pipe to the parent), for example to change moto's behaviour or to answer
    the parent's requests below HTTP."""
    import logging
    import os
    import random

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        os.environ.pop(var, None)
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    # moto checks If-None-Match and stores in two unlocked steps; real S3's
    # conditional put is atomic, so the double must be too (as in conftest.py).
    original = S3Response.put_object
    lock = threading.Lock()

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    S3Response.put_object = put_object  # type: ignore[method-assign]
    if latency is not None:
        low, high = latency
        dispatch = DomainDispatcherApplication.__call__

        def delayed(self: Any, environ: Any, start_response: Any) -> Any:
            time.sleep(random.uniform(low, high))
            return dispatch(self, environ, start_response)

        DomainDispatcherApplication.__call__ = delayed  # type: ignore[method-assign]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    import boto3

    boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    if setup is not None:
        threading.Thread(target=setup, args=(control,), daemon=True).start()
    ready.set()
    threading.Event().wait()


@dataclass
class MotoProcess:
    """A moto S3 server over HTTP in a child process (its own interpreter, so its
    work does not share the measuring process's GIL)."""

    endpoint_url: str
    bucket: str
    process: Any
    #: the parent's end of the pipe given to ``setup`` (None without one)
    control: Any = None

    @property
    def storage_options(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint_url,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)


def start_moto_process(
    bucket: str = "olympia-bench",
    timeout: float = 60.0,
    *,
    latency: tuple[float, float] | None = None,
    setup: Callable[[Any], None] | None = None,
) -> MotoProcess:
    """Start a moto S3 server on a free local port in a spawned child process
    (``latency`` and ``setup``: see :func:`_moto_main`)."""
    import multiprocessing as mp
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    parent_end, child_end = ctx.Pipe() if setup is not None else (None, None)
    process = ctx.Process(
        target=_moto_main,
        args=(port, bucket, ready, latency, setup, child_end),
        daemon=True,
    )
    process.start()
    if not ready.wait(timeout):
        process.kill()
        raise RuntimeError(f"the moto server did not start within {timeout:.0f} s")
    return MotoProcess(f"http://127.0.0.1:{port}", bucket, process, parent_end)
