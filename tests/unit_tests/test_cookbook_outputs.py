"""The cookbook notebooks are committed executed, so readers see results without running them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"
NOTEBOOKS = sorted(COOKBOOK.glob("[0-9]*.ipynb"))
VISUAL = {"03_chat_message_history", "05_code_agent_variables", "06_reducers"}


def cells(path: Path) -> list[dict[str, Any]]:
    notebook: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return [c for c in notebook["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 7


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_ran_in_order_without_errors(path: Path) -> None:
    code = cells(path)
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert errors == []
    assert sum(1 for c in code if c["outputs"]) >= len(code) // 2


@pytest.mark.parametrize("stem", sorted(VISUAL))
def test_tables_and_charts_are_shown(stem: str) -> None:
    kinds = {kind for c in cells(COOKBOOK / f"{stem}.ipynb") for o in c["outputs"]
             for kind in o.get("data", {})}  # fmt: skip
    assert {"image/png", "text/markdown"} <= kinds


ROOT = COOKBOOK.parent
# Paths that only exist on the machine that ran a notebook: home folders, temporary folders and
# the folder this checkout sits in (the evaluation data is found relative to the project root).
MACHINE_PATH = re.compile(
    r"(?<![\w./:])(?:/home/|/Users/|/root/|/tmp/|/private/var/|[A-Z]:\\\\Users\\\\"
    + (f"|{re.escape(str(ROOT.parent).rstrip('/') + '/')}" if len(ROOT.parent.parts) > 1 else "")
    + ")"
)
COMMITTED_TEXT = [*NOTEBOOKS, ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", COMMITTED_TEXT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_absolute_machine_paths_are_committed(path: Path) -> None:
    text = path.read_text("utf-8")
    assert [m.group(0) for m in MACHINE_PATH.finditer(text)] == []
