"""Argument checks for the public API.

Every public method calls these on its first lines, before it reads or writes
anything, so that a bad argument never reaches pyarrow, protobuf, the storage
backends or the catalog files. Each check raises
:class:`~olympia.errors.InvalidArgumentTypeError` for a value of the wrong type
and :class:`~olympia.errors.InvalidArgumentError` for a value out of range;
names of catalog objects raise :class:`~olympia.errors.InvalidNameError`.
Every message starts with ``argument '<name>'`` so the caller can tell which
argument was wrong.

Text is *valid* when it can be encoded as UTF-8: Python strings may hold lone
surrogates (``"\\ud800"``), which no file of the catalog can store.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from olympia.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidNameError
from olympia.keys import KeyCodec, validate_name, validate_transaction_id
from olympia.layout import MAX_VERSION
from olympia.storage import uri_problem

_SHOWN = 60


def show(value: object) -> str:
    """A short description of ``value`` for messages: its type and a clipped repr."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the real error
        text = "<unprintable>"
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    return f"{type(value).__name__} {text}"


def _type_error(arg: str, expected: str, value: object) -> InvalidArgumentTypeError:
    return InvalidArgumentTypeError(f"argument {arg!r} must be {expected}, got {show(value)}")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as UTF-8, or None if it can."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"is not valid Unicode text: it holds the lone surrogate "
            f"{value[exc.start]!r} at position {exc.start}"
        )
    return None


def require_text(arg: str, value: object, *, non_empty: bool = False) -> str:
    """A string that UTF-8 can encode (no lone surrogates)."""
    if not isinstance(value, str):
        raise _type_error(arg, "a string", value)
    problem = text_problem(value)
    if problem is not None:
        raise InvalidArgumentError(f"argument {arg!r} {problem}")
    if non_empty and not value:
        raise InvalidArgumentError(f"argument {arg!r} must not be empty")
    return value


def require_optional_text(arg: str, value: object, *, non_empty: bool = False) -> str | None:
    """None, or what :func:`require_text` accepts."""
    return None if value is None else require_text(arg, value, non_empty=non_empty)


def require_bytes(arg: str, value: object) -> bytes:
    """A ``bytes`` object (not ``str``, not a mutable buffer)."""
    if not isinstance(value, bytes):
        raise _type_error(arg, "bytes", value)
    return value


def require_bool(arg: str, value: object) -> bool:
    """``True`` or ``False`` (not 0/1, not None)."""
    if not isinstance(value, bool):
        raise _type_error(arg, "True or False", value)
    return value


def require_int(arg: str, value: object, low: int, high: int) -> int:
    """An ``int`` (never a ``bool``) with ``low <= value <= high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(arg, "an integer", value)
    if not low <= value <= high:
        raise InvalidArgumentError(
            f"argument {arg!r} must be an integer in [{low}, {high}], got {value}"
        )
    return value


def require_version(arg: str, value: object) -> int:
    """A catalog version: an ``int`` with ``0 <= value < 2**63`` (spec/format.md §2.1)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(arg, "a version, a non-negative integer", value)
    if not 0 <= value <= MAX_VERSION:
        raise InvalidArgumentError(
            f"argument {arg!r} must be a version, a non-negative integer below 2**63, got {value}"
        )
    return value


def require_optional_version(arg: str, value: object) -> int | None:
    """None, or what :func:`require_version` accepts."""
    return None if value is None else require_version(arg, value)


def require_seconds(arg: str, value: object) -> float:
    """A finite, non-negative ``int`` or ``float`` (never a ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _type_error(arg, "a number of seconds", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(f"argument {arg!r} must be finite, got {value}")
    if value < 0:
        raise InvalidArgumentError(f"argument {arg!r} must not be negative, got {value}")
    return float(value)


def require_datetime(arg: str, value: object) -> datetime:
    """A timezone-aware :class:`datetime.datetime`.

    Naive datetimes are refused: the catalog records UTC instants, and a
    naive value could mean local time or UTC.
    """
    if not isinstance(value, datetime):
        raise _type_error(arg, "a timezone-aware datetime.datetime", value)
    try:
        offset = value.utcoffset()
    except Exception as exc:  # a tzinfo that fails to answer
        raise InvalidArgumentError(
            f"argument {arg!r} has a time zone that gives no UTC offset ({exc})"
        ) from None
    if offset is None:
        raise InvalidArgumentError(
            f"argument {arg!r} must be timezone-aware (e.g. datetime.now(timezone.utc)), "
            f"got the naive datetime {value.isoformat()}"
        )
    return value


def require_optional_datetime(arg: str, value: object) -> datetime | None:
    """None, or what :func:`require_datetime` accepts."""
    return None if value is None else require_datetime(arg, value)


def require_choice(
    arg: str, value: object, choices: Collection[str], *, fold_case: bool = True
) -> str:
    """One of ``choices`` (compared case-insensitively if ``fold_case``)."""
    text = require_text(arg, value)
    if (text.lower() if fold_case else text) not in choices:
        raise InvalidArgumentError(
            f"argument {arg!r} must be one of {sorted(choices)}, got {text!r}"
        )
    return text


def require_text_mapping(arg: str, value: object) -> dict[str, str]:
    """None (an empty dict) or a mapping from text to text; returns a copy."""
    if value is None:
        return {}
    what = f"argument {arg!r}: properties must map strings to strings"
    if not isinstance(value, Mapping):
        raise InvalidArgumentTypeError(f"{what}, got {show(value)}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise InvalidArgumentTypeError(f"{what}, got the key {show(k)}")
        problem = text_problem(k)
        if problem is not None:
            raise InvalidArgumentError(f"argument {arg!r}: the property name {k!r} {problem}")
        if not isinstance(v, str):
            raise InvalidArgumentTypeError(f"{what}, got {k!r}: {show(v)}")
        problem = text_problem(v)
        if problem is not None:
            raise InvalidArgumentError(f"argument {arg!r}: the value of property {k!r} {problem}")
        out[k] = v
    return out


def require_text_collection(arg: str, value: object) -> list[str]:
    """None (an empty list), or a list, tuple or set of text; returns a list."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple | set | frozenset):
        raise _type_error(arg, "a list of strings", value)
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidArgumentTypeError(
                f"argument {arg!r} must be a list of strings; item {i} is {show(item)}"
            )
        problem = text_problem(item)
        if problem is not None:
            raise InvalidArgumentError(f"argument {arg!r}: item {i} {problem}")
    return items


def require_storage_options(arg: str, value: object) -> dict[str, Any] | None:
    """None or a mapping with string keys (the values go to the backend as they are)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _type_error(arg, "a mapping of option names to values, or None", value)
    for k in value:
        if not isinstance(k, str):
            raise InvalidArgumentTypeError(
                f"argument {arg!r} must have string option names, got {show(k)}"
            )
        problem = text_problem(k)
        if problem is not None:
            raise InvalidArgumentError(f"argument {arg!r}: the option name {k!r} {problem}")
    return dict(value)


def require_location(arg: str, value: object) -> str:
    """A storage location: non-empty text without NUL characters, of a supported protocol."""
    text = require_text(arg, value, non_empty=True)
    if "\x00" in text:
        raise InvalidArgumentError(f"argument {arg!r} must not contain NUL characters")
    problem = uri_problem(text)
    if problem is not None:
        raise InvalidArgumentError(f"argument {arg!r}: {text[:80]!r} {problem}")
    return text


def _renamed(arg: str, exc: InvalidNameError) -> InvalidNameError:
    return InvalidNameError(f"argument {arg!r}: {exc}")


def require_name(arg: str, kind: str, value: object, max_size: int) -> str:
    """A valid name for a ``kind`` object (spec/format.md §5)."""
    try:
        return validate_name(kind, value, max_size)
    except InvalidNameError as exc:
        raise _renamed(arg, exc) from None


def require_namespace(keys: KeyCodec, arg: str, value: object) -> str:
    """A valid namespace name for the catalog whose keys ``keys`` encodes."""
    return require_name(arg, "namespace", value, keys.namespace_max)


def require_table_name(keys: KeyCodec, arg: str, value: object) -> str:
    """A valid table name for the catalog whose keys ``keys`` encodes."""
    return require_name(arg, "table", value, keys.table_max)


def require_view_name(keys: KeyCodec, arg: str, value: object) -> str:
    """A valid view name for the catalog whose keys ``keys`` encodes."""
    return require_name(arg, "view", value, keys.view_max)


def require_transaction_id(arg: str, value: object) -> str:
    """1 to 64 characters from ``A-Z a-z 0-9 _ -``."""
    try:
        return validate_transaction_id(value)
    except InvalidNameError as exc:
        raise _renamed(arg, exc) from None


def require_export_name(arg: str, value: object) -> str:
    """Export names follow the rule of transaction ids."""
    if not isinstance(value, str):
        raise InvalidNameError(
            f"argument {arg!r}: an export name must be a string, got {show(value)}"
        )
    try:
        return validate_transaction_id(value)
    except InvalidNameError:
        raise InvalidNameError(
            f"argument {arg!r}: invalid export name {value!r}: use 1-64 of A-Z a-z 0-9 _ -"
        ) from None
