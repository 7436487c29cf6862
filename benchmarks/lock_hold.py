"""How much of a commit is spent holding the host's publish lock (below the API).

A diagnostic, not one of the compared benchmarks: P processes each update
their own table (``begin``, ``update_table``, ``commit``, through the public
API) for a fixed time on one local-directory catalog, and this script wraps
``FileHostLock`` (an internal class, olympia/storage/hostlock.py) to time,
per commit, how long the process waited for the lock and how long it held it
(spec/transactions.md §3.1: from obtaining it to letting it go after the
root's link). Since the writers of one host publish one at a time, the hold
bounds what they can commit together: at most one commit per hold time,
whatever the number of processes.

Run from the project root::

    python -m benchmarks.lock_hold              # 1, 2, 4 and 8 processes, 10 s each
    python -m benchmarks.lock_hold --procs 2 --seconds 5

It prints one line per process: commits, and the medians of the wait, the
hold and the whole commit in ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import olympia

try:
    from benchmarks import harness
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import harness  # type: ignore[no-redef]

TABLES = 1000


def _worker(path: str, index: int, seconds: float, out: Any) -> None:
    from olympia.storage import hostlock

    lock_class = hostlock.FileHostLock
    original_init, original_release = lock_class.__init__, lock_class.release
    waits: list[float] = []
    holds: list[float] = []

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        original_init(self, *args, **kwargs)
        self._bench_obtained = time.perf_counter()
        waits.append(self._bench_obtained - start)

    def release(self: Any) -> None:
        if getattr(self, "_fd", None) is not None:
            holds.append(time.perf_counter() - self._bench_obtained)
        original_release(self)

    lock_class.__init__ = init  # type: ignore[method-assign]
    lock_class.release = release  # type: ignore[method-assign]
    cat = olympia.load_catalog(path)
    commits: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        txn = cat.begin()
        txn.update_table("ns", f"t{index}", metadata_location=f"s3://b/{index}/{len(commits)}.json")
        txn.commit()
        commits.append(time.perf_counter() - start)
    out.put(
        (
            len(commits),
            statistics.median(waits) * 1e3,
            statistics.median(holds) * 1e3,
            statistics.median(commits) * 1e3,
        )
    )


def run(procs: int, seconds: float) -> list[tuple[int, float, float, float]]:
    folder = tempfile.mkdtemp(prefix="olympia-lock-hold-")
    path = os.path.join(folder, "catalog")
    cat = olympia.create_catalog(path)
    with cat.transaction() as txn:
        txn.create_namespace("ns")
        for i in range(TABLES):
            txn.create_table("ns", f"t{i}", metadata_location="s3://b/start.json")
    return harness.run_queued(_worker, [(path, i, seconds) for i in range(procs)])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    for procs in args.procs:
        results = run(procs, args.seconds)
        total = sum(r[0] for r in results)
        print(f"{procs} process(es), {args.seconds:g} s: {total / args.seconds:.1f} commits/s")
        for n, wait, hold, whole in results:
            print(f"  {n} commits; median ms: wait {wait:.2f}, hold {hold:.2f}, commit {whole:.2f}")


if __name__ == "__main__":
    main()
