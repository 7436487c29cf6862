"""The main job for now: a short tour of the catalog and its transactions.

Run with ``bash scripts/main.sh [LOCATION]``. It creates a catalog (in a
temporary folder unless a location is given) and shows multi-table
transactions, a conflict under each isolation level, a distributed
transaction, time travel and rollback.
"""

from __future__ import annotations

import sys
import tempfile

import olympia


def main(argv: list[str]) -> int:
    location = argv[0] if argv else tempfile.mkdtemp(prefix="olympia-demo-") + "/catalog"
    cat = olympia.create_catalog(location)
    print(f"created catalog at {location} (version {cat.version})")

    with cat.transaction() as txn:
        txn.create_namespace("sales", {"owner": "ops"})
        txn.create_namespace("finance")
        txn.create_table("sales", "orders", "s3://lake/sales/orders/v1.metadata.json")
        txn.create_table("finance", "ledger", "s3://lake/finance/ledger/v1.metadata.json")
    print(f"version {cat.version}: two namespaces and two tables, committed together")

    # Write skew: both read both tables, each updates one.
    for isolation in ("snapshot", "serializable"):
        a, b = cat.begin(isolation), cat.begin(isolation)
        for txn in (a, b):
            txn.describe_table("sales", "orders")
            txn.describe_table("finance", "ledger")
        a.update_table(
            "sales", "orders", metadata_location=f"s3://lake/sales/orders/{isolation}.json"
        )
        b.update_table(
            "finance", "ledger", metadata_location=f"s3://lake/finance/ledger/{isolation}.json"
        )
        a.commit()
        try:
            b.commit()
            print(f"{isolation}: write skew committed (allowed under snapshot isolation)")
        except olympia.CommitConflictError as exc:
            print(f"{isolation}: second commit refused, rule {exc.rule!r} at version {exc.version}")

    # A distributed transaction: begun here, resumed and committed "elsewhere".
    txn = cat.begin()
    txn.create_table("sales", "refunds", "s3://lake/sales/refunds/v1.metadata.json")
    txn_id = txn.distribute()
    other_process = olympia.load_catalog(location).resume(txn_id)
    other_process.create_table("sales", "returns", "s3://lake/sales/returns/v1.metadata.json")
    print(f"distributed transaction {txn_id[:8]}... committed as version {other_process.commit()}")

    latest = cat.latest()
    print(f"tables in sales now: {latest.list_tables('sales')}")
    print(f"tables in sales at version 1: {cat.at_version(1).list_tables('sales')}")
    rolled = cat.rollback_to(1)
    print(f"rolled back to version 1 as version {rolled}: {cat.latest().list_tables('sales')}")
    for entry in cat.history()[-3:]:
        kinds = sorted({olympia.transaction.A.Name(a.type) for a in entry.actions})
        print(f"  version {entry.version} ({entry.isolation or '-'}): {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
