"""Expiration and ``fsck()`` cost against the length of the expired history
(issue 23 item 12, spec/transactions.md §8.6: the marker horizon).

For each history length N (default 10^3, 10^4, 10^5 expired versions) on a
local-directory catalog and on S3 (a moto server over HTTP in a child
process, tests/s3_requests.py counting every request):

1. **History, made below the API.** Creating 10^5 versions through the
   public API takes too long, so the expired history is generated: a
   catalog is created through the API, the tree of its version 0 is
   published as version N with ``CatalogStore.commit``, and an
   expired-root marker is written at every version below N (local: plain
   file writes, no fsync; S3: ``Storage.overwrite`` from 32 threads), with
   the floor and the hint at N. That is the state N expirations of earlier
   builds would leave: N markers in ``vn/``. Everything after this goes
   through the public API: 10 versions are committed before each run.
2. **before**: ``expire_versions(keep_last=10)`` with no marker horizon
   yet (it writes the first one), and ``fsck()``. This is what every run
   of a build without the horizon costs: it lists all N markers.
3. **deleting run**: the same, once the horizon has matured (expiration's
   clock moved forward by ``tests``' hook ``expiration_clock_millis``,
   not by waiting): it deletes the N markers (S3: ``DeleteObjects``, 1,000
   keys a request). Paid once per marker.
4. **after**: the next run and ``fsck()``: what every later run costs.

Reported per step: wall time, and on S3 the requests by operation. No
assertion; pytest does not collect this folder.

    python -m benchmarks.bench_markers                      # writes results/markers-<date>.md
    python -m benchmarks.bench_markers --local-sizes 1e3,1e4,1e5,1e6 --s3-sizes 1e3,1e4,1e5
    python -m benchmarks.bench_markers --quick --no-save    # 10^3 and 10^4 only
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
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


def _history(uri: str, opts: dict[str, Any], expired: int, local_root: str | None) -> None:
    """A catalog whose versions 0 .. expired - 1 are expired: markers, made
    below the API (see the module docstring)."""
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
) -> dict[str, Any]:
    """The steps of the module docstring for one history length."""
    t0 = time.perf_counter()
    _history(uri, opts, expired, local_root)
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
    harness.add_common_options(parser, "markers-<date>.md", peer=False)
    args = parser.parse_args(argv)
    if args.quick:
        args.local_sizes = [s for s in args.local_sizes if s <= 10_000]
        args.s3_sizes = [s for s in args.s3_sizes if s <= 10_000]
    started = datetime.datetime.now(datetime.timezone.utc)
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
            moto = s3_requests.start_moto_process("olympia-markers")
            try:
                with s3_requests.record_s3_requests() as rec:
                    for n in args.s3_sizes:
                        harness.log(f"S3 (moto), N={n:,}")
                        uri = moto.uri(f"markers-{n}-{uuid.uuid4().hex[:8]}")
                        s3_rows.append(run_size(uri, moto.storage_options, n, None, rec))
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
