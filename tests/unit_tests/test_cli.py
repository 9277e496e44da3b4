from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from langchain_histcompress.workbench import cli
from langchain_histcompress.workbench.cli import main
from tests.unit_tests.test_bench_locomo import tiny_locomo_data, write_tiny

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOCOMO_DIR = Path(
    os.environ.get("HISTCOMPRESS_LOCOMO_DIR", PROJECT_ROOT.parent / "shared" / "data" / "locomo")
)


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("histcompress: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_missing_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.json"
    assert main(["bench", "--data", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert _error_line(capsys) == f"histcompress: error: {missing}: no such file"
    assert not (tmp_path / "o").exists()


def test_unreadable_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", "utf-8")
    assert main(["bench", "--data", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}: not valid JSON" in _error_line(capsys)


def test_wrong_format_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tiny_locomo_data()
    del data["session_2"][1]["dia_id"]
    path = write_tiny(tmp_path / "broken.json", data)
    assert main(["bench", "--data", str(path), "--out", str(tmp_path / "o")]) == 2
    assert _error_line(capsys) == (f"histcompress: error: {path}: session_2[1].dia_id: missing key")


def test_unknown_strategy_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny(tmp_path / "t.json")
    code = main(
        ["bench", "--data", str(path), "--strategies", "full,bogus", "--out", str(tmp_path)]
    )
    assert code == 2
    assert "unknown strategy 'bogus'; available: full, no_history, truncation" in _error_line(
        capsys
    )


def test_bad_model_spec_and_missing_key_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_tiny(tmp_path / "t.json")
    out = str(tmp_path / "o")
    assert main(["bench", "--data", str(path), "--model", "gpt-4o", "--out", out]) == 2
    assert "--model must look like provider:model" in _error_line(capsys)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    code = main(["bench", "--data", str(path), "--model", "openai:gpt-4o-mini", "--out", out])
    assert code == 2
    line = _error_line(capsys)
    assert "--model openai:gpt-4o-mini needs an API key: set OPENAI_API_KEY" in line


def test_argparse_errors_return_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 2
    assert "--data" in capsys.readouterr().err
    assert main([]) == 2


def test_tiny_file_produces_table_json_markdown_and_pngs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_tiny(tmp_path / "tiny.json")
    out = tmp_path / "report"
    code = main(
        [
            "bench",
            "--data",
            str(path),
            "--out",
            str(out),
            "--quick",
            "--strategies",
            "truncation,max_tokens",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    table = captured.out.splitlines()
    assert (
        max(len(line) for line in table if not line.startswith(("json:", "markdown:", "plot:")))
        <= 100
    )
    assert table[0].split()[:2] == ["strategy", "calls"]
    assert [line.split()[0] for line in table[2:5]] == ["full", "truncation", "max_tokens"]
    assert "done" in captured.err  # the progress bar
    assert sorted(p.name for p in out.iterdir()) == [
        "bench.json",
        "bench.md",
        "billed_vs_history_tiny.png",
        "cost_by_pricing.png",
        "recall_vs_tokens.png",
        "tokens_per_call_tiny.png",
    ]
    data = json.loads((out / "bench.json").read_text("utf-8"))
    assert data["config"]["quick"] is True
    assert data["totals"]["full"]["recall"]["recall"] == 1.0
    assert (out / "bench.md").read_text("utf-8").startswith("# histcompress benchmark")
    assert (out / "recall_vs_tokens.png").read_bytes()[:4] == b"\x89PNG"


def test_no_plots(tmp_path: Path) -> None:
    path = write_tiny(tmp_path / "tiny.json")
    out = tmp_path / "report"
    args = [
        "bench",
        "--data",
        str(path),
        "--out",
        str(out),
        "--quick",
        "--no-plots",
        "--strategies",
        "truncation",
    ]
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "bench.md"]


def test_unwritable_output_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny(tmp_path / "tiny.json")
    blocker = tmp_path / "file"
    blocker.write_text("x", "utf-8")
    args = [
        "bench",
        "--data",
        str(path),
        "--out",
        str(blocker / "sub"),
        "--quick",
        "--strategies",
        "truncation",
    ]
    assert main(args) == 2
    assert "cannot write reports to" in _error_line(capsys)


def test_demo_without_module_prints_a_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(name: str) -> types.ModuleType:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(cli.importlib, "import_module", missing)
    assert main(["demo"]) == 0
    assert "histcompress bench" in capsys.readouterr().out


def test_demo_runs_the_demo_module(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    module = types.ModuleType("langchain_histcompress.workbench.demo")
    module.run_demo = lambda argv: seen.append(argv) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langchain_histcompress.workbench.demo", module)
    assert main(["demo", "--fast"]) == 0
    assert seen == [["--fast"]]


def first_sessions(data: dict[str, Any], count: int) -> dict[str, Any]:
    """A LoCoMo conversation cut after ``count`` sessions, with the questions it can answer."""

    def session(key: str) -> int:
        found = re.match(r"(?:events_)?session_(\d+)", key)
        return int(found.group(1)) if found else 0

    def answerable(qa: dict[str, Any]) -> bool:
        ids = [e for e in qa.get("evidence", []) if re.match(r"D\d+:", e)]
        return all(int(e.split(":")[0][1:]) <= count for e in ids)

    cut = {key: value for key, value in data.items() if session(key) <= count}
    cut["qa"] = [qa for qa in data["qa"] if answerable(qa)]
    return cut


@pytest.mark.skipif(
    not (LOCOMO_DIR / "30.json").is_file(),
    reason=f"LoCoMo data not found in {LOCOMO_DIR} (set HISTCOMPRESS_LOCOMO_DIR)",
)
def test_real_conversation_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The first 5 of 19 sessions (50 assistant turns): every strategy's own calls still happen.
    data = first_sessions(json.loads((LOCOMO_DIR / "30.json").read_text("utf-8")), 5)
    path = tmp_path / "30.json"
    path.write_text(json.dumps(data), "utf-8")
    out = tmp_path / "real"
    assert main(["bench", "--data", str(path), "--quick", "--out", str(out)]) == 0
    assert "failed:" not in capsys.readouterr().out
    data = json.loads((out / "bench.json").read_text("utf-8"))
    totals = data["totals"]
    assert totals["full"]["recall"]["recall"] == 1.0
    assert totals["full"]["figures"]["calls"] == data["totals"]["truncation"]["figures"]["calls"]
    for name, entry in totals.items():
        assert entry["figures"] is not None, name
        if name == "facts_turns_cached":
            # folds only when a fold repays its extraction: on this excerpt it sends it whole
            assert entry["figures"]["savings"] >= 0, name
        elif name != "full":
            assert entry["figures"]["savings"] > 0, name
    assert (out / "tokens_per_call_30.png").is_file()


def _bench_args(tmp_path: Path, *extra: str) -> list[str]:
    path = write_tiny(tmp_path / "tiny.json")
    return [
        "bench", "--data", str(path), "--out", str(tmp_path / "report"), "--quick",
        "--no-plots", "--strategies", "round_compression", *extra,
    ]  # fmt: skip


def test_readme_markers_are_filled_with_generated_figures(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- bench:start -->\nold figures\n<!-- bench:end -->\nafter\n")
    assert main(_bench_args(tmp_path, "--readme", str(readme), "--summary-tokens", "90")) == 0
    text = readme.read_text()
    assert "old figures" not in text
    assert text.startswith("intro\n<!-- bench:start -->\nSavings against the full history")
    assert "summary cap 90 tokens" in " ".join(text.split())
    assert "| round_compression (default) |" in text
    assert text.endswith("<!-- bench:end -->\nafter\n")
    assert max(map(len, text.splitlines())) <= 100


def test_docs_page_markers_get_every_table_and_the_readme_the_headlines(tmp_path: Path) -> None:
    readme, page = tmp_path / "README.md", tmp_path / "benchmark.md"
    for path in (readme, page):
        path.write_text("intro\n<!-- bench:start -->\nold\n<!-- bench:end -->\nafter\n")
    args = _bench_args(tmp_path, "--readme", str(readme), "--docs", str(page))
    assert main(args) == 0
    full, short = page.read_text(), readme.read_text()
    for heading in ("## All conversations", "## Internal calls", "## Cost under prompt caching",
                    "## Conversation tiny", "## Definitions", "| pricing | cache rule |"):  # fmt: skip
        assert heading in full and heading not in short
    assert "| answer cov |" in full and "| savings @ openai-90 |" in full
    assert "| round_compression (default) |" in short and "docs/benchmark.md" in short
    assert page.read_text().endswith("<!-- bench:end -->\nafter\n")


def test_readme_without_markers_exits_2_and_is_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert main(_bench_args(tmp_path, "--readme", str(readme))) == 2
    assert "markers" in _error_line(capsys)
    assert readme.read_text() == "no markers here\n"


def test_bad_summary_cap_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_bench_args(tmp_path, "--summary-tokens", "0")) == 2
    assert "summary_tokens" in _error_line(capsys)


# --------------------------------------------------------------------------- first run


def test_unknown_bench_option_prints_the_bench_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--data", "x.json", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: histcompress bench ")
    assert "histcompress bench: error: unrecognized arguments: --bogus" in err


def test_bench_help_lists_the_strategies_and_the_output_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: histcompress-bench)" in text
    assert (
        "round_compression, round_compression_recall, round_compression_rounds, "
        "round_compression_5_10, thread_summary" in text
    )


def _no_run(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    from langchain_histcompress.workbench import cost_report, recall_report, report, runner

    seen: list[object] = []

    class Result:
        def failed_strategies(self) -> list[str]:
            return []

    def run(config: object, **_: object) -> object:
        seen.append(config)
        return Result()

    def write(result: object, out: Path, *, plots: bool = True) -> dict[str, Path]:
        seen.append({"plots": plots})
        return {}

    monkeypatch.setattr(runner, "run_benchmark", run)
    monkeypatch.setattr(report, "write_reports", write)
    monkeypatch.setattr(report, "format_table", lambda result: "table")
    monkeypatch.setattr(cost_report, "format_cost_table", lambda result: "costs")
    monkeypatch.setattr(cost_report, "format_agent_table", lambda result: "")
    monkeypatch.setattr(recall_report, "format_tool_recall_tables", lambda result: "")
    return seen


def test_unwritable_output_is_reported_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _no_run(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("x", "utf-8")
    args = ["bench", "--data", str(write_tiny(tmp_path / "t.json")), "--out", str(blocker / "o")]
    assert main(args) == 2
    assert _error_line(capsys) == (
        f"histcompress: error: cannot write reports to {blocker / 'o'}: {blocker} is not a folder"
    )
    assert seen == []


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name in modules else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_without_the_bench_extra_says_what_is_skipped_and_runs_without_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _no_run(monkeypatch)
    _without(monkeypatch, "matplotlib", "langmem", "langchain.agents")
    path = write_tiny(tmp_path / "t.json")
    assert main(["bench", "--data", str(path), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "note: skipping strategy 'langmem': it needs langmem (pip install " in err
    assert "note: skipping strategy 'summarization_middleware': it needs langchain" in err
    assert "note: no plots: drawing them needs matplotlib (pip install " in err
    assert seen[-1] == {"plots": False}
    strategies = seen[0].strategy_names()  # type: ignore[attr-defined]
    assert "langmem" not in strategies and "round_compression" in strategies


def test_a_strategy_asked_for_without_its_package_fails_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _no_run(monkeypatch)
    _without(monkeypatch, "langmem")
    path = write_tiny(tmp_path / "t.json")
    args = ["bench", "--data", str(path), "--strategies", "langmem", "--out", str(tmp_path)]
    assert main(args) == 2
    line = _error_line(capsys)
    assert "strategy 'langmem' needs langmem (pip install 'langchain-histcompress[bench]')" in line
    assert seen == []


def test_unknown_model_provider_is_our_own_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_tiny(tmp_path / "t.json")
    assert main(["bench", "--data", str(path), "--model", "nosuch:x", "--out", str(tmp_path)]) == 2
    line = _error_line(capsys)
    assert line.startswith("histcompress: error: unknown model provider 'nosuch' in 'nosuch:x'")
    assert "known providers: " in line and "openai" in line
