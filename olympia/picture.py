"""Pictures of a catalog (SVG) for ``olympia graph``: the version history,
and the B-trees of two versions drawn as one graph, where a node file both
versions reach is drawn once, grey, with links from both trees.

Everything is laid out for a monospace font: a text's width is estimated
from its character count, so boxes, labels and the canvas are sized to what
they hold and no two texts overlap. All text is XML-escaped (names are user
input)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from olympia import validate
from olympia.catalog import Catalog
from olympia.errors import CorruptCatalogError
from olympia.keys import KeyCodec, ObjectType
from olympia.maintenance import VersionInfo
from olympia.node import ChildRef, Loader, Node
from olympia.proto import actions_pb2 as apb

A = apb.ActionType

# Fills are light so that black text stays readable; links and rings are darker.
_FILL_A, _FILL_B, _FILL_SHARED, _FILL_MORE = "#f7c58a", "#a9cdf0", "#d4d4d4", "#ffffff"
_LINE_A, _LINE_B = "#c46f0a", "#2467a8"
_REBASE, _ROLLBACK = "#7a4fb5", "#c0392b"
_SERIALIZABLE = "#d8e8ff"
_FONT = 'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace"'
_EM = 0.6  # width of a monospace character, in font sizes
_MARGIN = 20.0
_NAME_CELLS = 26  # longest name shown in a node box
_SUMMARY_CELLS = 18  # longest "what it did" under a version
#: Node files read to count the objects under the drawn boxes; past this,
#: an internal node shows its child count instead.
_COUNT_BUDGET = 4000


# --- text -------------------------------------------------------------------------


def _cells(text: str) -> int:
    """Monospace cells ``text`` takes: wide (East Asian) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _width(text: str, size: float) -> float:
    return _cells(text) * size * _EM


def _shorten(text: str, limit: int) -> str:
    """``text``, or its start and end around an ellipsis, in at most ``limit``
    cells (the end is kept: names often differ only there)."""
    if _cells(text) <= limit:
        return text
    room = limit - 1
    head_room = (room + 1) // 2
    head, used = "", 0
    for c in text:
        if used + _cells(c) > head_room:
            break
        head += c
        used += _cells(c)
    tail, used = "", 0
    for c in reversed(text):
        if used + _cells(c) > room - _cells(head):
            break
        tail = c + tail
        used += _cells(c)
    return head + "\u2026" + tail


def _text(
    x: float, y: float, text: str, size: float, *, anchor: str = "start", extra: str = ""
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}" '
        f"{_FONT}{extra}>{escape(text)}</text>"
    )


def _attr(text: str) -> str:
    return escape(text, {'"': "&quot;"})


# --- the history strip -----------------------------------------------------------

_CHANGES: dict[int, tuple[str, str]] = {
    A.NAMESPACE_CREATE: ("+", "ns"),
    A.NAMESPACE_ALTER: ("~", "ns"),
    A.NAMESPACE_DROP: ("-", "ns"),
    A.TABLE_CREATE: ("+", "table"),
    A.TABLE_UPDATE: ("~", "table"),
    A.TABLE_RENAME: ("~", "table"),
    A.TABLE_INSERT: ("~", "table"),
    A.TABLE_OVERWRITE: ("~", "table"),
    A.TABLE_DROP: ("-", "table"),
    A.VIEW_CREATE: ("+", "view"),
    A.VIEW_REPLACE: ("~", "view"),
    A.VIEW_DROP: ("-", "view"),
    A.TRANSACTION_CREATE: ("+", "dtxn"),
    A.TRANSACTION_UPDATE: ("~", "dtxn"),
    A.TRANSACTION_DROP: ("-", "dtxn"),
}
_PLURAL = {"table": "tables", "view": "views", "ns": "ns", "dtxn": "dtxns", "object": "objects"}
_SIGNS = "+~-"


def _changes(info: VersionInfo) -> str:
    """What a version's writes did, e.g. ``+2 tables ~1 table``."""
    counts: dict[tuple[str, str], int] = {}
    for action in info.actions:
        if action.read_only:
            continue
        change = _CHANGES.get(action.type, ("~", "object"))
        counts[change] = counts.get(change, 0) + 1
    parts = []
    for (sign, kind), n in sorted(counts.items(), key=lambda kv: _SIGNS.index(kv[0][0])):
        parts.append(f"{sign}{n} {kind if n == 1 else _PLURAL[kind]}")
    return " ".join(parts)


def _summary(info: VersionInfo) -> str:
    """A short note of what a version did, for under its circle."""
    if len(info.transactions) > 1:
        return f"{len(info.transactions)} txns"
    if any(a.type == A.CATALOG_ROLLBACK for a in info.actions):
        return "rollback"
    changes = _changes(info)
    if not changes:
        return "created" if info.version == 0 else "no change"
    if _cells(changes) > _SUMMARY_CELLS:
        n = sum(1 for a in info.actions if not a.read_only)
        return f"{n} changes"
    return changes


def _tooltip(info: VersionInfo) -> str:
    text = f"version {info.version}: {info.isolation or '-'}"
    if info.begin_version is not None:
        text += f", began at {info.begin_version}"
    if len(info.transactions) > 1:
        text += f", {len(info.transactions)} transactions (group commit)"
    rollback_to = info.rollback_to
    if rollback_to is not None:
        text += f", rollback to {rollback_to}"
    changes = _changes(info)
    return text + (f"; {changes}" if changes else "")


@dataclass
class _Section:
    """Drawn parts in their own coordinates, with their size."""

    parts: list[str]
    width: float
    height: float


@dataclass(frozen=True)
class _Arc:
    start: float
    end: float
    label: str
    colour: str
    pattern: str


def _place_arcs(arcs: list[_Arc], size: float) -> list[tuple[_Arc, int]]:
    """A level per arc, so that arcs whose spans or labels meet sit at
    different heights (shorter spans lower)."""
    placed: list[tuple[float, float, int]] = []
    out = []
    for arc in sorted(arcs, key=lambda a: (a.end - a.start, a.start)):
        mid, half = (arc.start + arc.end) / 2, _width(arc.label, size) / 2 + 4
        lo, hi = min(arc.start, mid - half), max(arc.end, mid + half)
        level = 1 + max((lv for a, b, lv in placed if a < hi and lo < b), default=-1)
        placed.append((lo, hi, level))
        out.append((arc, level))
    return out


def _history(infos: Sequence[VersionInfo], version_a: int, version_b: int) -> _Section:
    num_size, note_size, arc_size = 12.0, 10.0, 10.0
    numbers = [str(i.version) for i in infos]
    notes = [_shorten(_summary(i), _SUMMARY_CELLS) for i in infos]
    num_w = max(_width(n, num_size) for n in numbers)
    note_w = max(_width(n, note_size) for n in notes)
    step = max(30.0, num_w + 12)
    stagger = note_w + 10 > step
    if stagger:  # notes alternate between two rows: each has two steps of room
        step = max(step, (note_w + 10) / 2)
    first = infos[0].version
    arcs: list[_Arc] = []
    for info in infos:
        rollback_to = info.rollback_to
        if rollback_to is not None:
            arcs.append(
                _Arc(rollback_to, info.version, f"rollback to {rollback_to}", _ROLLBACK, "")
            )
        elif info.begin_version is not None and info.begin_version < info.version - 1:
            over = info.version - 1 - info.begin_version
            arcs.append(
                _Arc(
                    info.begin_version,
                    info.version,
                    f"rebased over {over}",
                    _REBASE,
                    ' stroke-dasharray="5 3"',
                )
            )
    # An arc from a version before the strip starts one step left of it.
    before = any(a.start < first for a in arcs)

    def offset(version: float) -> float:
        return (max(version, first - 1) - first) * step

    # far enough right for the first version's texts and every arc label
    x0 = max(
        [_MARGIN + max(num_w, note_w, 14) / 2 + (step if before else 0)]
        + [
            _MARGIN + _width(a.label, arc_size) / 2 + 2 - (offset(a.start) + offset(a.end)) / 2
            for a in arcs
        ]
    )

    def x_of(version: float) -> float:
        return x0 + offset(version)

    arcs = [_Arc(x_of(a.start), x_of(a.end), a.label, a.colour, a.pattern) for a in arcs]
    placed = _place_arcs(arcs, arc_size)
    top_levels = 1 + max((lv for _, lv in placed), default=-1)
    heading_y = 16.0
    line_y = heading_y + 16 + 20 + top_levels * 15
    last_x = x_of(infos[-1].version)
    heading = f"history: versions {first}..{infos[-1].version} (number, and what each did)"
    parts = [
        _text(_MARGIN, heading_y, heading, 13, extra=' font-weight="bold"'),
        f'<line x1="{x_of(first) - (step if before else 0):.1f}" y1="{line_y:.1f}" '
        f'x2="{last_x:.1f}" y2="{line_y:.1f}" stroke="#444" stroke-width="1.5"/>',
    ]
    labels = []
    for arc, level in placed:
        h = 18 + level * 15
        mid = (arc.start + arc.end) / 2
        parts.append(
            f'<path d="M {arc.start:.1f} {line_y:.1f} Q {mid:.1f} {line_y - 2 * h:.1f} '
            f'{arc.end:.1f} {line_y:.1f}" fill="none" stroke="{arc.colour}" '
            f'stroke-width="1.5"{arc.pattern}/>'
        )
        w = _width(arc.label, arc_size)
        labels.append(
            f'<rect x="{mid - w / 2 - 2:.1f}" y="{line_y - h - 11:.1f}" width="{w + 4:.1f}" '
            f'height="11" fill="#ffffff" fill-opacity="0.85"/>'
        )
        labels.append(
            _text(
                mid,
                line_y - h - 2.5,
                arc.label,
                arc_size,
                anchor="middle",
                extra=f' fill="{arc.colour}"',
            )
        )
    parts.extend(labels)  # over every arc
    for i, info in enumerate(infos):
        x = x_of(info.version)
        fill = _SERIALIZABLE if info.isolation == "serializable" else "#ffffff"
        ring = {version_a: _LINE_A, version_b: _LINE_B}.get(info.version)
        stroke = f'stroke="{ring}" stroke-width="3"' if ring else 'stroke="#333"'
        parts.append(
            f'<circle cx="{x:.1f}" cy="{line_y:.1f}" r="7" fill="{fill}" {stroke}>'
            f"<title>{escape(_tooltip(info))}</title></circle>"
        )
        parts.append(
            _text(
                x, line_y + 23, numbers[i], num_size, anchor="middle", extra=' font-weight="bold"'
            )
        )
        row = i % 2 if stagger else 0
        parts.append(
            _text(
                x,
                line_y + 37 + row * 12,
                notes[i],
                note_size,
                anchor="middle",
                extra=' fill="#333"',
            )
        )
    width = max(
        [last_x + max(num_w, note_w, 14) / 2 + _MARGIN]
        + [(a.start + a.end) / 2 + _width(a.label, arc_size) / 2 + 2 + _MARGIN for a in arcs]
    )
    height = line_y + 37 + (12 if stagger else 0) + 10
    title_w = 2 * _MARGIN + _width(heading, 13)
    return _Section(parts, max(width, title_w), height)


# --- the trees ---------------------------------------------------------------------


@dataclass
class _Box:
    """One drawn node (or a "+N more" box standing for left-out nodes)."""

    ident: str
    owner: str  # "a", "b", "shared" or "more"
    height: int
    pivot: str  # the smallest key below it, for ordering
    node: Node | None = None
    root_of: int | None = None
    hidden: int = 0  # for "more" boxes: how many nodes it stands for
    parents: list[str] = field(default_factory=list)
    lines: tuple[str, ...] = ()
    tooltip: str = ""
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0


class _Nodes:
    """Loads nodes, finds the names at both ends of a subtree and counts objects."""

    def __init__(self, load: Loader, keys: KeyCodec) -> None:
        self._load = load
        self._keys = keys
        self._counts: dict[str, int] = {}
        self._held: list[Node] = []
        self._budget = _COUNT_BUDGET

    def node(self, ref: ChildRef) -> Node:
        return ref if isinstance(ref, Node) else self._load(ref)

    def end_key(self, node: Node, last: bool) -> str | None:
        while not node.is_leaf and node.children:
            node = self.node(node.children[-1 if last else 0])
        if not node.keys:
            return None
        return node.keys[-1 if last else 0]

    def name(self, key: str | None) -> str:
        if key is None:
            return "(empty)"
        try:
            decoded = self._keys.decode(key)
        except CorruptCatalogError:
            return "?" + key[:20]
        name = ".".join(decoded.parts)
        prefix = {
            ObjectType.NAMESPACE: "ns:",
            ObjectType.VIEW: "view:",
            ObjectType.TRANSACTION: "dtxn:",
        }.get(decoded.object_type, "")
        return prefix + name

    def count(self, ref: ChildRef) -> int | None:
        """Objects under ``ref``, or None when counting would read too much."""
        ident = _ident(ref)
        if ident in self._counts:
            return self._counts[ident]
        node = self.node(ref)
        if node.is_leaf:
            return len(node.keys)
        total = 0
        for child in node.children:
            if self._budget <= 0:
                return None
            self._budget -= 1
            sub = self.count(child)
            if sub is None:
                return None
            total += sub
        self._counts[ident] = total
        if isinstance(ref, Node):
            self._held.append(ref)  # its id names it only while it lives
        return total


def _paths(root: Node, load: Loader) -> frozenset[str]:
    """The node files a tree reaches."""
    out: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_leaf:
            continue
        for child in node.children:
            if isinstance(child, Node):
                stack.append(child)
            else:
                out.add(child)
                if node.height > 1:
                    stack.append(load(child))
    return frozenset(out)


def _ident(ref: ChildRef) -> str:
    return f"inline:{id(ref)}" if isinstance(ref, Node) else ref


def _tree_rows(
    roots: list[tuple[int, Node, str]],
    reach: dict[str, frozenset[str]],
    nodes: _Nodes,
    max_per_level: int,
) -> list[list[_Box]]:
    """Rows of boxes, one per node height, highest first. A node both trees
    reach is one grey box, not entered (everything below it is shared too);
    rows longer than ``max_per_level`` keep the nodes only one version
    reaches first and fold runs of the others into "+N more" boxes."""
    top = max(node.height for _, node, _ in roots)
    candidates: dict[int, dict[str, _Box]] = {h: {} for h in range(top + 1)}
    for version, node, owner in roots:
        # roots come first in their row, version A's on the left
        box = _Box(f"root:{owner}", owner, node.height, "", node, root_of=version)
        candidates[node.height][box.ident] = box
    rows: list[list[_Box]] = []
    for height in range(top, -1, -1):
        found = sorted(
            candidates[height].values(), key=lambda b: (b.root_of is None, b.pivot, b.owner)
        )
        if len(found) > max_per_level:
            ranked = sorted(
                range(len(found)),
                key=lambda i: (found[i].root_of is None, found[i].owner == "shared", i),
            )
            keep = set(ranked[:max_per_level])
        else:
            keep = set(range(len(found)))
        row: list[_Box] = []
        for i, box in enumerate(found):
            if i in keep:
                row.append(box)
                continue
            if not row or row[-1].owner != "more":
                row.append(_Box(f"more:{height}:{i}", "more", height, box.pivot))
            more = row[-1]
            more.hidden += 1
            more.parents.extend(p for p in box.parents if p not in more.parents)
        for box in row:
            if box.owner in ("shared", "more"):
                continue
            node = box.node if box.node is not None else nodes.node(box.ident)
            box.node = node
            if node.is_leaf:
                continue
            for pivot, child in zip(node.keys, node.children):
                ident = _ident(child)
                shared = isinstance(child, str) and all(child in r for r in reach.values())
                child_box = candidates[height - 1].get(ident)
                if child_box is None:
                    child_box = _Box(ident, "shared" if shared else box.owner, height - 1, pivot)
                    if isinstance(child, Node):
                        child_box.node = child
                    candidates[height - 1][ident] = child_box
                child_box.parents.append(box.ident)
        rows.append(row)
    return rows


def _label(box: _Box, nodes: _Nodes, versions: dict[str, int]) -> None:
    if box.owner == "more":
        box.lines = (f"+{box.hidden} more", "node(s) not", "drawn")
        box.tooltip = f"{box.hidden} node(s) left out to keep the row short"
        return
    node = box.node if box.node is not None else nodes.node(box.ident)
    box.node = node
    first = nodes.name(nodes.end_key(node, last=False))
    last = nodes.name(nodes.end_key(node, last=True))
    on_file = not box.ident.startswith(("root:", "inline:"))
    count = nodes.count(box.ident if on_file else node)
    if count is not None:
        amount = f"{count} object{'s' if count != 1 else ''}"
    else:
        amount = f"{len(node.children)} children"
    if box.root_of is not None:
        whose = f"root of v{box.root_of}"
    elif box.owner == "shared":
        whose = "shared"
    else:
        whose = f"only v{versions[box.owner]}"
    box.lines = (
        _shorten(first, _NAME_CELLS),
        ("to " + _shorten(last, _NAME_CELLS - 3)) if last != first else "",
        f"{whose}, {amount}",
    )
    file = f"\nfile {box.ident}" if on_file else ""
    box.tooltip = f"{first} .. {last}\n{whose}, {amount}, height {node.height}{file}"


_BOX_SIZE, _LINE_H, _ROW_GAP, _BOX_GAP = 11.0, 14.0, 46.0, 12.0
_BOX_H = 3 * _LINE_H + 8


def _trees(
    cat: Catalog, version_a: int, version_b: int, max_per_level: int
) -> tuple[_Section, int]:
    store = cat.store
    a, b = cat.at_version(version_a), cat.at_version(version_b)
    owners = {"a": version_a, "b": version_b}
    with store.reading(min(version_a, version_b)):
        reach = {
            "a": _paths(a.root.node, store.load_node),
            "b": _paths(b.root.node, store.load_node),
        }
        nodes = _Nodes(store.load_node, b.keys)
        roots = [(version_a, a.root.node, "a")]
        if version_b != version_a:
            roots.append((version_b, b.root.node, "b"))
        rows = _tree_rows(roots, reach, nodes, max_per_level)
        for row in reversed(rows):  # leaves first: counts reuse the ones below
            for box in row:
                _label(box, nodes, owners)
    shared = len(reach["a"] & reach["b"])
    for row in rows:
        for box in row:
            box.w = max(_width(line, _BOX_SIZE) for line in box.lines) + 14
    row_w = [sum(b.w for b in row) + _BOX_GAP * (len(row) - 1) for row in rows]
    width = max(row_w) + 2 * _MARGIN
    heading = (
        f"trees of versions {version_a} and {version_b}: a box is a node file, "
        "labelled with the first and last name below it"
    )
    width = max(width, 2 * _MARGIN + _width(heading, 13))
    y = 34.0
    where: dict[str, _Box] = {}
    for row, w in zip(rows, row_w):
        x = (width - w) / 2
        for box in row:
            box.x, box.y = x, y
            x += box.w + _BOX_GAP
            where[box.ident] = box
        y += _BOX_H + _ROW_GAP
    parts = [_text(_MARGIN, 16, heading, 13, extra=' font-weight="bold"')]
    for row in rows:
        for box in row:
            for ident in box.parents:
                parent = where.get(ident)
                if parent is None:
                    continue
                colour = _LINE_A if parent.owner == "a" else _LINE_B
                parts.append(
                    f'<line x1="{parent.x + parent.w / 2:.1f}" y1="{parent.y + _BOX_H:.1f}" '
                    f'x2="{box.x + box.w / 2:.1f}" y2="{box.y:.1f}" stroke="{colour}" '
                    f'stroke-width="1.2" stroke-opacity="0.8"/>'
                )
    fills = {"a": _FILL_A, "b": _FILL_B, "shared": _FILL_SHARED, "more": _FILL_MORE}
    for row in rows:
        for box in row:
            border = ' stroke-dasharray="3 2"' if box.owner == "more" else ""
            root = ' stroke-width="2.5"' if box.root_of is not None else ' stroke-width="1"'
            parts.append(
                f'<g class="node {box.owner}"><title>{escape(box.tooltip)}</title>'
                f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{_BOX_H:g}" '
                f'rx="4" fill="{fills[box.owner]}" stroke="#333"{root}{border}/>'
            )
            for k, line in enumerate(box.lines):
                parts.append(_text(box.x + 7, box.y + 4 + _LINE_H * (k + 1) - 2, line, _BOX_SIZE))
            parts.append("</g>")
    return _Section(parts, width, y - _ROW_GAP + 8), shared


# --- the legend --------------------------------------------------------------------


def _legend(version_a: int, version_b: int, shared: int) -> _Section:
    def box(fill: str, dash: str = "") -> str:
        return (
            f'<rect x="0" y="-10" width="26" height="13" rx="3" fill="{fill}" stroke="#333"{dash}/>'
        )

    def line(colour: str, dash: str = "", width: float = 1.5) -> str:
        return f'<line x1="0" y1="-4" x2="26" y2="-4" stroke="{colour}" stroke-width="{width:g}"{dash}/>'

    def arc(colour: str, dash: str = "") -> str:
        return f'<path d="M 0 0 Q 13 -16 26 0" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>'

    def dot(fill: str, stroke: str = "#333", width: float = 1) -> str:
        # an ellipse, so that every <circle> of the picture is a version
        return f'<ellipse cx="13" cy="-4" rx="6" ry="6" fill="{fill}" stroke="{stroke}" stroke-width="{width:g}"/>'

    items = [
        (box(_FILL_A), f"version {version_a} (orange): a node only it reaches"),
        (box(_FILL_B), f"version {version_b} (blue): a node only it reaches"),
        (box(_FILL_SHARED), f"grey: {shared} node files both versions share, drawn once"),
        (box(_FILL_MORE, ' stroke-dasharray="3 2"'), "+N more: nodes left out of a full row"),
        (line(_LINE_A), f"a child link in version {version_a}'s tree"),
        (line(_LINE_B), f"a child link in version {version_b}'s tree"),
        (dot("#ffffff"), "a version committed under snapshot isolation"),
        (dot(_SERIALIZABLE), "a version committed under serializable isolation"),
        (dot("#ffffff", _LINE_A, 3), f"ringed: version {version_a}, drawn below in orange"),
        (dot("#ffffff", _LINE_B, 3), f"ringed: version {version_b}, drawn below in blue"),
        (
            arc(_REBASE, ' stroke-dasharray="5 3"'),
            "rebased over N: began N versions before it committed",
        ),
        (arc(_ROLLBACK), "rollback to V: from the version it restored"),
        ("", "under a version: +created ~changed -dropped; N txns: group commit"),
        ("", "ns: namespace, view: view, dtxn: distributed transaction state"),
    ]
    size, row_h = 11.0, 19.0
    half = (len(items) + 1) // 2
    col_w = max(_width(text, size) for _, text in items) + 40
    parts = [_text(0, 0, "legend", 13, extra=' font-weight="bold"')]
    for i, (swatch, text) in enumerate(items):
        x, y = (i // half) * (col_w + 20), 22 + (i % half) * row_h
        parts.append(
            f'<g transform="translate({x:.1f},{y:.1f})">{swatch}'
            f"{_text(34 if swatch else 0, 0, text, size)}</g>"
        )
    return _Section(parts, 2 * col_w + 20, 22 + half * row_h)


# --- the picture -------------------------------------------------------------------


def catalog_svg(
    cat: Catalog,
    version_a: int,
    version_b: int,
    *,
    max_versions: int = 40,
    max_per_level: int = 10,
) -> str:
    """An SVG picture: the last ``max_versions`` versions, each with its
    number and what it did, arcs for rebased commits and rollbacks; below,
    the trees of ``version_a`` (orange) and ``version_b`` (blue) as one graph
    in which node files both reach are drawn once, grey; then a legend.
    Rows of more than ``max_per_level`` nodes fold the rest into "+N more".

    Raises:
        VersionNotFoundError: a version does not exist or was expired.
        InvalidArgumentError: a version is not a version number, or a limit
            is not a positive integer.
    """
    validate.require_version("version_a", version_a)
    validate.require_version("version_b", version_b)
    validate.require_int("max_versions", max_versions, 1, 1_000_000)
    validate.require_int("max_per_level", max_per_level, 1, 1_000_000)
    infos = cat.history()[-max_versions:]
    history = _history(infos, version_a, version_b)
    trees, shared = _trees(cat, version_a, version_b, max_per_level)
    legend = _legend(version_a, version_b, shared)
    title = f"catalog {cat.uri}"
    title = _shorten(title, 120)
    sections = [(history, 34.0)]
    y = 34.0 + history.height + 16
    sections.append((trees, y))
    y += trees.height + 24
    sections.append((legend, y + 14))
    height = y + 14 + legend.height + _MARGIN
    width = max(
        history.width,
        trees.width,
        legend.width + 2 * _MARGIN,
        2 * _MARGIN + _width(title, 14),
    )
    body = [
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
        _text(_MARGIN, 22, title, 14, extra=' font-weight="bold"'),
    ]
    for section, top in sections:
        dx = _MARGIN if section is legend else 0.0
        if section is trees:
            dx = (width - trees.width) / 2
        body.append(f'<g transform="translate({dx:.1f},{top:.1f})">')
        body.extend(section.parts)
        body.append("</g>")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">\n' + "\n".join(body) + "\n</svg>\n"
    )
