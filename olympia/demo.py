"""The main job for now: a short demonstration of the catalog core.

Run with ``bash scripts/main.sh [LOCATION]``. It creates a catalog (in a
temporary folder unless a location is given), commits a few versions, and
shows the files, the latest version and time travel.
"""

from __future__ import annotations

import sys
import tempfile

import olympia
from olympia import tree


def main(argv: list[str]) -> int:
    location = argv[0] if argv else tempfile.mkdtemp(prefix="olympia-demo-") + "/catalog"
    cat = olympia.create_catalog(location, node_order=4)
    print(f"created catalog at {location}, version {cat.version}")
    keys = cat.latest().keys
    for i in range(1, 6):
        base = cat.store.load_root(cat.version)
        changes = sorted(
            {keys.table("sales", f"orders_{i}"): f"s3://bucket/orders_{i}".encode()}.items()
        )
        new_root = tree.apply(base.node, changes, base.order, cat.store.load_node)
        done = cat.store.commit(
            base.version + 1, new_root, base.definition, "demo", previous_root=base.path
        )
        print(f"committed version {done.version}: wrote {cat.store.last_write.files} files")
    latest = olympia.load_catalog(location)
    print(f"latest version: {latest.version}")
    for v in (2, latest.version):
        names = [
            keys.decode(k).parts[1]
            for k, _ in latest.at_version(v).scan(keys.tables_prefix("sales"))
        ]
        print(f"tables in sales at version {v}: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
