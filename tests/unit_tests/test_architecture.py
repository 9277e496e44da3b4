"""The package's layering, read from its imports (``TYPE_CHECKING`` ones included).

The layers and their rules are written in ``docs/architecture.md``; this test is their
enforcement: imports point down, there are no import cycles, and a private module or name
(``_``-prefixed) is imported only from its own folder.
"""

from __future__ import annotations

import ast
from pathlib import Path

import langchain_histcompress

PACKAGE = "langchain_histcompress"
ROOT = Path(langchain_histcompress.__file__).parent
LAYERS = ["core", "storage", "recall", "edge", "context", "faces", "", "workbench"]
"""Bottom to top; ``""`` is the package's own ``__init__`` (the front door)."""


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _folder(module: str) -> str:
    path = MODULES[module]
    return str(path.parent.relative_to(ROOT))


def _imports() -> list[tuple[str, str, str, int]]:
    """``(importer, imported module, imported name or "", line)`` for every package import."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                assert node.level == 0, f"{module}: relative import"
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in MODULES:  # a module imported from its package
                        found.append((module, full, "", node.lineno))
                    else:
                        found.append((module, node.module or "", alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                found += [
                    (module, alias.name, "", node.lineno)
                    for alias in node.names
                    if alias.name.startswith(PACKAGE)
                ]
    return found


IMPORTS = _imports()


def test_every_module_is_in_a_known_layer() -> None:
    assert {_layer(m) for m in MODULES} <= set(LAYERS)
    loose = [m for m in MODULES if m.count(".") == 1 and MODULES[m].name != "__init__.py"]
    assert loose == [], "every module lives in a layer's folder"


def test_imports_point_down() -> None:
    upward = [
        f"{importer}:{line} imports {target}"
        for importer, target, _, line in IMPORTS
        if LAYERS.index(_layer(target)) > LAYERS.index(_layer(importer))
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for importer, target, _, _ in IMPORTS:
        if target != importer and target in MODULES:
            graph[importer].add(target)
    # a package's __init__ importing its own modules is how it exports them
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert cycles == []


def test_private_modules_and_names_stay_in_their_folder() -> None:
    leaks = []
    for importer, target, name, line in IMPORTS:
        private = name.startswith("_") or any(
            part.startswith("_") for part in target.split(".")[1:]
        )
        if private and target in MODULES and _folder(target) != _folder(importer):
            leaks.append(f"{importer}:{line} imports {target} {name}".rstrip())
    assert leaks == []
