"""Copy-on-write B+ tree operations. Pure functions; nodes come through a loader.

Changes are applied in batches: :func:`apply` takes a sorted list of
``(key, value or None)`` and returns a new root, copying only the nodes on
the paths to changed keys and sharing every other subtree with the old
tree. A transaction keeps its pending changes apart from the root it
started from and can replay them onto any newer root with the same call.

Invariants (checked by :func:`check`), for order ``m`` and ``lo = ceil(m/2)``:
keys strictly increase within a node; every node holds at most ``m``
entries; every node but the root holds at least ``lo``; an internal root has
at least two children; all leaves are at height 0 and each child is one
lower than its parent; an internal node's key ``i`` is the smallest key of
child ``i``'s subtree.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence

from olympia.errors import CorruptCatalogError
from olympia.node import EMPTY_LEAF, ChildRef, Loader, Node, Value

Change = tuple[str, "Value | None"]


def min_fill(order: int) -> int:
    """Smallest number of entries of a non-root node."""
    return (order + 1) // 2


def resolve(ref: ChildRef, loader: Loader) -> Node:
    """The node behind a child reference."""
    return ref if isinstance(ref, Node) else loader(ref)


def get(root: Node, key: str, loader: Loader) -> Value | None:
    """The value stored under ``key``, or None."""
    node = root
    while not node.is_leaf:
        i = bisect_right(node.keys, key) - 1
        if i < 0:
            return None
        node = resolve(node.children[i], loader)
    i = bisect_left(node.keys, key)
    if i < len(node.keys) and node.keys[i] == key:
        return node.values[i]
    return None


#: Children a scan asks to have loaded together first, and at most later on.
#: 128, the default node order, is every child of a node in one batch: one
#: round trip per node on S3 (a listing of 10,000 tables reads its leaves
#: in one). A scan stopped after its first key (a drop's "namespace is
#: empty" check) may have asked for more leaves than it reads.
_PREFETCH_FIRST = 128
_PREFETCH_MAX = 128

Prefetch = Callable[[Sequence[str]], None]


def scan(
    root: Node,
    prefix: str,
    loader: Loader,
    start: str | None = None,
    prefetch: Prefetch | None = None,
) -> Iterator[tuple[str, Value]]:
    """Yield ``(key, value)`` for every key starting with ``prefix``, in order.

    ``start`` (inclusive), when given, skips keys below it. ``prefetch``,
    when given, is handed the paths of sibling children the scan is about to
    read (up to 128 at a time: every child of a node of the default
    order), so that a loader can fetch them together instead of one after
    another.
    """
    lower = max(prefix, start) if start is not None else prefix
    yield from _scan(root, prefix, lower, loader, prefetch)


def _scan(
    node: Node, prefix: str, lower: str, loader: Loader, prefetch: Prefetch | None
) -> Iterator[tuple[str, Value]]:
    if node.is_leaf:
        for i in range(bisect_left(node.keys, lower), len(node.keys)):
            key = node.keys[i]
            if not key.startswith(prefix):
                return
            yield key, node.values[i]
        return
    first = max(bisect_right(node.keys, lower) - 1, 0)
    end = first + 1  # children [first, end) may hold keys under the prefix
    while end < len(node.keys) and (node.keys[end] <= prefix or node.keys[end].startswith(prefix)):
        end += 1
    fetched, window = first, _PREFETCH_FIRST
    for i in range(first, end):
        if prefetch is not None and i >= fetched:
            paths = [c for c in node.children[i : min(i + window, end)] if not isinstance(c, Node)]
            if len(paths) > 1:
                prefetch(paths)
            fetched, window = i + window, min(window * 4, _PREFETCH_MAX)
        yield from _scan(resolve(node.children[i], loader), prefix, lower, loader, prefetch)


def apply(root: Node, changes: Sequence[Change], order: int, loader: Loader) -> Node:
    """Return the root of the tree ``root`` with ``changes`` applied.

    ``changes`` must be sorted by key without repeats; a value of None deletes
    the key (deleting a missing key is a no-op). Returned nodes that are new
    are in-memory :class:`Node` objects; unchanged subtrees keep their paths.
    """
    if order < 3:
        raise ValueError("B-tree order must be at least 3")
    if not changes:
        return root
    for a, b in itertools.pairwise(changes):
        if a[0] >= b[0]:
            raise ValueError("changes must be sorted by key without repeats")
    level = _apply(root, changes, order, loader)
    height = root.height
    while len(level) > 1:
        height += 1
        level = [_internal(height, chunk) for chunk in _split_even(level, order)]
    if not level:
        return EMPTY_LEAF
    top = level[0]
    while not top.is_leaf and len(top.children) == 1:
        top = resolve(top.children[0], loader)
    return top


def _internal(height: int, children: Sequence[ChildRef | Node]) -> Node:
    keys = tuple(c.keys[0] for c in children if isinstance(c, Node))
    assert len(keys) == len(children)
    return Node(height=height, keys=keys, children=tuple(children))


#: Leaves cut from a long run hold at most 7/8 of an order at least this big.
_ROOMY_ORDER = 16


def _pieces(n: int, order: int, leaves: bool = False) -> int:
    """How many nodes ``n`` sorted entries are cut into: one when they fit;
    else the fewest nodes that hold them, except that ``leaves`` of an order
    of at least :data:`_ROOMY_ORDER` get the fewest of at most 7/8 of the
    order where that keeps every one at least :func:`min_fill` full (as when
    a bulk load is cut up), so that the next insert into such a leaf does
    not split it at once. Internal nodes are cut full: they grow only when a
    leaf splits."""
    if n <= order:
        return 1
    fewest = -(-n // order)
    if not leaves or order < _ROOMY_ORDER:
        return fewest
    return max(fewest, min(-(-n // (order * 7 // 8)), n // min_fill(order)))


def _split_even(items: Sequence[Node], order: int) -> list[list[Node]]:
    n = len(items)
    if n <= order:
        return [list(items)]
    k = _pieces(n, order)
    base, extra = divmod(n, k)
    out: list[list[Node]] = []
    start = 0
    for i in range(k):
        size = base + (1 if i < extra else 0)
        out.append(list(items[start : start + size]))
        start += size
    return out


def _chunks(
    node_height: int, keys: list[str], items: list[Value] | list[ChildRef], order: int
) -> list[Node]:
    """Cut sorted entries into nodes of even size within the fan-out bounds."""
    n = len(keys)
    if n == 0:
        return []
    k = _pieces(n, order, leaves=node_height == 0)
    base, extra = divmod(n, k)
    out: list[Node] = []
    start = 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        if node_height == 0:
            out.append(Node(0, tuple(keys[start:end]), tuple(items[start:end])))  # type: ignore[arg-type]
        else:
            out.append(Node(node_height, tuple(keys[start:end]), (), tuple(items[start:end])))  # type: ignore[arg-type]
        start = end
    return out


#: A leaf takes at most this many changes one by one (a binary search and a
#: list insert or delete each); more are merged in one pass over the leaf.
_FEW_CHANGES = 8


def _merge_leaf(node: Node, changes: Sequence[Change]) -> tuple[list[str], list[Value]]:
    if len(changes) <= _FEW_CHANGES:
        keys = list(node.keys)
        values = list(node.values)
        for key, value in changes:
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                if value is None:
                    del keys[i], values[i]
                else:
                    values[i] = value
            elif value is not None:
                keys.insert(i, key)
                values.insert(i, value)
        return keys, values
    keys = []
    values = []
    old_k, old_v = node.keys, node.values
    i = j = 0
    n, c = len(old_k), len(changes)
    while i < n or j < c:
        if j >= c or (i < n and old_k[i] < changes[j][0]):
            keys.append(old_k[i])
            values.append(old_v[i])
            i += 1
            continue
        ck, cv = changes[j]
        if i < n and old_k[i] == ck:
            i += 1
        if cv is not None:
            keys.append(ck)
            values.append(cv)
        j += 1
    return keys, values


#: A child of an internal node being built: its pivot key, the child, and
#: whether the child's whole subtree is known to satisfy the invariants.
_Entry = tuple[str, ChildRef, bool]


def _apply(node: Node, changes: Sequence[Change], order: int, loader: Loader) -> list[Node]:
    """Nodes of the same height as ``node`` that replace it; may be empty.

    Every node of the result with at least ``min_fill(order)`` entries has a
    subtree that satisfies all invariants. Only a result of a single node may
    be under-full; such a node with one entry may sit on a chain of
    single-entry nodes down to an under-full node, which the caller repairs
    by joining it with a sibling (:func:`_join`) or, at the top, by
    collapsing the chain.
    """
    if node.is_leaf:
        keys, values = _merge_leaf(node, changes)
        return _chunks(0, keys, values, order)

    lo = min_fill(order)
    pivots, kids = node.keys, node.children
    n = len(pivots)
    entries: list[_Entry] = []
    sound = True  # every entry so far is sound: nothing to rebalance
    done = 0  # the children before this one are in ``entries`` already
    ci = 0
    while ci < len(changes) and n:
        # The child whose range holds the next change (the first child also
        # takes keys below its pivot), and the changes that fall in it.
        i = max(bisect_right(pivots, changes[ci][0]) - 1, 0)
        cj = ci + 1
        if i + 1 < n:
            upper = pivots[i + 1]
            while cj < len(changes) and changes[cj][0] < upper:
                cj += 1
        else:
            cj = len(changes)
        # Untouched children go in as they are, sound, without a step each.
        entries.extend(zip(pivots[done:i], kids[done:i], itertools.repeat(True)))
        for new in _apply(resolve(kids[i], loader), changes[ci:cj], order, loader):
            full = len(new) >= lo
            sound = sound and full
            entries.append((new.keys[0], new, full))
        done, ci = i + 1, cj
    entries.extend(zip(pivots[done:], kids[done:], itertools.repeat(True)))
    # With every entry sound, _rebalance would return them unchanged.
    merged = entries if sound else _rebalance(entries, order, loader)
    return _chunks(node.height, [e[0] for e in merged], [e[1] for e in merged], order)


def _rebalance(entries: list[_Entry], order: int, loader: Loader) -> list[_Entry]:
    """Join every entry that is not known to be sound with a neighbour.

    In the result every entry is sound, except when the result is a single
    entry (there was no neighbour to join with).
    """
    lo = min_fill(order)
    merged: list[_Entry] = []
    for entry in entries:
        if merged and not (merged[-1][2] and entry[2]):
            left = resolve(merged.pop()[1], loader)
            right = resolve(entry[1], loader)
            for part in _join(left, right, order, loader):
                merged.append((part.keys[0], part, len(part) >= lo))
        else:
            merged.append(entry)
    return merged


def _join(left: Node, right: Node, order: int, loader: Loader) -> list[Node]:
    """The entries of two adjacent nodes of one height, re-cut into nodes.

    An under-full node from below may hang on a chain of single-entry nodes,
    so joining two internal nodes joins their children again where they
    meet (recursively), rather than only concatenating them: otherwise an
    under-full grandchild would end up inside a node that looks full.
    """
    if left.is_leaf:
        return _chunks(0, list(left.keys + right.keys), list(left.values + right.values), order)
    lo = min_fill(order)
    entries: list[_Entry] = [
        (key, child, not isinstance(child, Node) or len(child) >= lo)
        for side in (left, right)
        for key, child in zip(side.keys, side.children, strict=True)
    ]
    merged = _rebalance(entries, order, loader)
    return _chunks(left.height, [e[0] for e in merged], [e[1] for e in merged], order)


def new_nodes(root: Node) -> list[Node]:
    """The in-memory nodes below ``root`` (not ``root`` itself), children first."""
    out: list[Node] = []

    def walk(node: Node) -> None:
        for c in node.children:
            if isinstance(c, Node):
                walk(c)
                out.append(c)

    walk(root)
    return out


def check(root: Node, order: int, loader: Loader) -> int:
    """Verify every invariant of the tree under ``root``; return its key count.

    Raises:
        CorruptCatalogError: describing the first violation found.
    """
    lo = min_fill(order)

    def walk(node: Node, is_root: bool, lower: str | None, upper: str | None) -> int:
        keys = node.keys
        if any(a >= b for a, b in itertools.pairwise(keys)):
            raise CorruptCatalogError("keys not strictly increasing in a node")
        if len(keys) > order:
            raise CorruptCatalogError(f"node holds {len(keys)} entries, order is {order}")
        if not is_root and len(keys) < lo:
            raise CorruptCatalogError(f"non-root node holds {len(keys)} entries, minimum is {lo}")
        if keys and (
            (lower is not None and keys[0] < lower) or (upper is not None and keys[-1] >= upper)
        ):
            raise CorruptCatalogError("node keys outside the range given by its parent")
        if node.is_leaf:
            if len(node.values) != len(keys) or node.children:
                raise CorruptCatalogError("leaf entry count mismatch")
            return len(keys)
        if is_root and len(keys) < 2:
            raise CorruptCatalogError("internal root with fewer than two children")
        if len(node.children) != len(keys) or node.values:
            raise CorruptCatalogError("internal entry count mismatch")
        total = 0
        for i, ref in enumerate(node.children):
            child = resolve(ref, loader)
            if child.height != node.height - 1:
                raise CorruptCatalogError("leaves at different depths")
            if not child.keys or child.keys[0] != keys[i]:
                raise CorruptCatalogError("pivot key differs from the child's smallest key")
            total += walk(child, False, keys[i], keys[i + 1] if i + 1 < len(keys) else upper)
        return total

    return walk(root, True, None, None)


def _leaves(root: Node, loader: Loader, skip: frozenset[str]) -> tuple[list[str | Node], set[str]]:
    """The leaves under ``root`` (paths, or the nodes themselves when not
    written yet) and every child path seen; subtrees whose path is in
    ``skip`` are not entered."""
    leaves: list[str | Node] = []
    seen: set[str] = set()

    def walk(node: Node) -> None:
        if node.is_leaf:
            leaves.append(node)
            return
        for child in node.children:
            if isinstance(child, Node):
                walk(child)
                continue
            seen.add(child)
            if child in skip:
                continue
            if node.height == 1:
                leaves.append(child)
            else:
                walk(loader(child))

    walk(root)
    return leaves, seen


def unshared_leaves(a: Node, b: Node, loader: Loader) -> list[str | Node]:
    """The leaves of tree ``a`` that tree ``b`` does not reach by the same
    path (paths, or nodes not written yet), after reading every internal node
    of both trees that is not shared; leaves themselves are not read."""
    _, paths_b = _leaves(b, loader, frozenset())
    only_a, _ = _leaves(a, loader, frozenset(paths_b))
    return only_a


def diff(a: Node, b: Node, loader: Loader) -> Iterator[tuple[str, Value | None, Value | None]]:
    """``(key, value in a, value in b)`` for every key whose value differs
    between the trees ``a`` and ``b`` (None: absent), in key order.

    Node files are named by their content, so a subtree both trees reach by
    the same path is identical and is not read: the cost is proportional to
    the nodes that differ (plus the internal nodes of both trees).
    """
    _, paths_a = _leaves(a, loader, frozenset())
    _, paths_b = _leaves(b, loader, frozenset())
    shared = frozenset(paths_a & paths_b)
    only_a, _ = _leaves(a, loader, shared)
    only_b, _ = _leaves(b, loader, shared)

    def entries(leaves: list[str | Node]) -> dict[str, Value]:
        out: dict[str, Value] = {}
        for leaf in leaves:
            node = loader(leaf) if isinstance(leaf, str) else leaf
            out.update(zip(node.keys, node.values))
        return out

    left, right = entries(only_a), entries(only_b)
    for key in sorted(left.keys() | right.keys()):
        va, vb = left.get(key), right.get(key)
        if va != vb:
            yield key, va, vb
