"""The package's layering: no module imports from a layer below its own.

The source of truth is the "Layers" table of ``docs/architecture.md``: its rows, top to bottom,
go from the lowest layer to the highest, and its "where" column names each layer's files and
folders. A module may import from its own layer and from the layers above it in the table.
Imports inside functions count too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _layers() -> list[tuple[str, list[str]]]:
    """(layer name, its paths) per row of the Layers table, lowest layer first."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        paths = [p.rstrip("/") for p in re.findall(r"`([^`]+)`", cells[1])]
        rows.append((cells[0], paths))
    return rows


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "adapters":
        parts = ["orthoplug", *parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_of(path: Path, layers) -> int | None:
    """Index of the layer whose most specific path contains ``path``."""
    rel = path.relative_to(ROOT).as_posix()
    best, best_len = None, -1
    for index, (_, paths) in enumerate(layers):
        for where in paths:
            if (rel == where or rel.startswith(where + "/")) and len(where) > best_len:
                best, best_len = index, len(where)
    return best


def _imports(path: Path) -> set[str]:
    """Every ``orthoplug.*`` module named by an import in ``path`` (relative ones resolved)."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *filter(None, [base])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "orthoplug" or name.startswith("orthoplug.")}


def _sources() -> list[Path]:
    return sorted(p for folder in ("orthoplug", "adapters") for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _file_of(module: str) -> Path | None:
    parts = module.split(".")[1:]
    if parts[:1] == ["adapters"]:
        base = ROOT / "adapters" / Path(*parts[1:]) if parts[1:] else ROOT / "adapters"
    else:
        base = ROOT / "orthoplug" / Path(*parts) if parts else ROOT / "orthoplug"
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_every_module_has_a_layer():
    layers = _layers()
    assert len(layers) >= 8
    homeless = [p.relative_to(ROOT).as_posix() for p in _sources() if p.name != "__init__.py"
                and _layer_of(p, layers) is None]
    assert not homeless, f"add these to the Layers table of docs/architecture.md: {homeless}"


def test_no_upward_import():
    layers = _layers()
    upward = []
    for path in _sources():
        own = _layer_of(path, layers)
        if own is None:
            continue
        for module in sorted(_imports(path)):
            target = _file_of(module)
            if target is None:  # a name imported from a module, checked through the module
                continue
            theirs = _layer_of(target, layers)
            if theirs is not None and theirs > own:
                upward.append(f"{path.relative_to(ROOT)} ({layers[own][0]}) imports {module} "
                              f"({layers[theirs][0]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)

