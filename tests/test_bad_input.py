"""Every argument of every public entry point, given bad values.

The table below has one row per (entry point, argument). The public entry
points are enumerated from the classes and the package, so a new public
method or argument without a row makes :func:`test_table_covers_every_public_argument`
fail. For each bad value the call must raise an :class:`InvalidArgumentError`
(an OlympiaError; InvalidNameError and InvalidDefinitionError are
subclasses) whose message names the argument, and leave every file under the
test's folder exactly as it was (same latest version, same files, same bytes).
"""

from __future__ import annotations

import hashlib
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import olympia
from olympia import Catalog, CatalogVersion, InvalidArgumentError, InvalidNameError
from olympia.errors import InvalidArgumentTypeError, InvalidDefinitionError, OlympiaError
from olympia.transaction import Transaction

SURROGATE = "a\ud800b"
LONE_LOW = "\udcff"

# --- bad values, by the kind of argument --------------------------------------------
# Each entry is (value, expected error class).

T = InvalidArgumentTypeError
V = InvalidArgumentError
N = InvalidNameError

NAME = [
    (5, N), (1.5, N), (True, N), (None, N), (b"n", N), (("n",), N), (["n"], N),
    ("", N), ("a b", N), ("a\\b", N), ("a/../b", N), ("..", N), ("x" * 10_000, N),
    (SURROGATE, N), (LONE_LOW, N), ("a\x00", N),
]  # fmt: skip
TEXT = [(5, T), (True, T), (None, T), (b"x", T), (("x",), T), (SURROGATE, V), (LONE_LOW, V)]
OPTIONAL_TEXT = [v for v in TEXT if v[0] is not None]
NON_EMPTY_TEXT = [*TEXT, ("", V)]
OPTIONAL_NON_EMPTY_TEXT = [*OPTIONAL_TEXT, ("", V)]
PROPERTIES = [
    (5, T), ("k=v", T), (["k"], T), (True, T), ({1: "v"}, T), ({"k": 1}, T),
    ({"k": None}, T), ({"k": b"v"}, T), ({SURROGATE: "v"}, V), ({"k": SURROGATE}, V),
]  # fmt: skip
#: Commit metadata (spec/transactions.md §1.1): message, author, properties.
COMMIT_INFO: dict[str, Any] = {
    "message": [*OPTIONAL_TEXT, ("x" * 65_537, V)],
    "author": [*OPTIONAL_TEXT, ("é" * 513, V)],
    "properties": [*PROPERTIES, ({"": "v"}, V), ({"k": "v" * 4097}, V)],
}
UNSET = [
    ("k", T), (b"k", T), (5, T), ({"k": "v"}, T), ((k for k in ["k"]), T),
    ([1], T), ([None], T), ([SURROGATE], V),
]  # fmt: skip
VERSION = [
    (-1, V), (2**63, V), (2**64, V), (10**30, V), ("3", T), (2.0, T), (None, T), (True, T),
]  # fmt: skip
OPTIONAL_VERSION = [v for v in VERSION if v[0] is not None]
NAIVE = datetime(2020, 1, 1)
DATETIME = [
    ("2020-01-01", T), (0, T), (1.6e9, T), (None, T), (date(2020, 1, 1), T), (True, T),
    (NAIVE, V),
]  # fmt: skip
OPTIONAL_DATETIME = [v for v in DATETIME if v[0] is not None]
ISOLATION = [
    (1, T), (True, T), (b"snapshot", T), (["snapshot"], T),
    ("repeatable-read", V), ("", V), (SURROGATE, V),
]  # fmt: skip
MAX_ATTEMPTS = [(0, V), (-1, V), (2**40, V), ("3", T), (1.5, T), (True, T), (None, T)]
TXN_ID = [
    (5, N),
    (None, N),
    (True, N),
    (b"abc", N),
    ("", N),
    ("a/b", N),
    ("x" * 65, N),
    (SURROGATE, N),
]
BOOL = [(1, T), (0, T), ("yes", T), (None, T)]
URI = [
    (5, T), (None, T), (True, T), (b"/tmp/x", T), (["x"], T),
    ("", V), ("a\x00b", V), (SURROGATE, V), ("http://host/x", V), ("s3://", V), ("s3a:///", V),
]  # fmt: skip
STORAGE_OPTIONS = [
    ([1], T), ("x", T), (5, T), (True, T), ((("a", 1),), T), ({1: "a"}, T), ({SURROGATE: 1}, V),
]  # fmt: skip
CACHE_BYTES = [(-1, V), (-(2**70), V), (True, T), (1.5, T), ("100", T), (None, T)]
MODE = [(1, T), (None, T), (b"full", T), ("FULL", V), ("partial", V), (SURROGATE, V)]
KEEP_LAST = [(0, V), (-1, V), (2**64, V), ("3", T), (1.5, T), (True, T)]
SECONDS = [
    (-1, V), (float("nan"), V), (float("inf"), V), ("x", T), (None, T), (True, T),
    (timedelta(seconds=1), T),
]  # fmt: skip
SQL_TEXT = [*OPTIONAL_TEXT]
SUBSTRAIT = [("plan", T), (5, T), (bytearray(b"x"), T), (True, T)]

#: Bad values of the ``**definition`` options of create_catalog, by option name.
DEFINITION: dict[str, list[tuple[object, type[Exception]]]] = {
    **{
        option: [("8", V), (2**70, V), (-1, V), (True, V), (None, V), (8.0, V)]
        for option in (
            "namespace_name_max_size",
            "table_name_max_size",
            "view_name_max_size",
            "node_order",
            "inline_value_max_bytes",
            "distributed_txn_ttl_millis",
        )
    },
    "node_compression": [("gzip", V), (1, V), (None, V), (b"zstd", V), ("ZSTD", V)],
    "default_isolation": [("SNAPSHOT", V), (1, V), (None, V), (SURROGATE, V)],
    "properties": [([1], V), ("x", V), (5, V), ({"a": 1}, V), ({SURROGATE: "b"}, V)],
    "colour": [("red", V)],  # unknown option
}


# --- the table ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """Bad values for one argument of one public entry point."""

    owner: str  # "olympia", "Catalog", "CatalogVersion" or "Transaction"
    method: str
    arg: str
    bad: list[tuple[object, type[Exception]]]
    #: Valid values of the other arguments; the bad one replaces its entry.
    base: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.owner}.{self.method}({self.arg})"


def _rows() -> list[Row]:
    rows: list[Row] = []

    def add(owner: str, method: str, base: dict[str, Any], **bad: Any) -> None:
        for arg, values in bad.items():
            rows.append(Row(owner, method, arg, values, base))

    # module functions (uri bases are filled in by the fixture: NEW / EXISTING)
    add(
        "olympia",
        "create_catalog",
        {"uri": "NEW"},
        uri=URI,
        storage_options=STORAGE_OPTIONS,
        cache_bytes=CACHE_BYTES,
    )
    rows.append(Row("olympia", "create_catalog", "definition", [], {"uri": "NEW"}))
    add(
        "olympia",
        "load_catalog",
        {"uri": "EXISTING"},
        uri=URI,
        storage_options=STORAGE_OPTIONS,
        cache_bytes=CACHE_BYTES,
    )

    # Catalog
    add("Catalog", "at_version", {}, version=VERSION)
    add("Catalog", "rollback_to", {}, version=VERSION)
    add("Catalog", "rollback_to", {"version": 0}, **COMMIT_INFO)
    add("Catalog", "diff", {"from_version": 0, "to_version": 0}, from_version=VERSION)
    add("Catalog", "diff", {"from_version": 0, "to_version": 0}, to_version=VERSION)
    add("Catalog", "as_of", {}, when=DATETIME)
    add("Catalog", "history", {}, since=OPTIONAL_VERSION)
    for method in ("begin", "transaction"):
        add("Catalog", method, {}, isolation=ISOLATION, max_attempts=MAX_ATTEMPTS)
        add("Catalog", method, {}, **COMMIT_INFO)
    add(
        "Catalog",
        "resume",
        {"txn_id": "DIST"},
        txn_id=TXN_ID,
        max_attempts=MAX_ATTEMPTS,
        recover_after_seconds=SECONDS,
        expired=BOOL,
    )
    add("Catalog", "list_transactions", {}, include_expired=BOOL)
    add(
        "Catalog",
        "export_snapshot",
        {"name": "e1", "target_uri": "TARGET", "mode": "full", "storage_options": None},
        name=TXN_ID,
        target_uri=URI,
        mode=MODE,
        storage_options=STORAGE_OPTIONS,
    )
    add("Catalog", "drop_export", {}, name=TXN_ID)
    add(
        "Catalog",
        "expire_versions",
        {"grace_seconds": 0, "allow_short_grace": True},
        older_than=OPTIONAL_DATETIME,
        keep_last=KEEP_LAST,
        grace_seconds=SECONDS,
        allow_short_grace=BOOL,
        dry_run=BOOL,
    )

    # reads: on a read-only version and on transactions
    for owner in ("CatalogVersion", "Transaction"):
        for method in ("namespace_exists", "describe_namespace", "list_tables", "list_views"):
            add(owner, method, {"namespace": "n"}, namespace=NAME)
        for method in ("table_exists", "describe_table", "view_exists", "describe_view"):
            add(owner, method, {"namespace": "n", "name": "t"}, namespace=NAME, name=NAME)
    add("CatalogVersion", "get", {}, key=TEXT)
    add("CatalogVersion", "scan", {}, prefix=TEXT)

    # writes
    add(
        "Transaction", "create_namespace", {"namespace": "m"}, namespace=NAME, properties=PROPERTIES
    )
    add(
        "Transaction",
        "alter_namespace",
        {"namespace": "n"},
        namespace=NAME,
        set=[*PROPERTIES, ({"k": "v"}, V)],  # with unset=["k"] below: both set and unset
        unset=UNSET,
    )
    add("Transaction", "drop_namespace", {}, namespace=NAME)
    add(
        "Transaction",
        "create_table",
        {"namespace": "n", "name": "new", "metadata_location": "m/new"},
        namespace=NAME,
        name=NAME,
        metadata_location=NON_EMPTY_TEXT,
        properties=PROPERTIES,
        format=TEXT,
    )
    add(
        "Transaction",
        "update_table",
        {"namespace": "n", "name": "t", "metadata_location": "m/2"},
        namespace=NAME,
        name=NAME,
        metadata_location=OPTIONAL_NON_EMPTY_TEXT,
        properties=PROPERTIES,
    )
    add(
        "Transaction",
        "rename_table",
        {"namespace": "n", "name": "t", "new_namespace": "n", "new_name": "t2"},
        namespace=NAME,
        name=NAME,
        new_namespace=NAME,
        new_name=NAME,
    )
    add("Transaction", "drop_table", {"namespace": "n", "name": "t"}, namespace=NAME, name=NAME)
    add(
        "Transaction",
        "rename_view",
        {"namespace": "n", "name": "v", "new_namespace": "n", "new_name": "v2"},
        namespace=NAME,
        name=NAME,
        new_namespace=NAME,
        new_name=NAME,
    )
    add("Transaction", "drop_view", {"namespace": "n", "name": "v"}, namespace=NAME, name=NAME)
    for method, view in (("create_view", "new"), ("replace_view", "v")):
        add(
            "Transaction",
            method,
            {"namespace": "n", "name": view, "sql_text": "select 1"},
            namespace=NAME,
            name=NAME,
            sql_text=[*SQL_TEXT, (None, V)],  # None with no plan: neither given
            substrait_plan=[*SUBSTRAIT, (b"plan", V)],  # with sql_text: both given
            dialect=TEXT,
            schema_json=TEXT,
            properties=PROPERTIES,
            metadata_location=TEXT,
        )
    add("Transaction", "set_content_merge", {}, merge=[(5, T), ("hook", T), (object(), T)])
    add("Transaction", "set_commit_info", {}, **COMMIT_INFO)
    return rows


ROWS = _rows()
#: Public methods that take no arguments, so have no row.
NO_ARGUMENTS = {
    ("Catalog", "latest"),
    ("Catalog", "close"),
    ("Catalog", "fsck"),
    ("CatalogVersion", "list_namespaces"),
    ("Transaction", "list_namespaces"),
    ("Transaction", "distribute"),
    ("Transaction", "commit"),
    ("Transaction", "rollback"),
}
#: Extra arguments a row's base needs that are not the row's own.
EXTRA_BASE = {("Transaction", "alter_namespace", "set"): {"unset": ["k"]}}


def _public_entry_points() -> dict[tuple[str, str], inspect.Signature]:
    out: dict[tuple[str, str], inspect.Signature] = {}
    for cls in (Catalog, CatalogVersion, Transaction):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                out[cls.__name__, name] = inspect.signature(member)
    for name in olympia.__all__:
        member = getattr(olympia, name)
        if inspect.isfunction(member):
            out["olympia", name] = inspect.signature(member)
    return out


def test_table_covers_every_public_argument():
    expected = set()
    for (owner, method), sig in _public_entry_points().items():
        params = [p for p in sig.parameters if p != "self"]
        if not params:
            assert (owner, method) in NO_ARGUMENTS, f"{owner}.{method} has no row"
        expected |= {(owner, method, p) for p in params}
    covered = {(r.owner, r.method, r.arg) for r in ROWS}
    assert covered == expected, (
        f"arguments without a row: {sorted(expected - covered)}; "
        f"rows for no argument: {sorted(covered - expected)}"
    )
    assert {(o, m) for o, m in NO_ARGUMENTS} <= set(_public_entry_points())


# --- the catalog the calls run against ------------------------------------------------


@dataclass
class World:
    root: Path
    uri: str
    dist_id: str

    def snapshot(self) -> dict[str, str]:
        """Every file under the test folder, with a digest of its content."""
        return {
            str(p.relative_to(self.root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(self.root.rglob("*"))
            if p.is_file()
        }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("bad-input")
    uri = str(root / "catalog")
    with olympia.create_catalog(uri) as cat:
        with cat.transaction() as t:
            t.create_namespace("n", {"k": "v"})
            t.create_table("n", "t", "m/t")
            t.create_view("n", "v", "select 1")
        dist = cat.begin()
        dist.create_table("n", "d", "m/d")
        dist_id = dist.distribute()
    # close() waited for the background hint write: from here on, nothing moves.
    return World(root, uri, dist_id)


def _resolve(world: World, value: object) -> object:
    return {
        "NEW": str(world.root / "new-catalog"),
        "EXISTING": world.uri,
        "TARGET": str(world.root / "export-target"),
        "DIST": world.dist_id,
    }.get(value, value) if isinstance(value, str) else value  # fmt: skip


def _target(world: World, cat: Catalog, owner: str, distributed: bool) -> Any:
    if owner == "olympia":
        return olympia
    if owner == "Catalog":
        return cat
    if owner == "CatalogVersion":
        return cat.latest()
    return cat.resume(world.dist_id) if distributed else cat.begin()


def _check(world: World, call: Callable[[], object], arg: str, expected: type[Exception]) -> None:
    before = world.snapshot()
    with pytest.raises(OlympiaError) as info:
        call()
    exc = info.value
    assert isinstance(exc, expected), f"{type(exc).__name__} is not a {expected.__name__}: {exc}"
    assert isinstance(exc, InvalidArgumentError)
    assert f"'{arg}'" in str(exc), f"message does not name {arg!r}: {exc}"
    assert world.snapshot() == before


CASES = [
    pytest.param(row, distributed, id=f"{row}{'-distributed' if distributed else ''}")
    for row in ROWS
    if row.arg != "definition"  # the **definition options: see the next test
    for distributed in ((False, True) if row.owner == "Transaction" else (False,))
]


@pytest.mark.parametrize(("row", "distributed"), CASES)
def test_bad_argument_is_refused_and_changes_nothing(world, row, distributed):
    cat = olympia.load_catalog(world.uri)
    version = cat.version
    base = {k: _resolve(world, v) for k, v in row.base.items()}
    base.update(EXTRA_BASE.get((row.owner, row.method, row.arg), {}))
    target = _target(world, cat, row.owner, distributed)
    actions = list(target.actions) if isinstance(target, Transaction) else None
    assert row.bad, str(row)
    for value, expected in row.bad:
        kwargs = {**base, row.arg: value}
        method = getattr(target, row.method)
        _check(world, lambda: method(**kwargs), row.arg, expected)  # noqa: B023
        if actions is not None:
            assert target.actions == actions  # nothing recorded, no step written
            assert target.status == "open"
    assert cat.version == version
    assert not (world.root / "new-catalog").exists()
    assert not (world.root / "export-target").exists()
    cat.close()


@pytest.mark.parametrize("option", sorted(DEFINITION))
def test_bad_catalog_definition_option_is_refused(world, option):
    for value, expected in DEFINITION[option]:
        uri = str(world.root / "new-catalog")
        _check(
            world,
            lambda: olympia.create_catalog(uri, **{option: value}),  # noqa: B023
            option,
            expected,
        )
        assert not (world.root / "new-catalog").exists()
    assert issubclass(InvalidDefinitionError, InvalidArgumentError)


def test_every_error_kind_is_also_a_builtin_error():
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentTypeError, TypeError)
    assert issubclass(InvalidNameError, InvalidArgumentError)


def test_naive_datetimes_are_refused_aware_ones_in_any_zone_accepted(world):
    cat = olympia.load_catalog(world.uri)
    created = cat.history()[-1].created_at
    east = timezone(timedelta(hours=5))
    assert cat.as_of(created.astimezone(east)).version == cat.version
    assert cat.as_of(created + timedelta(days=1)).version == cat.version
    naive = created.replace(tzinfo=None)
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        cat.as_of(naive)
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        cat.expire_versions(older_than=naive)
    cat.close()


def test_a_hint_beyond_the_largest_version_is_ignored(tmp_path):
    """Versions are below 2**63: a tampered hint at 2**64 - 1, even with a file at
    that name, must not make the probe step past the 64-bit names."""
    uri = str(tmp_path / "c")
    with olympia.create_catalog(uri) as cat, cat.transaction() as t:
        t.create_namespace("n")
    (tmp_path / "c" / "vn" / ("1" * 64)).write_bytes(b"junk")
    (tmp_path / "c" / "vn" / "latest").write_text(str(2**64 - 1))
    cat = olympia.load_catalog(uri)
    assert cat.version == 1
    assert cat.latest().list_namespaces() == ["n"]
    with pytest.raises(InvalidArgumentError, match="below 2\\*\\*63"):
        cat.at_version(2**64 - 1)
    cat.close()


ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # lone surrogates too


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=ANY_TEXT,
    properties=st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=3),
    location=ANY_TEXT,
    sql=ANY_TEXT,
)
def test_any_text_is_stored_exactly_or_refused_with_a_typed_error(
    namespace, properties, location, sql
):
    """Arbitrary Unicode, lone surrogates included: a write either commits and
    reads back the same text, or is refused with InvalidArgumentError naming the
    argument, before anything is written."""
    from fsspec.implementations.memory import MemoryFileSystem

    name = f"olympia-bad-input-{uuid.uuid4().hex}"
    cat = olympia.create_catalog(f"memory://{name}")
    try:
        txn = cat.begin()
        steps = [
            (lambda: txn.create_namespace(namespace, properties)),
            (lambda: txn.create_table(namespace, "t", location, properties)),
            (lambda: txn.create_view(namespace, "v", sql, dialect=sql, schema_json=sql)),
        ]
        for step in steps:
            recorded = len(txn.actions)
            try:
                step()
            except InvalidArgumentError as exc:
                named = ("namespace", "properties", "metadata_location", "sql_text", "dialect")
                assert any(f"'{arg}'" in str(exc) for arg in named), str(exc)
                assert len(txn.actions) == recorded  # the refused call recorded nothing
                txn.rollback()
                assert cat.version == 0
                return
        version = txn.commit()
        view = olympia.load_catalog(f"memory://{name}").at_version(version)
        assert view.list_namespaces() == [namespace]
        assert view.describe_namespace(namespace).properties == properties
        table = view.describe_table(namespace, "t")
        assert (table.metadata_location, table.properties) == (location, properties)
        described = view.describe_view(namespace, "v")
        assert (described.sql_text, described.dialect, described.schema_json) == (sql, sql, sql)
    finally:
        cat.close()
        store = MemoryFileSystem.store
        for key in [k for k in tuple(store) if k.startswith(f"/{name}/")]:
            store.pop(key, None)
