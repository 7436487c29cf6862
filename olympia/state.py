"""A transaction's view of the catalog: a committed root plus private changes."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from olympia import tree
from olympia.store import CatalogStore, Root


class OverlayState:
    """Reads the tree of ``root`` through an overlay of uncommitted changes.

    The overlay maps object keys to new serialized values, or to None for a
    deletion. Nothing here touches storage except to read committed nodes.
    """

    def __init__(self, store: CatalogStore, root: Root) -> None:
        self.store = store
        self.root = root
        self.overlay: dict[str, bytes | None] = {}

    def get(self, key: str) -> bytes | None:
        if key in self.overlay:
            return self.overlay[key]
        with self.store.reading(self.root.version):
            value = tree.get(self.root.node, key, self.store.load_node)
            return None if value is None else self.store.read_value(value)

    def put(self, key: str, value: bytes | None) -> None:
        self.overlay[key] = value

    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """Live ``(key, value)`` pairs under ``prefix`` in key order, overlay applied."""
        pending = sorted((k, v) for k, v in self.overlay.items() if k.startswith(prefix))
        committed = (
            (k, v)
            for k, v in tree.scan(self.root.node, prefix, self.store.load_node)
            if k not in self.overlay
        )
        with self.store.reading(self.root.version):
            for key, value in heapq.merge(committed, pending, key=lambda kv: kv[0]):
                if value is None:
                    continue
                yield key, (value if isinstance(value, bytes) else self.store.read_value(value))

    def any_under(self, prefix: str) -> bool:
        return next(self.scan(prefix), None) is not None

    def changes(self) -> list[tuple[str, bytes | None]]:
        return sorted(self.overlay.items())
