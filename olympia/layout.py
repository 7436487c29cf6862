"""Where each kind of file lives under a catalog prefix (spec/format.md, "Layout")."""

from __future__ import annotations

import hashlib
import re
import time

from olympia.errors import CorruptCatalogError
from olympia.storage.local import TMP_DIR as TMP_DIR

VERSION_BITS = 64
VERSION_DIR = "vn"
NODE_DIR = "node"
DEF_DIR = "def"
#: Action files: the action records of one transaction (spec/format.md §3.5).
ACT_DIR = "act"
DTXN_DIR = "dtxn"
#: Records of exports and pins (spec/transactions.md §8.1-8.2).
EXPORT_DIR = "exports"
PIN_DIR = "pins"
#: Every folder directly under a catalog prefix that the catalog owns
#: (spec/format.md §2): no other catalog may live inside one of them, since
#: its files would read as this catalog's records or orphans.
CATALOG_FOLDERS = (VERSION_DIR, NODE_DIR, DEF_DIR, ACT_DIR, DTXN_DIR, EXPORT_DIR, PIN_DIR, TMP_DIR)
LATEST_HINT = f"{VERSION_DIR}/latest"
OLDEST_FLOOR = f"{VERSION_DIR}/oldest"
#: The marker horizon (spec/format.md §2.3, spec/transactions.md §8.6):
#: ``<h> <w>``, below which expiration may delete expired-root markers once
#: the horizon has matured.
MARKER_HORIZON = f"{VERSION_DIR}/horizon"
#: Versions are 0 <= v < 2**63 (spec/format.md §2.1): they fit a signed 64-bit
#: integer, and the most significant bit of a root file name is always 0.
MAX_VERSION = (1 << (VERSION_BITS - 1)) - 1


def version_file_name(version: int) -> str:
    """The 64-character root file name of ``version``: its binary digits, least significant first.

    Reversing the bits spreads consecutive versions over different key
    prefixes, which object stores partition by.
    """
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"version {version} out of range")
    return format(version, "064b")[::-1]


def parse_version_file_name(name: str) -> int:
    """Inverse of :func:`version_file_name`."""
    if len(name) != VERSION_BITS or set(name) - {"0", "1"} or name[-1] != "0":
        raise CorruptCatalogError(f"{name!r} is not a root file name")
    return int(name[::-1], 2)


#: The whole content of an *expired-root marker* (spec/format.md §2.3):
#: expiration of a catalog of format version 2 replaces the root file of a
#: version below the floor with these bytes instead of deleting it, so that
#: no writer can publish that version again. No root file (an Arrow IPC file)
#: can hold these bytes.
EXPIRED_ROOT = b"olympia-expired-root\n"


def is_expired_root(data: bytes) -> bool:
    """Whether the content of a root file path is an expired-root marker."""
    return data == EXPIRED_ROOT


def root_path(version: int) -> str:
    """Path of the root node file of ``version``."""
    return f"{VERSION_DIR}/{version_file_name(version)}"


#: A child reference to an inline node (spec/format.md §3.6): the root file
#: that carries it, then its index.
_INLINE_REF = re.compile(r"vn/([01]{63}0)/(0|[1-9][0-9]{0,8})")


def inline_ref(version: int, index: int) -> str:
    """How a parent names inline node ``index`` of the root of ``version``."""
    return f"{root_path(version)}/{index}"


def parse_inline_ref(ref: str) -> tuple[int, int] | None:
    """``(version, index)`` of an inline node reference, or None when ``ref``
    is not one."""
    m = _INLINE_REF.fullmatch(ref)  # (``$`` would let a final line break through)
    if m is None:
        return None
    return int(m.group(1)[::-1], 2), int(m.group(2))


def file_of(ref: str) -> str:
    """The file that holds what a child reference names: the root file for an
    inline node, the node file itself otherwise."""
    parsed = parse_inline_ref(ref)
    return ref if parsed is None else root_path(parsed[0])


_CONTENT_NAME = re.compile(r"^(node|def|act)/([0-9]{13,})-([0-9a-f]{32})\.(arrow|binpb)$")


def content_digest(data: bytes) -> str:
    """The 32 hex digits naming a node or definition file: the first 16 bytes of SHA-256."""
    return hashlib.sha256(data).hexdigest()[:32]


def _content_path(folder: str, data: bytes, ext: str) -> str:
    return f"{folder}/{int(time.time() * 1000):013d}-{content_digest(data)}.{ext}"


def node_path(data: bytes) -> str:
    """Path of a new non-root node file holding ``data``: creation time and content digest."""
    return _content_path(NODE_DIR, data, "arrow")


def action_path(data: bytes, millis: int | None = None, digest: str | None = None) -> str:
    """Path of a new action file holding ``data``, named at ``millis`` (now by
    default); ``digest``, when given, is ``content_digest(data)``."""
    if millis is None:
        millis = int(time.time() * 1000)
    return f"{ACT_DIR}/{millis:013d}-{digest or content_digest(data)}.arrow"


def def_path(data: bytes) -> str:
    """Path of a new definition file holding ``data``."""
    return _content_path(DEF_DIR, data, "binpb")


def content_matches(path: str, data: bytes) -> bool:
    """False when ``path`` names a content digest that ``data`` does not have.

    Paths without a digest (roots, hints) always match.
    """
    m = _CONTENT_NAME.match(path)
    return m is None or m.group(3) == content_digest(data)


def created_millis(path: str) -> int | None:
    """Creation time encoded in a node, action or definition file name."""
    m = _CONTENT_NAME.match(path)
    return int(m.group(2)) if m else None


def dtxn_state_path(txn_id: str, step: int) -> str:
    """Path of state number ``step`` of distributed transaction ``txn_id``."""
    return f"{DTXN_DIR}/{txn_id}/{step:020d}.binpb"


def encode_counter(value: int) -> bytes:
    """Content of the ``vn/latest`` and ``vn/oldest`` files."""
    return str(value).encode("ascii")


#: The width of the ``vn/latest`` hint: a fixed length lets local storage
#: overwrite it in place (spec/format.md §2, §9 item 3).
HINT_WIDTH = 20


def encode_hint(value: int) -> bytes:
    """Content of the ``vn/latest`` hint: the counter zero-padded to
    :data:`HINT_WIDTH` digits."""
    return str(value).zfill(HINT_WIDTH).encode("ascii")


def decode_counter(data: bytes) -> int | None:
    """Parse a ``vn/latest`` or ``vn/oldest`` file; ``None`` when damaged.

    Leading and trailing spaces, tabs, CRs and LFs are ignored (spec/format.md
    §2.2); anything else but 1 to 20 ASCII digits is damage.
    """
    text = data.strip(b" \t\r\n")
    if not 0 < len(text) <= 20 or not all(0x30 <= b <= 0x39 for b in text):
        return None
    value = int(text)
    return value if value <= MAX_VERSION else None


def encode_horizon(version: int, written_millis: int) -> bytes:
    """Content of ``vn/horizon``: the horizon version and the expiration
    clock (milliseconds since the Unix epoch) read after the floor at or
    above it was written."""
    return f"{version} {written_millis}".encode("ascii")


def decode_horizon(data: bytes) -> tuple[int, int] | None:
    """Parse ``vn/horizon``; ``None`` when damaged (treated as missing).

    Two counters of 1 to 20 ASCII digits each separated by exactly one
    space; as for counters, spaces, tabs, CRs and LFs around the whole are
    ignored."""
    parts = data.strip(b" \t\r\n").split(b" ")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    version, written = (decode_counter(p) for p in parts)
    if version is None or written is None:
        return None
    return version, written
