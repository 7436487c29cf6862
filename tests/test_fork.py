"""A catalog used before ``os.fork()`` keeps working in the child.

The fork start method is Linux's default for multiprocessing and what
Spark's Python workers use. The child inherits the parent's objects but only
the thread that forked, so a writer thread pool or a lock held by another
thread must not be carried over.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Any

import pytest

import olympia

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or "fork" not in mp.get_all_start_methods(),
    reason="the platform has no fork",
)


def _child_commits(cat: olympia.Catalog, queue: Any) -> None:
    try:
        with cat.transaction() as txn:  # a small commit that still writes node files
            for i in range(3):
                txn.create_table("ns", f"child{i}", f"s3://b/child{i}.json")
        queue.put(("ok", cat.version))
    except BaseException as exc:  # report anything, the parent asserts
        queue.put(("error", repr(exc)))


def _run_in_forked_child(cat: olympia.Catalog) -> tuple[str, Any]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_commits, args=(cat, queue))
    proc.start()
    proc.join(60)
    if proc.is_alive():
        proc.kill()
        proc.join()
        pytest.fail("the forked child hung on its commit")
    assert proc.exitcode == 0
    return queue.get(timeout=5)  # type: ignore[no-any-return]


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_commit_in_forked_child_after_parent_commits(backend, tmp_path, request):
    if backend == "local":
        uri, opts = str(tmp_path / "cat"), {}
    else:
        uri, opts = request.getfixturevalue("s3_location")
    cat = olympia.create_catalog(uri, opts, node_order=4)
    with cat.transaction() as txn:  # the parent starts its writer threads
        txn.create_namespace("ns")
        # Many node files: the parent's pool ends with many idle workers.
        for i in range(2000):
            txn.create_table("ns", f"parent{i}", f"s3://b/parent{i}.json")
    parent_version = cat.version

    status, value = _run_in_forked_child(cat)

    assert status == "ok", value
    assert value == parent_version + 1
    # The parent sees the child's commit, and its own pool still works.
    fresh = olympia.load_catalog(uri, opts)
    names = fresh.latest().list_tables("ns")
    assert sorted(names) == sorted(
        [f"parent{i}" for i in range(2000)] + [f"child{i}" for i in range(3)]
    )
    with cat.transaction() as txn:
        txn.create_table("ns", "after", "s3://b/after.json")
    assert cat.latest().table_exists("ns", "after")


def test_fork_right_after_create_catalog(tmp_path):
    cat = olympia.create_catalog(str(tmp_path / "cat"), node_order=4)
    with cat.transaction() as txn:
        txn.create_namespace("ns")
    status, value = _run_in_forked_child(cat)
    assert status == "ok", value
    assert len(cat.latest().list_tables("ns")) == 3
