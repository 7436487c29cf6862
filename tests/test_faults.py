"""Every storage call of a commit failing in turn (spec/format.md §8.1).

For each kind of commit, a clean run first counts the storage calls the
commit makes. Then, for every call number ``k`` and both fault modes of
:class:`faulty_storage.FaultyStorage` (the call fails before reaching
storage, or it is performed and its reply is lost), a fresh catalog is built
at a known version with known content, the fault is armed at call ``k`` and
the commit runs. The catalog is then reopened through a fresh, unwrapped
storage and must hold either the old or the new version, never a mix; a
commit that reported success must be there at the version it returned; every
retained version must still be readable with a valid tree whose node and
definition files all exist; and the catalog must accept new commits.

The kinds of commit: a one-object transaction, a many-object transaction that
splits nodes and writes definition files, ``rollback_to``, a SERIALIZABLE
transaction that must rebase on a newer version, one that loses the race for
its root while writing (another writer commits at that moment, through the
wrapper's hook), and the commit of a distributed transaction. Besides the
old-or-new rule, the spec's word on particular calls (format.md §8.1) is
checked, e.g. a lost reply of the root put means success.

Each violation is collected with the call number, the mode and the call that
was hit, so one run reports every failing case at once.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from faulty_storage import FAIL, LOSE_REPLY, MODES, Call, FaultyStorage

import olympia
from olympia import layout
from olympia.catalog import Catalog, CatalogVersion
from olympia.errors import (
    CommitConflictError,
    CommitFailedError,
    OlympiaError,
    StorageError,
    TransactionClosedError,
)
from olympia.node import DefRef, Node
from olympia.storage import MemoryStorage, Storage, open_storage
from olympia.store import CatalogStore, Root
from olympia.transaction import Transaction

Content = dict[str, Any]
Location = tuple[str, dict[str, Any]]


# --- reading a catalog back ------------------------------------------------------------


def dump(view: CatalogVersion) -> Content:
    """Everything a version holds, through the public read API."""
    namespaces: dict[str, dict[str, str]] = {}
    tables: dict[str, tuple[str, dict[str, str], str]] = {}
    views: dict[str, tuple[str, str, str, dict[str, str], str]] = {}
    for ns in view.list_namespaces():
        namespaces[ns] = view.describe_namespace(ns).properties
        for name in view.list_tables(ns):
            t = view.describe_table(ns, name)
            assert (t.namespace, t.name) == (ns, name)
            tables[f"{ns}.{name}"] = (t.metadata_location, t.properties, t.format)
        for name in view.list_views(ns):
            v = view.describe_view(ns, name)
            assert (v.namespace, v.name) == (ns, name)
            views[f"{ns}.{name}"] = (
                v.sql_text,
                v.dialect,
                v.schema_json,
                v.properties,
                v.metadata_location,
            )
    prefix = view.keys.transactions_prefix()
    transactions = tuple(sorted(key[len(prefix) :].rstrip() for key, _ in view.scan(prefix)))
    return {
        "namespaces": namespaces,
        "tables": tables,
        "views": views,
        "transactions": transactions,
    }


def object_count(content: Content) -> int:
    return sum(len(content[part]) for part in ("namespaces", "tables", "views", "transactions"))


def tree_files(store: CatalogStore, root: Root) -> tuple[set[str], set[str]]:
    """The node files and the definition files a version's tree refers to."""
    nodes: set[str] = set()
    defs: set[str] = set()

    def walk(node: Node) -> None:
        if node.is_leaf:
            defs.update(v.path for v in node.values if isinstance(v, DefRef))
            return
        for child in node.children:
            assert isinstance(child, str), "a stored node refers to an unwritten child"
            nodes.add(child)
            walk(store.load_node(child))

    walk(root.node)
    return nodes, defs


def verify_version(cat: Catalog, version: int) -> Content:
    """Check one version completely and return its content.

    The tree must satisfy every B+ tree invariant (``check_tree`` loads every
    node file, so a missing or damaged one raises CorruptCatalogError naming
    it), every definition file is read (by :func:`dump`), and the key count of
    the tree must equal the number of objects read through the API (no key the
    API cannot see). ``cat`` must have been opened on a fresh storage, so that
    every file is read from storage at least once.
    """
    store = cat.store
    key_count = store.check_tree(store.load_root(version))
    view = cat.at_version(version)
    content = dump(view)
    raw_keys = sum(1 for _ in view.scan(""))
    assert key_count == raw_keys == object_count(content), (
        f"version {version}: tree has {key_count} keys, scan {raw_keys}, "
        f"objects {object_count(content)}"
    )
    return content


# --- where catalogs live -------------------------------------------------------------


class Backend:
    """Hands out fresh, empty catalog locations on one storage backend."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.kind = kind
        self._request = request
        self._tmp = tmp_path
        self._made = 0
        self._memory: list[str] = []
        self._s3: dict[str, Storage] = {}
        self._catalogs: list[Catalog] = []

    def new_location(self) -> Location:
        self._made += 1
        if self.kind == "local":
            return str(self._tmp / f"catalog-{self._made}"), {}
        if self.kind == "memory":
            name = f"olympia-faults-{uuid.uuid4().hex}"
            self._memory.append(name)
            return f"memory://{name}", {}
        uri, opts = self._request.getfixturevalue("s3_location")
        return f"{uri}/case-{self._made}", opts

    def storage(self, location: Location) -> Storage:
        """An unwrapped storage for ``location``.

        A new object each time, except on S3: an S3 storage keeps no cache
        (reads and existence checks always go to the server), and setting up
        its connection costs a third of a second, so one is shared per location.
        """
        uri, opts = location
        if self.kind != "s3":
            return open_storage(uri, opts)
        if uri not in self._s3:
            self._s3[uri] = open_storage(uri, opts)
        return self._s3[uri]

    def reopen(self, location: Location) -> Catalog:
        """The catalog through an unwrapped storage, with empty caches."""
        return self.load(self.storage(location))

    def load(self, storage: Storage) -> Catalog:
        """The catalog on ``storage`` (closed by :meth:`release`)."""
        self._catalogs.append(olympia.load_catalog(storage))
        return self._catalogs[-1]

    def create(self, location: Location, definition: dict[str, Any]) -> Catalog:
        self._catalogs.append(olympia.create_catalog(self.storage(location), **definition))
        return self._catalogs[-1]

    def release(self) -> None:
        """Close the catalogs opened so far (their writer threads) and free the
        process-wide memory store of the memory catalogs."""
        from fsspec.implementations.memory import MemoryFileSystem

        for cat in self._catalogs:
            cat.close()
        self._catalogs.clear()

        store = MemoryFileSystem.store
        for name in self._memory:
            for key in [k for k in tuple(store) if k.startswith(f"/{name}/")]:
                store.pop(key, None)
        self._memory.clear()
        for storage in self._s3.values():
            storage.close()
        self._s3.clear()


# --- the commits under test ------------------------------------------------------------


def _loc(ns: str, name: str, gen: int) -> str:
    """A metadata location long enough to go to a definition file (inline max 48)."""
    return f"s3://warehouse/{ns}/{name}/metadata/{gen:05d}-0f8fad5b-d9cb-469f.metadata.json"


@dataclass
class Setting:
    """What a scenario may use to get its commit ready."""

    #: The wrapper every catalog object from :attr:`wrapped` goes through.
    faulty: FaultyStorage
    #: A new catalog object on the faulty storage.
    wrapped: Callable[[], Catalog]
    #: A new catalog object on an unwrapped storage (for other writers; close it
    #: after use, so its background work is done before the commit starts).
    plain: Callable[[], Catalog]


class Scenario:
    """One kind of commit: how to build the catalog, make the commit, and what it changes."""

    name = ""
    definition: dict[str, Any] = {}
    isolation = "snapshot"

    def setup(self, cat: Catalog) -> None:
        """Commit the known starting content (through an unwrapped catalog)."""
        raise NotImplementedError

    def prepare(self, setting: Setting) -> Callable[[], int]:
        """Get the commit ready; return the call that commits."""
        txn = setting.wrapped().begin(self.isolation)
        self.apply(txn)
        return txn.commit

    def apply(self, txn: Transaction) -> None:
        """The operations of the transaction under test."""
        raise NotImplementedError

    def model(self, content: Content, history: dict[int, Content]) -> Content:
        """The content after the commit, given the content before it."""
        raise NotImplementedError

    def published_meanwhile(self, content: Content) -> Content | None:
        """The content another writer published while the last commit ran, if it did."""
        return None

    def failed_states(self, old: Content) -> list[Content]:
        """Contents other than the new one that a failed commit may publish as old + 1."""
        return []

    def redo(self, cat: Catalog, content: Content) -> int:
        """Make the same change again on a catalog holding ``content``; return the version."""
        with cat.transaction(self.isolation) as txn:
            self.apply(txn)
        return cat.version

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        """Extra checks on the clean run: the commit exercises what it is meant to."""


class SingleObject(Scenario):
    """A one-object transaction on a tree three levels deep."""

    name = "single"
    definition = {"node_order": 3}

    def setup(self, cat: Catalog) -> None:
        with cat.transaction() as t:
            t.create_namespace("sales", {"owner": "ops"})
            t.create_namespace("hr")
            for i in range(10):
                t.create_table("sales", f"t{i:02d}", f"s3://w/sales/t{i:02d}/v1.json")
        with cat.transaction() as t:
            t.update_table("sales", "t03", properties={"p": "1"})
            t.create_table("hr", "staff", "s3://w/hr/staff/v1.json")

    def apply(self, txn: Transaction) -> None:
        txn.update_table("sales", "t05", metadata_location="s3://w/sales/t05/v2.json")

    def model(self, content: Content, history: dict[int, Content]) -> Content:
        new = copy.deepcopy(content)
        _, props, fmt = new["tables"]["sales.t05"]
        new["tables"]["sales.t05"] = ("s3://w/sales/t05/v2.json", props, fmt)
        return new

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        root = new_cat.store.load_root(new_cat.version)
        assert root.node.height >= 2
        # the new path below the root travels inside the root (format.md §3.6)
        assert len(root.info.inline_nodes) == root.node.height
        assert not any(c.op == "put_if_absent" and c.path.startswith("node/") for c in calls)


N_NEW = 6  # with the other changes, enough to grow the order-3 tree by a level


class MultiObject(Scenario):
    """Many objects at once: node splits and definition files (order 3, inline max 48)."""

    name = "multi"
    definition = {"node_order": 3, "inline_value_max_bytes": 48}

    def setup(self, cat: Catalog) -> None:
        with cat.transaction() as t:
            for ns in ("a", "b", "c"):
                t.create_namespace(ns, {"owner": f"team-{ns}", "note": "n" * 30})
        with cat.transaction() as t:
            for i in range(5):
                t.create_table("a", f"t{i:02d}", _loc("a", f"t{i:02d}", 1), {"i": str(i)})
        with cat.transaction() as t:
            t.create_view("b", "v0", sql_text="select 1", schema_json="{}")

    def apply(self, txn: Transaction) -> None:
        txn.create_namespace("d", {"owner": "new"})
        for i in range(N_NEW):
            txn.create_table("d", f"n{i:02d}", _loc("d", f"n{i:02d}", 1), {"i": str(i)})
        txn.alter_namespace("a", set={"tier": "gold"}, unset=["note"])
        txn.drop_table("a", "t01")
        txn.rename_table("a", "t02", "b", "t02r")
        txn.update_table("a", "t04", metadata_location=_loc("a", "t04", 2))
        txn.create_view("c", "v1", sql_text="select * from a.t00", properties={"k": "v"})
        txn.replace_view("b", "v0", sql_text="select 2", dialect="spark")

    def model(self, content: Content, history: dict[int, Content]) -> Content:
        new = copy.deepcopy(content)
        ns, tables, views = new["namespaces"], new["tables"], new["views"]
        ns["d"] = {"owner": "new"}
        for i in range(N_NEW):
            tables[f"d.n{i:02d}"] = (_loc("d", f"n{i:02d}", 1), {"i": str(i)}, "iceberg")
        ns["a"].pop("note")
        ns["a"]["tier"] = "gold"
        del tables["a.t01"]
        tables["b.t02r"] = tables.pop("a.t02")
        _, props, fmt = tables["a.t04"]
        tables["a.t04"] = (_loc("a", "t04", 2), props, fmt)
        views["c.v1"] = ("select * from a.t00", "", "", {"k": "v"}, "")
        views["b.v0"] = ("select 2", "spark", "", {}, "")
        return new

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        old_root = old_cat.store.load_root(new_cat.version - 1)
        new_root = new_cat.store.load_root(new_cat.version)
        old_nodes, _ = tree_files(old_cat.store, old_root)
        new_nodes, _ = tree_files(new_cat.store, new_root)
        assert len(new_nodes) > len(old_nodes), "the commit did not split any node"
        assert new_root.node.height > old_root.node.height
        puts = [c.path.split("/")[0] for c in calls if c.op == "put_if_absent"]
        # the first new nodes travel inside the root, any more as node files
        assert len(new_root.info.inline_nodes) + puts.count("node") >= 5
        assert puts.count("def") >= N_NEW + 2


class Rollback(Scenario):
    """``Catalog.rollback_to`` an earlier version."""

    name = "rollback"
    definition = {"node_order": 4, "inline_value_max_bytes": 48}
    target = 2

    def setup(self, cat: Catalog) -> None:
        with cat.transaction() as t:
            t.create_namespace("a", {"owner": "x"})
            t.create_namespace("b")
            for i in range(8):
                t.create_table("a", f"t{i:02d}", _loc("a", f"t{i:02d}", 1))
        with cat.transaction() as t:
            t.drop_table("a", "t03")
            t.drop_table("a", "t04")
            for i in range(4):
                t.create_table("b", f"u{i}", f"s3://w/b/u{i}")
        with cat.transaction() as t:
            t.alter_namespace("a", set={"owner": "y", "extra": "1"})
            t.update_table("a", "t00", metadata_location=_loc("a", "t00", 2))
        with cat.transaction() as t:
            t.create_namespace("c")
            t.create_view("c", "v", sql_text="select 3")

    def prepare(self, setting: Setting) -> Callable[[], int]:
        cat = setting.wrapped()
        return lambda: cat.rollback_to(self.target)

    def model(self, content: Content, history: dict[int, Content]) -> Content:
        return copy.deepcopy(history[self.target])

    def redo(self, cat: Catalog, content: Content) -> int:
        return cat.rollback_to(self.target)

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        info = new_cat.history()[-1]
        assert info.rollback_from == new_cat.version - 1


class Rebased(Scenario):
    """A SERIALIZABLE transaction whose begin version was overtaken by a
    concurrent commit before it committed: it checks for conflicts, replays its
    writes on the latest version and publishes the next one."""

    name = "rebase"
    definition = {"node_order": 3, "inline_value_max_bytes": 48}
    isolation = "serializable"

    def setup(self, cat: Catalog) -> None:
        with cat.transaction() as t:
            for ns in ("a", "b", "c"):
                t.create_namespace(ns, {"owner": f"team-{ns}"})
            for i in range(6):
                t.create_table("a", f"t{i:02d}", _loc("a", f"t{i:02d}", 1))

    def prepare(self, setting: Setting) -> Callable[[], int]:
        txn = setting.wrapped().begin(self.isolation)
        self.apply(txn)
        self.commit_other(setting)
        return txn.commit

    def commit_other(self, setting: Setting) -> None:
        """The concurrent commit: touches nothing the transaction under test read or wrote."""
        with setting.plain() as cat, cat.transaction() as other:
            other.create_table("b", "z0", _loc("b", "z0", 1))
            other.alter_namespace("b", set={"z": "1"})
            other.drop_table("a", "t05")

    def other_model(self, content: Content) -> Content:
        new = copy.deepcopy(content)
        new["tables"]["b.z0"] = (_loc("b", "z0", 1), {}, "iceberg")
        new["namespaces"]["b"]["z"] = "1"
        del new["tables"]["a.t05"]
        return new

    def apply(self, txn: Transaction) -> None:
        assert txn.describe_namespace("a").properties == {"owner": "team-a"}
        txn.list_tables("c")
        for i in range(2):
            txn.create_table("c", f"r{i:02d}", _loc("c", f"r{i:02d}", 1))
        txn.update_table("a", "t00", metadata_location=_loc("a", "t00", 2))
        txn.alter_namespace("c", set={"touched": "yes"})

    def model(self, content: Content, history: dict[int, Content]) -> Content:
        new = copy.deepcopy(content)
        for i in range(2):
            new["tables"][f"c.r{i:02d}"] = (_loc("c", f"r{i:02d}", 1), {}, "iceberg")
        _, props, fmt = new["tables"]["a.t00"]
        new["tables"]["a.t00"] = (_loc("a", "t00", 2), props, fmt)
        new["namespaces"]["c"]["touched"] = "yes"
        return new

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        info = new_cat.history()[-1]
        assert info.begin_version == new_cat.version - 2
        assert info.isolation == "serializable"


class LostRace(Rebased):
    """Like ``rebase``, but the concurrent commit publishes while the
    transaction writes its node files: the transaction's root put finds the
    version taken, and it cleans up, checks, replays and publishes the next."""

    name = "race"

    def prepare(self, setting: Setting) -> Callable[[], int]:
        txn = setting.wrapped().begin(self.isolation)
        self.apply(txn)
        lock = threading.Lock()
        self._fired: list[Call] = []

        def interleave(call: Call) -> None:
            if call.op != "put_if_absent" or not call.path.startswith(("node/", "def/")):
                return
            with lock:
                if self._fired:
                    return
                self._fired.append(call)
            self.commit_other(setting)

        setting.faulty.hook = interleave
        return txn.commit

    def published_meanwhile(self, content: Content) -> Content | None:
        return self.other_model(content) if self._fired else None

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        super().check_reference(old_cat, new_cat, calls)
        root_puts = [c for c in calls if c.op == "put_if_absent" and c.path.startswith("vn/")]
        assert len(root_puts) == 2, "the transaction did not lose the race for its first root"


class Distributed(Scenario):
    """The commit of a distributed transaction, resumed in another catalog object."""

    name = "distributed"
    definition = {"node_order": 4, "inline_value_max_bytes": 48}

    def setup(self, cat: Catalog) -> None:
        with cat.transaction() as t:
            t.create_namespace("sales", {"owner": "ops"})
            for i in range(6):
                t.create_table("sales", f"t{i:02d}", _loc("sales", f"t{i:02d}", 1))

    def prepare(self, setting: Setting) -> Callable[[], int]:
        with setting.wrapped() as first:
            txn = first.begin()
            txn.create_table("sales", "d0", _loc("sales", "d0", 1))
            txn_id = txn.distribute()
            txn.update_table("sales", "t01", metadata_location=_loc("sales", "t01", 2))
        resumed = setting.wrapped().resume(txn_id)
        resumed.create_namespace("dist", {"by": "worker-2"})
        resumed.drop_table("sales", "t02")
        return resumed.commit

    def apply(self, txn: Transaction) -> None:  # the same changes, for redo
        txn.create_table("sales", "d0", _loc("sales", "d0", 1))
        txn.update_table("sales", "t01", metadata_location=_loc("sales", "t01", 2))
        txn.create_namespace("dist", {"by": "worker-2"})
        txn.drop_table("sales", "t02")

    def model(self, content: Content, history: dict[int, Content]) -> Content:
        new = copy.deepcopy(content)
        tables = new["tables"]
        tables["sales.d0"] = (_loc("sales", "d0", 1), {}, "iceberg")
        _, props, fmt = tables["sales.t01"]
        tables["sales.t01"] = (_loc("sales", "t01", 2), props, fmt)
        new["namespaces"]["dist"] = {"by": "worker-2"}
        del tables["sales.t02"]
        new["transactions"] = ()
        return new

    def redo(self, cat: Catalog, content: Content) -> int:
        """Finish the distributed transaction if it is still open, else redo its changes."""
        if content["transactions"]:
            (txn_id,) = content["transactions"]
            try:
                resumed = cat.resume(txn_id)
            except TransactionClosedError as exc:
                raise AssertionError(
                    f"the failed commit left distributed transaction {txn_id} open in the "
                    f"catalog but impossible to resume, commit or roll back ({exc})"
                ) from None
            return resumed.commit()
        return super().redo(cat, content)

    def failed_states(self, old: Content) -> list[Content]:
        # A failed commit rolls the distributed transaction back: a version
        # that only drops its catalog object (spec/transactions.md §6).
        rolled_back = copy.deepcopy(old)
        rolled_back["transactions"] = ()
        return [rolled_back]

    def check_reference(self, old_cat: Catalog, new_cat: Catalog, calls: list[Call]) -> None:
        assert len(dump(old_cat.at_version(new_cat.version - 1))["transactions"]) == 1
        assert dump(new_cat.latest())["transactions"] == ()
        assert any(c.op == "put_if_absent" and c.path.startswith("dtxn/") for c in calls)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (SingleObject(), MultiObject(), Rollback(), Rebased(), LostRace(), Distributed())
}


# --- one case --------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run of a commit did."""

    calls: list[Call]
    hit: Call | None
    returned: int | None
    error: BaseException | None
    old_version: int
    history: dict[int, Content]
    landed: bool = False
    problems: list[str] = field(default_factory=list)


def _spec_problems(
    hit: Call, mode: str, error: BaseException | None, landed: bool
) -> Iterator[str]:
    """What spec/format.md §8.1 says about a fault in this particular call."""
    top = hit.path.split("/")[0]
    if error is not None and landed and not isinstance(error, CommitFailedError):
        # transactions.md §3: a failed commit leaves nothing a reader can see;
        # only CommitFailedError says "the outcome is unknown" (format.md §8.1).
        yield f"the commit raised {error!r} although its version was published"
    if hit.op == "put_if_absent" and top in (layout.NODE_DIR, layout.DEF_DIR):
        if not isinstance(error, CommitFailedError):
            yield f"a failed node/definition write must fail the commit, got {error!r}"
        if landed:
            yield "a failed node/definition write must not publish the version"
    root_put = hit.op == "put_if_absent" and top == layout.VERSION_DIR
    if root_put and mode == LOSE_REPLY and error is not None:
        yield f"a root put whose reply was lost landed: the commit must succeed, got {error!r}"
    if root_put and mode == FAIL and error is not None:
        if not isinstance(error, CommitFailedError):
            yield f"a root put that failed must raise CommitFailedError, got {error!r}"
        if landed:
            yield "a root put that never reached storage published the version"
    if hit.op == "overwrite" and hit.path == layout.LATEST_HINT and error is not None:
        yield f"a failed vn/latest hint must not fail the commit, got {error!r}"
    if hit.op == "delete" and error is not None:
        yield f"cleaning up a lost race is best effort and must not fail the commit, got {error!r}"


@dataclass
class Staged:
    """A catalog at its starting version with the commit under test ready."""

    location: Location
    faulty: FaultyStorage
    commit: Callable[[], int]
    wrapped: list[Catalog]

    def settle(self) -> None:
        """Close the catalog objects on the faulty storage, which waits for
        the commit's background work (the ``vn/latest`` hint)."""
        for cat in self.wrapped:
            cat.close()


def stage(backend: Backend, scenario: Scenario) -> Staged:
    location = backend.new_location()
    with backend.create(location, scenario.definition) as plain:
        scenario.setup(plain)
    faulty = FaultyStorage(backend.storage(location))
    wrapped: list[Catalog] = []

    def open_wrapped() -> Catalog:
        wrapped.append(olympia.load_catalog(faulty))
        return wrapped[-1]

    commit = scenario.prepare(Setting(faulty, open_wrapped, lambda: backend.reopen(location)))
    return Staged(location, faulty, commit, wrapped)


def run_case(
    backend: Backend,
    scenario: Scenario,
    at: int | None,
    mode: str,
    reference: dict[int, Content] | None = None,
) -> Outcome:
    """Build the catalog, run the commit with the fault armed at call ``at`` (None:
    no fault), and check the catalog afterwards. Problems are collected in the
    outcome; unexpected errors while checking become problems too.

    ``reference`` is the content of the versions before the commit, from the
    clean run (the starting content is deterministic); without it they are
    read and checked here.
    """
    staged = stage(backend, scenario)
    location, faulty = staged.location, staged.faulty
    before = backend.reopen(location)
    old_version = before.version
    if reference is None:
        history = {v: verify_version(before, v) for v in range(old_version + 1)}
    else:
        history = {v: content for v, content in reference.items() if v < old_version}
        assert sorted(history) == list(range(old_version))
        # The latest may name objects of this run (a distributed transaction's id).
        history[old_version] = dump(before.at_version(old_version))
    old = history[old_version]

    if at is None:
        faulty.reset()
    else:
        faulty.arm(at, mode)
    returned: int | None = None
    error: BaseException | None = None
    try:
        returned = staged.commit()
    except Exception as exc:
        error = exc
    staged.settle()
    meanwhile = scenario.published_meanwhile(old)
    if meanwhile is not None:  # another writer's version is now the one before ours
        old_version += 1
        old = history[old_version] = meanwhile
    new = scenario.model(old, history)
    assert new != old
    outcome = Outcome(faulty.calls, faulty.hit, returned, error, old_version, history)
    try:
        _check_after(backend, location, scenario, outcome, old, new, at, mode)
    except (AssertionError, OlympiaError) as exc:
        outcome.problems.append(f"{type(exc).__name__}: {exc}")
    if at is None and outcome.problems:
        raise AssertionError(f"the clean run of {scenario.name} failed: {outcome.problems}")
    return outcome


def _check_after(
    backend: Backend,
    location: Location,
    scenario: Scenario,
    outcome: Outcome,
    old: Content,
    new: Content,
    at: int | None,
    mode: str,
) -> None:
    problems = outcome.problems
    error, returned, old_version = outcome.error, outcome.returned, outcome.old_version
    if error is not None:
        if not isinstance(error, OlympiaError):
            problems.append(f"raised a raw {type(error).__name__}: {error!r}")
        if outcome.hit is None:
            problems.append(f"raised {error!r} although no fault was injected")
    if at is not None and outcome.hit is None:
        problems.append(f"the commit made only {len(outcome.calls)} calls; call {at} never came")

    cat = backend.reopen(location)
    latest = cat.version
    assert latest in (old_version, old_version + 1), (
        f"latest version is {latest}, expected {old_version} or {old_version + 1}"
    )
    expected = dict(outcome.history)  # what every version must hold at the end
    content = old
    if latest == old_version + 1:
        content = verify_version(cat, latest)
        allowed = [new, *scenario.failed_states(old)]
        assert content in allowed, (
            f"version {latest} holds neither the old nor the new content: {content}"
        )
        expected[latest] = content
    outcome.landed = content == new and latest == old_version + 1
    if returned is not None:
        assert returned == old_version + 1 == latest, (
            f"commit returned {returned}; latest is {latest}, old was {old_version}"
        )
        assert outcome.landed, "the commit reported success but its content is not there"
    if outcome.hit is not None:
        problems.extend(_spec_problems(outcome.hit, mode, error, outcome.landed))

    # The catalog is not wedged: the change can be made again if it did not
    # land, and a further transaction commits on top.
    if not outcome.landed:
        redone = scenario.redo(cat, content)
        assert redone == latest + 1, f"redo committed {redone}, expected {latest + 1}"
        content = scenario.model(content, outcome.history)
        latest = expected_version = redone
        expected[expected_version] = content
    with cat.transaction() as txn:
        txn.create_namespace("after_fault", {"call": str(at), "mode": mode})
    content = copy.deepcopy(content)
    content["namespaces"]["after_fault"] = {"call": str(at), "mode": mode}
    expected[latest + 1] = content

    # Reopened once more: every retained version is readable, complete, with a
    # valid tree, and holds what it held before or what was committed since.
    final = backend.reopen(location)
    assert final.version == latest + 1
    assert final.oldest_version == 0
    for v in range(final.version + 1):
        assert verify_version(final, v) == expected[v], f"version {v} does not hold its content"
    assert [v.version for v in final.history()] == list(range(final.version + 1))


def _describe(at: int, mode: str, outcome: Outcome) -> str:
    result = f"returned {outcome.returned}" if outcome.error is None else repr(outcome.error)
    return f"call {at} ({mode}) hit {outcome.hit}: commit {result}; problems: {outcome.problems}"


# --- the tests -------------------------------------------------------------------------


# Every kind of commit on memory storage; the ones that differ most in what
# they write also on local storage; the one-object commit on S3 (moto over
# HTTP, about 10 ms a request).
CASES = [
    *((name, "memory") for name in SCENARIOS),
    ("single", "local"),
    ("multi", "local"),
    ("rollback", "local"),
    ("single", "s3"),
]


@pytest.fixture
def backend_of(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[str], Backend]]:
    made: list[Backend] = []

    def make(kind: str) -> Backend:
        made.append(Backend(kind, request, tmp_path))
        return made[-1]

    yield make
    for b in made:
        b.release()


@pytest.mark.parametrize(("scenario", "backend"), CASES, ids=[f"{s}-{b}" for s, b in CASES])
def test_every_storage_call_of_a_commit_failing_in_turn(
    scenario: str,
    backend: str,
    backend_of: Callable[[str], Backend],
) -> None:
    kind = SCENARIOS[scenario]
    where = backend_of(backend)
    clean = run_case(where, kind, None, "")
    assert clean.error is None and clean.landed
    calls = clean.calls
    assert calls, "the commit made no storage call"
    # The commit publishes its root with put-if-absent and then moves the hint
    # (a rollback also removes its pin, transactions.md §8.1, in either order).
    assert any(c.op == "put_if_absent" and c.path.startswith("vn/") for c in calls)
    last = [c for c in calls if not c.path.startswith("pins/")][-1]
    assert last.op == "overwrite" and last.path == layout.LATEST_HINT

    failures: list[str] = []
    outcomes: list[tuple[int, str, Outcome]] = []
    for at in range(1, len(calls) + 1):
        for mode in MODES:
            outcome = run_case(where, kind, at, mode, clean.history)
            outcomes.append((at, mode, outcome))
            if outcome.problems:
                failures.append(_describe(at, mode, outcome))
        where.release()
    assert len(outcomes) == len(MODES) * len(calls)
    if failures:
        pytest.fail(
            f"{len(failures)} of {len(outcomes)} fault cases broke the contract:\n"
            + "\n".join(failures),
            pytrace=False,
        )
    # Both outcomes occur: some faults fail the commit, others do not stop it.
    assert any(o.error is not None for _, _, o in outcomes)
    assert any(o.error is None for _, _, o in outcomes)


def test_reference_runs_exercise_what_they_claim(backend_of: Callable[[str], Backend]) -> None:
    where = backend_of("memory")
    for kind in SCENARIOS.values():
        staged = stage(where, kind)
        before = where.reopen(staged.location)
        staged.faulty.reset()
        version = staged.commit()
        staged.settle()
        after = where.reopen(staged.location)
        assert version == after.version
        kind.check_reference(before, after, staged.faulty.calls)


# --- the wrapper itself ----------------------------------------------------------------


def _memory() -> MemoryStorage:
    return MemoryStorage(f"olympia-faulty-{uuid.uuid4().hex}")


def test_faulty_storage_forwards_and_numbers_calls() -> None:
    inner = _memory()
    fs = FaultyStorage(inner)
    fs.put_if_absent("a/b", b"1")
    assert fs.read("a/b") == b"1"
    assert fs.exists("a/b") and not fs.exists("a/c")
    fs.overwrite("a/h", b"2")
    assert fs.list("a") == ["a/b", "a/h"]
    fs.delete("a/h")
    assert inner.list("a") == ["a/b"]
    assert [str(c) for c in fs.calls] == [
        "#1 put_if_absent(a/b)",
        "#2 read(a/b)",
        "#3 exists(a/b)",
        "#4 exists(a/c)",
        "#5 overwrite(a/h)",
        "#6 list(a)",
        "#7 delete(a/h)",
    ]
    assert fs.hit is None
    assert fs.location == inner.location


def test_fail_mode_never_reaches_the_inner_storage() -> None:
    inner = _memory()
    fs = FaultyStorage(inner)
    fs.arm(2, FAIL)
    fs.put_if_absent("x/1", b"a")
    with pytest.raises(StorageError, match=r"injected fault: storage call #2 put_if_absent\(x/2\)"):
        fs.put_if_absent("x/2", b"b")
    assert not inner.exists("x/2")
    fs.put_if_absent("x/3", b"c")  # one fault only
    assert inner.list("x") == ["x/1", "x/3"]
    assert fs.hit == Call(2, "put_if_absent", "x/2", FAIL)


def test_lose_reply_mode_performs_the_call_then_raises() -> None:
    inner = _memory()
    fs = FaultyStorage(inner)
    fs.arm(1, LOSE_REPLY)
    with pytest.raises(StorageError, match="lost its reply"):
        fs.put_if_absent("x/1", b"a")
    assert inner.read("x/1") == b"a"
    assert fs.lost_outcome == "ok"
    # An "exists" answer is lost with the reply, too.
    fs.arm(1, LOSE_REPLY)
    with pytest.raises(StorageError, match="lost its reply") as info:
        fs.put_if_absent("x/1", b"other")
    assert type(info.value) is StorageError
    assert fs.lost_outcome.startswith("StorageFileExistsError")
    fs.arm(1, LOSE_REPLY)
    with pytest.raises(StorageError):
        fs.delete("x/1")
    assert not inner.exists("x/1")


def test_arm_refuses_bad_arguments() -> None:
    fs = FaultyStorage(_memory())
    with pytest.raises(ValueError, match="mode"):
        fs.arm(1, "explode")
    with pytest.raises(ValueError, match="at least 1"):
        fs.arm(0, FAIL)


def test_a_failed_commit_leaves_the_catalog_usable(backend_of: Callable[[str], Backend]) -> None:
    """The root put fails: nothing is published, and a new transaction from the
    reopened catalog commits the same change as the very next version."""
    where = backend_of("memory")
    kind = SingleObject()
    clean = run_case(where, kind, None, "")
    root_puts = [c for c in clean.calls if c.op == "put_if_absent" and c.path.startswith("vn/")]
    assert len(root_puts) == 1
    staged = stage(where, kind)
    old_version = where.reopen(staged.location).version
    staged.faulty.arm(root_puts[0].number, FAIL)
    with pytest.raises(CommitFailedError, match=f"publishing version {old_version + 1} failed"):
        staged.commit()
    staged.settle()
    assert staged.faulty.hit is not None
    assert staged.faulty.hit.path == layout.root_path(old_version + 1)
    again = where.reopen(staged.location)
    assert again.version == old_version
    assert again.latest().describe_table("sales", "t05").metadata_location.endswith("v1.json")
    assert kind.redo(again, dump(again.latest())) == old_version + 1
    latest = where.reopen(staged.location).latest()
    assert latest.version == old_version + 1
    assert latest.describe_table("sales", "t05").metadata_location.endswith("v2.json")


# --- a lost race must not delete the winner's files ------------------------------------


_real_monotonic = time.monotonic


class _FrozenClock:
    """``time`` for olympia's naming code, stuck in one millisecond."""

    def __init__(self, now: float) -> None:
        self._now = now

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return _real_monotonic()


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_losing_a_race_never_deletes_files_the_winner_published(
    backend: str, backend_of: Callable[[str], Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node and definition files are named by creation millisecond and content,
    so two writers that make the same change in the same millisecond write the
    same files, and put-if-absent counts the second write as a success
    (format.md §2 and §9). The writer that then loses the race for the root
    must not delete those files: the winner's version refers to them."""
    import olympia.layout
    import olympia.store

    clock = _FrozenClock(1_800_000_000.0)
    monkeypatch.setattr(olympia.layout, "time", clock)
    monkeypatch.setattr(olympia.store, "time", clock)
    # Node files, not inline nodes (a commit with more new nodes than a root
    # carries writes them so).
    monkeypatch.setattr(olympia.store, "INLINE_NODES_MAX", 0)
    where = backend_of(backend)
    location = where.new_location()
    with where.create(location, {"node_order": 3, "inline_value_max_bytes": 16}) as cat:
        with cat.transaction() as t:
            t.create_namespace("ns")
            for i in range(6):
                t.create_table("ns", f"t{i}", f"s3://w/ns/t{i}/v1.json")
        base = cat.version
    # One job started twice: both make the same change from the same version.
    winner_cat = where.reopen(location)
    winner = winner_cat.begin()
    interleaved = FaultyStorage(where.storage(location))
    loser = where.load(interleaved).begin()
    for txn in (winner, loser):
        txn.update_table("ns", "t3", metadata_location="s3://w/ns/t3/v2.json")
    published: list[int] = []
    lock = threading.Lock()

    def winner_commits_first(call: Call) -> None:
        # The loser has checked that version base + 1 is free and starts writing.
        if call.op != "put_if_absent" or not call.path.startswith("node/"):
            return
        with lock:
            if not published:
                published.append(winner.commit())
                winner_cat.close()  # its vn/latest hint is written before we go on

    interleaved.hook = winner_commits_first
    with pytest.raises(CommitConflictError) as refused:
        loser.commit()
    assert published == [base + 1]
    assert refused.value.rule == "write-write"
    assert any(c.op == "put_if_absent" and c.path.startswith("vn/") for c in interleaved.calls)
    fresh = where.reopen(location)
    assert fresh.version == base + 1
    content = verify_version(fresh, base + 1)
    assert content["tables"]["ns.t3"][0] == "s3://w/ns/t3/v2.json"
