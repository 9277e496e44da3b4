"""MkDocs hook: the API reference pages, generated from the package at build time.

Every public module (no path part starting with ``_``) gets one page rendered by mkdocstrings
from its docstrings, and the reference index lists the names of ``langchain_histcompress``'s
``__all__`` with a link to where each one is documented. Nothing is listed by hand, so the
reference follows modules as they are added, renamed or moved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PACKAGE = "langchain_histcompress"
SECTION = "API reference"
INDEX = "reference/index.md"


def public_modules(root: Path) -> list[str]:
    """Dotted names of the package's public modules and subpackages, the package excluded."""
    names = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        folders = path.relative_to(root).parent.parts
        packaged = all((root.joinpath(*folders[: i + 1]) / "__init__.py").is_file()
                       for i in range(len(folders)))  # fmt: skip
        if len(parts) > 1 and packaged and not any(p.startswith("_") for p in parts):
            names.append(".".join(parts))
    return names


def _page(module: str) -> str:
    return "reference/" + module.replace(".", "/") + ".md"


def on_config(config: Any) -> Any:
    """Fill the nav's API reference section with one entry per public module."""
    root = Path(config.config_file_path).parent
    for entry in config.nav or []:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = [INDEX] + [
                {module.removeprefix(PACKAGE + "."): _page(module)}
                for module in public_modules(root)
            ]
    return config


def _summary(obj: Any) -> str:
    docstring = obj.docstring.value if obj.docstring else ""
    return docstring.strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def _index(root: Path) -> str:
    import griffe

    package = griffe.load(PACKAGE, search_paths=[str(root)], resolve_aliases=True)
    lines = [
        "# API reference",
        "",
        f"The names below are importable from `{PACKAGE}` itself; every public module has its own",
        "page (see the navigation), generated from the docstrings.",
        "",
        "| name | what it is |",
        "| :--- | :--- |",
    ]
    private = []
    for name in sorted(package.exports or ()):
        target = package[name]
        path = target.canonical_path
        if any(part.startswith("_") for part in path.split(".")[:-1]):
            private.append(path)
        lines.append(f"| [`{name}`][{path}] | {_summary(target)} |")
    if private:
        lines += ["", "## Defined in private modules", ""]
        for path in private:
            lines += [f"::: {path}", "    options:", "      show_root_full_path: false", ""]
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages to the build."""
    from mkdocs.structure.files import File

    root = Path(config.config_file_path).parent
    files.append(File.generated(config, INDEX, content=_index(root)))
    for module in public_modules(root):
        content = f"# `{module}`\n\n::: {module}\n    options:\n      show_root_heading: false\n"
        files.append(File.generated(config, _page(module), content=content))
    return files
