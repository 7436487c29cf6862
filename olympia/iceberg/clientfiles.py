"""The files REST clients wrote for a transaction's staged tables (spec/rest.md
§8, §10): the server writes only metadata files, and the data files,
manifests and manifest lists its clients wrote are found from the staged
metadata, so that whoever ends the transaction without committing it (the
client's rollback, a refused commit, the server rolling back an idle or
orphaned transaction, ``olympia txn rollback``, expiration for a
distributed transaction past its time to live) deletes them too."""

from __future__ import annotations

import logging
import time

from pyiceberg.exceptions import CommitFailedException

from olympia import errors as oe
from olympia.iceberg import names
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.iceberg.locations import LocationNotAllowedError, is_under
from olympia.iceberg.purge import normal_path
from olympia.iceberg.sidecar import FOLDER as SIDECAR_FOLDER
from olympia.iceberg.transaction import IcebergTransaction, added_files

logger = logging.getLogger(__name__)


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
    staged_now = txn.staged_locations()
    for identifier, state in txn.tables.items():
        namespace, name = names.table_name(identifier)
        staged = staged_now.get((namespace, name))
        if staged and staged != state.base_location:
            txn.claim_files(client_files(txn.owner, (namespace, name), state.base_location, staged))


def roll_back(owner: OlympiaCatalog, txn_id: str, *, expired: bool = False) -> None:
    """Roll back distributed transaction ``txn_id`` with what it wrote: the
    metadata files, the files its sidecar lists, those its clients wrote for
    its staged tables (:func:`note_client_files`), and its sidecar (spec/
    rest.md §8). With ``expired``, also one past its time to live (spec/
    iceberg.md §6, "Expiry").

    Raises:
        as ``olympia.Catalog.resume`` and ``IcebergTransaction.rollback``.
    """
    core = owner.olympia.resume(txn_id, max_attempts=owner.max_attempts, expired=expired)
    txn = IcebergTransaction(owner, core)
    txn.restore()
    note_client_files(txn)
    txn.rollback()


def roll_back_expired(owner: OlympiaCatalog) -> tuple[str, ...]:
    """Roll back (:func:`roll_back`) every distributed transaction past its
    time to live that has an Iceberg sidecar, before expiration drops its
    object and with it the record of what it wrote (spec/iceberg.md §6,
    "Expiry"); the ids rolled back. One that cannot be rolled back (another
    process is finishing it, its sidecar is damaged, storage fails) is
    logged and left to the core's expiration, which drops its object and
    leaves its files, as orphans."""
    storage = owner.olympia.store.storage
    if not storage.list(SIDECAR_FOLDER):
        return ()
    now = time.time() * 1000
    done: list[str] = []
    for info in owner.olympia.list_transactions(include_expired=True):
        if info.expires_at_millis >= now or not storage.exists(f"{SIDECAR_FOLDER}/{info.id}.json"):
            continue
        try:
            roll_back(owner, info.id, expired=True)
        except (oe.OlympiaError, CommitFailedException, OSError, ValueError) as exc:
            logger.warning(
                "expired distributed transaction %s was not rolled back with its files (%s); "
                "expiration drops it, and the files it wrote stay",
                info.id,
                exc,
            )
            continue
        done.append(info.id)
    return tuple(done)


__all__ = ["client_files", "note_client_files", "roll_back", "roll_back_expired"]
