"""Property tests: the copy-on-write tree against a plain dict."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olympia import tree
from olympia.errors import CorruptCatalogError
from olympia.node import EMPTY_LEAF, Node

ORDERS = [3, 4, 5, 7, 16]

key_st = st.integers(0, 400).map(lambda i: f"AAAC{i:05d}")
batch_st = st.dictionaries(
    key_st, st.one_of(st.none(), st.binary(min_size=1, max_size=6)), max_size=60
)


class FakeFiles:
    """Persists new nodes under fake paths so that later batches share them."""

    def __init__(self) -> None:
        self.files: dict[str, Node] = {}
        self.counter = itertools.count()

    def load(self, path: str) -> Node:
        return self.files[path]

    def persist(self, root: Node) -> Node:
        def walk(node: Node) -> Node:
            if node.is_leaf:
                return node
            kids = []
            for c in node.children:
                if isinstance(c, Node):
                    stored = walk(c)
                    path = f"node/{next(self.counter)}.arrow"
                    self.files[path] = stored
                    kids.append(path)
                else:
                    kids.append(c)
            return Node(node.height, node.keys, (), tuple(kids))

        return walk(root)


def _apply_ref(ref: dict[str, bytes], batch: dict[str, bytes | None]) -> None:
    for k, v in batch.items():
        if v is None:
            ref.pop(k, None)
        else:
            ref[k] = v


@pytest.mark.parametrize("order", ORDERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(batch_st, min_size=1, max_size=25),
    prefix=st.sampled_from(["AAAC", "AAAC000", "AAAC001", "AAAC0039", "AAAD"]),
)
def test_tree_matches_dict(order, batches, prefix):
    files = FakeFiles()
    root = EMPTY_LEAF
    ref: dict[str, bytes] = {}
    for batch in batches:
        before = dict(files.files)
        root = files.persist(tree.apply(root, sorted(batch.items()), order, files.load))
        _apply_ref(ref, batch)
        # Existing node files are never changed by a later commit.
        assert all(files.files[p] is n for p, n in before.items())
        assert tree.check(root, order, files.load) == len(ref)
        assert list(tree.scan(root, "", files.load)) == sorted(ref.items())
        expected = sorted((k, v) for k, v in ref.items() if k.startswith(prefix))
        assert list(tree.scan(root, prefix, files.load)) == expected
        for k in list(batch)[:10]:
            assert tree.get(root, k, files.load) == ref.get(k)


@pytest.mark.parametrize("order", ORDERS)
def test_single_change_copies_one_path(order):
    files = FakeFiles()
    root = files.persist(
        tree.apply(EMPTY_LEAF, [(f"AAAC{i:05d}", b"v") for i in range(2000)], order, files.load)
    )
    changed = tree.apply(root, [("AAAC01000", b"new")], order, files.load)
    # Only the nodes on the path to the changed key are new.
    assert len(tree.new_nodes(changed)) == root.height
    assert tree.get(changed, "AAAC01000", files.load) == b"new"
    assert tree.get(root, "AAAC01000", files.load) == b"v"


def test_delete_everything_gives_an_empty_leaf():
    files = FakeFiles()
    keys = [f"AAAC{i:05d}" for i in range(300)]
    root = files.persist(tree.apply(EMPTY_LEAF, [(k, b"v") for k in keys], 3, files.load))
    root = tree.apply(root, [(k, None) for k in keys], 3, files.load)
    assert root.is_leaf and len(root) == 0


def test_unsorted_changes_are_refused():
    with pytest.raises(ValueError, match="sorted"):
        tree.apply(EMPTY_LEAF, [("b", b"1"), ("a", b"2")], 4, lambda p: EMPTY_LEAF)


def test_check_detects_broken_structure():
    leaf_a = Node(0, ("a", "b"), (b"1", b"2"))
    leaf_b = Node(0, ("c", "d"), (b"3", b"4"))
    ok = Node(1, ("a", "c"), (), (leaf_a, leaf_b))
    assert tree.check(ok, 4, lambda p: EMPTY_LEAF) == 4
    wrong_pivot = Node(1, ("a", "c"), (), (leaf_a, Node(0, ("d", "e"), (b"3", b"4"))))
    with pytest.raises(CorruptCatalogError, match="pivot"):
        tree.check(wrong_pivot, 4, lambda p: EMPTY_LEAF)
    underfull = Node(1, ("a", "c"), (), (Node(0, ("a",), (b"1",)), leaf_b))
    with pytest.raises(CorruptCatalogError, match="minimum"):
        tree.check(underfull, 4, lambda p: EMPTY_LEAF)
    uneven = Node(2, ("a", "c"), (), (Node(1, ("a", "b"), (), (leaf_a, leaf_a)), leaf_b))
    with pytest.raises(CorruptCatalogError):
        tree.check(uneven, 4, lambda p: EMPTY_LEAF)


# Batches shaped like real catalog traffic: a few scattered creates and drops
# plus drops of contiguous key runs (a namespace and its tables sit together),
# which empty whole leaves next to leaves left with one entry.
SMALL_ORDERS = [3, 4, 5, 8]
_small_key = st.integers(0, 119).map(lambda i: f"AAAC{i:05d}")


@st.composite
def _mixed_batch(draw: st.DrawFn) -> dict[str, bytes | None]:
    batch: dict[str, bytes | None] = {}
    for _ in range(draw(st.integers(0, 2))):
        start = draw(st.integers(0, 119))
        for i in range(start, min(start + draw(st.integers(1, 12)), 120)):
            batch[f"AAAC{i:05d}"] = None
    batch.update(
        draw(
            st.dictionaries(
                _small_key, st.one_of(st.none(), st.binary(min_size=1, max_size=3)), max_size=6
            )
        )
    )
    return batch


@pytest.mark.parametrize("order", SMALL_ORDERS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.sets(st.integers(0, 119), min_size=10, max_size=120),
    batches=st.lists(_mixed_batch(), min_size=1, max_size=30),
)
def test_every_batch_keeps_the_fill_invariant(order, initial, batches):
    """spec/format.md §4: after every batch, every non-root node holds at
    least ceil(m/2) entries, and the content equals a dict model."""
    files = FakeFiles()
    ref = {f"AAAC{i:05d}": b"x" for i in initial}
    root = files.persist(tree.apply(EMPTY_LEAF, sorted(ref.items()), order, files.load))
    assert tree.check(root, order, files.load) == len(ref)
    for batch in batches:
        root = files.persist(tree.apply(root, sorted(batch.items()), order, files.load))
        _apply_ref(ref, batch)
        assert tree.check(root, order, files.load) == len(ref)
        assert list(tree.scan(root, "", files.load)) == sorted(ref.items())


def test_a_leaf_left_with_one_entry_beside_an_emptied_leaf_is_joined():
    """The case found first: order 3, a leaf emptied and its sibling left with
    one key under the same parent; the parent's single remaining child must
    not be carried, under-full, into the node it is joined with."""
    files = FakeFiles()
    k = [f"AAAC{i:05d}" for i in range(9)]

    def leaf(*idx: int) -> Node:
        return Node(0, tuple(k[i] for i in idx), tuple(b"v" for _ in idx))

    def inner(*leaves: Node) -> Node:
        return Node(1, tuple(c.keys[0] for c in leaves), (), leaves)

    left, right = inner(leaf(1, 2), leaf(3, 4)), inner(leaf(5, 6), leaf(7, 8))
    root = files.persist(Node(2, (k[1], k[5]), (), (left, right)))
    assert tree.check(root, 3, files.load) == 8
    root = files.persist(tree.apply(root, [(k[i], None) for i in (2, 3, 4)], 3, files.load))
    assert tree.check(root, 3, files.load) == 5
    assert [key for key, _ in tree.scan(root, "", files.load)] == [k[1], k[5], k[6], k[7], k[8]]


@given(
    st.lists(key_st, unique=True, max_size=40),
    st.dictionaries(key_st, st.one_of(st.none(), st.binary(max_size=3)), max_size=12),
)
def test_a_few_changes_merge_into_a_leaf_like_many(base, batch):
    """A leaf takes up to ``_FEW_CHANGES`` changes one by one and more in one
    pass: both give the leaf a dict would hold."""
    base = sorted(base)
    leaf = Node(0, tuple(base), tuple(k.encode() for k in base))
    everything = sorted(batch.items())
    for changes in (everything[: tree._FEW_CHANGES], everything):
        expected: dict[str, bytes] = dict(zip(leaf.keys, leaf.values, strict=True))
        for k, v in changes:
            if v is None:
                expected.pop(k, None)
            else:
                expected[k] = v
        keys, values = tree._merge_leaf(leaf, changes)
        assert keys == sorted(expected)
        assert values == [expected[k] for k in keys]


@pytest.mark.parametrize("order", [16, 40, 128])
def test_a_bulk_load_leaves_room_in_its_nodes(order):
    """Leaves cut from a large batch hold at most 7/8 of the order (of 16 or
    more), so that one more key in any leaf of a freshly loaded tree splits
    nothing."""
    files = FakeFiles()
    n = 40 * order
    root = files.persist(
        tree.apply(EMPTY_LEAF, [(f"AAAC{i:06d}", b"v") for i in range(n)], order, files.load)
    )
    assert tree.check(root, order, files.load) == n
    leaves, _ = tree._leaves(root, files.load, frozenset())
    sizes = [len(files.load(leaf) if isinstance(leaf, str) else leaf) for leaf in leaves]
    assert max(sizes) <= order * 7 // 8 and min(sizes) >= tree.min_fill(order)
    grown = tree.apply(root, [("AAAC000000x", b"new")], order, files.load)
    assert len(tree._leaves(grown, files.load, frozenset())[0]) == len(leaves)
