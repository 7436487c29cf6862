"""In-memory B-tree nodes. Immutable; no I/O.

A node holds sorted keys. A leaf pairs each key with a value; an internal
node pairs each key with a child, the key being the smallest key in that
child's subtree (the "pivot"). A child is either the path of a node file
already on storage or a :class:`Node` not yet written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class DefRef:
    """A value stored in a definition file instead of inline."""

    path: str


Value = Union[bytes, DefRef]  # noqa: UP007
ChildRef = Union[str, "Node"]


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """One B-tree node. ``height`` is 0 for leaves and grows towards the root."""

    height: int
    keys: tuple[str, ...]
    values: tuple[Value, ...] = ()
    children: tuple[ChildRef, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return self.height == 0

    def __len__(self) -> int:
        return len(self.keys)


EMPTY_LEAF = Node(height=0, keys=())

#: Turns the path of a node file into the node; raises CorruptCatalogError.
Loader = Callable[[str], Node]
