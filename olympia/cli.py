"""The ``olympia`` command line: inspect, repair and maintain a catalog.

Every command takes the catalog as ``--warehouse URI`` or from the
``OLYMPIA_WAREHOUSE`` environment variable. Output is a table for people, or
JSON with ``--json`` (one document on stdout). Exit codes: 0 success, 1 the
command ran and found a problem (``fsck`` found damage, a commit conflicted),
2 bad input (usage, a missing catalog, an unknown version or object, a bad
name), 3 a damaged catalog or a storage failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, NoReturn

from rich import box
from rich.console import Console
from rich.table import Table

import olympia
from olympia.catalog import Catalog, CatalogVersion
from olympia.errors import (
    CommitConflictError,
    CorruptCatalogError,
    InvalidArgumentError,
    NoSuchObjectError,
    ObjectAlreadyExistsError,
    OlympiaError,
    StorageError,
)
from olympia.maintenance import VersionInfo
from olympia.proto import actions_pb2 as apb

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_DAMAGED = 0, 1, 2, 3
ENV_WAREHOUSE = "OLYMPIA_WAREHOUSE"


class CliError(Exception):
    """A user's mistake found by the command line itself."""


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


# --- output helpers -----------------------------------------------------------------------


class Out:
    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self.console = Console(highlight=False)
        if not self.console.is_terminal:  # piped: do not wrap tables at 80 columns
            self.console = Console(highlight=False, width=200)
        self.err = Console(stderr=True, highlight=False)

    def emit(self, data: Any, render: Callable[[], None]) -> None:
        if self.json:
            print(json.dumps(data, indent=2, sort_keys=True, default=str))
        else:
            render()

    def table(
        self, title: str | None, header: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        for h in header:
            t.add_column(h)
        for r in rows:
            t.add_row(*(str(x) for x in r))
        self.console.print(t)

    def status(self, message: str) -> Any:
        """A spinner on stderr while long work runs (silent for JSON output)."""
        if self.json or not self.err.is_terminal:
            import contextlib

            return contextlib.nullcontext()
        return self.err.status(message)


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _action_name(action: apb.Action) -> str:
    return apb.ActionType.Name(action.type).lower()


def _action_summary(actions: Sequence[apb.Action]) -> str:
    counts: dict[str, int] = {}
    for a in actions:
        if a.read_only:
            continue
        name = _action_name(a)
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "-"
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(counts.items()))


# --- opening the catalog ------------------------------------------------------------------


def _warehouse(args: argparse.Namespace) -> str:
    uri = args.warehouse or os.environ.get(ENV_WAREHOUSE)
    if not uri:
        raise CliError(f"no catalog given: pass --warehouse URI or set {ENV_WAREHOUSE}")
    return str(uri)


def _storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    opts: dict[str, Any] = {}
    for item in args.storage_option or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--storage-option must be KEY=VALUE, got {item!r}")
        opts[key] = value
    return opts or None


def _open(args: argparse.Namespace) -> Catalog:
    return olympia.load_catalog(_warehouse(args), _storage_options(args))


def _parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"not a time: {text!r}; use ISO 8601, e.g. 2026-11-23T15:00:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _view(cat: Catalog, args: argparse.Namespace) -> CatalogVersion:
    if getattr(args, "version", None) is not None and getattr(args, "as_of", None):
        raise CliError("give --version or --as-of, not both")
    if getattr(args, "version", None) is not None:
        return cat.at_version(args.version)
    if getattr(args, "as_of", None):
        return cat.as_of(_parse_time(args.as_of))
    return cat.latest()


# --- commands -------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace, out: Out) -> int:
    options: dict[str, Any] = {}
    if args.isolation:
        options["default_isolation"] = args.isolation
    if args.node_order:
        options["node_order"] = args.node_order
    cat = olympia.create_catalog(_warehouse(args), _storage_options(args), **options)
    d = cat.definition
    data = {
        "warehouse": cat.uri,
        "version": cat.version,
        "format_version": d.format_version,
        "default_isolation": d.default_isolation,
    }
    out.emit(
        data,
        lambda: out.console.print(
            f"created an empty catalog at {cat.uri} (version {cat.version}, format "
            f"{d.format_version}, default isolation {d.default_isolation})"
        ),
    )
    return EXIT_OK


def cmd_ls(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    view = _view(cat, args)
    if args.namespace is None:
        names = view.list_namespaces()
        rows = [[n, len(view.list_tables(n)), len(view.list_views(n))] for n in names]
        data = {
            "version": view.version,
            "namespaces": [{"name": r[0], "tables": r[1], "views": r[2]} for r in rows],
        }
        out.emit(
            data,
            lambda: out.table(
                f"version {view.version}: {len(rows)} namespace(s)",
                ["namespace", "tables", "views"],
                rows,
            ),
        )
        return EXIT_OK
    tables = view.list_tables(args.namespace)
    views = view.list_views(args.namespace)
    listing = {
        "version": view.version,
        "namespace": args.namespace,
        "tables": tables,
        "views": views,
    }
    entries = [["table", t] for t in tables] + [["view", v] for v in views]
    out.emit(
        listing,
        lambda: out.table(
            f"version {view.version}: namespace {args.namespace}", ["kind", "name"], entries
        ),
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    view = _view(cat, args)
    data: dict[str, Any]
    if args.kind == "namespace":
        if args.name is not None:
            raise CliError("show namespace takes one name: olympia show namespace NAMESPACE")
        ns = view.describe_namespace(args.namespace)
        data = {"kind": "namespace", "name": ns.name, "properties": ns.properties}
    else:
        if args.name is None:
            raise CliError(f"show {args.kind} needs a namespace and a name")
        if args.kind == "table":
            t = view.describe_table(args.namespace, args.name)
            data = {
                "kind": "table",
                "namespace": t.namespace,
                "name": t.name,
                "format": t.format,
                "metadata_location": t.metadata_location,
                "properties": t.properties,
            }
        else:
            v = view.describe_view(args.namespace, args.name)
            data = {
                "kind": "view",
                "namespace": v.namespace,
                "name": v.name,
                "dialect": v.dialect,
                "sql_text": v.sql_text,
                "schema_json": v.schema_json,
                "metadata_location": v.metadata_location,
                "properties": v.properties,
            }
    data["version"] = view.version

    def render() -> None:
        rows = []
        for k, v in data.items():
            if isinstance(v, dict):
                rows += [[f"{k}.{pk}", pv] for pk, pv in sorted(v.items())] or [[k, "{}"]]
            else:
                rows.append([k, v])
        out.table(None, ["field", "value"], rows)

    out.emit(data, render)
    return EXIT_OK


def _version_json(info: VersionInfo) -> dict[str, Any]:
    return {
        "version": info.version,
        "created_at": _iso(info.created_at),
        "transaction_id": info.transaction_id,
        "isolation": info.isolation,
        "begin_version": info.begin_version,
        "serialized_before": list(info.serialized_before),
        "rollback_from": info.rollback_from,
        "actions": [
            {
                "type": _action_name(a),
                "key": a.object_key.rstrip(),
                **({"target": a.target_key.rstrip()} if a.target_key else {}),
                **({"read_only": True} if a.read_only else {}),
            }
            for a in info.actions
        ],
        "transactions": [
            {
                "transaction_id": t.transaction_id,
                "isolation": t.isolation,
                "begin_version": t.begin_version,
                "n_actions": len(t.actions),
            }
            for t in info.transactions
        ],
    }


def _graph_lines(infos: Sequence[VersionInfo]) -> list[str]:
    """A text picture of the history: one line per version, newest first; a
    rebased commit shows the versions it was rebased over."""
    lines = []
    for info in reversed(infos):
        note = []
        if info.rollback_from is not None:
            note.append(f"rollback to the tree of {info.rollback_from}")
        elif info.begin_version is not None and info.begin_version < info.version - 1:
            over = info.version - 1 - info.begin_version
            note.append(f"began at {info.begin_version}, rebased over {over} version(s)")
        if info.serialized_before:
            note.append("serialized before " + ", ".join(map(str, info.serialized_before)))
        if len(info.transactions) > 1:
            note.append(f"{len(info.transactions)} transactions (group commit)")
        head = f"* {info.version:>6}  {_iso(info.created_at)}  {info.isolation or '-':<12}"
        lines.append(f"{head} {_action_summary(info.actions)}")
        if note:
            lines.append("|         " + "; ".join(note))
        lines.append("|")
    if lines:
        lines[-1] = " "
    return lines


def cmd_log(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    with out.status("reading versions"):
        infos = cat.history(since=args.since)
    if args.limit is not None:
        infos = infos[-args.limit :]
    if args.json:
        print(json.dumps([_version_json(i) for i in infos], indent=2))
        return EXIT_OK
    if args.graph:
        for line in _graph_lines(infos):
            out.console.print(line, markup=False)
        return EXIT_OK
    rows = [
        [
            i.version,
            _iso(i.created_at),
            (i.transaction_id or "-")[:12]
            + (f" +{len(i.transactions) - 1}" if len(i.transactions) > 1 else ""),
            i.isolation or "-",
            "-" if i.begin_version is None else i.begin_version,
            _action_summary(i.actions),
        ]
        for i in reversed(infos)
    ]
    out.table(
        f"{len(rows)} version(s), newest first",
        ["version", "created (UTC)", "transaction", "isolation", "began at", "actions"],
        rows,
    )
    return EXIT_OK


def cmd_diff(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    to_version = cat.version if args.to_version is None else args.to_version
    changes = cat.diff(args.from_version, to_version)
    data = {
        "from_version": args.from_version,
        "to_version": to_version,
        "changes": [{"kind": c.kind, "name": list(c.parts), "change": c.change} for c in changes],
    }
    out.emit(
        data,
        lambda: out.table(
            f"{len(changes)} object(s) changed from version {args.from_version} to {to_version}",
            ["change", "kind", "name"],
            [[c.change, c.kind, c.name] for c in changes],
        ),
    )
    return EXIT_OK


def cmd_graph(args: argparse.Namespace, out: Out) -> int:
    from olympia.picture import catalog_svg

    cat = _open(args)
    latest = cat.version
    to_version = latest if args.to_version is None else args.to_version
    from_version = max(to_version - 1, 0) if args.from_version is None else args.from_version
    with out.status("drawing"):
        svg = catalog_svg(cat, from_version, to_version, max_versions=args.versions)
    try:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as exc:
        raise CliError(f"cannot write {args.svg}: {exc.strerror}") from None
    out.emit(
        {"svg": args.svg, "from_version": from_version, "to_version": to_version},
        lambda: out.console.print(
            f"wrote {args.svg}: the last {args.versions} versions and the trees of versions "
            f"{from_version} and {to_version}"
        ),
    )
    return EXIT_OK


def cmd_rollback(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    new = cat.rollback_to(args.to)
    out.emit(
        {"rolled_back_to": args.to, "version": new},
        lambda: out.console.print(f"version {new} now holds the catalog as of version {args.to}"),
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    if args.drop:
        if args.target is not None:
            raise CliError("export --drop takes only the export's name")
        cat.drop_export(args.name)
        out.emit({"dropped": args.name}, lambda: out.console.print(f"dropped export {args.name}"))
        return EXIT_OK
    if args.target is None:
        raise CliError("export needs a NAME and a TARGET catalog URI")
    with out.status(f"exporting to {args.target}"):
        version = cat.export_snapshot(args.name, args.target, mode=args.mode)
    out.emit(
        {"name": args.name, "target": args.target, "mode": args.mode, "version": version},
        lambda: out.console.print(
            f"exported version {version} to {args.target} ({args.mode}); it stays pinned until "
            f"`olympia export --drop {args.name}`"
        ),
    )
    return EXIT_OK


def cmd_expire(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    older = _parse_time(args.older_than) if args.older_than else None
    with out.status("expiring versions and removing unreachable files"):
        res = cat.expire_versions(
            older_than=older,
            keep_last=args.keep_last,
            grace_seconds=args.grace_seconds,
            allow_short_grace=args.allow_short_grace,
        )
    data: dict[str, Any] = {
        "oldest_version": res.oldest_version,
        "deleted_roots": res.deleted_roots,
        "deleted_files": res.deleted_files,
        "deleted_pins": res.deleted_pins,
        "deleted_temporary_files": res.deleted_temporary_files,
        "broken_pins": list(res.broken_pins),
    }
    if cat.store.storage.list(ICEBERG_PURGES):
        with out.status("deleting the files of purged Iceberg tables no kept version holds"):
            purges = _iceberg_owner(args).run_purges()
        data["purged_tables"] = purges.purged_tables
        data["pending_purges"] = purges.pending_tables
        data["deleted_table_files"] = purges.deleted_files
        data["damaged_purge_records"] = list(purges.damaged)
    out.emit(data, lambda: out.table(None, ["", "count"], [[k, v] for k, v in data.items()]))
    return EXIT_OK


#: The folder of Iceberg purge records (olympia.iceberg.purge.FOLDER).
ICEBERG_PURGES = "iceberg-purge"


def _iceberg_owner(args: argparse.Namespace) -> Any:
    """The Iceberg layer over the catalog of ``args``, for its purges."""
    try:
        from olympia.iceberg.catalog import OlympiaCatalog, catalog_properties
    except ImportError as exc:  # the iceberg extra is not installed
        raise CliError(
            f"this catalog has purged Iceberg tables, whose files only the Iceberg layer can "
            f"delete; install olympia's iceberg extra: {exc}"
        ) from None
    try:
        properties = catalog_properties(_storage_options(args) or {})
    except ValueError as exc:
        raise CliError(f"cannot run the purges of Iceberg tables: {exc}") from None
    return OlympiaCatalog(
        "olympia", warehouse=_warehouse(args), **{"create-catalog": "false", **properties}
    )


def cmd_fsck(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    with out.status("checking every file the kept versions need"):
        check = cat.fsck()
    data = {
        "ok": check.ok,
        "oldest_version": check.oldest_version,
        "latest_version": check.latest_version,
        "kept_versions": len(check.kept_versions),
        "checked_files": check.checked_files,
        "missing": list(check.missing),
        "damaged": list(check.damaged),
        "orphans": list(check.orphans),
    }

    def render() -> None:
        verdict = "[green]ok[/green]" if check.ok else "[red]DAMAGED[/red]"
        out.console.print(
            f"{verdict}: versions {check.oldest_version}..{check.latest_version}, "
            f"{len(check.kept_versions)} kept, {check.checked_files} file(s) checked, "
            f"{len(check.missing)} missing, {len(check.damaged)} damaged, "
            f"{len(check.orphans)} orphan(s)"
        )
        rows = [["missing", p] for p in check.missing] + [["damaged", p] for p in check.damaged]
        rows += [["orphan", p] for p in check.orphans]
        if rows:
            out.table(None, ["problem", "file"], rows)

    out.emit(data, render)
    return EXIT_OK if check.ok else EXIT_PROBLEM


def cmd_serve(args: argparse.Namespace, out: Out) -> int:
    """Serve the catalog over the Iceberg REST protocol until interrupted (spec/rest.md)."""
    try:
        from olympia.rest.server import read_token, serve
    except ImportError as exc:  # the rest extra is not installed
        raise CliError(
            f"olympia serve needs the 'rest' extra (pip install 'olympia[rest]'): {exc}"
        ) from None
    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    serve(
        _warehouse(args),
        host=args.host,
        port=args.port,
        token=token,
        prefix=args.prefix,
        allowed_locations=args.allowed_location,
        allow_overlapping_locations=args.allow_overlapping_locations,
        transaction_idle_seconds=args.transaction_idle_seconds,
        max_open_transactions=args.max_open_transactions,
    )
    return EXIT_OK


def cmd_txn(args: argparse.Namespace, out: Out) -> int:
    cat = _open(args)
    if args.txn_command == "list":
        infos = cat.list_transactions(include_expired=args.all)
        data = [_txn_json(t) for t in infos]
        out.emit(
            data,
            lambda: out.table(
                f"{len(infos)} distributed transaction(s)",
                ["id", "isolation", "began at", "created (UTC)", "expires (UTC)"],
                [
                    [d["id"], d["isolation"], d["begin_version"], d["created_at"], d["expires_at"]]
                    for d in data
                ],
            ),
        )
        return EXIT_OK
    txn = cat.resume(args.id)
    if args.txn_command == "show":
        shown: dict[str, Any] = {
            "id": txn.id,
            "isolation": txn.isolation,
            "begin_version": txn.begin_version,
            "status": txn.status,
            "actions": [
                {"type": _action_name(a), "key": a.object_key.rstrip()} for a in txn.actions
            ],
        }
        out.emit(
            shown,
            lambda: out.table(
                f"transaction {txn.id} ({txn.isolation}, began at version {txn.begin_version})",
                ["action", "object key"],
                [[a["type"], a["key"]] for a in shown["actions"]],
            ),
        )
        return EXIT_OK
    txn.rollback()
    out.emit(
        {"id": args.id, "rolled_back": True},
        lambda: out.console.print(f"rolled back distributed transaction {args.id}"),
    )
    return EXIT_OK


def _txn_json(t: olympia.objects.TransactionInfo) -> dict[str, Any]:
    def ms(x: int) -> str:
        return _iso(datetime.fromtimestamp(x / 1000, tz=timezone.utc))

    return {
        "id": t.id,
        "isolation": t.isolation,
        "begin_version": t.begin_version,
        "created_at": ms(t.created_at_millis),
        "expires_at": ms(t.expires_at_millis),
        "properties": t.properties,
    }


# --- the parser ----------------------------------------------------------------------------


def _version_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("time travel")
    g.add_argument("--version", type=_nonnegative, metavar="N", help="read version N")
    g.add_argument(
        "--as-of", metavar="TIME", help="read the last version at or before TIME (ISO 8601)"
    )


def _nonnegative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a version number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"versions are >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _nonnegative(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--warehouse",
        "-w",
        metavar="URI",
        help=f"the catalog: a folder, file://, s3://bucket/prefix (default: ${ENV_WAREHOUSE})",
    )
    common.add_argument(
        "--storage-option",
        "-o",
        action="append",
        metavar="KEY=VALUE",
        help="an fsspec storage option, e.g. -o endpoint_url=http://localhost:9000 (repeatable)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")

    parser = argparse.ArgumentParser(
        prog="olympia",
        description=textwrap.dedent(
            """\
            Inspect, repair and maintain an olympia catalog: a lakehouse catalog that
            lives only in files (a folder or S3) and gives Iceberg tables transactions
            across many tables."""
        ),
        epilog=_examples(
            "olympia init -w /data/lake",
            "export OLYMPIA_WAREHOUSE=s3://bucket/lake",
            "olympia ls",
            "olympia log --graph",
            "olympia fsck --json",
        )
        + "\n\nexit codes: 0 ok, 1 a problem found (fsck) or a conflict, 2 bad input, "
        "3 a damaged catalog or a storage failure",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", "--olympia-version", action="version", version=olympia.__version__
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, help_: str, examples: Sequence[str], fn: Callable[..., int]) -> Any:
        p = sub.add_parser(
            name,
            parents=[common],
            help=help_,
            description=help_,
            epilog=_examples(*examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(fn=fn)
        return p

    p = add(
        "init",
        "Create a new, empty catalog at the warehouse URI.",
        ["olympia init -w /data/lake", "olympia init -w s3://bucket/lake --isolation serializable"],
        cmd_init,
    )
    p.add_argument("--isolation", choices=("snapshot", "serializable"), help="default isolation")
    p.add_argument(
        "--node-order", type=_positive, metavar="M", help="B-tree node order (default 128)"
    )

    p = add(
        "ls",
        "List namespaces (with table and view counts), or the tables and views of one namespace.",
        ["olympia ls", "olympia ls sales", "olympia ls sales --version 12"],
        cmd_ls,
    )
    p.add_argument("namespace", nargs="?", help="a namespace to list")
    _version_options(p)

    p = add(
        "show",
        "Show one object's definition.",
        [
            "olympia show namespace sales",
            "olympia show table sales orders",
            "olympia show view sales recent --as-of 2026-11-23T12:00:00Z",
        ],
        cmd_show,
    )
    p.add_argument("kind", choices=("namespace", "table", "view"))
    p.add_argument("namespace")
    p.add_argument("name", nargs="?")
    _version_options(p)

    p = add(
        "log",
        "List versions: time, transaction id, isolation, the version a commit began at, actions.",
        ["olympia log", "olympia log --limit 20 --graph", "olympia log --since 100 --json"],
        cmd_log,
    )
    p.add_argument("--since", type=_nonnegative, metavar="N", help="start at version N")
    p.add_argument("--limit", type=_positive, metavar="K", help="only the newest K versions")
    p.add_argument("--graph", action="store_true", help="draw the history as a text graph")

    p = add(
        "diff",
        "List the objects added, removed or changed between two versions.",
        ["olympia diff 3 7", "olympia diff 3          # from version 3 to the latest"],
        cmd_diff,
    )
    p.add_argument("from_version", type=_nonnegative, metavar="FROM")
    p.add_argument("to_version", type=_nonnegative, nargs="?", metavar="TO")

    p = add(
        "graph",
        "Draw an SVG picture: the version history, and the trees of two versions with the "
        "node files they share.",
        ["olympia graph --svg history.svg", "olympia graph --svg t.svg 3 7"],
        cmd_graph,
    )
    p.add_argument("--svg", required=True, metavar="FILE", help="the SVG file to write")
    p.add_argument("from_version", type=_nonnegative, nargs="?", metavar="FROM")
    p.add_argument("to_version", type=_nonnegative, nargs="?", metavar="TO")
    p.add_argument("--versions", type=_positive, default=40, help="versions drawn (default 40)")

    p = add(
        "rollback",
        "Publish a new version equal to an older one (history is kept).",
        ["olympia rollback 12"],
        cmd_rollback,
    )
    p.add_argument("to", type=_nonnegative, metavar="VERSION")

    p = add(
        "export",
        "Copy the latest version to a new catalog and pin it, or drop an export's pin.",
        [
            "olympia export nightly /backup/lake",
            "olympia export nightly s3://backup/lake --mode minimal",
            "olympia export --drop nightly",
        ],
        cmd_export,
    )
    p.add_argument("name")
    p.add_argument("target", nargs="?", metavar="TARGET")
    p.add_argument("--mode", choices=("full", "minimal"), default="full")
    p.add_argument("--drop", action="store_true", help="unpin the export NAME")

    p = add(
        "expire",
        "Expire old versions and delete files no kept version needs.",
        [
            "olympia expire --keep-last 100",
            "olympia expire --older-than 2026-11-01T00:00:00Z --grace-seconds 600",
        ],
        cmd_expire,
    )
    p.add_argument("--older-than", metavar="TIME", help="expire versions created before TIME")
    p.add_argument("--keep-last", type=_positive, metavar="K", help="keep the newest K versions")
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=3600.0,
        help="never delete files younger than this (default 3600; at least twice the "
        "catalog's commit time limit, 600 by default)",
    )
    p.add_argument(
        "--allow-short-grace",
        action="store_true",
        help="allow a grace period below twice the commit time limit: only while nobody "
        "writes to the catalog",
    )

    p = add(
        "fsck",
        "Check that every file a kept version needs is present and undamaged; list orphans.",
        ["olympia fsck", "olympia fsck --json"],
        cmd_fsck,
    )

    p = add(
        "serve",
        "Serve the catalog over the Iceberg REST protocol (Spark, PyIceberg, any Iceberg engine).",
        [
            "olympia serve -w /data/lake",
            "olympia serve -w s3://bucket/lake --port 8181 --token-file /etc/olympia/token",
        ],
        cmd_serve,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8181, help="port (default 8181)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file whose first line is the bearer token clients must send "
        "(default: $OLYMPIA_TOKEN; neither: no authentication)",
    )
    p.add_argument("--prefix", default="olympia", help="URL prefix advertised in /v1/config")
    p.add_argument(
        "--allowed-location",
        action="append",
        default=[],
        metavar="URI",
        help="a location besides the warehouse where clients may put tables and views "
        "(repeatable; spec/rest.md §10)",
    )
    p.add_argument(
        "--allow-overlapping-locations",
        action="store_true",
        help="let one table's location lie inside another's",
    )
    p.add_argument(
        "--transaction-idle-seconds",
        type=float,
        default=900.0,
        metavar="S",
        help="roll back a /txn transaction idle this long (default 900)",
    )
    p.add_argument(
        "--max-open-transactions",
        type=_positive,
        default=1000,
        metavar="N",
        help="at most N /txn transactions open at once (default 1000)",
    )

    p = add(
        "txn",
        "Distributed transactions: list, show or roll back.",
        ["olympia txn list", "olympia txn show 0f3c...", "olympia txn rollback 0f3c..."],
        cmd_txn,
    )
    tsub = p.add_subparsers(dest="txn_command", metavar="ACTION")
    tsub.required = True
    tl = tsub.add_parser("list", parents=[common], help="open distributed transactions")
    tl.add_argument("--all", action="store_true", help="include expired ones not yet removed")
    for action in ("show", "rollback"):
        tp = tsub.add_parser(action, parents=[common], help=f"{action} one transaction")
        tp.add_argument("id")
    return parser


def _fail(out: Out | None, code: int, message: str) -> NoReturn:
    if out is not None and out.json:
        print(json.dumps({"error": message, "exit_code": code}))
    err = Console(stderr=True, highlight=False)
    err.print(f"olympia: error: {message}", markup=False)
    raise SystemExit(code)


def _port(text: str) -> int:
    """A TCP port number, for argparse (a usage error otherwise)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0-65535")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Out(bool(getattr(args, "json", False)))
    try:
        return int(args.fn(args, out))
    except BrokenPipeError:
        # The reader went away (`olympia log | head`): not an error of ours.
        # Point stdout at nothing so that flushing it at exit is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except CliError as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except (InvalidArgumentError, NoSuchObjectError, ObjectAlreadyExistsError) as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except olympia.CatalogNotFoundError as exc:
        _fail(out, EXIT_USAGE, f"{exc} (create one with `olympia init`)")
    except olympia.CatalogAlreadyExistsError as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except olympia.VersionNotFoundError as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except CommitConflictError as exc:
        _fail(out, EXIT_PROBLEM, str(exc))
    except (CorruptCatalogError, StorageError) as exc:
        _fail(out, EXIT_DAMAGED, str(exc))
    except OlympiaError as exc:
        _fail(out, EXIT_PROBLEM, str(exc))
    except KeyboardInterrupt:
        _fail(None, 130, "interrupted")


if __name__ == "__main__":
    sys.exit(main())
