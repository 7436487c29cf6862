"""``olympia graph``'s picture (olympia/picture.py): what it says, that its
text is escaped and never overlaps, and that a real SVG renderer
(``rsvg-convert``, Debian's librsvg2-bin, installed by scripts/setup.sh)
draws it as a picture that is not blank."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from typing import Any

import pytest

import olympia
from olympia.maintenance import TransactionRecord
from olympia.picture import catalog_svg

NS = "{http://www.w3.org/2000/svg}"
EM = 0.6  # monospace character width, in font sizes (as the picture assumes)


@pytest.fixture
def lake(tmp_path: Path) -> olympia.Catalog:
    """Versions: 1 two namespaces and two tables; 2 and 3 two transactions
    begun at 1 (3 rebased over 2); 4 400 tables (a tree of several nodes);
    5 one table changed and one created; 6 a rollback to 4."""
    cat = olympia.create_catalog(str(tmp_path / "lake"), default_isolation="serializable")
    with cat.transaction() as t:
        t.create_namespace("sales")
        t.create_namespace("finance")
        t.create_table("sales", "orders", "s3://lake/orders/v1.json")
        t.create_table("sales", "customers", "s3://lake/customers/v1.json")
    a, b = cat.begin(), cat.begin()
    a.create_table("finance", "ledger", "s3://lake/ledger/v1.json")
    b.update_table("sales", "orders", metadata_location="s3://lake/orders/v2.json")
    assert a.commit() == 2
    assert b.commit() == 3
    with cat.transaction() as t:
        for i in range(400):
            t.create_table("finance", f"account_{i:03d}", "s3://lake/accounts/v1.json")
    with cat.transaction() as t:
        t.update_table("finance", "account_123", metadata_location="s3://lake/accounts/v2.json")
        t.create_table("sales", "returns", "s3://lake/returns/v1.json")
    assert cat.rollback_to(4) == 6
    return cat


def _names(cat: olympia.Catalog, version: int) -> set[str]:
    """Every object of ``version`` as the picture names it."""
    view = cat.at_version(version)
    out = set()
    for ns in view.list_namespaces():
        out.add(f"ns:{ns}")
        out.update(f"{ns}.{t}" for t in view.list_tables(ns))
    return out


def _texts(root: ET.Element) -> list[str]:
    return [el.text or "" for el in root.iter(f"{NS}text")]


def _boxes(root: ET.Element) -> list[tuple[str, tuple[str, ...], str]]:
    """``(class, label lines, tooltip)`` of every node box."""
    out = []
    for g in root.iter(f"{NS}g"):
        cls = g.get("class", "")
        if cls.startswith("node "):
            title = g.find(f"{NS}title")
            lines = tuple(t.text or "" for t in g.iter(f"{NS}text"))
            out.append((cls.split()[1], lines, "" if title is None else title.text or ""))
    return out


def test_versions_arcs_and_nodes_are_labelled(lake: olympia.Catalog) -> None:
    svg = catalog_svg(lake, 4, 5)
    root = ET.fromstring(svg)
    texts = _texts(root)
    # every version: its number and what it did
    for v in range(7):
        assert str(v) in texts
    for note in ("created", "+2 ns +2 tables", "+1 table", "~1 table", "+400 tables"):
        assert note in texts
    assert "+1 table ~1 table" in texts and "rollback" in texts
    # the arcs say what they are; the rollback's is drawn from the version it restored
    assert "rebased over 1" in texts and "rollback to 4" in texts
    x_of = {}
    for c in root.iter(f"{NS}circle"):
        title = c.find(f"{NS}title")
        assert title is not None and title.text is not None
        x_of[int(title.text.split(":")[0].split()[1])] = float(c.get("cx", "nan"))
    assert sorted(x_of) == list(range(7))
    arcs = [p.get("d", "") for p in root.iter(f"{NS}path") if "Q" in p.get("d", "")]
    ends = {(round(float(d.split()[1])), round(float(d.split()[-2]))) for d in arcs}
    assert (round(x_of[4]), round(x_of[6])) in ends  # rollback: from 4 to 6
    assert (round(x_of[1]), round(x_of[3])) in ends  # rebased: began at 1, committed as 3
    # node boxes are named by the objects they hold, with counts
    boxes = _boxes(root)
    names = _names(lake, 4) | _names(lake, 5)
    kinds = {kind for kind, _, _ in boxes}
    assert {"a", "b", "shared"} <= kinds
    for _kind, lines, _ in boxes:
        assert lines[0] in names, lines  # short names: never shortened
        assert lines[1] == "" or lines[1][3:] in names
        assert re.fullmatch(r"(root of v[45]|only v[45]|shared), \d+ objects?", lines[2])
    assert any("finance.account_" in lines[0] for _, lines, _ in boxes)
    assert any(lines[1] == "to sales.returns" for _, lines, _ in boxes)
    objects_4 = len(_names(lake, 4))
    assert ("a", f"root of v4, {objects_4} objects") in {(k, ls[2]) for k, ls, _ in boxes}
    assert any(k == "shared" and ls[2].startswith("shared, ") for k, ls, _ in boxes)
    assert all(
        ls[2].startswith("only v4") for k, ls, _ in boxes if k == "a" and "root" not in ls[2]
    )
    # equal labels only for boxes holding the same range of names
    by_label: dict[tuple[str, ...], set[str]] = {}
    for _, lines, tooltip in boxes:
        by_label.setdefault(lines[:2], set()).add(tooltip.splitlines()[0])
    assert all(len(ranges) == 1 for ranges in by_label.values()), by_label
    # a legend
    assert "legend" in texts
    legend = " ".join(texts[texts.index("legend") :])
    for words in ("version 4 (orange)", "version 5 (blue)", "grey: ", "rebased over N"):
        assert words in legend
    assert "rollback to V: from the version it restored" in legend


def test_a_group_committed_version_shows_its_transaction_count(
    lake: olympia.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    infos = lake.history()
    record = TransactionRecord("t", "snapshot", 4, infos[5].actions)
    infos[5] = dataclasses.replace(infos[5], transactions=(record, record, record))
    monkeypatch.setattr(lake, "history", lambda since=None: infos)
    texts = _texts(ET.fromstring(catalog_svg(lake, 4, 5)))
    assert "3 txns" in texts and "+1 table ~1 table" not in texts


def _extent(el: ET.Element, dx: float, dy: float) -> tuple[float, float, float, float]:
    """Rough box of a <text>: monospace cells wide, a font size tall."""
    size = float(el.get("font-size", "12"))
    text = el.text or ""
    w = sum(2 if ord(c) > 0x2E80 else 1 for c in text) * size * EM
    x, y = float(el.get("x", "0")) + dx, float(el.get("y", "0")) + dy
    anchor = el.get("text-anchor", "start")
    left = x - w / 2 if anchor == "middle" else x - w if anchor == "end" else x
    return left, y - 0.8 * size, left + w, y + 0.2 * size


def _placed_texts(root: ET.Element) -> list[tuple[str, tuple[float, float, float, float]]]:
    out = []

    def walk(el: ET.Element, dx: float, dy: float) -> None:
        m = re.fullmatch(r"translate\(([-\d.]+),([-\d.]+)\)", el.get("transform", ""))
        if m:
            dx, dy = dx + float(m.group(1)), dy + float(m.group(2))
        if el.tag == f"{NS}text" and el.text:
            out.append((el.text, _extent(el, dx, dy)))
        for child in el:
            walk(child, dx, dy)

    walk(root, 0.0, 0.0)
    return out


def _assert_laid_out(root: ET.Element) -> None:
    """Every text inside the canvas, none overlapping another, and the canvas
    no larger than the content."""
    width, height = float(root.get("width", "0")), float(root.get("height", "0"))
    placed = _placed_texts(root)
    for i, (text, (l1, t1, r1, b1)) in enumerate(placed):
        assert l1 >= 0 and t1 >= 0 and r1 <= width + 1 and b1 <= height + 1, text
        for other, (l2, t2, r2, b2) in placed[i + 1 :]:
            overlap = min(r1, r2) - max(l1, l2) > 0.5 and min(b1, b2) - max(t1, t2) > 0.5
            assert not overlap, f"{text!r} overlaps {other!r}"
    # sized to the content: something reaches near the right and bottom edges
    assert max(r for _, (_, _, r, _) in placed) > 0.85 * width
    assert max(b for _, (_, _, _, b) in placed) > height - 40


@pytest.mark.parametrize("versions", [(4, 5), (4, 6), (0, 3)])
def test_text_never_overlaps_and_the_canvas_fits_the_content(
    lake: olympia.Catalog, versions: tuple[int, int]
) -> None:
    _assert_laid_out(ET.fromstring(catalog_svg(lake, *versions)))


def test_a_short_history_with_a_rollback_to_the_start(tmp_path: Path) -> None:
    cat = olympia.create_catalog(str(tmp_path / "short"))
    with cat.transaction() as t:
        t.create_namespace("ops")
        t.create_table("ops", "jobs", "s3://x/v1.json")
    assert cat.rollback_to(0) == 2
    root = ET.fromstring(catalog_svg(cat, 1, 2))
    _assert_laid_out(root)  # the arc's label fits although the arc is short
    assert "rollback to 0" in _texts(root)
    boxes = _boxes(root)  # the roots: version 1's on the left, whatever they hold
    assert [(kind, lines[2]) for kind, lines, _ in boxes] == [
        ("a", "root of v1, 2 objects"),
        ("b", "root of v2, 0 objects"),
    ]
    assert boxes[0][1][:2] == ("ns:ops", "to ops.jobs") and boxes[1][1][0] == "(empty)"


def test_full_rows_fold_into_more_boxes(lake: olympia.Catalog) -> None:
    root = ET.fromstring(catalog_svg(lake, 4, 5, max_per_level=2))
    boxes = _boxes(root)
    rows: dict[float, list[str]] = {}
    for g in root.iter(f"{NS}g"):
        if g.get("class", "").startswith("node "):
            rect = g.find(f"{NS}rect")
            assert rect is not None
            rows.setdefault(float(rect.get("y", "0")), []).append(g.get("class", ""))
    assert len(rows) >= 2
    for classes in rows.values():
        assert sum(1 for c in classes if c != "node more") <= 2
    more = [lines[0] for kind, lines, _ in boxes if kind == "more"]
    assert more and all(re.fullmatch(r"\+\d+ more", m) for m in more)


def test_names_are_escaped_and_long_names_shortened(tmp_path: Path) -> None:
    cat = olympia.create_catalog(str(tmp_path / "odd"))
    odd, long = "a<b>&\"c'", "t" + "x" * 70 + "_end"
    with cat.transaction() as t:
        t.create_namespace(odd)
        t.create_table(odd, long, "s3://x/v1.json")
    root = ET.fromstring(catalog_svg(cat, 0, 1))  # parses: everything escaped
    texts = _texts(root)
    assert f"ns:{odd}" in texts
    shortened = [t for t in texts if t.startswith("to ")]
    assert len(shortened) == 1
    assert "\u2026" in shortened[0] and shortened[0].endswith("_end")
    assert len(shortened[0]) <= 26
    tooltips = [tip for _, _, tip in _boxes(root)]
    assert any(f"{odd}.{long}" in tip for tip in tooltips)


# --- rendering --------------------------------------------------------------------


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                corner = prev[i - bpp] if i >= bpp else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3)))
        prev = line
    return width, height, rows


def _renderer() -> str:
    found = shutil.which("rsvg-convert")
    if found is None:
        # scripts/setup.sh installs librsvg2-bin when run as root (as CI runs);
        # elsewhere it can only say so, as for the kit's Debian packages
        if os.geteuid() == 0:
            pytest.fail("rsvg-convert is missing: run scripts/setup.sh (installs librsvg2-bin)")
        pytest.skip(
            "rsvg-convert is missing and setup was not run as root: apt install librsvg2-bin"
        )
    return found


def test_a_real_renderer_draws_the_picture(lake: olympia.Catalog, tmp_path: Path) -> None:
    renderer = _renderer()
    svg = tmp_path / "lake.svg"
    svg.write_text(catalog_svg(lake, 4, 5), encoding="utf-8")
    png = tmp_path / "lake.png"
    res = subprocess.run(
        [renderer, "--zoom", "0.5", "--background-color", "white", str(svg), "-o", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    width, height, rows = _png_pixels(png.read_bytes())
    root = ET.parse(svg).getroot()
    assert abs(width - float(root.get("width", "0")) / 2) <= 1
    assert abs(height - float(root.get("height", "0")) / 2) <= 1
    assert width >= 300 and height >= 200
    pixels: list[tuple[int, ...]] = []
    for row in rows:
        pixels.extend(tuple(row[i : i + 3]) for i in range(0, len(row), 3))
    ink = sum(1 for p in pixels if min(p) < 235)
    assert ink > 0.06 * len(pixels), f"only {ink} of {len(pixels)} pixels drawn"

    def share(test: Any) -> float:
        return sum(1 for p in pixels if test(*p)) / len(pixels)

    # the three kinds of node box are filled: orange, blue and grey
    assert share(lambda r, g, b: r > 230 and 170 < g < 215 and b < 160) > 0.005
    assert share(lambda r, g, b: r < 190 and 190 < g < 220 and b > 225) > 0.005
    assert share(lambda r, g, b: 200 < r < 220 and abs(r - g) < 3 and abs(g - b) < 3) > 0.005


def test_bad_arguments_are_refused_by_name(lake: olympia.Catalog) -> None:
    with pytest.raises(olympia.InvalidArgumentError, match="max_per_level"):
        catalog_svg(lake, 4, 5, max_per_level=0)
    with pytest.raises(olympia.InvalidArgumentError, match="max_versions"):
        catalog_svg(lake, 4, 5, max_versions=0)
    with pytest.raises(olympia.InvalidArgumentError, match="version_b"):
        catalog_svg(lake, 4, -1)
    with pytest.raises(olympia.VersionNotFoundError):
        catalog_svg(lake, 4, 99)
