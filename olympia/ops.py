"""Write actions: checking their preconditions and applying them to a state.

The same code runs when a transaction performs a write and when its writes
are replayed on a newer version during commit (spec/transactions.md §3), so
a replay re-checks exactly what the original call checked.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

from olympia.errors import (
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    OlympiaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionNotFoundError,
    ViewAlreadyExistsError,
    ViewNotFoundError,
)
from olympia.keys import KeyCodec
from olympia.objects import parse
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.state import OverlayState

#: The action types as plain ints: attribute access on the protobuf enum
#: wrapper is slow, and every write looks several up.
A = SimpleNamespace(**dict(apb.ActionType.items()))


class Check(NamedTuple):
    """One precondition a write evaluated, as the read it amounts to.

    ``action`` is a read action type: a membership read (NAMESPACE_EXISTS,
    TABLE_EXISTS, VIEW_EXISTS, TRANSACTION_EXISTS) of ``key``, or a prefix read
    (TABLES_LIST, VIEWS_LIST) of the prefix ``key``. ``found`` says whether the
    key (or anything under the prefix) was there.
    """

    action: int
    key: str
    found: bool


class PreconditionFailed(Exception):
    """A write's precondition does not hold; ``key`` is what decided it."""

    def __init__(self, error: OlympiaError, key: str, found: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.key = key
        self.found = found


def _member(state: OverlayState, read: int, key: str, checks: list[Check]) -> bytes | None:
    """Read ``key`` as a membership precondition, noting the check (``read``
    is the membership-read action type of the key's object type)."""
    value = state.get(key)
    checks.append(Check(read, key, value is not None))
    return value


def _require_namespace(
    state: OverlayState, keys: KeyCodec, namespace: str, checks: list[Check]
) -> bytes:
    key = keys.namespace(namespace)
    value = _member(state, A.NAMESPACE_EXISTS, key, checks)
    if value is None:
        raise PreconditionFailed(
            NamespaceNotFoundError(f"namespace {namespace!r} does not exist"), key, False
        )
    return value


def _require_free(
    state: OverlayState,
    keys: KeyCodec,
    namespace: str,
    name: str,
    error: type[OlympiaError],
    checks: list[Check],
) -> None:
    """No table or view named ``name`` may exist in ``namespace``; ``error`` is
    the already-exists error of the kind of object being created."""
    reads = {"table": A.TABLE_EXISTS, "view": A.VIEW_EXISTS}
    for key, kind in keys.table_and_view_keys(namespace, name):
        if _member(state, reads[kind], key, checks) is not None:
            raise PreconditionFailed(
                error(f"a {kind} named {namespace}.{name} already exists"), key, True
            )


def _require_object(
    state: OverlayState,
    read: int,
    key: str,
    what: str,
    error: type[OlympiaError],
    checks: list[Check],
) -> bytes:
    value = _member(state, read, key, checks)
    if value is None:
        raise PreconditionFailed(error(f"{what} does not exist"), key, False)
    return value


def apply_write(
    state: OverlayState,
    keys: KeyCodec,
    action: apb.Action,
    checks: list[Check] | None = None,
    key: str | None = None,
) -> None:
    """Apply one write action to ``state``.

    Every precondition evaluated is appended to ``checks`` (when given) in the
    order evaluated, the one that failed included: each is a read the write
    depends on (spec/transactions.md §1). ``key``, when given, is
    ``action.object_key`` (a caller that keeps the key too passes it so that
    one string object serves both).

    Raises:
        PreconditionFailed: wrapping the error the caller should see.
    """
    if checks is None:
        checks = []
    t = action.type
    if key is None:
        key = action.object_key
    if t == A.NAMESPACE_CREATE:
        if _member(state, A.NAMESPACE_EXISTS, key, checks) is not None:
            raise PreconditionFailed(
                NamespaceAlreadyExistsError(f"namespace {action.namespace.name!r} already exists"),
                key,
                True,
            )
        state.put(key, action.namespace.SerializeToString(deterministic=True))
    elif t == A.NAMESPACE_ALTER:
        name = action.namespace.name
        ns_msg = parse(
            pb.Namespace, _require_namespace(state, keys, name, checks), f"namespace {name}"
        )
        for prop in action.unset_properties:
            ns_msg.properties.pop(prop, None)
        ns_msg.properties.update(action.namespace.properties)
        state.put(key, ns_msg.SerializeToString(deterministic=True))
    elif t == A.NAMESPACE_DROP:
        name = keys.decode(key).parts[0]
        _require_namespace(state, keys, name, checks)
        for prefix, list_action in (
            (keys.tables_prefix(name), A.TABLES_LIST),
            (keys.views_prefix(name), A.VIEWS_LIST),
        ):
            first = next(state.scan(prefix), None)
            checks.append(Check(list_action, prefix, first is not None))
            if first is not None:
                raise PreconditionFailed(
                    NamespaceNotEmptyError(
                        f"namespace {name!r} is not empty: it holds {keys.decode(first[0]).parts[1]!r}"
                    ),
                    first[0],
                    True,
                )
        state.put(key, None)
    elif t in (A.TABLE_CREATE, A.VIEW_CREATE):
        obj = action.table if t == A.TABLE_CREATE else action.view
        _require_namespace(state, keys, obj.namespace, checks)
        _require_free(
            state,
            keys,
            obj.namespace,
            obj.name,
            TableAlreadyExistsError if t == A.TABLE_CREATE else ViewAlreadyExistsError,
            checks,
        )
        state.put(key, obj.SerializeToString(deterministic=True))
    elif t == A.TABLE_UPDATE:
        table = action.table
        _require_namespace(state, keys, table.namespace, checks)
        what = f"table {table.namespace}.{table.name}"
        current = parse(
            pb.Table,
            _require_object(state, A.TABLE_EXISTS, key, what, TableNotFoundError, checks),
            f"table {table.namespace}.{table.name}",
        )
        if "metadata_location" in action.update_fields:
            current.metadata_location = table.metadata_location
        if "properties" in action.update_fields:
            current.properties.clear()
            current.properties.update(table.properties)
        state.put(key, current.SerializeToString(deterministic=True))
    elif t == A.TABLE_RENAME:
        old = keys.decode(key).parts
        current = parse(
            pb.Table,
            _require_object(
                state, A.TABLE_EXISTS, key, f"table {old[0]}.{old[1]}", TableNotFoundError, checks
            ),
            f"table {old[0]}.{old[1]}",
        )
        new = action.table
        _require_namespace(state, keys, new.namespace, checks)
        _require_free(state, keys, new.namespace, new.name, TableAlreadyExistsError, checks)
        current.namespace, current.name = new.namespace, new.name
        state.put(key, None)
        state.put(action.target_key, current.SerializeToString(deterministic=True))
    elif t == A.TABLE_DROP:
        parts = keys.decode(key).parts
        what = f"table {parts[0]}.{parts[1]}"
        _require_object(state, A.TABLE_EXISTS, key, what, TableNotFoundError, checks)
        state.put(key, None)
    elif t == A.VIEW_REPLACE:
        view = action.view
        _require_namespace(state, keys, view.namespace, checks)
        what = f"view {view.namespace}.{view.name}"
        _require_object(state, A.VIEW_EXISTS, key, what, ViewNotFoundError, checks)
        state.put(key, view.SerializeToString(deterministic=True))
    elif t == A.VIEW_DROP:
        parts = keys.decode(key).parts
        what = f"view {parts[0]}.{parts[1]}"
        _require_object(state, A.VIEW_EXISTS, key, what, ViewNotFoundError, checks)
        state.put(key, None)
    elif t == A.TRANSACTION_CREATE:
        if _member(state, A.TRANSACTION_EXISTS, key, checks) is not None:
            raise PreconditionFailed(
                OlympiaError(f"transaction {action.transaction.id} already exists"), key, True
            )
        state.put(key, action.transaction.SerializeToString(deterministic=True))
    elif t == A.TRANSACTION_DROP:
        txn_id = keys.decode(key).parts[0]
        what = f"distributed transaction {txn_id}"
        _require_object(state, A.TRANSACTION_EXISTS, key, what, TransactionNotFoundError, checks)
        state.put(key, None)
    else:
        raise OlympiaError(f"action type {apb.ActionType.Name(t)} is not a write")
