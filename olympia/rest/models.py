"""Request bodies of the Iceberg REST API that PyIceberg has no model for
(or has one that is stricter than the specification).

Schemas, partition specs, sort orders, requirements, updates and view
versions are PyIceberg's own models, so that a body is validated against the
same definitions the catalog then applies.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.table.update import TableRequirement, TableUpdate


class _Body(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")


class CreateNamespaceRequest(_Body):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesRequest(_Body):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class TableIdentifierModel(_Body):
    namespace: list[str]
    name: str


class RenameTableRequest(_Body):
    source: TableIdentifierModel
    destination: TableIdentifierModel


class RegisterTableRequest(_Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class CommitTableRequest(_Body):
    """``identifier`` is optional on the single-table route (the path names
    the table) and required inside a ``CommitTransactionRequest``."""

    identifier: TableIdentifierModel | None = None
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class CommitTransactionRequest(_Body):
    table_changes: list[CommitTableRequest] = Field(alias="table-changes")
