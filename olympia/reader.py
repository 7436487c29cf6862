"""The read half of the catalog API, shared by transactions and read-only
views, and the read-only view of one committed version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from olympia import tree, validate
from olympia.definition import key_codec
from olympia.errors import (
    CorruptCatalogError,
    NamespaceNotFoundError,
    ReadOnlyError,
    TableNotFoundError,
    ViewNotFoundError,
)
from olympia.keys import KeyCodec
from olympia.objects import NamespaceInfo, TableInfo, ViewInfo, parse
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.store import CatalogStore, Root
from olympia.validate import require_namespace, require_table_name, require_view_name

A = apb.ActionType


def _check_names(what: str, stored: tuple[str, ...], expected: tuple[str, ...]) -> None:
    """A value's name fields must equal its key's name parts (spec/format.md §6)."""
    if stored != expected:
        raise CorruptCatalogError(
            f"stored definition of {what} names {'.'.join(stored)!r}, not its key's name"
        )


class CatalogReader:
    """Read methods over some state. Subclasses supply ``_get``, ``_scan`` and ``_record``."""

    _keys: KeyCodec

    def _get(self, key: str) -> bytes | None:
        raise NotImplementedError

    def _scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        raise NotImplementedError

    def _record(self, action_type: int, key: str, found: bool) -> None:
        """Remember a read (transactions record them; views do not)."""

    def _record_check(self, action_type: int, key: str, found: bool) -> None:
        """Remember a read a listing evaluates before it lists (the check that
        its namespace exists): transactions record it as they record a write's
        precondition, left out when it adds nothing (spec/transactions.md §1)."""
        self._record(action_type, key, found)

    def _read(self, action_type: int, key: str) -> bytes | None:
        value = self._get(key)
        self._record(action_type, key, value is not None)
        return value

    # --- namespaces -------------------------------------------------------------

    def namespace_exists(self, namespace: str) -> bool:
        """Whether ``namespace`` exists. Raises InvalidNameError for a bad name."""
        require_namespace(self._keys, "namespace", namespace)
        return self._read(A.NAMESPACE_EXISTS, self._keys.namespace(namespace)) is not None

    def describe_namespace(self, namespace: str) -> NamespaceInfo:
        """The namespace's name and properties.

        Raises:
            NamespaceNotFoundError: it does not exist.
        """
        require_namespace(self._keys, "namespace", namespace)
        data = self._read(A.NAMESPACE_DESCRIBE, self._keys.namespace(namespace))
        if data is None:
            raise NamespaceNotFoundError(f"namespace {namespace!r} does not exist")
        msg = parse(pb.Namespace, data, f"namespace {namespace}")
        _check_names(f"namespace {namespace}", (msg.name,), (namespace,))
        return NamespaceInfo.from_proto(msg)

    def list_namespaces(self) -> list[str]:
        """Names of all namespaces, sorted."""
        prefix = self._keys.namespaces_prefix()
        names = [self._keys.decode(k).parts[0] for k, _ in self._scan(prefix)]
        # ``found``: whether anything was under the prefix (spec/format.md §3.4).
        self._record(A.NAMESPACES_LIST, prefix, bool(names))
        return names

    def _require_namespace(self, namespace: str) -> None:
        key = self._keys.namespace(namespace)
        found = self._get(key) is not None
        self._record_check(A.NAMESPACE_EXISTS, key, found)
        if not found:
            raise NamespaceNotFoundError(f"namespace {namespace!r} does not exist")

    # --- tables -----------------------------------------------------------------

    def table_exists(self, namespace: str, name: str) -> bool:
        """Whether table ``namespace.name`` exists."""
        require_namespace(self._keys, "namespace", namespace)
        require_table_name(self._keys, "name", name)
        return self._read(A.TABLE_EXISTS, self._keys.table(namespace, name)) is not None

    def describe_table(self, namespace: str, name: str) -> TableInfo:
        """The table's definition.

        Raises:
            TableNotFoundError: it does not exist.
        """
        require_namespace(self._keys, "namespace", namespace)
        require_table_name(self._keys, "name", name)
        data = self._read(A.TABLE_DESCRIBE, self._keys.table(namespace, name))
        if data is None:
            raise TableNotFoundError(f"table {namespace}.{name} does not exist")
        msg = parse(pb.Table, data, f"table {namespace}.{name}")
        _check_names(f"table {namespace}.{name}", (msg.namespace, msg.name), (namespace, name))
        return TableInfo.from_proto(msg)

    def list_tables(self, namespace: str) -> list[str]:
        """Names of the tables in ``namespace``, sorted.

        Raises:
            NamespaceNotFoundError: the namespace does not exist.
        """
        require_namespace(self._keys, "namespace", namespace)
        self._require_namespace(namespace)
        prefix = self._keys.tables_prefix(namespace)
        names = [self._keys.decode(k).parts[1] for k, _ in self._scan(prefix)]
        self._record(A.TABLES_LIST, prefix, bool(names))
        return names

    # --- views ------------------------------------------------------------------

    def view_exists(self, namespace: str, name: str) -> bool:
        """Whether view ``namespace.name`` exists."""
        require_namespace(self._keys, "namespace", namespace)
        require_view_name(self._keys, "name", name)
        return self._read(A.VIEW_EXISTS, self._keys.view(namespace, name)) is not None

    def describe_view(self, namespace: str, name: str) -> ViewInfo:
        """The view's definition.

        Raises:
            ViewNotFoundError: it does not exist.
        """
        require_namespace(self._keys, "namespace", namespace)
        require_view_name(self._keys, "name", name)
        data = self._read(A.VIEW_DESCRIBE, self._keys.view(namespace, name))
        if data is None:
            raise ViewNotFoundError(f"view {namespace}.{name} does not exist")
        msg = parse(pb.View, data, f"view {namespace}.{name}")
        _check_names(f"view {namespace}.{name}", (msg.namespace, msg.name), (namespace, name))
        return ViewInfo.from_proto(msg)

    def list_views(self, namespace: str) -> list[str]:
        """Names of the views in ``namespace``, sorted.

        Raises:
            NamespaceNotFoundError: the namespace does not exist.
        """
        require_namespace(self._keys, "namespace", namespace)
        self._require_namespace(namespace)
        prefix = self._keys.views_prefix(namespace)
        names = [self._keys.decode(k).parts[1] for k, _ in self._scan(prefix)]
        self._record(A.VIEWS_LIST, prefix, bool(names))
        return names


class CatalogVersion(CatalogReader):
    """A read-only view of one committed version of a catalog.

    Offers the read methods of a transaction (``describe_table``,
    ``list_tables``, ...); writes raise ReadOnlyError.
    """

    def __init__(self, store: CatalogStore, root: Root) -> None:
        self._store = store
        self._root = root
        self._keys = key_codec(root.definition)

    @property
    def keys(self) -> Any:
        return self._keys

    @property
    def version(self) -> int:
        return self._root.version

    @property
    def root(self) -> Root:
        return self._root

    @property
    def definition(self) -> pb.CatalogDefinition:
        return self._root.definition

    def _get(self, key: str) -> bytes | None:
        return self.get(key)

    def _scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        return self._scan_raw(prefix)

    def get(self, key: str) -> bytes | None:
        """The raw value stored under an object key, or None."""
        validate.require_text("key", key)
        with self._store.reading(self.version):
            value = tree.get(self._root.node, key, self._store.load_node)
            return None if value is None else self._store.read_value(value)

    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """Raw ``(key, value)`` pairs whose key starts with ``prefix``, in key order."""
        validate.require_text("prefix", prefix)
        return self._scan_raw(prefix)

    def _scan_raw(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        with self._store.reading(self.version):
            for key, value in tree.scan(
                self._root.node, prefix, self._store.load_node, prefetch=self._store.prefetch_nodes
            ):
                yield key, self._store.read_value(value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("create_", "drop_", "alter_", "update_", "rename_", "replace_")):
            raise ReadOnlyError(
                f"version {self.version} is a read-only view; use Catalog.begin() to write"
            )
        raise AttributeError(name)
