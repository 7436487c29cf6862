"""Actions told by name: what a transaction did, as people say it.

A committed action names its object by an internal key (spec/format.md §5:
a type prefix and the name parts). :func:`describe` turns each action into
a :class:`NamedAction` (``sales.orders updated``, ``sales.audit created``,
``read sales.orders``) for ``olympia log`` and ``Catalog.history`` readers.
It needs no catalog definition: name parts never hold a space, so a key's
parts are its space-separated words in both key encodings (padded and
compact).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from olympia.keys import TYPE_PREFIX_LEN, ObjectType, type_prefix
from olympia.proto import actions_pb2 as apb

A = apb.ActionType

_KIND = {type_prefix(t): t.name.lower() for t in ObjectType}

#: Writes: the word for what happened to the object.
_WRITE_VERBS = {
    A.NAMESPACE_CREATE: "created",
    A.NAMESPACE_ALTER: "altered",
    A.NAMESPACE_DROP: "dropped",
    A.TABLE_CREATE: "created",
    A.TABLE_UPDATE: "updated",
    A.TABLE_DROP: "dropped",
    A.TABLE_RENAME: "renamed",
    A.TABLE_INSERT: "appended to",
    A.TABLE_OVERWRITE: "overwritten",
    A.VIEW_CREATE: "created",
    A.VIEW_REPLACE: "replaced",
    A.VIEW_DROP: "dropped",
    A.TRANSACTION_CREATE: "created",
    A.TRANSACTION_UPDATE: "updated",
    A.TRANSACTION_DROP: "dropped",
    A.CATALOG_ROLLBACK: "rolled back",
}

#: Reads: the word for how the object was read.
_READ_VERBS = {
    A.NAMESPACE_EXISTS: "checked",
    A.NAMESPACE_DESCRIBE: "read",
    A.NAMESPACES_LIST: "listed",
    A.TABLE_EXISTS: "checked",
    A.TABLE_DESCRIBE: "read",
    A.TABLES_LIST: "listed",
    A.TABLE_SELECT: "scanned",
    A.VIEW_EXISTS: "checked",
    A.VIEW_DESCRIBE: "read",
    A.VIEWS_LIST: "listed",
    A.TRANSACTION_EXISTS: "checked",
}

_LISTS = {
    A.NAMESPACES_LIST: "namespaces",
    A.TABLES_LIST: "tables",
    A.VIEWS_LIST: "views",
}


@dataclass(frozen=True)
class NamedAction:
    """One action, by name.

    ``kind`` is ``namespace``, ``table``, ``view``, ``transaction`` or
    ``catalog``; ``name`` the object's dotted name (namespace, then name),
    for a list action what was listed (``tables of sales``) and ``""`` for a
    catalog-wide action; ``change`` the verb (``created``, ``updated``,
    ``dropped``, ``renamed``, ``altered``, ... for writes; ``read``,
    ``checked``, ``listed``, ``scanned`` for reads); ``target`` the new name
    of a rename; ``read_only`` whether the action only read."""

    kind: str
    name: str
    change: str
    read_only: bool
    target: str | None = None
    #: For ``altered`` namespaces: the property keys set and removed.
    set_properties: tuple[str, ...] = ()
    unset_properties: tuple[str, ...] = ()

    def text(self) -> str:
        """``sales.orders updated``, ``read sales.orders``, ``listed tables of sales``."""
        if self.read_only:
            return f"{self.change} {self.name}"
        if self.kind == "catalog":
            return self.change
        if self.target is not None:
            return f"{self.name} renamed to {self.target}"
        text = f"{self.name} {self.change}"
        details = [f"set {k}" for k in self.set_properties]
        details += [f"unset {k}" for k in self.unset_properties]
        return f"{text} ({', '.join(details)})" if details else text

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "name": self.name, "change": self.change}
        if self.target is not None:
            out["target"] = self.target
        if self.set_properties:
            out["set_properties"] = list(self.set_properties)
        if self.unset_properties:
            out["unset_properties"] = list(self.unset_properties)
        if self.read_only:
            out["read_only"] = True
        return out


def key_name(key: str) -> tuple[str, str]:
    """``(kind, dotted name)`` of an object key or key prefix; the kind is
    ``unknown`` for a key whose type prefix no object type has."""
    kind = _KIND.get(key[:TYPE_PREFIX_LEN], "unknown")
    parts = [p for p in key[TYPE_PREFIX_LEN:].split(" ") if p]
    return kind, ".".join(parts)


def name_of(action: apb.Action) -> NamedAction:
    """One action by name."""
    if action.type == A.CATALOG_ROLLBACK:
        return NamedAction("catalog", "", "rolled back", False)
    kind, name = key_name(action.object_key)
    if action.type in _LISTS:
        listed = _LISTS[action.type]
        return NamedAction(kind, f"{listed} of {name}" if name else listed, "listed", True)
    if action.read_only or action.type in _READ_VERBS:
        return NamedAction(kind, name, _READ_VERBS.get(action.type, "read"), True)
    target = key_name(action.target_key)[1] if action.target_key else None
    return NamedAction(
        kind,
        name,
        _WRITE_VERBS.get(action.type, A.Name(action.type).lower()),
        False,
        target,
        tuple(action.set_properties),
        tuple(action.unset_properties),
    )


#: Changes that only refine an object's state: after ``created`` in the same
#: transaction they say nothing more (the object is new either way).
_REFINING = frozenset({"updated", "altered", "appended to", "overwritten", "replaced"})


def describe(actions: Iterable[apb.Action], reads: bool = False) -> list[NamedAction]:
    """The actions by name, in order, without repeats; reads only if
    ``reads``. A table updated twice in one transaction is listed once, and
    one created and then updated is listed as created."""
    out: list[NamedAction] = []
    seen: set[NamedAction] = set()
    created: set[tuple[str, str]] = set()
    for action in actions:
        named = name_of(action)
        if named.read_only and not reads:
            continue
        if named.change == "created":
            created.add((named.kind, named.name))
        elif named.change in _REFINING and (named.kind, named.name) in created:
            continue
        if named not in seen:
            seen.add(named)
            out.append(named)
    return out


def summary(named: Sequence[NamedAction], limit: int = 6) -> str:
    """One line: the first ``limit`` actions' texts, then how many more."""
    if not named:
        return "-"
    texts = [n.text() for n in named[:limit]]
    if len(named) > limit:
        texts.append(f"and {len(named) - limit} more")
    return ", ".join(texts)
