"""Iceberg identifiers and olympia names (spec/iceberg.md §3).

A namespace ``(l1, ..., ln)`` is the olympia namespace ``"l1.l2....ln"``; a
table identifier is ``(l1, ..., ln, table)``. A namespace level that is empty
or holds a ``.`` is refused, so that no two identifiers map to one stored
name; a table name may hold ``.`` (it is stored apart from the namespace).
"""

from __future__ import annotations

from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.typedef import Identifier

SEPARATOR = "."


class InvalidNamespaceError(NoSuchNamespaceError, ValueError):
    """A namespace identifier that cannot name a namespace: empty, an empty
    or blank level, or a level holding ``.`` (also for the namespace part of
    a table identifier). Both PyIceberg's ``NoSuchNamespaceError``, as
    SqlCatalog raises for these, and a ``ValueError``."""


def to_tuple(identifier: str | Identifier) -> Identifier:
    """A string is split on ``.``; a tuple is kept as it is."""
    if isinstance(identifier, str):
        return tuple(identifier.split(SEPARATOR))
    if not isinstance(identifier, tuple) or not all(isinstance(p, str) for p in identifier):
        raise ValueError(
            f"an identifier must be a string or a tuple of strings, got {identifier!r}"
        )
    return identifier


def namespace_name(namespace: str | Identifier) -> str:
    """The olympia namespace name of an Iceberg namespace.

    Raises:
        InvalidNamespaceError: the namespace is empty or a level is empty or holds a ``.``.
    """
    levels = to_tuple(namespace)
    if not levels or levels == ("",):
        raise InvalidNamespaceError("empty namespace identifier")
    for level in levels:
        if not level.strip():
            raise InvalidNamespaceError(f"namespace {levels!r} has an empty level")
        if SEPARATOR in level:
            raise InvalidNamespaceError(
                f"namespace level {level!r} of {levels!r} contains '.', which olympia uses "
                f"to join namespace levels; use separate levels instead"
            )
    return SEPARATOR.join(levels)


def table_name(identifier: str | Identifier) -> tuple[str, str]:
    """``(olympia namespace, table name)`` of a table or view identifier.

    Raises:
        InvalidNamespaceError: fewer than two levels, or a bad namespace level.
        ValueError: an empty name.
    """
    levels = to_tuple(identifier)
    if len(levels) < 2:
        raise InvalidNamespaceError(
            f"table identifier {levels!r} needs a namespace and a name, e.g. ('ns', 'table')"
        )
    name = levels[-1]
    if not name:
        raise ValueError(f"table identifier {levels!r} has an empty name")
    # A "." in the name is kept: the name is the last level and is stored apart
    # from the namespace, so ("a", "b.c") and ("a.b", "c") stay two objects (the
    # latter is refused anyway).
    return namespace_name(levels[:-1]), name


def namespace_levels(name: str) -> Identifier:
    """The Iceberg namespace of an olympia namespace name."""
    return tuple(name.split(SEPARATOR))


def identifier(namespace: str, name: str) -> Identifier:
    """The Iceberg identifier of olympia table ``namespace.name``."""
    return (*namespace_levels(namespace), name)
