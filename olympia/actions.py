"""The actions of a transaction, in order, kept compactly (spec/transactions.md §1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from olympia.conflicts import CONTENT_WRITES, MEMBER_READS, MEMBER_WRITES, READ_TYPES, Footprint
from olympia.proto import actions_pb2 as apb

A = apb.ActionType

#: One recorded action, kept compact: (type, object key, target key, payload).
#: The payload of a read is its ``found`` flag (a read has no other field);
#: that of any other action is the action serialized deterministically.
_Record = tuple[int, str, str, "bytes | bool"]


class ActionLog:
    """The actions of a transaction, in order, stored as compact records
    rather than protobuf messages: a message costs over a kilobyte of memory,
    which a transaction of a million writes cannot afford. Indexing and
    iterating give :class:`apb.Action` messages, built on demand."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: list[_Record] = []

    @staticmethod
    def _pack(action: apb.Action) -> _Record:
        t, key = int(action.type), action.object_key
        if t in READ_TYPES and action.read_only:
            canonical = apb.Action(
                type=cast(Any, t), object_key=key, read_only=True, found=action.found
            )
            if canonical == action:  # nothing else set: the flag says it all
                return (t, key, "", bool(action.found))
        return (t, key, action.target_key, action.SerializeToString(deterministic=True))

    @staticmethod
    def _unpack(record: _Record) -> apb.Action:
        t, key, _, payload = record
        if isinstance(payload, bool):
            return apb.Action(type=cast(Any, t), object_key=key, read_only=True, found=payload)
        return apb.Action.FromString(payload)

    def __len__(self) -> int:
        return len(self._records)

    def __bool__(self) -> bool:
        return bool(self._records)

    def __iter__(self) -> Iterator[apb.Action]:
        return (self._unpack(r) for r in self._records)

    def since(self, start: int) -> list[apb.Action]:
        """The actions from index ``start`` on, as messages."""
        return [self._unpack(r) for r in self._records[start:]]

    def records(self, start: int = 0) -> list[_Record]:
        return self._records[start:] if start else self._records

    def append(self, action: apb.Action) -> None:
        self._records.append(self._pack(action))

    def append_read(self, action_type: int, key: str, found: bool) -> None:
        self._records.append((action_type, key, "", found))

    def append_write(self, action: apb.Action, key: str | None = None) -> None:
        """Record a write; ``key`` is ``action.object_key`` when the caller has it."""
        self._records.append(
            (
                int(action.type),
                action.object_key if key is None else key,
                action.target_key,
                action.SerializeToString(deterministic=True),
            )
        )

    def truncate(self, length: int) -> None:
        del self._records[length:]

    def writes(self) -> Iterator[apb.Action]:
        """The write actions, as messages, one at a time."""
        for t, _, _, payload in self._records:
            if t in _WRITE_TYPES and not isinstance(payload, bool):
                yield apb.Action.FromString(payload)

    def has_write(self) -> bool:
        return any(r[0] in _WRITE_TYPES for r in self._records)

    def patch_location(self, key: str, location: str) -> int:
        """Point every TABLE_UPDATE of ``key`` at ``location``; how many there were."""
        found = 0
        for i, (t, k, target, payload) in enumerate(self._records):
            if t != A.TABLE_UPDATE or k != key or isinstance(payload, bool):
                continue
            action = apb.Action.FromString(payload)
            action.table.metadata_location = location
            if "metadata_location" not in action.update_fields:
                action.update_fields.append("metadata_location")
            self._records[i] = (t, k, target, action.SerializeToString(deterministic=True))
            found += 1
        return found

    def encoded(self) -> Iterator[tuple[str, bytes]]:
        """``(object key, serialized action)`` per action, for the root or
        action file (spec/format.md §3.2)."""
        for t, key, _, payload in self._records:
            if isinstance(payload, bool):
                yield key, _read_bytes(t, key, payload)
            else:
                yield key, payload

    def footprint(self, version: int, begin: int) -> Footprint:
        """The footprint of these actions, without building a message per
        action where the record tells enough."""
        fp = Footprint(version, begin)
        member_reads, writes = fp.member_reads, fp.writes
        for t, key, target, payload in self._records:
            # The two most common records first: an existence check and a create.
            if t in MEMBER_READS:
                member_reads.add(key)
            elif t in _PLAIN_MEMBER_WRITES and key not in fp.alter_props:
                writes[key] = True
            elif isinstance(payload, bool) or t in _PLAIN_FOOTPRINT:
                fp.add_plain(t, key, target)
            else:
                fp.add(apb.Action.FromString(payload))
        return fp


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_bytes(action_type: int, key: str, found: bool) -> bytes:
    """``Action(type, object_key=key, read_only=True, found=found)`` serialized
    deterministically, written directly: fields in number order, defaults
    left out (the protobuf wire format; tests compare with protobuf's own)."""
    raw = key.encode("utf-8")
    out = [b"\x08" + _varint(action_type)] if action_type else []
    if raw:
        out.append(b"\x12" + _varint(len(raw)) + raw)
    out.append(b"\x50\x01\x58\x01" if found else b"\x50\x01")  # read_only, found
    return b"".join(out)


#: Action types whose footprint needs only type, key and target key.
_PLAIN_FOOTPRINT = (MEMBER_WRITES | CONTENT_WRITES | READ_TYPES) - {A.NAMESPACE_ALTER}
#: What :func:`is_write` calls a write.
_WRITE_TYPES = MEMBER_WRITES | CONTENT_WRITES
#: Membership writes whose footprint is the key alone (not a rename).
_PLAIN_MEMBER_WRITES = MEMBER_WRITES - {A.TABLE_RENAME}
