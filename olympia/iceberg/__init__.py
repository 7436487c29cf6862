"""Apache Iceberg tables in an olympia catalog, through PyIceberg (spec/iceberg.md).

The only package of olympia that knows Iceberg metadata; nothing else in
olympia imports it. Needs ``pip install 'olympia[iceberg]'``.
"""

from olympia.iceberg.catalog import OlympiaCatalog, storage_options
from olympia.iceberg.errors import CommitConflictException
from olympia.iceberg.names import InvalidNamespaceError
from olympia.iceberg.transaction import (
    IcebergTransaction,
    OlympiaTable,
    TableState,
    TransactionCatalog,
)

__all__ = [
    "CommitConflictException",
    "IcebergTransaction",
    "InvalidNamespaceError",
    "OlympiaCatalog",
    "OlympiaTable",
    "TableState",
    "TransactionCatalog",
    "storage_options",
]
