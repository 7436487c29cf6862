"""Object keys: how catalog objects are named inside the B-tree (spec/format.md, "Object keys").

A key is the object type id as four base64 characters followed by the
object's name parts. In format version 2 (*compact* keys) every part but the
last is followed by one space and the last by nothing; in format version 1
(*padded* keys) every part is padded with spaces to the maximum size the
catalog definition allows. Because every allowed name character sorts above
the space (and names hold no space), comparing keys of either encoding
compares names part by part, and all tables of a namespace share one key
prefix.
"""

from __future__ import annotations

import base64
import enum
import functools
import re
from dataclasses import dataclass

from olympia.errors import CorruptCatalogError, InvalidNameError

PAD = " "
TYPE_PREFIX_LEN = 4
TRANSACTION_ID_MAX_SIZE = 64


class ObjectType(enum.IntEnum):
    """Type ids of catalog objects. The id is part of the format."""

    NAMESPACE = 1
    TABLE = 2
    VIEW = 3
    TRANSACTION = 4


@functools.cache
def type_prefix(object_type: ObjectType) -> str:
    """The 4-character base64 encoding of the 3-byte big-endian type id."""
    return base64.b64encode(int(object_type).to_bytes(3, "big")).decode("ascii")


_PREFIX_TO_TYPE = {type_prefix(t): t for t in ObjectType}

#: The code points a name must not contain (spec/format.md §5.1). The list is
#: explicit so that it does not depend on the Unicode version of the runtime:
#: C0 and C1 controls, the space and every other White_Space character (the
#: line and paragraph separators U+2028/U+2029 among them), surrogates, the 66
#: noncharacters and ``\``. All other code points, including ones not yet
#: assigned, are allowed; ``/`` among them, as Iceberg allows it (a name never
#: becomes a path without being encoded, spec/iceberg.md §2).
FORBIDDEN_NAME_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x0020),  # C0 controls and the space
    (0x005C, 0x005C),  # \
    (0x007F, 0x00A0),  # DEL, C1 controls, no-break space
    (0x1680, 0x1680),  # ogham space mark
    (0x2000, 0x200A),  # en quad .. hair space
    (0x2028, 0x2029),  # line separator, paragraph separator
    (0x202F, 0x202F),  # narrow no-break space
    (0x205F, 0x205F),  # medium mathematical space
    (0x3000, 0x3000),  # ideographic space
    (0xD800, 0xDFFF),  # surrogates
    (0xFDD0, 0xFDEF),  # noncharacters
    *((plane + 0xFFFE, plane + 0xFFFF) for plane in range(0, 0x110000, 0x10000)),
)
_FORBIDDEN_NAME_CHAR = re.compile(
    "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in FORBIDDEN_NAME_RANGES) + "]"
)


def validate_name(kind: str, name: object, max_size: int) -> str:
    """Return ``name`` if it may name a ``kind`` object, else raise InvalidNameError.

    A name is a non-empty string of at most ``max_size`` code points with no
    code point of :data:`FORBIDDEN_NAME_RANGES` (controls, whitespace,
    surrogates, noncharacters, ``\\``) and no ``..``; ``/`` is allowed.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a string, got {type(name).__name__}")
    return _validate_str(kind, name, max_size)


@functools.lru_cache(maxsize=65536)
def _validate_str(kind: str, name: str, max_size: int) -> str:
    if not name:
        raise InvalidNameError(f"{kind} name must not be empty")
    if len(name) > max_size:
        raise InvalidNameError(
            f"{kind} name {name[:40]!r}... is {len(name)} characters, the catalog allows {max_size}"
        )
    if ".." in name:
        raise InvalidNameError(f"{kind} name {name!r} must not contain '..'")
    bad = _FORBIDDEN_NAME_CHAR.search(name)
    if bad is not None:
        raise InvalidNameError(
            f"{kind} name {name!r} contains forbidden character {bad.group()!r} "
            f"(U+{ord(bad.group()):04X})"
        )
    return name


def validate_transaction_id(txn_id: object) -> str:
    """Transaction ids are 1-64 characters from ``[A-Za-z0-9_-]``."""
    if not isinstance(txn_id, str):
        raise InvalidNameError(f"a transaction id must be a string, got {type(txn_id).__name__}")
    if not 0 < len(txn_id) <= TRANSACTION_ID_MAX_SIZE or not all(
        c.isascii() and (c.isalnum() or c in "_-") for c in txn_id
    ):
        raise InvalidNameError(
            f"invalid transaction id {txn_id[:80]!r}: use 1-64 of A-Z a-z 0-9 _ -"
        )
    return txn_id


@dataclass(frozen=True)
class DecodedKey:
    """A key taken apart: the object type and its name parts."""

    object_type: ObjectType
    parts: tuple[str, ...]


@dataclass(frozen=True)
class KeyCodec:
    """Encodes and decodes object keys for one catalog definition."""

    namespace_max: int
    table_max: int
    view_max: int
    #: Compact keys (format version 2): parts separated by one space, the last
    #: unpadded. Otherwise padded keys (format version 1).
    compact: bool = False

    def _pad(self, kind: str, name: str, size: int) -> str:
        """A name part followed by more parts (the namespace of a table key)."""
        name = validate_name(kind, name, size)
        return name + PAD if self.compact else name.ljust(size, PAD)

    def _last(self, kind: str, name: str, size: int) -> str:
        """The last name part of a key."""
        name = validate_name(kind, name, size)
        return name if self.compact else name.ljust(size, PAD)

    def namespace(self, namespace: str) -> str:
        """Key of a namespace."""
        return type_prefix(ObjectType.NAMESPACE) + self._last(
            "namespace", namespace, self.namespace_max
        )

    def table(self, namespace: str, name: str) -> str:
        """Key of a table."""
        return self.tables_prefix(namespace) + self._last("table", name, self.table_max)

    def view(self, namespace: str, name: str) -> str:
        """Key of a view."""
        return self.views_prefix(namespace) + self._last("view", name, self.view_max)

    def table_and_view_keys(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """``(key, kind)`` of the table and of the view ``namespace.name`` could be.

        Table and view widths are independent (spec/format.md §5): a name
        wider than the view width can only be a table and the other way round,
        so the kind whose width it exceeds is left out, not refused.

        Raises:
            InvalidNameError: the name fits neither width, or is invalid.
        """
        name = validate_name("table or view", name, max(self.table_max, self.view_max))
        found = []
        if len(name) <= self.table_max:
            found.append((self.table(namespace, name), "table"))
        if len(name) <= self.view_max:
            found.append((self.view(namespace, name), "view"))
        return found

    def transaction(self, txn_id: str) -> str:
        """Key of a distributed transaction."""
        txn_id = validate_transaction_id(txn_id)
        if not self.compact:
            txn_id = txn_id.ljust(TRANSACTION_ID_MAX_SIZE, PAD)
        return type_prefix(ObjectType.TRANSACTION) + txn_id

    def namespaces_prefix(self) -> str:
        """Prefix shared by all namespace keys."""
        return type_prefix(ObjectType.NAMESPACE)

    def tables_prefix(self, namespace: str) -> str:
        """Prefix shared by the keys of all tables of ``namespace``."""
        return type_prefix(ObjectType.TABLE) + self._pad("namespace", namespace, self.namespace_max)

    def views_prefix(self, namespace: str) -> str:
        """Prefix shared by the keys of all views of ``namespace``."""
        return type_prefix(ObjectType.VIEW) + self._pad("namespace", namespace, self.namespace_max)

    def transactions_prefix(self) -> str:
        """Prefix shared by all distributed transaction keys."""
        return type_prefix(ObjectType.TRANSACTION)

    def decode(self, key: str) -> DecodedKey:
        """Split ``key`` into its type and names.

        Raises:
            CorruptCatalogError: the key does not follow the encoding.
        """
        object_type = _PREFIX_TO_TYPE.get(key[:TYPE_PREFIX_LEN])
        body = key[TYPE_PREFIX_LEN:]
        widths: tuple[int, ...]
        if object_type is ObjectType.NAMESPACE:
            widths = (self.namespace_max,)
        elif object_type is ObjectType.TABLE:
            widths = (self.namespace_max, self.table_max)
        elif object_type is ObjectType.VIEW:
            widths = (self.namespace_max, self.view_max)
        elif object_type is ObjectType.TRANSACTION:
            widths = (TRANSACTION_ID_MAX_SIZE,)
        else:
            raise CorruptCatalogError(f"object key {key[:40]!r} has an unknown type prefix")
        if self.compact:
            return DecodedKey(object_type, self._split(key, body, widths))
        if len(body) != sum(widths):
            raise CorruptCatalogError(f"object key {key.rstrip()!r} has the wrong length")
        parts = []
        start = 0
        for width in widths:
            parts.append(body[start : start + width].rstrip(PAD))
            start += width
        return DecodedKey(object_type, tuple(parts))

    @staticmethod
    def _split(key: str, body: str, widths: tuple[int, ...]) -> tuple[str, ...]:
        """The name parts of a compact key body: separated by single spaces,
        each 1 to its width code points."""
        parts = tuple(body.split(PAD))
        if len(parts) != len(widths) or not all(
            0 < len(part) <= width for part, width in zip(parts, widths)
        ):
            raise CorruptCatalogError(
                f"object key {key[:200]!r} does not hold {len(widths)} name part(s) "
                "separated by single spaces, each within its width"
            )
        return parts
