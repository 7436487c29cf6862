"""Expiration and ``fsck()`` cost against the length of the expired history
(issue 23 item 12, spec/transactions.md §8.6: the marker horizon).

For each history length N (default 10^3, 10^4, 10^5 expired versions) on a
local-directory catalog and on S3 (a moto server over HTTP in a child
process, tests/s3_requests.py counting every request):

1. **History, made below the API.** Creating 10^5 versions through the
   public API takes too long, so the expired history is generated: a
   catalog is created through the API, the tree of its version 0 is
   published as version N with ``CatalogStore.commit``, and an
   expired-root marker is written at every version below N, with the
   floor and the hint at N. Local: plain file writes, no fsync. S3: the
   markers are put straight into moto's backend in the server process
   (``S3Backend.put_object``, no HTTP; ``--check`` compares such a marker
   with one written by ``Storage.overwrite`` over HTTP: same body,
   ETag, content type, metadata). That is the state N expirations of
   earlier builds would leave: N markers in ``vn/``. Everything after
   this goes through the public API: 10 versions are committed before
   each run.
2. **before**: ``expire_versions(keep_last=10)`` with no marker horizon
   yet (it writes the first one), and ``fsck()``. This is what every run
   of a build without the horizon costs: it lists all N markers.
3. **deleting run**: the same, once the horizon has matured (expiration's
   clock moved forward by ``tests``' hook ``expiration_clock_millis``,
   not by waiting): it deletes the N markers (S3: ``DeleteObjects``, 1,000
   keys a request). Paid once per marker.
4. **after**: the next run and ``fsck()``: what every later run costs.

**moto's listing.** moto scans and sorts every key of the bucket on every
``ListObjectsV2`` page, so listing 10^6 keys would take hours. The server
here computes each (bucket, prefix, delimiter) listing once per state of
the bucket, from a sorted index of its key names, and pages it by
bisection; pages and continuation tokens are moto's own (``--check``
compares every page with moto's code on buckets of about 3,000 keys,
between mutations). Wall times on S3 are those of this faster moto, not of S3.
Only the seeding and moto's listing algorithm are below HTTP: every
measured request goes over HTTP and is counted by tests/s3_requests.py.

Reported per step: wall time, and on S3 the requests by operation. No
assertion; pytest does not collect this folder.

    python -m benchmarks.bench_markers                      # writes results/markers-<date>.md
    python -m benchmarks.bench_markers --local-sizes 1e3,1e4,1e5,1e6 --s3-sizes 1e3,1e4,1e5,1e6
    python -m benchmarks.bench_markers --quick --no-save    # 10^3 and 10^4 only
    python -m benchmarks.bench_markers --check              # the moto shortcuts against moto
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import olympia
from olympia import layout, maintenance

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

if str(harness.PROJECT_ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(harness.PROJECT_ROOT / "tests"))
import s3_requests  # tests/s3_requests.py: the request counter

#: Versions kept by each run, and committed before each run.
KEPT = 10
SHORT = {"grace_seconds": 0, "allow_short_grace": True}
#: Four commit time limits (the default limit): a horizon has matured after it.
MATURE = 4 * 300_000 + 1
STEPS = ("before: expire", "before: fsck", "deleting run", "after: expire", "after: fsck")


# --- below HTTP, in the moto child process -------------------------------------------
#
# moto lists a bucket by scanning and sorting all its keys on every
# ListObjectsV2 page (``S3Backend.list_objects``), so listing 10^6 keys, 1,000
# a page, costs hours. :func:`moto_setup` replaces ``list_objects_v2`` by an
# equivalent that computes the merged, sorted list of keys and folders once per
# (bucket, prefix, delimiter) and state of the bucket, and finds each page's
# start by bisection. Responses, continuation tokens included, are moto's
# (``--check`` compares them page by page).

#: Serialises the key stores' mutations with the listings computed from them.
_MOTO_LOCK = threading.RLock()
#: Mutating methods of moto's key store that take the key first, and the others.
_BY_KEY = ("__setitem__", "setlist", "pop", "__delitem__", "setdefault")
_WHOLESALE = ("clear", "update", "popitem", "__ior__")
#: More keys changed than this since the last listing: re-sort all names.
_RESORT = 2_000


def _touched(store: Any, key: Any) -> None:
    """Record a mutation of a key store: a new generation, and the key changed
    (``None``: any, the sorted names are dropped)."""
    state = store.__dict__
    state["_olympia_generation"] = state.get("_olympia_generation", 0) + 1
    if state.get("_olympia_names") is None:
        return
    if key is None or len(state.setdefault("_olympia_changed", set())) > _RESORT:
        state["_olympia_names"] = None
    else:
        state["_olympia_changed"].add(key)


def _sorted_names(store: Any) -> list[str]:
    """All key names of a store, sorted, kept up to date with its mutations."""
    state = store.__dict__
    names: list[str] | None = state.get("_olympia_names")
    changed: set[str] = state.setdefault("_olympia_changed", set())
    if names is None:
        names = sorted(dict.keys(store))
    else:
        for key in changed:
            i = bisect.bisect_left(names, key)
            listed = i < len(names) and names[i] == key
            if dict.__contains__(store, key) and not listed:
                names.insert(i, key)
            elif listed and not dict.__contains__(store, key):
                del names[i]
    changed.clear()
    state["_olympia_names"] = names
    return names


def _listing(
    backend: Any, bucket: Any, prefix: str | None, delimiter: str | None
) -> tuple[list[Any], list[str]]:
    """What moto's ``list_objects_v2`` sorts before paging (keys, and folders
    with a delimiter, merged and sorted by name, as ``S3Backend.list_objects``
    makes them), and their names; cached until the bucket's keys change."""
    from moto.s3.models import FakeDeleteMarker

    store = bucket.keys
    state = store.__dict__
    generation = state.get("_olympia_generation", 0)
    cache = state.get("_olympia_listings")
    if cache is None or cache[0] != generation:
        cache = state["_olympia_listings"] = (generation, {})
    hit = cache[1].get((prefix, delimiter))
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    names = _sorted_names(store)
    # moto keeps the names that start with the prefix: one range of the sorted names
    start = bisect.bisect_left(names, prefix) if prefix else 0
    keys: list[Any] = []
    folders: set[str] = set()
    for name in itertools.islice(names, start, None):
        if prefix and not name.startswith(prefix):
            break
        rest = name.replace(prefix, "", 1) if prefix else name
        if delimiter and delimiter in rest:
            folders.add(f"{prefix or ''}{rest.split(delimiter)[0]}{delimiter}")
        else:
            keys.append(store[name])
    found = sorted(
        (k for k in keys if not isinstance(k, FakeDeleteMarker)), key=lambda key: key.name
    )
    merged: list[Any] = found + sorted(folders)
    merged.sort(key=backend._get_name)
    result = (merged, [backend._get_name(x) for x in merged])
    cache[1][(prefix, delimiter)] = result
    return result


def _patch_moto_listing() -> Callable[..., Any]:
    """Install the cached listing in this process's moto; returns moto's own
    ``S3Backend.list_objects_v2``."""
    from moto.s3 import utils
    from moto.s3.exceptions import MethodNotAllowed
    from moto.s3.models import FakeTableStorageBucket, S3Backend

    original: Callable[..., Any] = S3Backend.__dict__["list_objects_v2"]
    if getattr(original, "_olympia", False):
        return original._olympia  # type: ignore[attr-defined, no-any-return]
    store_class = utils._VersionedKeyStore

    def mutating(name: str) -> Callable[..., Any]:
        method = getattr(store_class, name)
        by_key = name in _BY_KEY

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _MOTO_LOCK:
                try:
                    return method(self, *args, **kwargs)
                finally:
                    _touched(self, args[0] if by_key and args else None)

        wrapper.__name__ = name
        return wrapper

    for name in _BY_KEY + _WHOLESALE:
        setattr(store_class, name, mutating(name))

    def list_objects_v2(
        self: Any,
        bucket: Any,
        prefix: str | None,
        delimiter: str | None,
        continuation_token: str | None,
        start_after: str | None,
        max_keys: int,
    ) -> Any:
        if isinstance(bucket, FakeTableStorageBucket):
            raise MethodNotAllowed()
        start = 0
        if continuation_token or start_after:
            limit = (
                self._pagination_tokens.get(continuation_token)
                if continuation_token
                else start_after
            )
            if limit is None:  # an unknown token: whatever moto does
                return original(
                    self, bucket, prefix, delimiter, continuation_token, start_after, max_keys
                )
        with _MOTO_LOCK:
            merged, names = _listing(self, bucket, prefix, delimiter)
        if continuation_token or start_after:
            # moto's _get_results_from_token: from the first name > limit
            start = bisect.bisect_right(names, limit)
        # _truncate_result only needs to see whether more than max_keys remain
        end = len(merged) if max_keys < 0 else start + max_keys + 1
        return self._truncate_result(merged[start:end], max_keys)

    list_objects_v2._olympia = original  # type: ignore[attr-defined]
    S3Backend.list_objects_v2 = list_objects_v2  # type: ignore[method-assign]
    return original


def _moto_backend() -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]


def _seed(bucket: str, prefix: str, count: int) -> None:
    """Write the expired-root markers of versions 0 .. count - 1 of the catalog
    at ``prefix`` into moto's backend, as ``Storage.overwrite`` would over HTTP
    (``--check`` compares the two)."""
    backend = _moto_backend()
    for v in range(count):
        backend.put_object(bucket, f"{prefix}{layout.root_path(v)}", layout.EXPIRED_ROOT)


def moto_setup(control: Any) -> None:
    """``setup`` of ``s3_requests.start_moto_process``: patches the listing,
    then answers the parent's ``("seed", bucket, prefix, count)`` requests
    with ``("seeded", count)`` (or ``("error", text)``) until the pipe closes."""
    _patch_moto_listing()
    while True:
        try:
            request = control.recv()
        except EOFError:
            return
        try:
            _kind, bucket, prefix, count = request
            _seed(bucket, prefix, count)
            control.send(("seeded", count))
        except Exception as exc:  # reported to the parent, which raises
            control.send(("error", f"{type(exc).__name__}: {exc}"))


def _seeder(moto: s3_requests.MotoProcess, name: str) -> Callable[[int], None]:
    """The parent's side: seeds the catalog ``moto.uri(name)``."""

    def seed(count: int) -> None:
        moto.control.send(("seed", moto.bucket, f"{name}/", count))
        kind, detail = moto.control.recv()
        if kind != "seeded" or detail != count:
            raise RuntimeError(f"seeding {count} markers in moto failed: {detail}")

    return seed


# --- --check: the cached listing and the seeding against moto's own code -------------


def _page(result: Any) -> tuple[list[tuple[str, str, int]], bool, str | None]:
    """One list_objects_v2 result, by identity: (kind, name, id) per entry."""
    entries, truncated, token = result
    return (
        [("folder", x, 0) if isinstance(x, str) else ("key", x.name, id(x)) for x in entries],
        truncated,
        token,
    )


def _check_listing() -> str:
    """Every page, with moto's code and with the cached listing, on the same
    buckets (one versioned, with delete markers), between mutations."""
    import random

    backend = _moto_backend()
    original = _patch_moto_listing()
    patched = type(backend).list_objects_v2
    rng = random.Random(23)
    names = [f"cat/{layout.root_path(v)}" for v in range(2000)]
    names += [f"cat/node/{i % 17}/{i:04d}" for i in range(300)]
    names += [f"cat/def/{i}.json" for i in range(300)]
    names += [f"other/{i}" for i in range(300)] + [f"z{i}" for i in range(100)]
    names += ["cat", "cat/", "cat//x", "cat/vn/", "cat/vn//y", "cat/vn/a/b/c", "ca/t"]
    prefixes = [None, "", "c", "cat", "cat/", "cat/vn/", "cat/vn/1", "cat/node/", "z", "none/"]
    pages = 0
    for bucket_name, versioned in (
        ("olympia-check-plain", False),
        ("olympia-check-versions", True),
    ):
        backend.create_bucket(bucket_name, "us-east-1")
        if versioned:
            backend.put_bucket_versioning(bucket_name, "Enabled")
        for name in names:
            backend.put_object(bucket_name, name, b"x" * rng.randrange(30))
        if versioned:  # delete markers, which listings skip
            for name in rng.sample(names, 300):
                backend.delete_object(bucket_name, name)
        bucket = backend.get_bucket(bucket_name)
        for prefix in prefixes:
            for delimiter in (None, "/", "v"):
                for max_keys in (1000, 97, 7, 0):
                    # small pages over the small ranges only (moto's own listing is slow)
                    if max_keys == 7 and prefix not in ("cat/node/", "cat/vn/1", "z"):
                        continue
                    starts = (
                        [None, "cat/vn/0111", "cat/node/3/", "zz"] if max_keys == 97 else [None]
                    )
                    for start_after in starts:
                        token = None
                        while True:
                            args = (bucket, prefix, delimiter, token, start_after, max_keys)
                            theirs = _page(original(backend, *args))
                            ours = _page(patched(backend, *args))
                            if ours != theirs:
                                raise AssertionError(f"listing differs: {args[1:]}")
                            pages += 1
                            if pages % 3 == 0:  # change the bucket between pages
                                backend.put_object(
                                    bucket_name, rng.choice(names) + rng.choice(["", "0", "/"]), b""
                                )
                                backend.delete_object(bucket_name, rng.choice(names))
                            token = theirs[2]
                            if not theirs[1] or token is None:
                                break
    return f"{pages:,} pages identical"


def _check_seed() -> str:
    """A marker seeded in moto's backend and one written by ``Storage.overwrite``
    over HTTP: the same object, as S3 reports it (all but times and request ids)."""
    import boto3

    from olympia.storage import open_storage

    moto = s3_requests.start_moto_process("olympia-check-seed", setup=moto_setup)
    try:
        written = open_storage(moto.uri("written"), moto.storage_options)
        written.overwrite(layout.root_path(1), layout.EXPIRED_ROOT)
        _seeder(moto, "seeded")(2)
        seeded = open_storage(moto.uri("seeded"), moto.storage_options)
        if seeded.read(layout.root_path(1)) != layout.EXPIRED_ROOT:
            raise AssertionError("a seeded marker reads back differently")
        expected = sorted(layout.root_path(v) for v in range(2))
        if sorted(seeded.list(layout.VERSION_DIR)) != expected:
            raise AssertionError(f"seeded listing: {seeded.list(layout.VERSION_DIR)}")
        client = boto3.client(
            "s3",
            endpoint_url=moto.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

        def described(key: str) -> dict[str, Any]:
            head = client.head_object(Bucket=moto.bucket, Key=key)
            body = client.get_object(Bucket=moto.bucket, Key=key)["Body"].read()
            for field in ("ResponseMetadata", "LastModified"):
                head.pop(field, None)
            return {**head, "Body": body}

        a = described(f"written/{layout.root_path(1)}")
        b = described(f"seeded/{layout.root_path(1)}")
        if a != b:
            raise AssertionError(f"written {a} != seeded {b}")
        written.close()
        seeded.close()
        return f"seeded and written markers alike: {sorted(a)}"
    finally:
        moto.stop()


def _history(
    uri: str,
    opts: dict[str, Any],
    expired: int,
    local_root: str | None,
    seed: Callable[[int], None] | None,
) -> None:
    """A catalog whose versions 0 .. expired - 1 are expired: markers, made
    below the API (see the module docstring). ``seed``: on S3, writes the
    markers into the moto server's backend (:func:`moto_setup`)."""
    cat = olympia.create_catalog(uri, dict(opts))
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
    if local_root is not None:
        folder = os.path.join(local_root, layout.VERSION_DIR)
        for v in range(expired):
            with open(os.path.join(folder, layout.version_file_name(v)), "wb") as f:
                f.write(layout.EXPIRED_ROOT)
    elif seed is not None:
        seed(expired)
        for v in {0, expired - 1}:  # read back over HTTP, as expiration will
            if storage.read(layout.root_path(v)) != layout.EXPIRED_ROOT:
                raise RuntimeError(f"seeded marker of version {v} does not read back")
    else:
        with ThreadPoolExecutor(32) as pool:
            list(
                pool.map(
                    lambda v: storage.overwrite(layout.root_path(v), layout.EXPIRED_ROOT),
                    range(expired),
                )
            )
    storage.overwrite(layout.OLDEST_FLOOR, layout.encode_counter(expired))
    storage.overwrite(layout.LATEST_HINT, layout.encode_counter(expired))
    cat.close()


def _commit_some(cat: olympia.Catalog, tag: str) -> None:
    for i in range(KEPT):
        with cat.transaction() as t:
            t.create_namespace(f"{tag}{i}")


def _measure(
    recorder: s3_requests.S3RequestLog | None, fn: Callable[[], Any]
) -> tuple[float, Counter[str], Any]:
    if recorder is None:
        t0 = time.perf_counter()
        result = fn()
        return time.perf_counter() - t0, Counter(), result
    result, measured = recorder.measure(fn)
    ops = Counter(r.operation for r in measured.waited + measured.background)
    return measured.elapsed, ops, result


def run_size(
    uri: str,
    opts: dict[str, Any],
    expired: int,
    local_root: str | None,
    recorder: s3_requests.S3RequestLog | None,
    seed: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The steps of the module docstring for one history length."""
    t0 = time.perf_counter()
    _history(uri, opts, expired, local_root, seed)
    made = time.perf_counter() - t0
    cat = olympia.load_catalog(uri, dict(opts))
    clock = int(time.time() * 1000)
    original = maintenance.expiration_clock_millis
    out: dict[str, Any] = {"expired": expired, "made": made, "steps": {}}
    try:
        for step in STEPS:
            if step.endswith("expire") or step == "deleting run":
                _commit_some(cat, f"{step.split(':')[0].split()[0]}")
                if step == "deleting run":
                    clock += MATURE
                elif step == "after: expire":
                    clock += 1000
                at = clock
                maintenance.expiration_clock_millis = lambda at=at: at  # type: ignore[misc]

                def fn() -> Any:
                    return cat.expire_versions(keep_last=KEPT, **SHORT)
            else:

                def fn() -> Any:
                    return cat.fsck()

            seconds, ops, result = _measure(recorder, fn)
            note = ""
            if isinstance(result, maintenance.ExpireResult):
                note = f"{result.deleted_roots} marked, {result.deleted_markers} markers deleted"
            else:
                note = "clean" if result.clean else f"NOT CLEAN: {result}"
            out["steps"][step] = (seconds, ops, note)
            harness.log(f"  N={expired:,} {step}: {seconds:.3f} s {dict(ops)} {note}")
        out["vn_files"] = len(cat.store.storage.list(layout.VERSION_DIR))
    finally:
        maintenance.expiration_clock_millis = original  # type: ignore[assignment]
        cat.close()
    return out


def _ops_text(ops: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(ops.items())) or "-"


def _report(title: str, rows: list[dict[str, Any]], s3: bool) -> str:
    header = ["expired versions N", "history made in", "step", "wall time", "result"]
    if s3:
        header[4:4] = ["requests", "by S3 operation"]
    lines: list[list[str]] = []
    for row in rows:
        for i, step in enumerate(STEPS):
            seconds, ops, note = row["steps"][step]
            cells = [
                f"{row['expired']:,}" if i == 0 else "",
                f"{row['made']:.1f} s" if i == 0 else "",
                step,
                f"{seconds * 1000:.1f} ms",
                note,
            ]
            if s3:
                cells[4:4] = [str(sum(ops.values())), _ops_text(ops)]
            lines.append(cells)
    return f"### {title}\n\n" + harness.md_table(header, lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local-sizes", type=harness.parse_sizes, default=[1000, 10_000, 100_000])
    parser.add_argument("--s3-sizes", type=harness.parse_sizes, default=[1000, 10_000, 100_000])
    parser.add_argument("--quick", action="store_true", help="sizes 10^3 and 10^4 only")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the cached moto listing and the seeding with moto's own code, and exit",
    )
    harness.add_common_options(parser, "markers-<date>.md", peer=False)
    args = parser.parse_args(argv)
    if args.check:
        harness.log(f"listing: {_check_listing()}")
        harness.log(f"seeding: {_check_seed()}")
        return 0
    if args.quick:
        args.local_sizes = [s for s in args.local_sizes if s <= 10_000]
        args.s3_sizes = [s for s in args.s3_sizes if s <= 10_000]
    started = datetime.datetime.now(datetime.UTC)
    tmp = tempfile.mkdtemp(prefix="olympia-markers-", dir=args.tmp)
    local_rows: list[dict[str, Any]] = []
    s3_rows: list[dict[str, Any]] = []
    try:
        for n in args.local_sizes:
            harness.log(f"local, N={n:,}")
            folder = os.path.join(tmp, f"local-{n}")
            local_rows.append(run_size(folder, {}, n, folder, None))
            shutil.rmtree(folder, ignore_errors=True)
        if args.s3_sizes:
            moto = s3_requests.start_moto_process("olympia-markers", setup=moto_setup)
            try:
                with s3_requests.record_s3_requests() as rec:
                    for n in args.s3_sizes:
                        harness.log(f"S3 (moto), N={n:,}")
                        name = f"markers-{n}-{uuid.uuid4().hex[:8]}"
                        seed = _seeder(moto, name)
                        s3_rows.append(
                            run_size(moto.uri(name), moto.storage_options, n, None, rec, seed)
                        )
            finally:
                moto.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    command = harness.command_line("bench_markers", sys.argv[1:] if argv is None else argv)
    parts = [
        f"# Expiration and fsck against history length ({started:%Y-%m-%d})\n",
        f"Run {started:%Y-%m-%d %H:%M} UTC with `{command}`.\n",
        harness.md_table(["", ""], [list(x) for x in harness.machine_info(tmp)]) + "\n",
        (__doc__ or "").split("\n\n", 1)[1].rsplit("\n\n", 1)[0] + "\n",
    ]
    if local_rows:
        parts.append(_report("Local directory", local_rows, s3=False))
    if s3_rows:
        parts.append(_report("S3 (moto over HTTP, requests counted)", s3_rows, s3=True))
    text = "\n".join(parts)
    print(text)
    if not args.no_save:
        name = f"markers-{started:%Y-%m-%d}{'-quick' if args.quick else ''}.md"
        harness.write_results(harness.results_path(args.out, name), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
