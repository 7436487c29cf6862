"""Pictures of a catalog (SVG): its version history, and the trees of two
versions with the node files they share. Used by ``olympia graph``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from olympia.catalog import Catalog
from olympia.maintenance import VersionInfo
from olympia.node import Loader, Node

_SHARED, _ONLY_A, _ONLY_B = "#b0b0b0", "#f0a040", "#4a90d9"
_FONT = 'font-family="monospace"'


@dataclass(frozen=True)
class _Box:
    label: str
    colour: str
    children: tuple[int, ...]  # indexes into the next level's boxes


def _tree_levels(
    root: Node, other: frozenset[str], colour: str, load: Loader, max_per_level: int
) -> list[list[_Box]]:
    """Boxes per level, root first. A child whose file the other version also
    reaches is shared: drawn grey, not entered (its whole subtree is shared)."""
    levels: list[list[_Box]] = []
    frontier: list[tuple[Node | None, str, str]] = [(root, "root", colour)]
    while frontier:
        boxes: list[_Box] = []
        nxt: list[tuple[Node | None, str, str]] = []
        for node, label, col in frontier[:max_per_level]:
            kids: list[int] = []
            if node is not None and not node.is_leaf:
                for child in node.children:
                    if len(nxt) >= max_per_level:
                        break
                    if isinstance(child, Node):
                        nxt.append((child, "new", colour))
                    elif child in other:
                        nxt.append((None, child.rsplit("-", 1)[-1][:6], _SHARED))
                    else:
                        nxt.append((load(child), child.rsplit("-", 1)[-1][:6], colour))
                    kids.append(len(nxt) - 1)
            boxes.append(_Box(label, col, tuple(kids)))
        if len(frontier) > max_per_level:
            boxes.append(_Box(f"+{len(frontier) - max_per_level}", "#ffffff", ()))
        levels.append(boxes)
        frontier = nxt
    return levels


def _paths(root: Node, load: Loader) -> frozenset[str]:
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


def _draw_tree(levels: list[list[_Box]], x0: float, y0: float, width: float) -> list[str]:
    parts: list[str] = []
    pos: list[list[tuple[float, float]]] = []
    for depth, boxes in enumerate(levels):
        step = width / max(len(boxes), 1)
        pos.append([(x0 + step * (i + 0.5), y0 + depth * 60) for i in range(len(boxes))])
    for depth, boxes in enumerate(levels[:-1]):
        for i, box in enumerate(boxes):
            px, py = pos[depth][i]
            for k in box.children:
                cx, cy = pos[depth + 1][k]
                parts.append(
                    f'<line x1="{px:.1f}" y1="{py + 9:.1f}" x2="{cx:.1f}" y2="{cy - 9:.1f}" '
                    f'stroke="#888" stroke-width="0.7"/>'
                )
    for depth, boxes in enumerate(levels):
        for i, box in enumerate(boxes):
            x, y = pos[depth][i]
            w = max(8.0, min(44.0, width / max(len(boxes), 1) - 2))
            parts.append(
                f'<rect x="{x - w / 2:.1f}" y="{y - 9:.1f}" width="{w:.1f}" height="18" '
                f'fill="{box.colour}" stroke="#333" stroke-width="0.5"/>'
            )
            if w >= 36:
                parts.append(
                    f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" font-size="11" {_FONT}>'
                    f"{escape(box.label)}</text>"
                )
    return parts


def _draw_history(infos: Sequence[VersionInfo], width: float) -> list[str]:
    parts: list[str] = []
    if not infos:
        return parts
    step = (width - 80) / max(len(infos) - 1, 1)
    x_of = {info.version: 40 + i * step for i, info in enumerate(infos)}
    y = 70
    parts.append(
        f'<line x1="40" y1="{y}" x2="{x_of[infos[-1].version]:.1f}" y2="{y}" stroke="#333"/>'
    )
    for info in infos:
        x = x_of[info.version]
        begin = info.begin_version
        if begin is not None and begin < info.version - 1 and begin in x_of:
            bx = x_of[begin]
            parts.append(
                f'<path d="M {bx:.1f} {y} Q {(bx + x) / 2:.1f} {y - 45} {x:.1f} {y}" '
                f'fill="none" stroke="{_ONLY_B}" stroke-dasharray="4 2"/>'
            )
        if info.rollback_from is not None and info.rollback_from in x_of:
            rx = x_of[info.rollback_from]
            parts.append(
                f'<path d="M {rx:.1f} {y} Q {(rx + x) / 2:.1f} {y + 45} {x:.1f} {y}" '
                f'fill="none" stroke="#c03030"/>'
            )
        fill = "#ffffff" if info.isolation != "serializable" else "#d8e8ff"
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y}" r="7" fill="{fill}" stroke="#333">'
            f"<title>version {info.version}: {escape(info.isolation or '-')}, "
            f"{len(info.actions)} action(s)</title></circle>"
        )
        parts.append(
            f'<text x="{x:.1f}" y="{y + 22}" text-anchor="middle" {_FONT}>{info.version}</text>'
        )
    return parts


def catalog_svg(
    cat: Catalog,
    version_a: int,
    version_b: int,
    *,
    max_versions: int = 40,
    max_per_level: int = 64,
) -> str:
    """An SVG picture: the last ``max_versions`` versions (dashed arcs: a
    commit rebased over the versions it spans; red arcs: rollbacks), and the
    trees of ``version_a`` and ``version_b``, grey where they share node files."""
    store = cat.store
    infos = cat.history()[-max_versions:]
    a, b = cat.at_version(version_a), cat.at_version(version_b)
    with store.reading(min(version_a, version_b)):
        paths_a = _paths(a.root.node, store.load_node)
        paths_b = _paths(b.root.node, store.load_node)
        levels_a = _tree_levels(a.root.node, paths_b, _ONLY_A, store.load_node, max_per_level)
        levels_b = _tree_levels(b.root.node, paths_a, _ONLY_B, store.load_node, max_per_level)
    width = 1200.0
    depth = max(len(levels_a), len(levels_b))
    height = 200 + depth * 60 + 60
    shared = len(paths_a & paths_b)
    body = [
        f'<text x="20" y="24" {_FONT} font-size="14">catalog {escape(cat.uri)}: '
        f"versions {infos[0].version if infos else 0}..{infos[-1].version if infos else 0}</text>",
        *_draw_history(infos, width),
        f'<text x="20" y="150" {_FONT} font-size="13">version {version_a} (orange: only here)</text>',
        f'<text x="{width / 2 + 20:.0f}" y="150" {_FONT} font-size="13">version {version_b} '
        f"(blue: only here; grey: {shared} node file(s) both share)</text>",
        *_draw_tree(levels_a, 10, 185, width / 2 - 20),
        *_draw_tree(levels_b, width / 2 + 10, 185, width / 2 - 20),
    ]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.0f} {height}">\n'
        f'<rect width="100%" height="100%" fill="#ffffff"/>\n' + "\n".join(body) + "\n</svg>\n"
    )
