"""Iceberg row filters as people write them: ``customer_id >= 100 AND
region = 'eu'`` rather than ``And(left=GreaterThanOrEqual(term=Reference(...``.

:func:`to_sql` renders a PyIceberg ``BooleanExpression``, bound or unbound,
in the syntax of PyIceberg's own filter parser
(``pyiceberg.expressions.parser.parse``), so that the unbound filters of
that syntax read back as the same expression. Conflict messages use it
(spec/iceberg.md §7).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any

from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, BooleanExpression, Not, Or
from pyiceberg.expressions.literals import (
    BinaryLiteral,
    BooleanLiteral,
    DateLiteral,
    FixedLiteral,
    Literal,
    StringLiteral,
    TimeLiteral,
    TimestampLiteral,
    UUIDLiteral,
)
from pyiceberg.utils.datetime import days_to_date, micros_to_time, micros_to_timestamp

__all__ = ["to_sql"]

#: Comparison operators by predicate class name (without ``Bound``).
_COMPARISONS = {
    "EqualTo": "=",
    "NotEqualTo": "!=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}
_UNARY = {
    "IsNull": "IS NULL",
    "NotNull": "IS NOT NULL",
    "IsNaN": "IS NaN",
    "NotNaN": "IS NOT NaN",
}
_KEYWORDS = frozenset(
    {"and", "or", "not", "is", "in", "null", "nan", "like", "between", "true", "false"}
)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def to_sql(expression: BooleanExpression) -> str:
    """``expression`` as SQL-like text: ``AND``/``OR``/``NOT``, comparisons,
    ``IN (...)``, ``IS [NOT] NULL``, ``IS [NOT] NaN``, ``LIKE 'prefix%'``;
    ``true`` and ``false`` for the constant filters. Anything else (a class
    a later PyIceberg adds) falls back to its ``str``."""
    return _render(expression, parent=None)


def _render(e: BooleanExpression, parent: str | None) -> str:
    if isinstance(e, AlwaysTrue):
        return "true"
    if isinstance(e, AlwaysFalse):
        return "false"
    if isinstance(e, (And, Or)):
        word = "AND" if isinstance(e, And) else "OR"
        text = f" {word} ".join(_render(part, word) for part in _chain(e, type(e)))
        # Parenthesised inside the other connective (AND inside OR too, for
        # the reader's sake, although AND binds tighter).
        return f"({text})" if parent in ("AND", "OR") and parent != word else text
    if isinstance(e, Not):
        inner = _render(e.child, "NOT")
        return (
            f"NOT {inner}" if isinstance(e.child, (AlwaysTrue, AlwaysFalse)) else f"NOT ({inner})"
        )
    return _predicate(e)


def _chain(e: BooleanExpression, kind: type) -> Iterable[BooleanExpression]:
    """The operands of a run of one connective: ``a AND b AND c``, not nested."""
    if isinstance(e, kind):
        yield from _chain(e.left, kind)  # type: ignore[attr-defined]
        yield from _chain(e.right, kind)  # type: ignore[attr-defined]
    else:
        yield e


def _predicate(e: BooleanExpression) -> str:
    kind = type(e).__name__.removeprefix("Bound")
    term = getattr(e, "term", None)
    if term is None:
        return str(e)
    column = _column(term)
    if kind in _UNARY:
        return f"{column} {_UNARY[kind]}"
    if kind in _COMPARISONS:
        return f"{column} {_COMPARISONS[kind]} {_literal(e.literal)}"  # type: ignore[attr-defined]
    if kind in ("StartsWith", "NotStartsWith"):
        prefix = str(e.literal.value)  # type: ignore[attr-defined]
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%")
        like = "LIKE" if kind == "StartsWith" else "NOT LIKE"
        return f"{column} {like} {_quote(pattern + '%')}"
    if kind in ("In", "NotIn"):
        values = ", ".join(_literal(v) for v in _sorted(e.literals))  # type: ignore[attr-defined]
        return f"{column} {'IN' if kind == 'In' else 'NOT IN'} ({values})"
    return str(e)


def _sorted(literals: Iterable[Literal[Any]]) -> list[Literal[Any]]:
    """In value order (2 before 10), or by text when the values do not compare."""
    try:
        return sorted(literals, key=lambda lit: lit.value)
    except TypeError:
        return sorted(literals, key=str)


def _column(term: Any) -> str:
    """A column reference: the name (dotted for a nested field) of an unbound
    term, the field's name of a bound one; quoted where it is not a plain
    identifier."""
    if hasattr(term, "ref"):
        names = [str(term.ref().field.name)]
    else:
        names = str(getattr(term, "name", term)).split(".")
    return ".".join(_identifier(n) for n in names)


def _identifier(name: str) -> str:
    if _PLAIN_NAME.fullmatch(name) and name.lower() not in _KEYWORDS:
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(lit: Literal[Any]) -> str:
    value = lit.value
    if isinstance(lit, StringLiteral):
        return _quote(str(value))
    if isinstance(lit, BooleanLiteral):
        return "true" if value else "false"
    if isinstance(lit, DateLiteral):
        return f"DATE '{days_to_date(value).isoformat()}'"
    if isinstance(lit, TimeLiteral):
        return f"TIME '{micros_to_time(value).isoformat()}'"
    if isinstance(lit, TimestampLiteral):
        return f"TIMESTAMP '{micros_to_timestamp(value).isoformat()}'"
    if isinstance(lit, UUIDLiteral):
        return f"UUID '{uuid.UUID(bytes=bytes(value))}'"
    if isinstance(lit, (FixedLiteral, BinaryLiteral)):
        return f"X'{bytes(value).hex()}'"
    return str(lit)  # numbers, decimals, AboveMax/BelowMin


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
