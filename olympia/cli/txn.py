"""``olympia txn``: distributed transactions."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import olympia
from olympia import changes
from olympia.cli.base import (
    EXIT_OK,
    Command,
    Out,
    absolute_location,
    examples_epilog,
    iso_time,
    open_catalog,
    storage_options,
    warehouse_uri,
)
from olympia.iceberg.sidecar import FOLDER as SIDECAR_FOLDER
from olympia.keys import validate_transaction_id


def cmd_txn(args: argparse.Namespace, out: Out) -> int:
    cat = open_catalog(args)
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
    if args.txn_command == "rollback":
        _rollback(args, cat)
        out.emit(
            {"id": args.id, "rolled_back": True},
            lambda: out.console.print(f"rolled back distributed transaction {args.id}"),
        )
        return EXIT_OK
    txn = cat.resume(args.id)
    if args.txn_command == "show":
        shown: dict[str, Any] = {
            "id": txn.id,
            "isolation": txn.isolation,
            "begin_version": txn.begin_version,
            "status": txn.status,
            "actions": [n.to_json() for n in changes.describe(txn.actions, reads=True)],
        }
        out.emit(
            shown,
            lambda: out.table(
                f"transaction {txn.id} ({txn.isolation}, began at version {txn.begin_version})",
                ["action", "kind", "name"],
                [
                    [
                        a["change"],
                        a["kind"],
                        a["name"] + (f" -> {a['target']}" if "target" in a else ""),
                    ]
                    for a in shown["actions"]
                ],
            ),
        )
    return EXIT_OK


def _rollback(args: argparse.Namespace, cat: olympia.Catalog) -> None:
    """Roll back distributed transaction ``args.id``. One begun through the
    REST server or the PyIceberg catalog (it has an Iceberg sidecar, spec/
    iceberg.md §6) is rolled back as the server's own rollback does: with the
    metadata files written for it and the files its clients wrote (spec/
    rest.md §8), and its sidecar; without the iceberg extra, through the
    core alone (those files are left, as orphans). One past its time to
    live is rolled back too (spec/transactions.md §6.6)."""
    txn_id = validate_transaction_id(args.id)
    if cat.store.storage.exists(f"{SIDECAR_FOLDER}/{txn_id}.json"):
        try:
            from pyiceberg.catalog import load_catalog

            from olympia.iceberg.catalog import catalog_properties
            from olympia.iceberg.clientfiles import roll_back
        except ImportError:
            pass
        else:
            iceberg = load_catalog(
                "olympia",
                **{
                    "py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                    "warehouse": absolute_location(warehouse_uri(args)),
                    **catalog_properties(storage_options(args) or {}),
                },
            )
            roll_back(iceberg, txn_id, expired=True)  # type: ignore[arg-type]
            return
    cat.resume(txn_id, expired=True).rollback()


def _txn_json(t: olympia.objects.TransactionInfo) -> dict[str, Any]:
    def ms(x: int) -> str:
        return iso_time(datetime.fromtimestamp(x / 1000, tz=UTC))

    return {
        "id": t.id,
        "isolation": t.isolation,
        "begin_version": t.begin_version,
        "created_at": ms(t.created_at_millis),
        "expires_at": ms(t.expires_at_millis),
        "properties": t.properties,
    }


def _txn_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    tsub = p.add_subparsers(dest="txn_command", metavar="ACTION")
    tsub.required = True
    tl = tsub.add_parser(
        "list",
        parents=[common],
        help="open distributed transactions",
        description="List the open distributed transactions (id, isolation, begin version, "
        "expiry).",
        epilog=examples_epilog("olympia txn list", "olympia txn list --all --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tl.add_argument("--all", action="store_true", help="include expired ones not yet removed")
    for action, what, example in (
        ("show", "Show one distributed transaction: its state and staged actions.", "show"),
        (
            "rollback",
            "Roll back one distributed transaction, also one past its time to live (nothing "
            "is published).",
            "rollback",
        ),
    ):
        tp = tsub.add_parser(
            action,
            parents=[common],
            help=f"{action} one transaction",
            description=what,
            epilog=examples_epilog(
                f"olympia txn {example} 0f3c2a...", f"olympia txn {example} 0f3c2a... --json"
            ),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        tp.add_argument("id", help="the transaction's id (olympia txn list shows them)")


TXN = Command(
    "txn",
    "Distributed transactions: list, show or roll back.",
    ["olympia txn list", "olympia txn show 0f3c...", "olympia txn rollback 0f3c..."],
    cmd_txn,
    _txn_arguments,
)
