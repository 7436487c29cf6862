"""When storage says a file was written (spec/iceberg.md §6, §7).

A rollback, a refused commit and a rebased commit delete files that staged
metadata names as the transaction's own. Staged metadata may come from a
client, and may name a file that only an older catalog version reads (a
table dropped and created again at the same place, a snapshot expired from
the table's metadata): such a file was written before the metadata the
transaction started from, and the time storage gives it tells so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from pyiceberg.io import FileIO

logger = logging.getLogger(__name__)

#: How much earlier than a version's commit time a file may say it was
#: written and still count as written after it: file systems stamp files
#: from a coarse clock (a tick of a few milliseconds), and an object store's
#: clock is not the writer's.
CLOCK_SLACK_MILLIS = 1000


def written_before(io: FileIO, paths: Sequence[str], committed_millis: int) -> set[str]:
    """Those of ``paths`` that storage says were last written more than
    :data:`CLOCK_SLACK_MILLIS` before ``committed_millis`` (a commit's time,
    ms since the epoch), or whose time it cannot tell (the FileIO gives
    none, the request failed); a missing file is neither. One request per
    file on an object store, up to 16 at a time."""
    millis = committed_millis - CLOCK_SLACK_MILLIS

    def before(path: str) -> bool:
        try:
            written = modified_millis(io, path)
        except FileNotFoundError:
            return False
        return written is None or written < millis

    if len(paths) <= 1:
        return {p for p in paths if before(p)}
    with ThreadPoolExecutor(min(16, len(paths))) as pool:
        return {p for p, old in zip(paths, pool.map(before, paths)) if old}


def modified_millis(io: FileIO, path: str) -> int | None:
    """When storage says ``path`` was last written (ms since the epoch), or
    None when ``io`` cannot tell: PyIceberg's PyArrow and fsspec FileIOs
    can, through the file system they wrap; another FileIO cannot.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    try:
        found = io.new_input(path)
        info = getattr(found, "_file_info", None)  # PyArrowFile
        if callable(info):
            stamp: object = info().mtime
        else:
            fs = getattr(found, "_fs", None)  # FsspecInputFile
            if fs is None:
                return None
            details = fs.info(found.location)
            stamp = next(
                (details[k] for k in ("mtime", "LastModified", "last_modified") if details.get(k)),
                None,
            )
    except FileNotFoundError:
        raise
    except Exception:  # a FileIO's own error: the time is unknown, not the file
        logger.debug("cannot tell when %s was written", path, exc_info=True)
        return None
    if isinstance(stamp, datetime):
        return int(stamp.timestamp() * 1000)  # a naive one is local time, as written
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return int(stamp * 1000)  # fsspec's local file system: seconds
    return None
