"""``olympia init``, ``rollback``, ``export``, ``expire`` and ``fsck``: making
and keeping a catalog."""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

import olympia
from olympia.cli.base import (
    EXIT_OK,
    EXIT_PROBLEM,
    CliError,
    Command,
    Out,
    iceberg_layer,
    lasting_uri,
    nonnegative_int,
    open_catalog,
    parse_time,
    positive_int,
    storage_options,
    warehouse_uri,
)
from olympia.errors import (
    CorruptCatalogError,
)


def cmd_init(args: argparse.Namespace, out: Out) -> int:
    options: dict[str, Any] = {}
    if args.isolation:
        options["default_isolation"] = args.isolation
    if args.node_order:
        options["node_order"] = args.node_order
    if args.expire_max_age_seconds is not None:
        seconds = args.expire_max_age_seconds
        if not (0 < seconds < 2**52):  # also refuses nan and inf
            raise CliError(f"--expire-max-age-seconds must be a positive number, got {seconds}")
        options["expire_max_age_millis"] = max(1, round(seconds * 1000))
    if args.expire_min_versions is not None:
        options["expire_min_versions"] = args.expire_min_versions
    cat = olympia.create_catalog(warehouse_uri(args), storage_options(args), **options)
    d = cat.definition
    data = {
        "warehouse": cat.uri,
        "version": cat.version,
        "format_version": d.format_version,
        "default_isolation": d.default_isolation,
        "expire_max_age_millis": d.expire_max_age_millis,
        "expire_min_versions": d.expire_min_versions,
    }
    out.emit(
        data,
        lambda: out.console.print(
            f"created an empty catalog at {cat.uri} (version {cat.version}, format "
            f"{d.format_version}, default isolation {d.default_isolation}; `olympia expire` "
            f"without options keeps versions younger than "
            f"{_duration(d.expire_max_age_millis)} and at least the newest "
            f"{d.expire_min_versions})"
        ),
    )
    return EXIT_OK


def _duration(millis: int) -> str:
    """``millis`` for people: ``5 d``, ``36 h``, ``90 s``, ``250 ms``."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if millis >= size and millis % size == 0:
            return f"{millis // size} {unit}"
    return f"{millis / 1000:g} s" if millis >= 1000 else f"{millis} ms"


def cmd_rollback(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
    new = cat.rollback_to(args.to, message=args.message, author=args.author)
    out.emit(
        {"rolled_back_to": args.to, "version": new},
        lambda: out.console.print(f"version {new} now holds the catalog as of version {args.to}"),
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
    if args.drop:
        if args.target is not None:
            raise CliError("export --drop takes only the export's name")
        cat.drop_export(args.name)
        out.emit({"dropped": args.name}, lambda: out.console.print(f"dropped export {args.name}"))
        return EXIT_OK
    if args.target is None:
        raise CliError("export needs a NAME and a TARGET catalog URI")
    lasting_uri(args.target, "the export's target")
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
    cat = open_catalog(args)
    older = parse_time(args.older_than) if args.older_than else None
    doing = "expiring versions and removing unreachable files"
    if args.dry_run:
        doing = "finding what expiration would remove"
    rolled_back: tuple[str, ...] = ()
    if not args.dry_run and cat.store.storage.list(ICEBERG_TRANSACTIONS):
        with out.status("rolling back the Iceberg transactions past their time to live"):
            rolled_back = _roll_back_expired(args)
    with out.status(doing):
        res = cat.expire_versions(
            older_than=older,
            keep_last=args.keep_last,
            grace_seconds=args.grace_seconds,
            allow_short_grace=args.allow_short_grace,
            dry_run=args.dry_run,
        )
    expired = res.expired_versions
    data: dict[str, Any] = {
        "dry_run": res.dry_run,
        "oldest_version": res.oldest_version,
        "expired_versions": len(expired),
        "first_expired_version": expired[0] if expired else None,
        "last_expired_version": expired[-1] if expired else None,
        "deleted_roots": res.deleted_roots,
        "deleted_markers": res.deleted_markers,
        "deleted_files": res.deleted_files,
        "deleted_pins": res.deleted_pins,
        "deleted_temporary_files": res.deleted_temporary_files,
        "dropped_transactions": [*rolled_back, *res.dropped_transactions],
        "broken_pins": list(res.broken_pins),
        "retention": None
        if res.retention is None
        else {"max_age_millis": res.retention[0], "min_versions": res.retention[1]},
    }
    if cat.store.storage.list(ICEBERG_PURGES):
        if args.dry_run:
            with out.status("finding the purged Iceberg tables that would be deleted"):
                due, pending, damaged = _due_purges(args, res.oldest_version)
            data["purged_tables"] = due
            data["pending_purges"] = pending
            data["damaged_purge_records"] = damaged
        else:
            with out.status("deleting the files of purged Iceberg tables no kept version holds"):
                purges = iceberg_layer(args).run_purges()
            data["purged_tables"] = purges.purged_tables
            data["pending_purges"] = purges.pending_tables
            data["deleted_table_files"] = purges.deleted_files
            data["damaged_purge_records"] = list(purges.damaged)
    if args.dry_run:
        data["paths"] = list(res.paths)

    def render() -> None:
        if res.retention is not None:
            out.console.print(
                f"no option given: the catalog's retention keeps versions younger than "
                f"{_duration(res.retention[0])} and at least the newest {res.retention[1]}"
            )
        if args.dry_run:
            note = "dry run: nothing was deleted; a run now would expire and delete this"
            if res.dropped_transactions:
                note += " (after a new version that drops the expired distributed transactions)"
            out.console.print(note)
        rows = [
            [k, "-" if v is None else ", ".join(map(str, v)) if isinstance(v, list) else v]
            for k, v in data.items()
            if k not in ("paths", "retention", "dry_run")
        ]
        out.table(None, ["", "value"], rows)
        if args.dry_run and res.paths:
            out.table(None, ["would delete"], [[p] for p in res.paths])

    out.emit(data, render)
    return EXIT_OK


def _due_purges(args: argparse.Namespace, floor: int) -> tuple[int, int, list[str]]:
    """``(due, pending, damaged records)``: the purges of Iceberg tables that a
    run which moves the floor to ``floor`` would carry out
    (:func:`olympia.iceberg.purge.plan`), counted without deleting."""
    owner = iceberg_layer(args)  # says so when the iceberg extra is missing
    from olympia.iceberg import purge

    todo = purge.plan(owner, floor)
    return len(todo.due), len(todo.pending), list(todo.damaged)


def _roll_back_expired(args: argparse.Namespace) -> tuple[str, ...]:
    """Roll back, with the files they wrote, the distributed transactions
    begun through the Iceberg layer that are past their time to live
    (:func:`olympia.iceberg.clientfiles.roll_back_expired`), before the
    catalog's expiration drops them; none without the iceberg extra (their
    files then stay, as orphans)."""
    try:
        owner = iceberg_layer(args)
    except CliError:
        return ()
    from olympia.iceberg.clientfiles import roll_back_expired

    result: tuple[str, ...] = roll_back_expired(owner)
    return result


#: The folder of Iceberg purge records (olympia.iceberg.purge.FOLDER).
ICEBERG_PURGES = "iceberg-purge"
#: The folder of Iceberg sidecars (olympia.iceberg.sidecar.FOLDER).
ICEBERG_TRANSACTIONS = "iceberg-txn"


def cmd_fsck(args: argparse.Namespace, out: Out) -> int:
    with out.status("checking every file the kept versions need"):
        check = _fsck(args)
    tables = None
    if args.tables:
        owner = iceberg_layer(args, "--tables reads the Iceberg tables' metadata")
        from olympia.iceberg.tablecheck import check_tables

        with out.status("checking every file the kept versions' Iceberg tables read"):
            tables = check_tables(owner)
    ok = check.ok and (tables is None or tables.ok)
    data = {
        "ok": ok,
        "oldest_version": check.oldest_version,
        "latest_version": check.latest_version,
        "kept_versions": len(check.kept_versions),
        "checked_files": check.checked_files,
        "missing": list(check.missing),
        "damaged": list(check.damaged),
        "orphans": list(check.orphans),
        "awaiting_expiration": list(check.awaiting_expiration),
    }
    if tables is not None:
        data["tables"] = {
            "ok": tables.ok,
            "checked_tables": tables.checked_tables,
            "checked_files": tables.checked_files,
            "missing": [{"metadata": m, "file": f} for m, f in tables.missing],
            "unreadable": [{"metadata": m, "why": w} for m, w in tables.unreadable],
        }

    def render() -> None:
        verdict = ("ok", "green") if ok else ("DAMAGED", "red")
        out.console.print(
            Text.assemble(
                verdict,
                f": versions {check.oldest_version}..{check.latest_version}, "
                f"{len(check.kept_versions)} kept, {check.checked_files} file(s) checked, "
                f"{len(check.missing)} missing, {len(check.damaged)} damaged, "
                f"{len(check.orphans)} orphan(s), "
                f"{len(check.awaiting_expiration)} awaiting expiration",
            )
        )
        rows = [["missing", p] for p in check.missing] + [["damaged", p] for p in check.damaged]
        rows += [["orphan", p] for p in check.orphans]
        rows += [["awaiting expiration", p] for p in check.awaiting_expiration]
        if tables is not None:
            out.console.print(
                f"tables: {tables.checked_tables} table metadata file(s) of the kept versions, "
                f"{tables.checked_files} file(s) checked, {len(tables.missing)} missing, "
                f"{len(tables.unreadable)} unreadable"
            )
            rows += [["table file missing", f"{f} (table metadata {m})"] for m, f in tables.missing]
            rows += [
                ["table file unreadable", f"{w} (table metadata {m})"] for m, w in tables.unreadable
            ]
        if rows:
            out.table(None, ["finding", "file"], rows)

    out.emit(data, render)
    return EXIT_OK if ok else EXIT_PROBLEM


def _fsck_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tables",
        action="store_true",
        help="also check every file the Iceberg tables of the kept versions read (their "
        "metadata, manifest lists, manifests, data and statistics files; needs the iceberg "
        "extra, and reads every manifest)",
    )


def _fsck(args: argparse.Namespace) -> Any:
    """``Catalog.fsck()``; when the catalog cannot be opened because its
    latest root is damaged, the same check on its storage, which reports
    that root among the damaged files (spec/transactions.md §8.3)."""
    try:
        cat = open_catalog(args)
    except CorruptCatalogError:
        from olympia.maintenance import check_files
        from olympia.storage import open_storage
        from olympia.store import CatalogStore

        store = CatalogStore(open_storage(warehouse_uri(args), storage_options(args)))
        try:
            store.load_latest()
        except CorruptCatalogError:
            return check_files(store)  # the latest root: the check names it
        raise  # something else (an unsupported format version, say)
    return cat.fsck()


def _init_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--isolation", choices=("snapshot", "serializable"), help="default isolation")
    p.add_argument(
        "--node-order", type=positive_int, metavar="M", help="B-tree node order (default 128)"
    )
    p.add_argument(
        "--expire-max-age-seconds",
        type=float,
        metavar="S",
        help="`olympia expire` without options keeps versions younger than this "
        "(default 432000, five days)",
    )
    p.add_argument(
        "--expire-min-versions",
        type=positive_int,
        metavar="K",
        help="`olympia expire` without options keeps at least the newest K versions (default 1)",
    )


INIT = Command(
    "init",
    "Create a new, empty catalog at the warehouse URI.",
    [
        "olympia init -w /data/lake",
        "olympia init -w s3://bucket/lake --isolation serializable",
        "olympia init -w /data/lake --expire-max-age-seconds 604800 --expire-min-versions 10",
    ],
    cmd_init,
    _init_arguments,
)


def _rollback_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("to", type=nonnegative_int, metavar="VERSION")
    p.add_argument("-m", "--message", help="why: the commit message stored with the rollback")
    p.add_argument("--author", help="who: stored with the rollback (default: none)")


ROLLBACK = Command(
    "rollback",
    "Publish a new version equal to an older one (history is kept).",
    ["olympia rollback 12", 'olympia rollback 12 -m "undo the bad load" --author ops'],
    cmd_rollback,
    _rollback_arguments,
)


def _export_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("target", nargs="?", metavar="TARGET")
    p.add_argument(
        "--mode",
        choices=("full", "minimal"),
        default="full",
        help="full (default): every kept version, with the files they reach; minimal: only "
        "the latest version, written afresh (the tables' data files are never copied)",
    )
    p.add_argument("--drop", action="store_true", help="unpin the export NAME")


EXPORT = Command(
    "export",
    "Copy the latest version to a new catalog and pin it, or drop an export's pin.",
    [
        "olympia export nightly /backup/lake",
        "olympia export nightly s3://backup/lake --mode minimal",
        "olympia export --drop nightly",
    ],
    cmd_export,
    _export_arguments,
)


def _expire_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", metavar="TIME", help="expire versions created before TIME")
    p.add_argument("--keep-last", type=positive_int, metavar="K", help="keep the newest K versions")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="delete and write nothing: print what would be expired and deleted",
    )
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


EXPIRE = Command(
    "expire",
    "Expire old versions and delete files no kept version needs. Without --older-than "
    "or --keep-last, the catalog's retention decides (`olympia init "
    "--expire-max-age-seconds/--expire-min-versions`; by default versions younger than "
    "five days, and the newest one, are kept).",
    [
        "olympia expire --dry-run            # what the catalog's retention would remove",
        "olympia expire                      # remove it",
        "olympia expire --keep-last 100 --dry-run --json",
        "olympia expire --older-than 2026-11-01T00:00:00Z --grace-seconds 600",
    ],
    cmd_expire,
    _expire_arguments,
)


def cmd_orphans(args: argparse.Namespace, out: Out) -> int:
    owner = iceberg_layer(args, "removing a table's orphan files reads its Iceberg metadata")
    older = parse_time(args.older_than) if args.older_than else None
    doing = "finding" if args.dry_run else "deleting"
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    with out.status(f"{doing} the orphan files of {args.table}"):
        try:
            found = owner.remove_orphan_files(
                args.table, older_than=older, location=args.location, dry_run=args.dry_run
            )
        except (NoSuchTableError, NoSuchNamespaceError, ValueError) as exc:
            raise CliError(str(exc)) from None
    data = {
        "table": args.table,
        "location": found.location,
        "dry_run": found.dry_run,
        "orphan_files": list(found.files),
    }

    def render() -> None:
        verb = "would delete" if found.dry_run else "deleted"
        out.console.print(
            f"{verb} {len(found.files)} orphan file(s) under {found.location}: no kept catalog "
            f"version or open distributed transaction reads them"
        )
        if found.files:
            out.table(None, [verb], [[f] for f in found.files])

    out.emit(data, render)
    return EXIT_OK


def _orphans_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("table", metavar="TABLE", help="the Iceberg table, namespace.table")
    p.add_argument(
        "--older-than",
        metavar="TIME",
        help="only files written before this ISO 8601 time (default three days ago; at "
        "least 24 hours ago)",
    )
    p.add_argument(
        "--location", metavar="URI", help="a folder inside the table's location to look in"
    )
    p.add_argument("--dry-run", action="store_true", help="list them; delete nothing")


ORPHANS = Command(
    "orphans",
    "Delete an Iceberg table's orphan files: files under its location that no kept catalog "
    "version reads (Iceberg's own clean-up would delete what older versions read).",
    [
        "olympia orphans sales.orders --dry-run",
        "olympia orphans sales.orders --older-than 2026-11-01T00:00:00Z",
    ],
    cmd_orphans,
    _orphans_arguments,
)


FSCK = Command(
    "fsck",
    "Check that every file a kept version needs is present and undamaged; list orphans.",
    ["olympia fsck", "olympia fsck --json", "olympia fsck --tables"],
    cmd_fsck,
    _fsck_arguments,
)
