"""Every Python block of the README runs as written (offline, fake models)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(
        compile(BLOCKS[index], f"README.md[python block {index}]", "exec", dont_inherit=True),
        {"__name__": "__readme__"},
    )
    assert capsys.readouterr().out.strip(), "every README block shows the user something"


def test_thread_summarization_example_folds_the_exchange_just_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (block,) = [b for b in BLOCKS if "thread_summarizer(cheap)" in b]
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
    assert block.count("| strategy |") >= 2
    assert max(map(len, block.splitlines())) <= 100
