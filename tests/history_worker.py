"""The randomized bank workload of tests/test_history.py, run in spawned processes.

Objects: namespaces ``bank_a`` and ``bank_b``, each with accounts ``acct0`` ..
``acct2`` (a balance in the table's properties) and up to four extra tables
``x0`` .. ``x3`` that transactions create and drop. Every write stores a
unique writer token (the transaction's label) in the properties, so a read
tells which write it saw. Transaction kinds:

* ``transfer``: read one account in each namespace, move money between them;
* ``audit``: read all six balances (and one namespace's table list), check the sum;
* ``skew``: read ``bank_a.acctI`` and ``bank_b.acctI``, rewrite one of them with
  the same balance (write skew under SNAPSHOT);
* ``phantom``: list a namespace's tables; with fewer than two extra tables create
  one, else drop one (under SERIALIZABLE a namespace never holds more than two);
* ``probe``: read an extra table (often absent) and an account of the other
  namespace; touch the extra table when it exists.
* ``renew``: rewrite a hot account (``acct0`` of either namespace) with its
  balance, then drop the namespace ``scratch`` and create it again, which only
  works while it is empty (NamespaceNotEmpty is recorded, and the transaction
  goes on);
* ``nest``: read a hot account, then create table ``s0`` or ``s1`` in
  ``scratch``; when the create finds it exists (TableAlreadyExists is
  recorded), drop both (TableNotFound is recorded for a missing one).

With ``renew`` and ``nest`` the recorder also writes down the preconditions
its writes checked (``exists`` and ``any`` reads, see history_checker.py),
passed or failed: a renew committed before a concurrent nest that read its
account is the example of spec/transactions.md §1 (the nest must precede the
renew, and the renew's drop needed ``scratch`` empty).

Functions here are top-level so that the ``spawn`` start method can import them.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import olympia
from olympia import (
    CommitConflictError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    OlympiaError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from olympia.conflicts import ConflictChecker

NAMESPACES = ("bank_a", "bank_b")
SCRATCH = "scratch"
SCRATCH_TABLES = ("s0", "s1")
HOT = tuple((ns, "acct0") for ns in NAMESPACES)
ACCOUNTS = ("acct0", "acct1", "acct2")
EXTRAS = ("x0", "x1", "x2", "x3")
INITIAL_BALANCE = 100
TOTAL = INITIAL_BALANCE * len(NAMESPACES) * len(ACCOUNTS)
MAX_EXTRAS = 2
LOCATION = "s3://warehouse/bank/metadata.json"
KINDS = ("transfer", "audit", "skew", "phantom", "probe", "renew", "nest")
WEIGHTS = (26, 12, 14, 14, 8, 14, 12)


def setup_catalog(uri: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create the catalog with both namespaces and all accounts; return the setup record."""
    cat = olympia.create_catalog(uri, storage_options=options)
    txn = cat.begin("snapshot")
    ops = []
    for ns in (*NAMESPACES, SCRATCH):
        txn.create_namespace(ns, {"writer": "init"})
        ops.append({"kind": "create", "obj": ns, "token": "init"})
    for ns in NAMESPACES:
        for acct in ACCOUNTS:
            props = {"balance": str(INITIAL_BALANCE), "writer": "init"}
            txn.create_table(ns, acct, LOCATION, properties=props)
            ops.append({"kind": "create", "obj": f"{ns}.{acct}", "token": "init"})
    begin = txn.begin_version
    version = txn.commit()
    return {
        "label": "init",
        "txn_id": txn.id,
        "isolation": "snapshot",
        "begin": begin,
        "ops": ops,
        "outcome": "committed",
        "version": version,
        "kind": "setup",
    }


class _Recorder:
    """Performs operations on a transaction and records what each saw or wrote."""

    def __init__(self, txn: Any, label: str, rng: random.Random, pause: float) -> None:
        self.txn = txn
        self.label = label
        self.rng = rng
        self.pause = pause
        self.ops: list[dict[str, Any]] = []

    def nap(self) -> None:
        # Widens the window between a transaction's reads and its commit.
        time.sleep(self.rng.uniform(0, self.pause))

    def read(self, ns: str, name: str) -> dict[str, str] | None:
        try:
            props = dict(self.txn.describe_table(ns, name).properties)
        except TableNotFoundError:
            props = None
        token = None if props is None else props["writer"]
        self.ops.append({"kind": "read", "obj": f"{ns}.{name}", "token": token})
        return props

    def list(self, ns: str) -> list[str]:
        names = list(self.txn.list_tables(ns))
        self.ops.append({"kind": "list", "obj": ns, "names": sorted(names)})
        return names

    def update(self, ns: str, name: str, props: dict[str, str]) -> None:
        self.txn.update_table(ns, name, properties={**props, "writer": self.label})
        self.ops.append({"kind": "update", "obj": f"{ns}.{name}", "token": self.label})

    def create(self, ns: str, name: str) -> None:
        self.txn.create_table(ns, name, LOCATION, properties={"writer": self.label})
        self.ops.append({"kind": "create", "obj": f"{ns}.{name}", "token": self.label})

    def drop(self, ns: str, name: str) -> None:
        self.txn.drop_table(ns, name)
        self.ops.append({"kind": "drop", "obj": f"{ns}.{name}", "token": None})

    # Writes that also record the preconditions they checked, as reads.

    def checked(self, kind: str, obj: str, found: bool) -> None:
        self.ops.append({"kind": kind, "obj": obj, "found": found})

    def checked_create(self, ns: str, name: str) -> str | None:
        """Create a table; return the name of the error it failed with, if any."""
        try:
            self.txn.create_table(ns, name, LOCATION, properties={"writer": self.label})
        except NamespaceNotFoundError:
            self.checked("exists", ns, False)
            return "NamespaceNotFound"
        except TableAlreadyExistsError:
            self.checked("exists", ns, True)
            self.checked("exists", f"{ns}.{name}", True)
            return "TableAlreadyExists"
        self.checked("exists", ns, True)
        self.checked("exists", f"{ns}.{name}", False)
        self.ops.append({"kind": "create", "obj": f"{ns}.{name}", "token": self.label})
        return None

    def checked_drop(self, ns: str, name: str) -> str | None:
        try:
            self.txn.drop_table(ns, name)
        except TableNotFoundError:
            self.checked("exists", f"{ns}.{name}", False)
            return "TableNotFound"
        self.checked("exists", f"{ns}.{name}", True)
        self.ops.append({"kind": "drop", "obj": f"{ns}.{name}", "token": None})
        return None

    def checked_update(self, ns: str, name: str, props: dict[str, str]) -> None:
        self.txn.update_table(ns, name, properties={**props, "writer": self.label})
        self.checked("exists", f"{ns}.{name}", True)
        self.ops.append({"kind": "update", "obj": f"{ns}.{name}", "token": self.label})

    def checked_drop_namespace(self, ns: str) -> str | None:
        try:
            self.txn.drop_namespace(ns)
        except NamespaceNotFoundError:
            self.checked("exists", ns, False)
            return "NamespaceNotFound"
        except NamespaceNotEmptyError:
            self.checked("exists", ns, True)
            self.checked("any", ns, True)
            return "NamespaceNotEmpty"
        self.checked("exists", ns, True)
        self.checked("any", ns, False)
        self.ops.append({"kind": "drop", "obj": ns, "token": None})
        return None

    def checked_create_namespace(self, ns: str) -> str | None:
        try:
            self.txn.create_namespace(ns, {"writer": self.label})
        except NamespaceAlreadyExistsError:
            self.checked("exists", ns, True)
            return "NamespaceAlreadyExists"
        self.checked("exists", ns, False)
        self.ops.append({"kind": "create", "obj": ns, "token": self.label})
        return None


def _transfer(r: _Recorder, info: dict[str, Any]) -> None:
    a, b = r.rng.choice(ACCOUNTS), r.rng.choice(ACCOUNTS)
    pa, pb = r.read("bank_a", a), r.read("bank_b", b)
    assert pa is not None and pb is not None
    amount = r.rng.randint(-20, 20)
    r.nap()
    r.update("bank_a", a, {"balance": str(int(pa["balance"]) - amount)})
    r.update("bank_b", b, {"balance": str(int(pb["balance"]) + amount)})
    info["amount"] = amount


def _audit(r: _Recorder, info: dict[str, Any]) -> None:
    accounts = [(ns, a) for ns in NAMESPACES for a in ACCOUNTS]
    r.rng.shuffle(accounts)
    total = 0
    for i, (ns, a) in enumerate(accounts):
        props = r.read(ns, a)
        assert props is not None
        total += int(props["balance"])
        if i == 2:
            r.nap()
    info["extras_seen"] = sum(n in EXTRAS for n in r.list(r.rng.choice(NAMESPACES)))
    info["sum"] = total


def _skew(r: _Recorder, info: dict[str, Any]) -> None:
    acct = r.rng.choice(ACCOUNTS)
    pa, pb = r.read("bank_a", acct), r.read("bank_b", acct)
    assert pa is not None and pb is not None
    r.nap()
    ns, props = r.rng.choice([("bank_a", pa), ("bank_b", pb)])
    r.update(ns, acct, {"balance": props["balance"]})


def _phantom(r: _Recorder, info: dict[str, Any]) -> None:
    ns = r.rng.choice(NAMESPACES)
    extras = [n for n in r.list(ns) if n in EXTRAS]
    info["extras_seen"] = len(extras)
    r.nap()
    if len(extras) < MAX_EXTRAS:
        r.create(ns, r.rng.choice([n for n in EXTRAS if n not in extras]))
    else:
        r.drop(ns, r.rng.choice(extras))


def _probe(r: _Recorder, info: dict[str, Any]) -> None:
    ns, other = r.rng.sample(NAMESPACES, 2)
    extra = r.rng.choice(EXTRAS)
    props = r.read(ns, extra)
    r.read(other, r.rng.choice(ACCOUNTS))
    r.nap()
    if props is not None:
        r.update(ns, extra, {})


def _renew(r: _Recorder, info: dict[str, Any]) -> None:
    ns, acct = r.rng.choice(HOT)
    props = r.read(ns, acct)
    assert props is not None
    r.checked_update(ns, acct, {"balance": props["balance"]})
    r.nap()
    info["errors"] = [r.checked_drop_namespace(SCRATCH)]
    if info["errors"][0] is None:
        info["errors"].append(r.checked_create_namespace(SCRATCH))


def _nest(r: _Recorder, info: dict[str, Any]) -> None:
    r.read(*r.rng.choice(HOT))
    r.nap()
    name = r.rng.choice(SCRATCH_TABLES)
    info["errors"] = [r.checked_create(SCRATCH, name)]
    if info["errors"][0] == "TableAlreadyExists":  # empty the namespace instead
        info["errors"] += [r.checked_drop(SCRATCH, n) for n in sorted(SCRATCH_TABLES)]


OPERATIONS = {
    "transfer": _transfer,
    "audit": _audit,
    "skew": _skew,
    "phantom": _phantom,
    "probe": _probe,
    "renew": _renew,
    "nest": _nest,
}


class SkipChecks(ConflictChecker):
    """A deliberately broken rebase: every conflict rule of
    spec/transactions.md §4.1 and §4.2 passes (the replay still finds
    ``structural``), and its transactions leave no group-commit requests,
    since it vouches for no base. Given to the commits of the workers of
    test_history.py's negative control, whose checker must find anomalies."""

    group_commit = False

    def check_window(self, *args: Any, **kwargs: Any) -> None:
        pass

    def serializable_cycle(self, *args: Any, **kwargs: Any) -> list[int]:
        return []


def run_transactions(
    uri: str,
    proc: int,
    n_txns: int,
    seed: int,
    isolation: str,
    pause: float,
    checker: ConflictChecker | None = None,
    options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``n_txns`` random transactions, their commits checked by
    ``checker`` (the rules of spec §4 when None); return one record per
    transaction."""
    rng = random.Random(seed * 1000 + proc)
    cat = olympia.load_catalog(uri, storage_options=options)
    records = []
    for seq in range(n_txns):
        label = f"p{proc}-{seq}"
        kind = rng.choices(KINDS, WEIGHTS)[0]
        txn = cat.begin(isolation)
        if checker is not None:
            txn.conflict_checker = checker
        rec: dict[str, Any] = {
            "label": label,
            "txn_id": txn.id,
            "isolation": isolation,
            "begin": txn.begin_version,
            "kind": kind,
            "info": {},
        }
        recorder = _Recorder(txn, label, rng, pause)
        try:
            OPERATIONS[kind](recorder, rec["info"])
            rec["version"] = txn.commit()
            rec["outcome"] = "committed"
            rec["by_holder"] = txn.published_by_holder
        except CommitConflictError as exc:
            rec.update(outcome="aborted", rule=exc.rule, version=None)
            rec["info"]["conflict_version"] = exc.version
        except OlympiaError as exc:  # not expected: the checker reports it
            rec.update(outcome="error", rule=type(exc).__name__, version=None)
            rec["info"]["error"] = str(exc)
            if txn.status == "open":
                txn.rollback()
        rec["ops"] = recorder.ops
        records.append(rec)
    return records


def worker_main(
    uri: str,
    proc: int,
    n_txns: int,
    seed: int,
    isolation: str,
    unsafe: bool,
    pause: float,
    barrier: Any,
    out_path: str,
    options: dict[str, Any] | None = None,
) -> None:
    """Process entry point: wait for the others, run, write the records as JSON."""
    barrier.wait(timeout=120)
    # A deliberately broken rebase, injected into this process's commits only.
    checker = SkipChecks() if unsafe else None
    records = run_transactions(uri, proc, n_txns, seed, isolation, pause, checker, options)
    Path(out_path).write_text(json.dumps(records))


def run_workload(
    directory: Path,
    *,
    isolation: str,
    seed: int,
    unsafe: bool = False,
    n_procs: int = 4,
    n_txns: int = 50,
    pause: float = 0.004,
    location: tuple[str, Sequence[dict[str, Any]]] | None = None,
) -> tuple[olympia.Catalog, list[dict[str, Any]]]:
    """Create a catalog, run the workload in ``n_procs`` spawned processes on
    it; return the catalog and every record (setup first). The catalog is
    ``directory/catalog`` unless ``location`` gives ``(uri, options)``:
    process ``i`` opens it with ``options[i % len(options)]``, and the setup
    and the returned catalog with ``options[0]``. ``directory`` holds the
    records."""
    uri, options = location if location is not None else (str(directory / "catalog"), [{}])
    per_proc = [options[i % len(options)] or None for i in range(n_procs)]
    records = [setup_catalog(uri, per_proc[0])]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n_procs)
    outs = [directory / f"records-{i}.json" for i in range(n_procs)]
    procs = [
        ctx.Process(
            target=worker_main,
            args=(
                uri,
                i,
                n_txns,
                seed,
                isolation,
                unsafe,
                pause,
                barrier,
                str(outs[i]),
                per_proc[i],
            ),
        )
        for i in range(n_procs)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=300)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    codes = [p.exitcode for p in procs]
    if codes != [0] * n_procs:
        raise RuntimeError(f"workers exited with codes {codes}")
    for out in outs:
        records.extend(json.loads(out.read_text()))
    return olympia.load_catalog(uri, storage_options=per_proc[0]), records


def final_state(cat: olympia.Catalog) -> dict[str, str]:
    """Object name -> writer token of every namespace and table now."""
    view = cat.latest()
    out = {}
    for ns in view.list_namespaces():
        out[ns] = view.describe_namespace(ns).properties["writer"]
        for name in view.list_tables(ns):
            out[f"{ns}.{name}"] = view.describe_table(ns, name).properties["writer"]
    return out


def balances_at(cat: olympia.Catalog, version: int) -> tuple[int, dict[str, int]]:
    """Total balance and extra-table count per namespace at ``version``."""
    view = cat.at_version(version)
    total = sum(
        int(view.describe_table(ns, a).properties["balance"]) for ns in NAMESPACES for a in ACCOUNTS
    )
    extras = {ns: sum(n in EXTRAS for n in view.list_tables(ns)) for ns in NAMESPACES}
    return total, extras
