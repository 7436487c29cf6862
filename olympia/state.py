"""A transaction's view of the catalog: a committed root plus private changes."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from olympia import tree
from olympia.store import CatalogStore, MissingFileError, Root


class OverlayState:
    """Reads the tree of ``root`` through an overlay of uncommitted changes.

    The overlay maps object keys to new serialized values, or to None for a
    deletion. Nothing here touches storage except to read committed nodes.
    """

    def __init__(self, store: CatalogStore, root: Root) -> None:
        self.store = store
        self.root = root
        self.overlay: dict[str, bytes | None] = {}
        #: While recording (see :meth:`record_undo`): each key's overlay
        #: entry before its first change, ``(present, value)``.
        self._undo: dict[str, tuple[bool, bytes | None]] | None = None

    def get(self, key: str) -> bytes | None:
        overlay = self.overlay
        if key in overlay:
            return overlay[key]
        store = self.store
        try:  # what store.reading() does, without a context manager per read
            value = tree.get(self.root.node, key, store.load_node)
            return None if value is None else store.read_value(value)
        except MissingFileError as exc:
            store.missing_while_reading(self.root.version, exc)

    def put(self, key: str, value: bytes | None) -> None:
        if self._undo is not None and key not in self._undo:
            self._undo[key] = (key in self.overlay, self.overlay.get(key))
        self.overlay[key] = value

    def record_undo(self) -> None:
        """Start remembering what :meth:`put` replaces, for :meth:`end_undo`."""
        self._undo = {}

    def end_undo(self, restore: bool) -> None:
        """Stop remembering; with ``restore``, undo every put since :meth:`record_undo`."""
        undo, self._undo = self._undo, None
        if not restore or not undo:
            return
        for key, (present, value) in undo.items():
            if present:
                self.overlay[key] = value
            else:
                self.overlay.pop(key, None)

    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """Live ``(key, value)`` pairs under ``prefix`` in key order, overlay applied."""
        pending = sorted((k, v) for k, v in self.overlay.items() if k.startswith(prefix))
        committed = (
            (k, v)
            for k, v in tree.scan(
                self.root.node, prefix, self.store.load_node, prefetch=self.store.prefetch_nodes
            )
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
