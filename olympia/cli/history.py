"""``olympia log``, ``diff`` and ``graph``: the history, told by name."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from olympia import changes
from olympia.changes import NamedAction
from olympia.cli.base import (
    EXIT_OK,
    CliError,
    Command,
    Out,
    iso_time,
    nonnegative_int,
    open_catalog,
    positive_int,
)
from olympia.maintenance import TransactionRecord, VersionInfo


def _txn_changes(t: TransactionRecord, reads: bool) -> list[NamedAction]:
    return changes.describe(t.actions, reads=reads)


def _changes_text(info: VersionInfo, t: TransactionRecord, reads: bool) -> str:
    if info.rollback_to is not None:
        return f"rollback to version {info.rollback_to}"
    return changes.summary(_txn_changes(t, reads))


def _transaction_json(t: TransactionRecord, reads: bool) -> dict[str, Any]:
    return {
        "transaction_id": t.transaction_id,
        "isolation": t.isolation,
        "begin_version": t.begin_version,
        "message": t.message,
        "author": t.author,
        "properties": dict(t.properties),
        "changes": [n.to_json() for n in _txn_changes(t, reads)],
    }


def _version_json(info: VersionInfo, reads: bool = False) -> dict[str, Any]:
    return {
        "version": info.version,
        "created_at": iso_time(info.created_at),
        "isolation": info.isolation,
        "begin_version": info.begin_version,
        "serialized_before": list(info.serialized_before),
        "rollback_to": info.rollback_to,
        "transactions": [_transaction_json(t, reads) for t in info.transactions],
    }


def _who(t: TransactionRecord) -> str:
    """``alice: "nightly load"``, or what of it is known."""
    parts = []
    if t.author:
        parts.append(t.author)
    if t.message:
        parts.append(json.dumps(t.message, ensure_ascii=False))
    return ": ".join(parts)


def _history_notes(info: VersionInfo) -> list[str]:
    notes = []
    if info.rollback_to is not None:
        notes.append(f"rollback to version {info.rollback_to}")
    elif info.rollback_from is not None:
        notes.append("rollback (to a version this catalog's older format did not record)")
    elif info.begin_version is not None and info.begin_version < info.version - 1:
        over = info.version - 1 - info.begin_version
        notes.append(f"began at {info.begin_version}, rebased over {over} version(s)")
    if info.serialized_before:
        notes.append("serialized before " + ", ".join(map(str, info.serialized_before)))
    if len(info.transactions) > 1:
        notes.append(f"{len(info.transactions)} transactions (group commit)")
    return notes


def _graph_lines(infos: Sequence[VersionInfo], reads: bool = False) -> list[str]:
    """A text picture of the history: one entry per version, newest first,
    with each transaction's author, message and changes by name; a rebased
    commit shows the versions it was rebased over, a rollback its target."""
    lines = []
    for info in reversed(infos):
        lines.append(f"* {info.version:>6}  {iso_time(info.created_at)}  {info.isolation or '-'}")
        for note in _history_notes(info):
            lines.append(f"|         {note}")
        for t in info.transactions:
            who = _who(t)
            prefix = f"|         {t.transaction_id[:12]}"
            lines.append(f"{prefix}  {who}" if who else prefix)
            for named in _txn_changes(t, reads):
                lines.append(f"|           {named.text()}")
        lines.append("|")
    if lines:
        lines[-1] = " "
    return lines


def cmd_log(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
    with out.status("reading versions"):
        infos = cat.history(since=args.since)
    if args.limit is not None:
        infos = infos[-args.limit :]
    if args.json:
        print(json.dumps([_version_json(i, args.reads) for i in infos], indent=2))
        return EXIT_OK
    if args.graph:
        for line in _graph_lines(infos, args.reads):
            out.console.print(line, markup=False)
        return EXIT_OK
    rows = []
    for info in reversed(infos):
        notes = "; ".join(_history_notes(info))
        for i, t in enumerate(info.transactions):
            rows.append(
                [
                    info.version if i == 0 else "",
                    iso_time(info.created_at) if i == 0 else "",
                    t.transaction_id[:12],
                    t.author or "",
                    t.message or "",
                    _changes_text(info, t, args.reads)
                    + (f" ({notes})" if notes and i == 0 and info.rollback_to is None else ""),
                ]
            )
    out.table(
        f"{len(infos)} version(s), newest first",
        ["version", "created (UTC)", "transaction", "author", "message", "changes"],
        rows,
    )
    return EXIT_OK


def cmd_diff(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
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

    cat = open_catalog(args)
    latest = cat.version
    to_version = latest if args.to_version is None else args.to_version
    if args.from_version is None:  # the version before, or the oldest kept
        from_version = max(to_version - 1, min(cat.oldest_version, to_version))
    else:
        from_version = args.from_version
    location = cat.store.storage.location
    if "://" not in location and _inside(args.svg, location):
        raise CliError(
            f"--svg {args.svg} lies inside the catalog at {location}: writing it there would "
            f"replace or add one of the catalog's files"
        )
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


def _inside(path: str, folder: str) -> bool:
    """Whether local ``path`` lies inside ``folder`` (symbolic links resolved)."""
    inner, outer = os.path.realpath(path), os.path.realpath(folder)
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _log_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--since", type=nonnegative_int, metavar="N", help="start at version N")
    p.add_argument("--limit", type=positive_int, metavar="K", help="only the newest K versions")
    p.add_argument("--graph", action="store_true", help="draw the history as a text graph")
    p.add_argument("--reads", action="store_true", help="also list what each transaction read")


LOG = Command(
    "log",
    "List versions, newest first: when, who (author), why (message) and what each "
    "transaction changed, by name; rebases and rollbacks are named.",
    [
        "olympia log",
        "olympia log --limit 20 --graph",
        "olympia log --reads            # also what each transaction read",
        "olympia log --since 100 --json",
    ],
    cmd_log,
    _log_arguments,
)


def _diff_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("from_version", type=nonnegative_int, metavar="FROM")
    p.add_argument("to_version", type=nonnegative_int, nargs="?", metavar="TO")


DIFF = Command(
    "diff",
    "List the objects added, removed or changed between two versions.",
    ["olympia diff 3 7", "olympia diff 3          # from version 3 to the latest"],
    cmd_diff,
    _diff_arguments,
)


def _graph_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--svg", required=True, metavar="FILE", help="the SVG file to write")
    p.add_argument("from_version", type=nonnegative_int, nargs="?", metavar="FROM")
    p.add_argument("to_version", type=nonnegative_int, nargs="?", metavar="TO")
    p.add_argument("--versions", type=positive_int, default=40, help="versions drawn (default 40)")


GRAPH = Command(
    "graph",
    "Draw an SVG picture: the version history, and the trees of two versions with the "
    "node files they share.",
    ["olympia graph --svg history.svg", "olympia graph --svg t.svg 3 7"],
    cmd_graph,
    _graph_arguments,
)
