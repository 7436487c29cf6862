"""The package's imports go one way: down the layer line of README.md.

Every module of olympia/ is parsed with ``ast``; every olympia import in it
(at module level, inside functions, or under ``TYPE_CHECKING``) must go to a
module of the same layer or a lower one, and the imports must form no cycle.
A subpackage (``storage/``, ``proto/``, ``iceberg/``, ``rest/``, ``cli/``, ``jobs/``)
counts as one unit; ``__init__`` is the package's own ``olympia/__init__.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "olympia"

#: The layers, lowest first; the README's layout table says the same (checked below).
LAYERS: list[list[str]] = [
    ["errors", "proto/"],
    ["storage/"],
    [
        "layout",
        "keys",
        "node",
        "objects",
        "arrowfile",
        "codec",
        "validate",
        "definition",
        "changes",
    ],
    ["tree"],
    ["store"],
    ["state", "reader", "ops", "conflicts", "actions", "group", "maintenance"],
    ["distributed"],
    ["commit"],
    ["transaction"],
    ["catalog"],
    ["__init__"],
    ["iceberg/"],
    ["rest/", "spark", "cli/", "picture"],
    ["jobs/"],
]
LAYER = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1] + "/"
    return parts[1]


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every olympia import of ``module``."""
    out: list[tuple[int, str]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from olympia import tree`` imports the module olympia.tree.
                name = f"{source}.{alias.name}"
                out.append((node.lineno, name if name in modules else source))
    return [(line, name) for line, name in out if name.split(".")[0] == "olympia"]


def _edges() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> where (``module:line``)."""
    modules = _modules()
    edges: dict[str, dict[str, list[str]]] = {}
    for module, path in modules.items():
        source = _unit(module)
        for line, target in _imports(module, path, modules):
            if _unit(target) != source:
                where = f"{path.relative_to(ROOT)}:{line}"
                edges.setdefault(source, {}).setdefault(_unit(target), []).append(where)
    return edges


def test_the_readme_states_these_layers() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `olympia/` |"))
    line = row.split(":", 1)[1]  # after "in layers (...):"
    stated = [re.findall(r"`([^`]+)`", group) for group in line.split("←")]
    assert stated == LAYERS


def test_every_module_has_a_layer() -> None:
    units = {_unit(module) for module in _modules()}
    assert sorted(units - set(LAYER)) == []
    assert sorted(set(LAYER) - units) == []


def test_every_import_goes_to_the_same_or_a_lower_layer() -> None:
    upward = [
        f"{source} -> {target} ({', '.join(where)})"
        for source, targets in _edges().items()
        for target, where in targets.items()
        if LAYER[target] > LAYER[source]
    ]
    assert upward == []


def test_the_imports_form_no_cycle() -> None:
    edges = {source: set(targets) for source, targets in _edges().items()}
    done: set[str] = set()

    def visit(unit: str, path: list[str]) -> None:
        if unit in path:
            cycle = [*path[path.index(unit) :], unit]
            raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
        if unit in done:
            return
        for target in sorted(edges.get(unit, ())):
            visit(target, [*path, unit])
        done.add(unit)

    for unit in sorted(edges):
        visit(unit, [])
