"""Deleting a table's file (spec/iceberg.md §2): on a local file system
with the checksum file Hadoop writes beside every file Spark writes there
(``.<name>.crc``), which no metadata names and nothing else would delete."""

from __future__ import annotations

import contextlib
import posixpath

from pyiceberg.io import FileIO


def checksum_file(path: str) -> str | None:
    """The Hadoop checksum file of local file ``path`` (``file:`` or a bare
    path), or None for a path of another file system."""
    scheme, sep, _ = path.partition("://")
    if sep and scheme != "file":
        return None
    if not sep and ":" in path.split("/", 1)[0] and not path.startswith("file:"):
        return None  # another scheme spelt without "//"
    folder, name = posixpath.split(path)
    if not name or name.startswith("."):
        return None
    return f"{folder}/.{name}.crc"


#: The first bytes of every checksum file Hadoop writes (ChecksumFileSystem).
CHECKSUM_MAGIC = b"crc\x00"


def delete_file(io: FileIO, path: str) -> None:
    """Delete ``path`` through ``io`` (raising what ``io.delete`` raises),
    then, quietly, its Hadoop checksum file if it is a local file and the
    file at that name is one (it starts with :data:`CHECKSUM_MAGIC`: a table
    may hold a data file of any name)."""
    io.delete(path)
    crc = checksum_file(path)
    if crc is None:
        return
    with contextlib.suppress(OSError, ValueError):
        with io.new_input(crc).open() as found:
            if found.read(len(CHECKSUM_MAGIC)) != CHECKSUM_MAGIC:
                return
        io.delete(crc)


__all__ = ["checksum_file", "delete_file"]
