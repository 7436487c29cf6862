"""Write actions: checking their preconditions and applying them to a state.

The same code runs when a transaction performs a write and when its writes
are replayed on a newer version during commit (spec/transactions.md §3), so
a replay re-checks exactly what the original call checked.
"""

from __future__ import annotations

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
from olympia.keys import KeyCodec, ObjectType
from olympia.objects import parse
from olympia.proto import actions_pb2 as apb
from olympia.proto import objects_pb2 as pb
from olympia.state import OverlayState

A = apb.ActionType


class PreconditionFailed(Exception):
    """A write's precondition does not hold; ``key`` is what decided it."""

    def __init__(self, error: OlympiaError, key: str, found: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.key = key
        self.found = found


def _require_namespace(state: OverlayState, keys: KeyCodec, namespace: str) -> bytes:
    key = keys.namespace(namespace)
    value = state.get(key)
    if value is None:
        raise PreconditionFailed(
            NamespaceNotFoundError(f"namespace {namespace!r} does not exist"), key, False
        )
    return value


def _require_free(
    state: OverlayState, keys: KeyCodec, namespace: str, name: str, error: type[OlympiaError]
) -> None:
    """No table or view named ``name`` may exist in ``namespace``; ``error`` is
    the already-exists error of the kind of object being created."""
    for key, kind in keys.table_and_view_keys(namespace, name):
        if state.get(key) is not None:
            raise PreconditionFailed(
                error(f"a {kind} named {namespace}.{name} already exists"), key, True
            )


def _require_object(state: OverlayState, key: str, what: str, error: type[OlympiaError]) -> bytes:
    value = state.get(key)
    if value is None:
        raise PreconditionFailed(error(f"{what} does not exist"), key, False)
    return value


def apply_write(state: OverlayState, keys: KeyCodec, action: apb.Action) -> None:
    """Apply one write action to ``state``.

    Raises:
        PreconditionFailed: wrapping the error the caller should see.
    """
    t = action.type
    key = action.object_key
    if t == A.NAMESPACE_CREATE:
        if state.get(key) is not None:
            raise PreconditionFailed(
                NamespaceAlreadyExistsError(f"namespace {action.namespace.name!r} already exists"),
                key,
                True,
            )
        state.put(key, action.namespace.SerializeToString(deterministic=True))
    elif t == A.NAMESPACE_ALTER:
        name = action.namespace.name
        ns_msg = parse(pb.Namespace, _require_namespace(state, keys, name), f"namespace {name}")
        for prop in action.unset_properties:
            ns_msg.properties.pop(prop, None)
        ns_msg.properties.update(action.namespace.properties)
        state.put(key, ns_msg.SerializeToString(deterministic=True))
    elif t == A.NAMESPACE_DROP:
        name = keys.decode(key).parts[0]
        _require_namespace(state, keys, name)
        for prefix in (keys.tables_prefix(name), keys.views_prefix(name)):
            first = next(state.scan(prefix), None)
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
        _require_namespace(state, keys, obj.namespace)
        _require_free(
            state,
            keys,
            obj.namespace,
            obj.name,
            TableAlreadyExistsError if t == A.TABLE_CREATE else ViewAlreadyExistsError,
        )
        state.put(key, obj.SerializeToString(deterministic=True))
    elif t == A.TABLE_UPDATE:
        table = action.table
        _require_namespace(state, keys, table.namespace)
        current = parse(
            pb.Table,
            _require_object(
                state, key, f"table {table.namespace}.{table.name}", TableNotFoundError
            ),
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
            _require_object(state, key, f"table {old[0]}.{old[1]}", TableNotFoundError),
            f"table {old[0]}.{old[1]}",
        )
        new = action.table
        _require_namespace(state, keys, new.namespace)
        _require_free(state, keys, new.namespace, new.name, TableAlreadyExistsError)
        current.namespace, current.name = new.namespace, new.name
        state.put(key, None)
        state.put(action.target_key, current.SerializeToString(deterministic=True))
    elif t == A.TABLE_DROP:
        parts = keys.decode(key).parts
        _require_object(state, key, f"table {parts[0]}.{parts[1]}", TableNotFoundError)
        state.put(key, None)
    elif t == A.VIEW_REPLACE:
        view = action.view
        _require_namespace(state, keys, view.namespace)
        _require_object(state, key, f"view {view.namespace}.{view.name}", ViewNotFoundError)
        state.put(key, view.SerializeToString(deterministic=True))
    elif t == A.VIEW_DROP:
        parts = keys.decode(key).parts
        _require_object(state, key, f"view {parts[0]}.{parts[1]}", ViewNotFoundError)
        state.put(key, None)
    elif t == A.TRANSACTION_CREATE:
        if state.get(key) is not None:
            raise PreconditionFailed(
                OlympiaError(f"transaction {action.transaction.id} already exists"), key, True
            )
        state.put(key, action.transaction.SerializeToString(deterministic=True))
    elif t == A.TRANSACTION_DROP:
        txn_id = keys.decode(key).parts[0]
        _require_object(state, key, f"distributed transaction {txn_id}", TransactionNotFoundError)
        state.put(key, None)
    else:
        raise OlympiaError(f"action type {apb.ActionType.Name(t)} is not a write")


#: For each object type, the membership-read action recorded when a write's
#: precondition fails on a key of that type.
EXISTS_ACTION = {
    ObjectType.NAMESPACE: A.NAMESPACE_EXISTS,
    ObjectType.TABLE: A.TABLE_EXISTS,
    ObjectType.VIEW: A.VIEW_EXISTS,
    ObjectType.TRANSACTION: A.TRANSACTION_EXISTS,
}
