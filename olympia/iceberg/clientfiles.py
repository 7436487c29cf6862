"""The files REST clients wrote for a transaction's staged tables (spec/rest.md
§8, §10): the server writes only metadata files, and the data files,
manifests and manifest lists its clients wrote are found from the staged
metadata, so that whoever ends the transaction without committing it (the
client's rollback, a refused commit, the server rolling back an idle or
orphaned transaction, ``olympia txn rollback``) deletes them too."""

from __future__ import annotations

from olympia.iceberg import names
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.iceberg.locations import LocationNotAllowedError, is_under
from olympia.iceberg.purge import normal_path
from olympia.iceberg.transaction import IcebergTransaction, added_files


def client_files(
    owner: OlympiaCatalog, table: tuple[str, str], base_location: str | None, staged: str
) -> list[str]:
    """The files a client wrote for the snapshots that the staged metadata adds
    to the base (the server writes the metadata files itself), as far as the
    server can tell: only files under the table's own location (its location
    at the base, or where it was created), and none under another table's
    location or ``write.*.path`` (spec/rest.md §8, §10). What the staged metadata names elsewhere,
    or what can no longer be read, is left alone."""
    try:
        home_metadata = owner.read_metadata(base_location or staged)
        home = owner.locations.check(home_metadata.location, "the table's location")
        candidates = added_files(owner, base_location, staged, metadata=False)
    except (OSError, ValueError, LocationNotAllowedError):
        return []
    # Table locations do not overlap unless the operator allows it; only then
    # must every other table's location be looked at (a scan of the catalog).
    others = owner.table_places_but(exclude=table) if owner.locations.allow_overlap else []
    out: list[str] = []
    for path in candidates:
        normal = normal_path(owner, path)
        if normal is None:
            continue
        if is_under(normal, home) and not any(is_under(normal, o) for o in others):
            out.append(path)
    return out


def note_client_files(txn: IcebergTransaction) -> None:
    """Add to the transaction's written files those the REST clients wrote for
    its staged tables (:func:`client_files`), so that a rollback or a refused
    commit deletes them too: the server itself only writes metadata files."""
    core = txn.olympia_transaction
    for identifier, state in txn.tables.items():
        namespace, name = names.table_name(identifier)
        if not core.table_exists(namespace, name):
            continue
        staged = core.describe_table(namespace, name).metadata_location
        if staged and staged != state.base_location:
            txn.claim_files(client_files(txn.owner, (namespace, name), state.base_location, staged))


__all__ = ["client_files", "note_client_files"]
