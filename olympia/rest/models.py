"""Request bodies of the Iceberg REST API that PyIceberg has no model for
(or has one that is stricter than the specification).

Schemas, partition specs, sort orders, requirements, updates and view
versions are PyIceberg's own models, so that a body is validated against the
same definitions the catalog then applies.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.view.metadata import ViewVersion

from olympia.iceberg.views import ViewRequirement, ViewUpdate


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


class CreateTableRequest(_Body):
    """``location``, ``partition-spec`` and ``write-order`` are optional in
    the specification (PyIceberg's model requires them)."""

    name: str
    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)
    stage_create: bool = Field(alias="stage-create", default=False)
    properties: dict[str, str] = Field(default_factory=dict)


class RegisterTableRequest(_Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class RemoveOrphanFilesRequest(_Body):
    """olympia's orphan clean-up of one table (spec/rest.md §11): typed
    strictly, since it deletes files (``"dry-run": "no"`` is refused, not
    read as false)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore", strict=True)

    older_than_ms: int | None = Field(alias="older-than-ms", default=None)
    location: str | None = None
    dry_run: bool = Field(alias="dry-run", default=False)


class CommitTableRequest(_Body):
    """``identifier`` is optional on the single-table route (the path names
    the table) and required inside a ``CommitTransactionRequest``."""

    identifier: TableIdentifierModel | None = None
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class CommitViewRequest(_Body):
    """A view commit: the path names the view; ``identifier`` is optional."""

    identifier: TableIdentifierModel | None = None
    requirements: list[ViewRequirement] = Field(default_factory=list)
    updates: list[ViewUpdate] = Field(default_factory=list)


class CreateViewRequest(_Body):
    """``location`` is optional in the specification (PyIceberg's model requires it)."""

    name: str
    location: str | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)


class RegisterViewRequest(_Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")


class CommitTransactionRequest(_Body):
    table_changes: list[CommitTableRequest] = Field(alias="table-changes")
    # olympia's extension (spec/rest.md §3): the commit metadata of the
    # catalog version; Iceberg clients send none of these.
    commit_message: str | None = Field(default=None, alias="commit-message")
    commit_author: str | None = Field(default=None, alias="commit-author")
    commit_properties: dict[str, str] | None = Field(default=None, alias="commit-properties")


class ReportMetricsRequest(BaseModel):
    """A ``ScanReport`` or a ``CommitReport`` (the server checks it and discards it)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore", strict=True)

    report_type: str = Field(alias="report-type")
    table_name: str = Field(alias="table-name")
    snapshot_id: int = Field(alias="snapshot-id")
    metrics: dict[str, Any]
    metadata: dict[str, str] | None = None
    # a scan report
    filter: Any = None
    schema_id: int | None = Field(alias="schema-id", default=None)
    projected_field_ids: list[int] | None = Field(alias="projected-field-ids", default=None)
    projected_field_names: list[str] | None = Field(alias="projected-field-names", default=None)
    # a commit report
    sequence_number: int | None = Field(alias="sequence-number", default=None)
    operation: str | None = None

    @model_validator(mode="after")
    def _scan_or_commit(self) -> ReportMetricsRequest:
        given = self.model_fields_set
        scan = {"filter", "schema_id", "projected_field_ids", "projected_field_names"}
        commit = {"sequence_number", "operation"}
        if not (scan <= given or commit <= given):
            raise ValueError(
                "a metrics report is a scan report (filter, schema-id, projected-field-ids, "
                "projected-field-names) or a commit report (sequence-number, operation)"
            )
        return self


class BeginRequest(BaseModel):
    """``POST /txn`` (spec/rest.md §8)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    isolation: Literal["snapshot", "serializable"] | None = None
    distributed: bool = False
    message: str | None = None
    author: str | None = None
    properties: dict[str, str] | None = None


class TxnCommitRequest(BaseModel):
    """``POST /txn/{id}/commit`` (spec/rest.md §8): commit metadata to add."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message: str | None = None
    author: str | None = None
    properties: dict[str, str] | None = None
