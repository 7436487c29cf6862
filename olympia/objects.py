"""What the catalog API returns: plain frozen records, converted from protobuf."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from olympia.errors import CorruptCatalogError
from olympia.proto import objects_pb2 as pb

M = TypeVar("M", bound=Message)


def parse(message_type: type[M], data: bytes, what: str) -> M:
    """Parse ``data`` as ``message_type``.

    Raises:
        CorruptCatalogError: naming ``what``.
    """
    msg = message_type()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptCatalogError(f"stored definition of {what} is damaged: {exc}") from None
    return msg


@dataclass(frozen=True)
class NamespaceInfo:
    name: str
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, msg: pb.Namespace) -> NamespaceInfo:
        return cls(msg.name, dict(msg.properties))


@dataclass(frozen=True)
class TableInfo:
    namespace: str
    name: str
    metadata_location: str
    properties: dict[str, str] = field(default_factory=dict)
    format: str = "iceberg"

    @classmethod
    def from_proto(cls, msg: pb.Table) -> TableInfo:
        return cls(msg.namespace, msg.name, msg.metadata_location, dict(msg.properties), msg.format)


@dataclass(frozen=True)
class ViewInfo:
    namespace: str
    name: str
    sql_text: str = ""
    dialect: str = ""
    substrait_plan: bytes = b""
    schema_json: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    metadata_location: str = ""

    @classmethod
    def from_proto(cls, msg: pb.View) -> ViewInfo:
        return cls(
            msg.namespace,
            msg.name,
            msg.sql_text,
            msg.dialect,
            msg.substrait_plan,
            msg.schema_json,
            dict(msg.properties),
            msg.metadata_location,
        )


@dataclass(frozen=True)
class TransactionInfo:
    """A distributed transaction as listed by ``Catalog.list_transactions``."""

    id: str
    isolation: str
    begin_version: int
    created_at_millis: int
    expires_at_millis: int
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, msg: pb.DistributedTransaction) -> TransactionInfo:
        return cls(
            msg.id,
            msg.isolation,
            msg.begin_version,
            msg.created_at_millis,
            msg.expires_at_millis,
            dict(msg.properties),
        )


@dataclass(frozen=True)
class ObjectChange:
    """One object that differs between two versions (``Catalog.diff``).

    ``kind`` is ``namespace``, ``table``, ``view`` or ``transaction``;
    ``parts`` its name (namespace, or namespace and name, or transaction id);
    ``change`` is ``added``, ``removed`` or ``changed``.
    """

    kind: str
    parts: tuple[str, ...]
    change: str

    @property
    def name(self) -> str:
        return ".".join(self.parts)
