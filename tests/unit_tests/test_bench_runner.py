from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.workbench import strategies as strategies_module
from langchain_histcompress.workbench.bench_config import BenchConfig
from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.costs import REPORTED_PRICINGS
from langchain_histcompress.workbench.progress import ProgressBar
from langchain_histcompress.workbench.report import format_table, result_to_dict, write_reports
from langchain_histcompress.workbench.runner import run_benchmark
from langchain_histcompress.workbench.strategies import available_strategies
from tests.unit_tests.test_bench_locomo import tiny_locomo_data, write_tiny


def _long_tiny() -> dict[str, object]:
    """The tiny conversation with its sessions repeated, so budgets matter."""
    data = tiny_locomo_data()
    for n in range(3, 9):
        source = n % 2 + 1
        data[f"session_{n}"] = [
            {**t, "dia_id": t["dia_id"].replace(f"D{source}:", f"D{n}:")}
            for t in data[f"session_{source}"]  # type: ignore[attr-defined]
        ]
        data[f"session_{n}_date_time"] = f"day {n}"
    return data


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> BenchResult:
    folder = tmp_path_factory.mktemp("data")
    write_tiny(folder / "t1.json", _long_tiny())
    write_tiny(folder / "t2.json")
    config = BenchConfig(
        data=(folder,),
        strategies=("truncation", "max_tokens", "summarization_middleware"),
        overhead_sizes=(40,),
        overhead_turns=2,
        budget_tokens=250,
        keep_messages=4,
        summary_tokens=80,
    )
    return run_benchmark(config, progress=io.StringIO())


def test_runs_every_strategy_on_every_file(result: BenchResult) -> None:
    assert result.conversations == ("t1", "t2")
    assert result.strategies == ("full", "truncation", "max_tokens", "summarization_middleware")
    assert all(run.error is None for run in result.runs)
    assert len(result.runs) == 8
    run = result.run("full", "t1")
    assert run is not None
    assert len(run.turns) == 5 + 3 * 2 + 3 * 3  # 5 assistant turns + three copies of each session
    # prompts grow with the full history
    prompts = [t.prompt_tokens for t in run.turns]
    assert prompts == sorted(prompts)


def test_figures_savings_and_recall(result: BenchResult) -> None:
    full = result.figures("full")
    truncation = result.figures("truncation")
    middleware = result.figures("summarization_middleware")
    assert full is not None and truncation is not None and middleware is not None
    assert full.savings == 0.0
    assert truncation.savings is not None and 0 < truncation.savings < 1
    assert truncation.prompt_mean < full.prompt_mean
    assert truncation.internal_calls == 0
    assert middleware.internal_calls > 0
    assert middleware.internal_billed > 0
    recall_full = result.recall("full")
    recall_truncation = result.recall("truncation")
    assert recall_full is not None and recall_full.recall == 1.0
    assert recall_full.questions == 6  # 3 questions per file
    assert recall_truncation is not None and recall_truncation.recall < 1.0
    assert recall_truncation.mean_context_tokens < recall_full.mean_context_tokens
    per_file = result.figures("truncation", "t2")
    assert per_file is not None and per_file.calls == 5


def test_overhead_is_measured_per_strategy_and_size(result: BenchResult) -> None:
    assert {(o.strategy, o.messages) for o in result.overhead} == {
        (s, 40) for s in result.strategies
    }
    assert all(o.error is None and o.turns == 2 for o in result.overhead)


def test_table_json_markdown_and_plots(result: BenchResult, tmp_path: Path) -> None:
    table = format_table(result)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["strategy", "calls", "internal"]
    assert "ms@40" in table and "answer cov" in table
    assert max(map(len, lines)) <= 100
    strategies = len(result.strategies)
    assert [line.split()[0] for line in lines[2 : 2 + strategies]] == list(result.strategies)
    assert "internal calls: no failures" in lines
    written = write_reports(result, tmp_path / "out")
    data = json.loads(written["json"].read_text("utf-8"))
    assert data["conversations"] == ["t1", "t2"]
    assert data["totals"]["full"]["figures"]["savings"] == 0.0
    assert data["totals"]["truncation"]["recall"]["questions"] == 6
    assert len(data["turns"]["t1"]["truncation"]["prompt_tokens"]) == len(
        result.run("truncation", "t1").turns  # type: ignore[union-attr]
    )
    assert data["overhead"][0]["messages"] == 40
    markdown = written["markdown"].read_text("utf-8")
    assert "| strategy | calls |" in markdown
    assert "![recall_vs_tokens](recall_vs_tokens.png)" in markdown
    for key in ("plot:tokens_per_call_t1", "plot:tokens_per_call_t2", "plot:recall_vs_tokens"):
        assert written[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result_to_dict(result)["config"]["budget_tokens"] == 250


def test_failing_strategy_is_reported_not_fatal(tmp_path: Path) -> None:
    class Down(FakeListChatModel):
        def _call(self, *args: object, **kwargs: object) -> str:
            raise RuntimeError("model down")

    if "round_compression_rounds" not in available_strategies():
        pytest.skip("the compressor module is not installed")
    write_tiny(tmp_path / "t.json", _long_tiny())
    config = BenchConfig(
        data=(tmp_path / "t.json",),
        strategies=("round_compression_rounds",),
        overhead_sizes=(40,),
        overhead_turns=1,
    )
    result = run_benchmark(config, progress=io.StringIO(), model=Down(responses=["x"]))
    run = result.run("round_compression_rounds", "t")
    assert run is not None and run.error is not None
    assert "SummarizationError" in run.error
    assert result.figures("round_compression_rounds") is None
    assert result.figures("full") is not None
    assert "failed: t: SummarizationError" in format_table(result)


def test_config_validation() -> None:
    with pytest.raises(ConfigurationError, match="no data given"):
        BenchConfig(data=())
    with pytest.raises(ConfigurationError, match="budget_tokens must be an integer >= 1"):
        BenchConfig(data=(Path("x"),), budget_tokens=0)
    with pytest.raises(ConfigurationError, match="context_tokens must be an integer >= 1"):
        BenchConfig(data=(Path("x"),), context_tokens=0)
    with pytest.raises(ConfigurationError, match="unknown strategy 'nope'"):
        BenchConfig(data=(Path("x"),), strategies=("nope",)).strategy_names()
    assert BenchConfig(data=(Path("x"),), strategies=("truncation",)).strategy_names() == [
        "full",
        "truncation",
    ]
    assert BenchConfig(data=(Path("x"),), quick=True).sizes == (1000,)


def test_progress_bar_interactive_and_plain() -> None:
    stream = io.StringIO()
    bar = ProgressBar(10, stream, width=10, interactive=True)
    bar.advance(5, "half")
    bar.close()
    assert "\r[#####.....]  50% half" in stream.getvalue()
    assert stream.getvalue().endswith("\n")
    plain = io.StringIO()
    bar = ProgressBar(4, plain, width=4, interactive=False)
    bar.advance(1, "a")
    bar.advance(1)
    bar.advance(2, "b")
    assert plain.getvalue().splitlines() == ["[#...]  25% a", "[####] 100% b"]


def test_pricing_aware_strategies_are_replayed_per_pricing_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny(tmp_path / "t.json", _long_tiny())
    config = BenchConfig(
        data=(tmp_path / "t.json",),
        strategies=("round_compression",),
        overhead_sizes=(40,),
        overhead_turns=1,
    )
    seen: list[object] = []
    original = strategies_module._compressor

    def spy(env: Any, **kwargs: Any) -> Any:
        trigger = kwargs.get("trigger")
        if isinstance(trigger, tuple) and trigger[0] == "cost":  # ("cost", pricing)
            seen.append(getattr(trigger[1], "name", trigger[1]))
        return original(env, **kwargs)

    monkeypatch.setattr(strategies_module, "_compressor", spy)
    result = run_benchmark(config, progress=io.StringIO())
    assert set(REPORTED_PRICINGS) <= set(seen)
    run = result.run("round_compression", "t")
    assert run is not None and set(run.costs) == set(REPORTED_PRICINGS)
    # each pricing's bill comes from the replay configured for it
    assert all(c.total.pricing.name == name for name, c in run.costs.items())
