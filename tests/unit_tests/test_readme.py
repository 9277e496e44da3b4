"""Every Python block of the README and the documentation runs as written (offline, fakes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    (f"{page.relative_to(ROOT)}[python block {index}]", block)
    for page in PAGES
    for index, block in enumerate(
        re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    )
]


def test_readme_and_docs_have_python_blocks() -> None:
    assert sum(name.startswith("README.md") for name, _ in BLOCKS) >= 3
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize(("name", "block"), BLOCKS, ids=[name for name, _ in BLOCKS])
def test_block_runs(
    name: str,
    block: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(block, name, "exec", dont_inherit=True), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "every example shows the user something"


def test_the_quickstart_folds_with_the_defaults_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    (block,) = [b for n, b in BLOCKS if n.startswith("README.md") and "explain(state)" in b]
    monkeypatch.chdir(tmp_path)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep()
    logging.getLogger("langchain_histcompress").addHandler(handler)
    try:
        exec(compile(block, "README.md[quickstart]", "exec"), {"__name__": "__readme__"})
    finally:
        logging.getLogger("langchain_histcompress").removeHandler(handler)
    folds = [r for r in records if r.startswith("round compression: fold")]
    assert any("cost (" in r for r in folds)  # the default folded, by cost, and said why
    why = capsys.readouterr().out.splitlines()[-1]  # explain(): the budget and the pricing
    assert "108,800 of" in why or " of 108,800 tokens" in why
    assert "openai-50" in why or "no fold pays" in why or "cost (" in why


def test_thread_summarization_example_folds_the_exchange_just_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (block,) = [b for _, b in BLOCKS if "thread_summarizer(cheap)" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md[thread summarization]", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.splitlines() == [
        "turn 1: 2 messages sent, summary: None",
        "turn 2: 3 messages sent, summary: Lisbon in May: mild.",
        "turn 3: 3 messages sent, summary: Lisbon in May: mild. Porto: rainier.",
    ]


def test_install_instructions_work_without_a_public_index() -> None:
    text = README.read_text(encoding="utf-8")
    assert "pip install langchain-histcompress" not in text.replace("`", "")
    assert 'pip install "./langchain-histcompress[agents]"' in text
    assert "pip wheel --no-deps -w dist" in text and ".whl[agents,postgres]" in text


def test_generated_benchmark_tables_fit_100_columns() -> None:
    text = README.read_text(encoding="utf-8")
    block = text[text.index("<!-- bench:start -->") : text.index("<!-- bench:end -->")]
    assert block.count("| strategy |") >= 1
    assert max(map(len, block.splitlines())) <= 100
