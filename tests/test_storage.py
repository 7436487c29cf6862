"""Contract tests for every storage backend, plus backend-specific behaviour."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import olympia
from olympia import layout
from olympia.errors import (
    InvalidPathError,
    OlympiaError,
    StorageError,
    StorageFileExistsError,
    StorageFileNotFoundError,
)
from olympia.storage import LocalStorage, MemoryStorage, Storage, open_storage
from olympia.storage.local import TMP_DIR

Location = tuple[str, dict[str, Any]]


@pytest.fixture
def location(any_storage_location: Location) -> Location:
    return any_storage_location


@pytest.fixture
def storage(location: Location) -> Storage:
    return open_storage(*location)


# --- basic semantics -----------------------------------------------------------


def test_read_missing_file_is_not_found(storage: Storage) -> None:
    with pytest.raises(StorageFileNotFoundError, match="v/00001"):
        storage.read("v/00001")
    assert storage.exists("v/00001") is False


def test_put_if_absent_then_read(storage: Storage) -> None:
    storage.put_if_absent("v/00001", b"first")
    assert storage.read("v/00001") == b"first"
    assert storage.exists("v/00001") is True


@pytest.mark.parametrize("data", [b"", bytes(range(256)) * 3, b"\x00\r\n\x1a"])
def test_binary_content_round_trips(storage: Storage, data: bytes) -> None:
    storage.put_if_absent("a/blob", data)
    assert storage.read("a/blob") == data
    storage.overwrite("a/hint", data)
    assert storage.read("a/hint") == data


def test_read_many_returns_each_content_or_its_error_in_order(storage: Storage) -> None:
    storage.put_if_absent("a/one", b"1")
    storage.put_if_absent("a/two", b"22")
    got = storage.read_many(["a/two", "a/missing", "a/one", "a/two"])
    assert got[0] == b"22"
    assert isinstance(got[1], StorageFileNotFoundError)
    assert "a/missing" in str(got[1])
    assert got[2:] == [b"1", b"22"]
    assert storage.read_many([]) == []
    # paths in heads are only checked for existence
    got = storage.read_many(["a/one", "a/two", "a/gone"], heads={"a/one", "a/gone"})
    assert got[0] is True and got[1] == b"22"
    assert isinstance(got[2], StorageFileNotFoundError)
    with pytest.raises(InvalidPathError):
        storage.read_many(["a/../x"])


def test_put_if_absent_different_content_loses(storage: Storage) -> None:
    storage.put_if_absent("v/00001", b"winner")
    with pytest.raises(StorageFileExistsError, match="v/00001"):
        storage.put_if_absent("v/00001", b"loser")
    assert storage.read("v/00001") == b"winner"


def test_put_if_absent_identical_content_succeeds(storage: Storage) -> None:
    # A retry of a write that already landed must not look like a lost race.
    storage.put_if_absent("v/00001", b"same bytes")
    storage.put_if_absent("v/00001", b"same bytes")
    assert storage.read("v/00001") == b"same bytes"
    # ...but a prefix or extension of the stored bytes is a different file.
    with pytest.raises(StorageFileExistsError):
        storage.put_if_absent("v/00001", b"same byte")
    with pytest.raises(StorageFileExistsError):
        storage.put_if_absent("v/00001", b"same bytes!")


def test_overwrite_creates_and_replaces(storage: Storage) -> None:
    storage.overwrite("hint/latest", b"1")
    assert storage.read("hint/latest") == b"1"
    storage.overwrite("hint/latest", b"22")
    assert storage.read("hint/latest") == b"22"
    storage.overwrite("hint/latest", b"")
    assert storage.read("hint/latest") == b""


def test_overwrite_then_put_if_absent_sees_file(storage: Storage) -> None:
    storage.overwrite("x", b"old")
    with pytest.raises(StorageFileExistsError):
        storage.put_if_absent("x", b"new")
    assert storage.read("x") == b"old"


def test_delete(storage: Storage) -> None:
    storage.put_if_absent("v/00001", b"x")
    storage.delete("v/00001")
    assert storage.exists("v/00001") is False
    with pytest.raises(StorageFileNotFoundError):
        storage.read("v/00001")
    storage.delete("v/00001")  # deleting a missing file is fine
    storage.delete("never/there")
    # After a delete the name is free again.
    storage.put_if_absent("v/00001", b"again")
    assert storage.read("v/00001") == b"again"


def test_list(storage: Storage) -> None:
    for path in ["v/00002", "v/00001", "v/sub/deep/f", "vv/other", "w", "v2"]:
        storage.put_if_absent(path, path.encode())
    assert storage.list("v") == ["v/00001", "v/00002", "v/sub/deep/f"]
    assert storage.list("v/") == ["v/00001", "v/00002", "v/sub/deep/f"]
    assert storage.list("v/sub") == ["v/sub/deep/f"]
    assert storage.list("vv") == ["vv/other"]
    assert storage.list("nothing") == []
    assert storage.list("w") == []  # a file, not a folder
    storage.delete("v/00001")
    assert storage.list("v") == ["v/00002", "v/sub/deep/f"]
    # Every listed path reads back its own content.
    assert all(storage.read(p) == p.encode() for p in storage.list("v"))


def test_folder_is_not_a_file(storage: Storage) -> None:
    storage.put_if_absent("ns/t/f", b"x")
    assert storage.exists("ns") is False
    assert storage.exists("ns/t") is False
    with pytest.raises(StorageFileNotFoundError):
        storage.read("ns/t")
    storage.delete("ns/t")  # no file there: nothing happens
    assert storage.read("ns/t/f") == b"x"


@pytest.mark.parametrize("kind", ["fifo", "device", "dangling"])
def test_a_local_name_that_is_no_regular_file_is_an_error_at_once(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO (open() would wait for a writer forever), a link to a device
    (/dev/zero never ends) or a symbolic link to nothing at a catalog file's
    name: reads and puts fail at once with StorageError naming the file,
    and a put is never taken for a lost race (which a commit retries)."""
    storage = LocalStorage(str(tmp_path / "c"))
    storage.put_if_absent("vn/a", b"x")
    bad = tmp_path / "c" / "vn" / "b"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "device":
        os.symlink("/dev/zero", bad)
    else:
        os.symlink(tmp_path / "nowhere", bad)
    for call in (lambda: storage.read("vn/b"), lambda: storage.put_if_absent("vn/b", b"y")):
        with pytest.raises(StorageError, match="'vn/b'") as caught:
            call()
        assert not isinstance(caught.value, StorageFileExistsError | StorageFileNotFoundError)
    assert storage.read("vn/a") == b"x"


def test_a_catalog_whose_next_root_name_is_taken_by_no_file_says_so(tmp_path: Path) -> None:
    """A symbolic link to nothing at the next version's root name: a commit
    fails at once naming it, rather than losing 100 races in a row."""
    cat = olympia.create_catalog(str(tmp_path / "c"))
    with cat.transaction() as t:
        t.create_namespace("ns")
    os.symlink(tmp_path / "nowhere", tmp_path / "c" / layout.root_path(cat.version + 1))
    started = time.monotonic()
    with pytest.raises(StorageError, match="symbolic link to nothing"), cat.transaction() as t:
        t.create_namespace("other")
    assert time.monotonic() - started < 10


def test_second_instance_sees_same_files(location: Location) -> None:
    a, b = open_storage(*location), open_storage(*location)
    assert b.exists("f") is False
    a.put_if_absent("f", b"from a")
    assert b.exists("f") is True
    assert b.read("f") == b"from a"
    with pytest.raises(StorageFileExistsError):
        b.put_if_absent("f", b"from b")
    b.overwrite("f", b"from b")
    assert a.read("f") == b"from b"
    a.delete("f")
    assert b.exists("f") is False
    assert b.list("f") == [] and a.list("g") == []


BAD_PATHS = [
    "",
    ".",
    "..",
    "../x",
    "a/../../x",
    "a/..",
    "./a",
    "a/./b",
    "/abs",
    "/etc/passwd",
    "a\\b",
    "..\\x",
    "a//b",
    "a/",
    "a b",
    "a\x00b",
    "caf\u00e9",
    "s3://other/x",
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_path_escapes_are_refused(storage: Storage, path: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: storage.read(path),
        lambda: storage.put_if_absent(path, b"x"),
        lambda: storage.overwrite(path, b"x"),
        lambda: storage.exists(path),
        lambda: storage.delete(path),
    ]
    if path not in ("a/",):  # list() accepts one trailing slash on a folder
        calls.append(lambda: storage.list(path))
    for call in calls:
        with pytest.raises(InvalidPathError):
            call()


def test_path_escape_writes_nothing_outside(tmp_path: Path) -> None:
    root = tmp_path / "cat" / "inner"
    storage = open_storage(str(root))
    for path in ["../x", "../../x", "/x", "..\\x", str(tmp_path / "abs")]:
        with pytest.raises(InvalidPathError):
            storage.put_if_absent(path, b"escaped")
        with pytest.raises(InvalidPathError):
            storage.overwrite(path, b"escaped")
    # Only the catalog root (and nothing else) may ever be created.
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_list_trailing_slash_is_the_folder(storage: Storage) -> None:
    storage.put_if_absent("a/b", b"1")
    assert storage.list("a/") == storage.list("a") == ["a/b"]


# --- races -----------------------------------------------------------------------


def _race_threads(storage: Storage, path: str, threads: int) -> dict[int, str]:
    """Start ``threads`` writers of distinct payloads on ``path`` at once."""
    barrier = threading.Barrier(threads)
    outcomes: dict[int, str] = {}

    def writer(i: int) -> None:
        barrier.wait()
        try:
            storage.put_if_absent(path, f"writer {i}".encode())
            outcomes[i] = "won"
        except StorageFileExistsError:
            outcomes[i] = "lost"
        except Exception as exc:  # recorded, asserted by the caller
            outcomes[i] = repr(exc)

    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(30)
    return outcomes


def test_thread_race_has_exactly_one_winner(storage: Storage) -> None:
    threads = 16
    for round_ in range(3):
        path = f"v/{round_:05d}"
        outcomes = _race_threads(storage, path, threads)
        winners = [i for i, o in outcomes.items() if o == "won"]
        assert len(winners) == 1, outcomes
        assert sorted(outcomes.values()) == ["lost"] * (threads - 1) + ["won"], outcomes
        assert storage.read(path) == f"writer {winners[0]}".encode()


def _process_writer(location: Location, path: str, index: int, barrier: Any, results: Any) -> None:
    """Body of one racing process (module level so 'spawn' can import it)."""
    storage = open_storage(*location)
    storage.exists(path)  # connect before the start line, so all PUTs overlap
    barrier.wait(60)
    try:
        storage.put_if_absent(path, f"process {index}".encode())
        results.put((index, "won"))
    except StorageFileExistsError:
        results.put((index, "lost"))
    except Exception as exc:
        results.put((index, repr(exc)))


@pytest.mark.parametrize(
    "any_storage_location",
    [
        "local",
        "s3",
    ],
    indirect=True,
)
def test_process_race_has_exactly_one_winner(storage: Storage, location: Location) -> None:
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    path = "v/00001"
    procs = [
        ctx.Process(target=_process_writer, args=(location, path, i, barrier, results))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=120) for _ in range(n))
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    winners = [i for i, o in outcomes.items() if o == "won"]
    assert len(winners) == 1, outcomes
    assert sorted(outcomes.values()) == ["lost"] * (n - 1) + ["won"], outcomes
    assert storage.read(path) == f"process {winners[0]}".encode()


BIG = 8 * 1024 * 1024


def _big_payload(seed: int) -> bytes:
    """8 MiB whose first 8 bytes determine all the others (self-verifying)."""
    head = seed.to_bytes(8, "big")
    return head + hashlib.shake_256(head).digest(BIG - 8)


def _is_whole_payload(data: bytes) -> bool:
    return len(data) == BIG and hashlib.shake_256(data[:8]).digest(BIG - 8) == data[8:]


def test_reader_never_sees_a_partial_file(storage: Storage) -> None:
    path = "v/big"
    payloads = [_big_payload(seed) for seed in range(1, 4)]
    stop = threading.Event()
    seen: list[str] = []
    bad: list[str] = []

    def reader() -> None:
        while not stop.is_set() or "full" not in seen:
            try:
                data = storage.read(path)
            except StorageFileNotFoundError:
                seen.append("missing")
                continue
            except Exception as exc:
                bad.append(repr(exc))
                return
            if _is_whole_payload(data) and data in payloads:
                seen.append("full")
            else:
                bad.append(f"partial or foreign content of {len(data)} bytes")
                return

    def put(data: bytes) -> None:
        with contextlib.suppress(StorageFileExistsError):
            storage.put_if_absent(path, data)

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=put, args=(p,)) for p in payloads]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    # overwrite must never expose a partial file either.
    for i in range(4):
        storage.overwrite(path, payloads[i % 3])
    stop.set()
    r.join(60)
    assert not r.is_alive()
    assert bad == []
    assert "full" in seen
    assert storage.read(path) == payloads[0]


# --- open_storage ----------------------------------------------------------------


def test_open_storage_picks_backend(tmp_path: Path) -> None:
    local = open_storage(str(tmp_path))
    assert isinstance(local, LocalStorage) and local.location == str(tmp_path)
    via_uri = open_storage(f"file://{tmp_path}")
    assert isinstance(via_uri, LocalStorage) and via_uri.location == str(tmp_path)
    local.put_if_absent("f", b"x")
    assert via_uri.read("f") == b"x"
    assert isinstance(open_storage("memory://olympia-open-test"), MemoryStorage)


@pytest.mark.parametrize("scheme", ["file", "FILE", "File", "local", "LOCAL"])
def test_local_uri_schemes_are_not_case_sensitive(tmp_path: Path, scheme: str) -> None:
    # An upper-case scheme once became a folder named "FILE:" under the
    # working directory: a catalog written somewhere the user never named.
    opened = open_storage(f"{scheme}://{tmp_path}")
    assert isinstance(opened, LocalStorage) and opened.location == str(tmp_path)
    opened.put_if_absent("f", b"x")
    assert (tmp_path / "f").read_bytes() == b"x"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("file://data/lake", "names a host ('data')"),
        ("FILE://localhost/lake", "names a host ('localhost')"),
        ("local://lake", "names a host ('lake')"),
        ("s3:/bucket/lake", "protocol 's3' without '//'"),
        ("S3A:bucket", "protocol 's3a' without '//'"),
        ("memory:lake", "protocol 'memory' without '//'"),
        ("file:lake", "protocol 'file' without '//'"),
    ],
)
def test_a_uri_a_local_folder_would_stand_in_for_is_refused_before_anything_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str, message: str
) -> None:
    # fsspec reads "file://data/lake" as data/lake under the working
    # directory, and a path "s3:/bucket/lake" is a folder named "s3:".
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OlympiaError, match=re.escape(message)):
        open_storage(uri)
    with pytest.raises(OlympiaError, match=re.escape(message)):
        olympia.create_catalog(uri)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scheme", ["file", "FILE", "local"])
def test_hadoop_style_local_uris_are_the_absolute_path(tmp_path: Path, scheme: str) -> None:
    # Spark and Hadoop write local paths as file:/x.
    opened = open_storage(f"{scheme}:{tmp_path}")
    assert isinstance(opened, LocalStorage) and opened.location == str(tmp_path)


def test_memory_is_process_wide() -> None:
    name = f"memory://olympia-shared-{os.getpid()}-{time.monotonic_ns()}"
    open_storage(name).put_if_absent("f", b"shared")
    assert open_storage(name).read("f") == b"shared"
    assert open_storage(name + "-other").exists("f") is False
    open_storage(name).delete("f")


@pytest.mark.parametrize("uri", ["gs://bucket/x", "http://host/x", "hdfs://nn/x", "ftp://h/x"])
def test_open_storage_refuses_unknown_protocol(uri: str) -> None:
    protocol = uri.split("://")[0]
    with pytest.raises(OlympiaError, match=f"'{protocol}'.*put-if-absent"):
        open_storage(uri)


def test_open_storage_refuses_empty_uri_and_bucketless_s3() -> None:
    with pytest.raises(OlympiaError):
        open_storage("")
    with pytest.raises(OlympiaError, match="bucket"):
        open_storage("s3://")


def test_open_storage_without_s3fs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "olympia.storage.s3", raising=False)
    monkeypatch.setitem(sys.modules, "s3fs", None)  # makes "import s3fs" fail
    with pytest.raises(OlympiaError, match=r"olympia\[s3\]"):
        open_storage("s3://bucket/x")


# --- local backend ------------------------------------------------------------


def test_local_leaves_no_temp_files(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path))
    storage.put_if_absent("v/1", b"a")
    with pytest.raises(StorageFileExistsError):
        storage.put_if_absent("v/1", b"b")
    storage.put_if_absent("v/1", b"a")
    storage.overwrite("h", b"c")
    assert list((tmp_path / TMP_DIR).iterdir()) == []
    # A stray temp file (say, from a crash) is never listed or readable.
    (tmp_path / TMP_DIR / "crash.tmp").write_bytes(b"partial")
    with pytest.raises(InvalidPathError):
        storage.list(TMP_DIR)
    with pytest.raises(InvalidPathError):
        storage.read(f"{TMP_DIR}/crash.tmp")
    assert storage.list("v") == ["v/1"]


def test_local_files_are_complete_on_disk(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "root"))
    storage.put_if_absent("ns/v/00001", b"content")
    assert (tmp_path / "root" / "ns" / "v" / "00001").read_bytes() == b"content"


def test_local_os_errors_become_storage_errors(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path))
    storage.put_if_absent("a", b"file")
    # "a" is a file, so "a/b" cannot be created: a storage failure, not "exists".
    with pytest.raises(StorageError, match="a/b") as info:
        storage.put_if_absent("a/b", b"x")
    assert type(info.value) is StorageError
    with pytest.raises(StorageError, match="a/b") as info:
        storage.overwrite("a/b", b"x")
    assert type(info.value) is StorageError
    assert storage.exists("a/b") is False
    with pytest.raises(StorageFileNotFoundError):
        storage.read("a/b")


def test_local_put_onto_folder_is_storage_error(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path))
    storage.put_if_absent("d/f", b"x")
    with pytest.raises(StorageError, match="folder") as info:
        storage.put_if_absent("d", b"x")
    assert type(info.value) is StorageError


def test_local_io_error_is_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    storage = open_storage(str(tmp_path))

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    calls: list[Callable[[], object]] = [
        lambda: storage.put_if_absent("v/1", b"x"),
        lambda: storage.overwrite("v/1", b"x"),
    ]
    for call in calls:
        with pytest.raises(StorageError, match=r"v/1.*disk on fire") as info:
            call()
        assert type(info.value) is StorageError
    monkeypatch.undo()
    assert storage.exists("v/1") is False
    assert list((tmp_path / TMP_DIR).iterdir()) == []  # failed writes clean up


# --- S3 backend -------------------------------------------------------------------


@pytest.fixture
def s3_hooks() -> Iterator[Callable[[Storage, str, Callable[..., None]], None]]:
    """Register a botocore event handler on a storage's S3 client for the
    test only: storages with equal options share one client, so a handler
    left behind would reach later tests."""
    registered: list[tuple[Any, str, Callable[..., None]]] = []

    def register(storage: Storage, event: str, handler: Callable[..., None]) -> None:
        events = storage._fs.s3.meta.events  # type: ignore[attr-defined]
        events.register(event, handler)
        registered.append((events, event, handler))

    yield register
    for events, event, handler in registered:
        events.unregister(event, handler)


def test_s3_409_conflict_is_retried(s3_location: Location, s3_hooks: Any) -> None:
    from botocore.exceptions import ClientError

    storage = open_storage(*s3_location)
    attempts: list[int] = []

    def conflict_once(**_: Any) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise ClientError(
                {
                    "Error": {"Code": "ConditionalRequestConflict", "Message": "busy"},
                    "ResponseMetadata": {"HTTPStatusCode": 409},
                },
                "PutObject",
            )

    s3_hooks(storage, "before-call.s3.PutObject", conflict_once)
    storage.put_if_absent("v/00001", b"payload")
    assert len(attempts) == 2
    assert open_storage(*s3_location).read("v/00001") == b"payload"


def test_s3_409_forever_is_storage_error(s3_location: Location, s3_hooks: Any) -> None:
    from botocore.exceptions import ClientError

    storage = open_storage(*s3_location)
    storage.conflict_attempts = 3  # type: ignore[attr-defined]
    storage.conflict_backoff = 0.001  # type: ignore[attr-defined]
    attempts: list[int] = []

    def always_conflict(**_: Any) -> None:
        attempts.append(1)
        raise ClientError(
            {
                "Error": {"Code": "ConditionalRequestConflict", "Message": "busy"},
                "ResponseMetadata": {"HTTPStatusCode": 409},
            },
            "PutObject",
        )

    s3_hooks(storage, "before-call.s3.PutObject", always_conflict)
    with pytest.raises(StorageError, match="409") as info:
        storage.put_if_absent("v/00001", b"payload")
    # A 409 says nothing about the file: never reported as "exists".
    assert not isinstance(info.value, StorageFileExistsError)
    assert len(attempts) == 3
    assert storage.exists("v/00001") is False


def test_s3_lost_reply_counts_as_success(s3_location: Location, s3_hooks: Any) -> None:
    from botocore.exceptions import ConnectionClosedError

    storage = open_storage(*s3_location)
    puts: list[int] = []

    def lose_first_reply(**_: Any) -> None:
        # after-call runs once the server has stored the object.
        puts.append(1)
        if len(puts) == 1:
            raise ConnectionClosedError(endpoint_url="http://moto")

    s3_hooks(storage, "after-call.s3.PutObject", lose_first_reply)
    storage.put_if_absent("v/00001", b"mine")  # the resend gets 412: still success
    assert len(puts) == 2
    assert storage.read("v/00001") == b"mine"


def test_s3_lost_reply_with_other_content_is_exists(s3_location: Location) -> None:
    storage = open_storage(*s3_location)
    open_storage(*s3_location).put_if_absent("v/00001", b"theirs")
    with pytest.raises(StorageFileExistsError, match="v/00001"):
        storage.put_if_absent("v/00001", b"mine")
    assert storage.read("v/00001") == b"theirs"


def test_s3_is_fresh_across_instances(s3_location: Location) -> None:
    writer, prober = open_storage(*s3_location), open_storage(*s3_location)
    # Equal options share one client (set up once per process), which must
    # still never answer from a cache.
    assert writer._fs is prober._fs  # type: ignore[attr-defined]
    writer.put_if_absent("v/00000", b"zero")
    # Warm every cache the prober could have: a stale answer must not survive.
    assert prober.exists("v/00001") is False
    assert prober.list("v") == ["v/00000"]
    folder = prober.location.removeprefix("s3://") + "/v"
    assert len(prober._fs.ls(folder)) == 1  # type: ignore[attr-defined]
    writer.put_if_absent("v/00001", b"one")
    assert prober.exists("v/00001") is True
    assert prober.read("v/00001") == b"one"
    assert prober.list("v") == ["v/00000", "v/00001"]
    writer.overwrite("v/00001", b"two")
    assert prober.read("v/00001") == b"two"
    writer.delete("v/00001")
    assert prober.exists("v/00001") is False
    with pytest.raises(StorageFileNotFoundError):
        prober.read("v/00001")
    assert prober.list("v") == ["v/00000"]


def test_s3a_is_the_same_store(s3_location: Location) -> None:
    uri, options = s3_location
    open_storage(uri, options).put_if_absent("f", b"x")
    assert open_storage("s3a://" + uri.removeprefix("s3://"), options).read("f") == b"x"


def test_s3_options_do_not_leak_between_instances(moto_server: Any, s3_location: Location) -> None:
    uri, options = s3_location
    good = open_storage(uri, options)
    good.put_if_absent("f", b"x")
    dead = {
        **options,
        "endpoint_url": f"http://127.0.0.1:{_closed_port()}",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    bad = open_storage(uri, dead)
    with pytest.raises(StorageError, match="'f'") as info:
        bad.read("f")
    assert not isinstance(info.value, StorageFileNotFoundError)
    assert good.read("f") == b"x"  # the first instance kept its own endpoint


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_s3_missing_bucket_is_storage_error(moto_server: Any) -> None:
    storage = open_storage("s3://olympia-no-such-bucket/x", moto_server.storage_options)
    calls: list[Callable[[], object]] = [
        lambda: storage.read("f"),
        lambda: storage.put_if_absent("f", b"x"),
        lambda: storage.overwrite("f", b"x"),
        lambda: storage.list("v"),
    ]
    for call in calls:
        with pytest.raises(StorageError, match="olympia-no-such-bucket") as info:
            call()
        assert type(info.value) is StorageError


def test_s3_keys_stay_under_prefix(moto_server: Any, s3_location: Location) -> None:
    uri, options = s3_location
    storage = open_storage(uri, options)
    storage.put_if_absent("v/00001", b"x")
    storage.overwrite("hint", b"y")
    prefix = uri.removeprefix(f"s3://{moto_server.bucket}/")
    listed = moto_server.boto3_client().list_objects_v2(Bucket=moto_server.bucket, Prefix=prefix)
    assert sorted(o["Key"] for o in listed["Contents"]) == [f"{prefix}/hint", f"{prefix}/v/00001"]
    # Keys that no catalog path can name (folder markers) are not listed.
    moto_server.boto3_client().put_object(
        Bucket=moto_server.bucket, Key=f"{prefix}/v/marker/", Body=b""
    )
    assert storage.list("v") == ["v/00001"]


def _record_fsynced_inodes(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """Inodes of every file or folder that olympia.storage.local fsyncs."""
    import olympia.storage.local as local_module

    synced: set[int] = set()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.add(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(local_module.os, "fsync", fsync)
    return synced


def test_local_hint_is_not_fsynced_but_counters_and_roots_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """format.md §9: the vn/latest hint need not survive a crash (readers probe
    past a stale, empty or missing hint), so the local backend writes it
    without fsync; overwrite (vn/oldest) and put_if_absent stay durable."""
    import olympia

    uri = str(tmp_path / "cat")
    olympia.create_catalog(uri).close()
    synced = _record_fsynced_inodes(monkeypatch)
    cat = olympia.load_catalog(uri)
    with cat.transaction() as t:
        t.create_namespace("n")
    version = cat.version
    cat.close()  # waits for the background hint write
    root = tmp_path / "cat" / "vn"
    from olympia import layout

    assert (root / "latest").read_bytes() == str(version).zfill(20).encode()
    assert os.stat(tmp_path / "cat" / layout.root_path(version)).st_ino in synced
    assert os.stat(root).st_ino in synced
    assert os.stat(root / "latest").st_ino not in synced

    storage = LocalStorage(str(tmp_path / "s"))
    storage.overwrite("vn/oldest", b"3")
    storage.overwrite_hint("vn/latest", b"4")
    assert storage.read("vn/latest") == b"4"
    assert os.stat(tmp_path / "s" / "vn" / "oldest").st_ino in synced
    assert os.stat(tmp_path / "s" / "vn" / "latest").st_ino not in synced
    assert storage.temporary_files() == []


def test_local_hint_is_overwritten_in_place_never_through_another_name(
    tmp_path: Path,
) -> None:
    """format.md §9 item 3: a 20-digit ``vn/latest`` of one link is written in
    place (the same inode: no file freed per commit); a hint of another
    length is replaced; a symbolic or hard link is replaced, never written
    through to the file it names."""
    import olympia
    from olympia import layout

    uri = tmp_path / "cat"
    cat = olympia.create_catalog(str(uri))
    hint = uri / "vn" / "latest"

    def commit(name: str) -> int:
        with cat.transaction() as t:
            t.create_namespace(name)
        cat.store.wait_for_background_writes()
        return cat.version

    version = commit("a")
    assert hint.read_bytes() == b"%020d" % version
    inode = os.stat(hint).st_ino
    version = commit("b")
    assert hint.read_bytes() == b"%020d" % version and os.stat(hint).st_ino == inode

    hint.write_bytes(b"1")  # an earlier build's hint: another length
    version = commit("c")
    assert hint.read_bytes() == layout.encode_hint(version)

    outside = tmp_path / "outside"
    for link in (os.symlink, os.link):
        outside.write_bytes(b"%020d" % 0)  # the length the hint has
        hint.unlink()
        link(outside, hint)
        version = commit(f"d{link.__name__}")
        assert outside.read_bytes() == b"%020d" % 0, link.__name__
        assert not hint.is_symlink() and os.stat(hint).st_nlink == 1
        assert hint.read_bytes() == layout.encode_hint(version)
    # A FIFO planted at the name: replaced, never opened in a way that waits.
    hint.unlink()
    os.mkfifo(hint)
    version = commit("fifo")
    assert hint.is_file() and hint.read_bytes() == layout.encode_hint(version)
    assert cat.store.storage.temporary_files() == []
    cat.close()
    # Any 20 digits are a hint a reader finds the latest version from, ahead
    # of the roots (a read that mixed two writes) or behind them.
    for digits in (b"%020d" % (version + 90), b"%020d" % 1):
        hint.write_bytes(digits)
        assert olympia.load_catalog(str(uri)).version == version


def test_local_staged_put(tmp_path: Path) -> None:
    """stage() writes the temporary file ahead; put_staged links it with the
    put_if_absent contract; nothing is left in the temporary folder."""
    storage = LocalStorage(str(tmp_path))
    staged = storage.stage(b"root one")
    assert len(storage.temporary_files()) == 1  # written before any path is known
    storage.put_staged("vn/a", staged)
    assert storage.read("vn/a") == b"root one"
    assert storage.temporary_files() == []
    storage.put_staged("vn/a", storage.stage(b"root one"))  # identical content: success
    with pytest.raises(StorageFileExistsError):
        storage.put_staged("vn/a", storage.stage(b"root two"))
    assert storage.read("vn/a") == b"root one"
    storage.stage(b"unused").discard()
    assert storage.temporary_files() == []
    other = LocalStorage(str(tmp_path / "other"))
    foreign = other.stage(b"elsewhere")  # staged by another storage: written anew
    storage.put_staged("vn/b", foreign)
    assert storage.read("vn/b") == b"elsewhere"
    foreign.discard()
    assert other.temporary_files() == [] and storage.temporary_files() == []


class _NodeWritesWaitForRoot(LocalStorage):
    """Holds the background part of every node file write (its fsync) until
    the commit's root has been staged."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.root_staged = threading.Event()
        self.node_writes_after_root: list[bool] = []

    def stage(self, data: bytes) -> Any:
        staged = super().stage(data)
        self.root_staged.set()
        return staged

    def put_group(self, submit: Any) -> Any:
        def held(call: Any) -> Any:
            def run() -> None:
                # Bounded, so that code which stages only after the node writes
                # (or never) fails the assertion below instead of hanging.
                self.node_writes_after_root.append(self.root_staged.wait(10))
                call()

            return submit(run)

        return super().put_group(held)


def test_commit_stages_its_root_while_node_files_are_written(tmp_path: Path) -> None:
    """format.md §8: the root's content is written (and fsynced) while the node
    files are in flight; only the put that publishes the root waits for them."""
    import olympia

    uri = str(tmp_path / "cat")
    with olympia.create_catalog(uri, node_order=4) as cat, cat.transaction() as t:
        t.create_namespace("n")
        for i in range(20):
            t.create_table("n", f"t{i:02d}", f"m/{i}")
    storage = _NodeWritesWaitForRoot(uri)
    cat = olympia.load_catalog(storage)
    with cat.transaction() as t:
        t.update_table("n", "t07", metadata_location="m/7b")
        for i in range(40):  # more new nodes than the root carries inline
            t.create_table("n", f"u{i:02d}", f"m/u{i}")
    assert storage.node_writes_after_root and all(storage.node_writes_after_root)
    assert cat.latest().describe_table("n", "t07").metadata_location == "m/7b"
    cat.close()
    assert storage.temporary_files() == []


def _inline_submit(call: Callable[[], None]) -> Any:
    from concurrent.futures import Future

    future: Future[None] = Future()
    try:
        call()
    except BaseException as exc:  # handed to the future, as an executor does
        future.set_exception(exc)
    else:
        future.set_result(None)
    return future


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_put_group_has_the_put_if_absent_contract(tmp_path: Path, backend: str) -> None:
    """A put group creates each file like put_if_absent: identical content
    already there is success, other content is StorageFileExistsError (reported
    by wait), and a bad path is reported the same way."""
    storage: Storage = LocalStorage(str(tmp_path)) if backend == "local" else MemoryStorage("g")
    storage.put_if_absent("node/b", b"bee")
    storage.put_if_absent("node/c", b"sea")
    group = storage.put_group(_inline_submit)
    group.put("node/a", b"ay")
    group.put("def/x", b"ex")
    group.put("node/b", b"bee")  # identical: success
    assert group.wait() == []
    assert storage.read("node/a") == b"ay" and storage.read("def/x") == b"ex"
    assert storage.read("node/b") == b"bee"
    group = storage.put_group(_inline_submit)
    group.put("node/c", b"other")
    group.put("../escape", b"x")
    group.put("node/d", b"dee")
    errors = group.wait()
    assert [type(e) for e in errors] == [StorageFileExistsError, InvalidPathError]
    assert storage.read("node/c") == b"sea" and storage.read("node/d") == b"dee"
    assert storage.temporary_files() == []


def test_local_put_group_makes_files_and_folders_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """format.md §9: every file of a put group is fsynced, and each folder
    that gained one, before wait() returns; a file found already there with
    the same content is fsynced too (its writer may not have done it yet)."""
    storage = LocalStorage(str(tmp_path))
    storage.put_if_absent("node/old", b"same")
    synced = _record_fsynced_inodes(monkeypatch)
    group = storage.put_group(_inline_submit)
    group.put("node/n1", b"one")
    group.put("node/n2", b"two")
    group.put("def/d1", b"three")
    group.put("node/old", b"same")
    assert group.wait() == []
    for path in ("node/n1", "node/n2", "def/d1", "node/old", "node", "def"):
        assert os.stat(tmp_path / path).st_ino in synced, path
    assert storage.temporary_files() == []


def test_local_put_group_reports_a_failed_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    storage = LocalStorage(str(tmp_path))

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    group = storage.put_group(_inline_submit)
    group.put("node/a", b"x")
    errors = group.wait()
    assert len(errors) == 1 and type(errors[0]) is StorageError
    assert "node/a" in str(errors[0]) and "disk on fire" in str(errors[0])
    assert storage.temporary_files() == []


def test_commit_fsyncs_its_node_files_before_publishing_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """format.md §8, §9: when the root of a commit is linked into vn/, every
    node file it names anew has been fsynced, and so has node/."""
    import olympia
    import olympia.storage.local as local_module

    uri = str(tmp_path / "cat")
    with olympia.create_catalog(uri, node_order=4) as cat, cat.transaction() as t:
        t.create_namespace("n")
        for i in range(20):
            t.create_table("n", f"t{i:02d}", f"m/{i}")
    synced = _record_fsynced_inodes(monkeypatch)
    synced_at_publish: list[set[int]] = []
    real_link = local_module.os.link

    def link(src: str, dst: str, **kwargs: Any) -> None:
        if os.path.basename(os.path.dirname(dst)) == "vn":
            synced_at_publish.append(set(synced))
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(local_module.os, "link", link)
    cat = olympia.load_catalog(uri)
    before = cat.version
    with cat.transaction() as t:
        t.update_table("n", "t07", metadata_location="m/7b")
        for i in range(40):  # more new nodes than the root carries inline
            t.create_table("n", f"u{i:02d}", f"m/u{i}")

    def named(version: int) -> set[str]:
        out: set[str] = set()

        def walk(node: Any) -> None:
            for child in node.children:
                out.add(child)
                walk(cat.store.load_node(child))

        walk(cat.at_version(version).root.node)
        return out

    # the node files it wrote (the first new nodes travel inside the root)
    new = {p for p in named(cat.version) - named(before) if p.startswith("node/")}
    cat.close()
    assert len(synced_at_publish) == 1 and len(new) >= 2
    inodes = {os.stat(tmp_path / "cat" / p).st_ino for p in new}
    assert inodes <= synced_at_publish[0]
    assert os.stat(tmp_path / "cat" / "node").st_ino in synced_at_publish[0]


def test_local_put_group_holds_few_files_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit of many files does not hold one descriptor per file until
    the end: a put waits for the oldest fsync once too many are pending."""
    import olympia.storage.local as local_module

    monkeypatch.setattr(local_module, "_OPEN_FILES_MAX", 4)

    class Deferred:
        """A future whose call runs only when its outcome is asked for."""

        def __init__(self, call: Callable[[], None]) -> None:
            self.call = call
            self.done = False
            self.error: BaseException | None = None

        def exception(self) -> BaseException | None:
            if not self.done:
                self.done = True
                try:
                    self.call()
                except BaseException as exc:  # handed over, as a future does
                    self.error = exc
            return self.error

    pending: list[Deferred] = []

    def submit(call: Callable[[], None]) -> Any:
        pending.append(Deferred(call))
        return pending[-1]

    storage = LocalStorage(str(tmp_path))
    group = storage.put_group(submit)
    most = 0
    for i in range(20):
        group.put(f"node/f{i:02d}", b"x%d" % i)
        most = max(most, sum(not d.done for d in pending))
    assert most <= 4
    assert group.wait() == []
    assert all(d.done for d in pending)
    assert [storage.read(f"node/f{i:02d}") for i in range(20)] == [b"x%d" % i for i in range(20)]
    assert storage.temporary_files() == []


def test_s3_storages_share_a_client_only_with_equal_options(s3_location: Location) -> None:
    uri, options = s3_location
    first, second = open_storage(uri, options), open_storage(uri, dict(options))
    assert first._fs is second._fs  # type: ignore[attr-defined]
    other_key = {**options, "key": "someone-else"}
    third = open_storage(uri, other_key)
    assert third._fs is not first._fs  # type: ignore[attr-defined]
    assert third._fs.key == "someone-else"  # type: ignore[attr-defined]
    assert first._fs.key == options["key"]  # type: ignore[attr-defined]
    tuned = open_storage(uri, {**options, "config_kwargs": {"max_pool_connections": 8}})
    assert tuned._fs is not first._fs  # type: ignore[attr-defined]


def test_placed_says_whether_the_put_won(storage: Storage) -> None:
    """``placed`` (group commit names a version in refusals only once its put
    won, spec/transactions.md §3.2 item 4): True first when this put's file
    is in place, never True when the path held other bytes."""
    calls: list[bool] = []
    storage.put_staged("vn/a", storage.stage(b"mine"), placed=calls.append)
    assert calls and calls[0] is True
    calls.clear()
    with pytest.raises(StorageFileExistsError):
        storage.put_staged("vn/a", storage.stage(b"theirs"), placed=calls.append)
    assert calls and True not in calls
    calls.clear()
    outcome = storage.put_staged_reading("vn/a", storage.stage(b"other"), ["vn/a"], calls.append)
    assert outcome.taken and calls and True not in calls
    calls.clear()
    outcome = storage.put_staged_reading("vn/b", storage.stage(b"new"), ["vn/b"], calls.append)
    assert not outcome.taken and calls and calls[0] is True
    assert storage.read("vn/a") == b"mine" and storage.read("vn/b") == b"new"


def test_a_local_catalog_and_the_command_line_start_without_fsspec(tmp_path):
    """fsspec (tens of milliseconds to import) is loaded by the storages that
    use it (memory://, S3) and by file:// URIs, not by `import olympia` nor by
    a catalog in a local folder, which every command of the command line
    opens."""
    import subprocess
    import sys

    script = (
        "import sys, olympia\n"
        "assert 'fsspec' not in sys.modules, 'import olympia'\n"
        f"cat = olympia.create_catalog({str(tmp_path / 'c')!r})\n"
        "with cat.transaction() as t:\n"
        "    t.create_namespace('ns')\n"
        f"olympia.load_catalog({str(tmp_path / 'c')!r}).latest().list_namespaces()\n"
        "from olympia.cli import main\n"
        f"assert main(['ls', '-w', {str(tmp_path / 'c')!r}]) == 0\n"
        "assert 'fsspec' not in sys.modules, 'a local catalog'\n"
        "from olympia.storage import MemoryStorage\n"
        "assert 'fsspec' in sys.modules and MemoryStorage.__name__ == 'MemoryStorage'\n"
        f"assert olympia.load_catalog('file://' + {str(tmp_path / 'c')!r}).version == 1\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "ns" in res.stdout


def test_a_put_into_a_folder_removed_meanwhile_makes_it_again(tmp_path, monkeypatch):
    """remove_folder_if_empty (expiration, after a transaction's state files)
    may remove a folder between the put's mkdir and its link: the put makes
    the folder again instead of failing."""
    from olympia.storage import local

    storage = LocalStorage(str(tmp_path / "c"))
    storage.put_if_absent("dtxn/a/0", b"x")
    storage.delete("dtxn/a/0")
    storage.remove_folder_if_empty("dtxn/a")
    assert not (tmp_path / "c" / "dtxn" / "a").exists()
    assert (tmp_path / "c" / "dtxn").is_dir()
    real_makedirs = local.os.makedirs
    calls = []

    def makedirs_then_lose_it(name, *args, **kwargs):
        real_makedirs(name, *args, **kwargs)
        if name.endswith("b"):
            calls.append(name)
            if len(calls) == 1:  # a concurrent expiration removes it at once
                local.os.rmdir(name)

    monkeypatch.setattr(local.os, "makedirs", makedirs_then_lose_it)
    storage.put_if_absent("dtxn/b/0", b"y")
    assert storage.read("dtxn/b/0") == b"y"
    assert len(calls) == 2
    storage.put_if_absent("vn/x", b"z")
    storage.remove_folder_if_empty("vn")  # not empty: kept
    assert storage.read("vn/x") == b"z"
