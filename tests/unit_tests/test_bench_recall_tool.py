"""The ``round_compression_recall`` benchmark strategy, the pricing of its tool call, its report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_histcompress.core.pricing import PRICING_MODELS
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.recall_tool import HistoryRecall
from langchain_histcompress.workbench.bench_config import BenchConfig
from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.costs import REPORTED_PRICINGS, RequestEncoder
from langchain_histcompress.workbench.recall_costs import price_tool_call
from langchain_histcompress.workbench.recall_report import (
    TOOL_RECALL_NOTE,
    format_tool_recall_tables,
    markdown_tool_recall_tables,
    tool_recall_figures,
    tool_recall_to_dict,
)
from langchain_histcompress.workbench.report import readme_section, result_to_dict
from langchain_histcompress.workbench.runner import run_benchmark
from langchain_histcompress.workbench.strategies import build_strategy, is_priced
from langchain_histcompress.workbench.strategy import StrategyEnv
from langchain_histcompress.workbench.summary_strategies import RecallStrategy
from tests.fakes import CountingSummarizer
from tests.unit_tests.test_bench_locomo import write_tiny
from tests.unit_tests.test_bench_runner import _long_tiny

COUNTER = TiktokenCounter()


def chat(rounds: int) -> list:
    out: list = [SystemMessage("You are Ben.", id="sys")]
    for n in range(rounds):
        out += [
            HumanMessage(f"Round {n}: my cousin number {n} lives in town {n}.", id=f"h{n}"),
            AIMessage(f"Nice, town {n} sounds lovely.", id=f"a{n}"),
        ]
    return out


def recall_strategy(**kwargs: object) -> RecallStrategy:
    compressor = RoundCompressor(
        CountingSummarizer(),
        token_counter=COUNTER,
        trigger=("rounds", 3),
        keep=("rounds", 1),
    )
    return RecallStrategy(compressor, HistoryRecall(token_counter=COUNTER, **kwargs))


def test_the_turns_are_the_default_compressions_and_a_question_adds_one_call() -> None:
    strategy = recall_strategy(max_tokens=200)
    history = chat(8)
    for end in range(2, len(history) + 1, 2):
        strategy.model_input(history[:end])
    assert strategy.summary is not None
    question = HumanMessage("Where does cousin number 1 live?", id="question-0")
    context = strategy.context_for_question(history, question)
    asked, (call, result) = context.tool_request, context.messages[-2:]
    assert context.messages[: len(asked)] == asked and asked[-1] is question
    assert isinstance(call, AIMessage) and call.tool_calls[0]["name"] == "recall_history"
    assert call.tool_calls[0]["args"] == {"query": question.content}
    assert isinstance(result, ToolMessage) and result.tool_call_id == call.tool_calls[0]["id"]
    assert "h1" in context.retrieved_ids and "town 1" in str(result.content)
    assert context.retrieved_ids <= strategy.summary.covered_ids  # only folded turns
    assert COUNTER.count_text(str(result.content)) <= 200
    assert any("recall_history tool" in str(m.content) for m in asked)  # the summary's hint
    assert json.loads(strategy.tools_text())[0]["function"]["name"] == "recall_history"


def test_the_strategy_is_registered_and_priced() -> None:
    assert is_priced("round_compression_recall")
    env = StrategyEnv(counter=COUNTER, model=CountingSummarizer(), context_tokens=900)
    strategy = build_strategy("round_compression_recall", env)
    assert isinstance(strategy, RecallStrategy) and strategy.recall.max_tokens == 900


def test_the_extra_request_reads_its_prefix_from_the_cache_when_long_enough() -> None:
    encoder = RequestEncoder(COUNTER)
    call = AIMessage(
        "", id="c", tool_calls=[{"name": "recall_history", "args": {"query": "q"}, "id": "t1"}]
    )
    pricings = [PRICING_MODELS[p] for p in REPORTED_PRICINGS]
    for rules, cached in (("short rules", False), ("rules " * 1500, True)):
        asked = [SystemMessage(rules, id="s"), HumanMessage("Where?", id="q")]
        answered = [*asked, call, ToolMessage("[h1 user] Oslo", tool_call_id="t1", id="r")]
        costs = price_tool_call(asked, answered, call_tokens=10, encoder=encoder, pricings=pricings)
        assert set(costs) == set(REPORTED_PRICINGS)
        assert costs["none"].cached_tokens == 0
        assert (costs["openai-90"].cached_tokens > 0) is cached
        assert (costs["anthropic"].cached_tokens > 0) is cached
        whole = PRICING_MODELS["none"]
        full = whole.input_cost(costs["none"].input_tokens) + whole.output_cost(10)
        assert costs["none"].cost == pytest.approx(full)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> BenchResult:
    folder = tmp_path_factory.mktemp("data")
    write_tiny(folder / "t1.json", _long_tiny())
    config = BenchConfig(
        data=(folder,),
        strategies=("round_compression", "round_compression_recall"),
        overhead_sizes=(40,),
        overhead_turns=1,
        context_tokens=300,
    )
    return run_benchmark(config, progress=io.StringIO())


def test_the_conversations_bill_is_the_defaults(result: BenchResult) -> None:
    default, recall = (
        result.run("round_compression", "t1"),
        result.run("round_compression_recall", "t1"),
    )
    assert default is not None and recall is not None and recall.error is None
    assert [t.prompt_tokens for t in recall.turns] == [t.prompt_tokens for t in default.turns]
    for name in REPORTED_PRICINGS:
        assert recall.costs[name].total.cost == pytest.approx(default.costs[name].total.cost)


def test_every_question_has_its_recall_and_the_cost_under_every_pricing(
    result: BenchResult,
) -> None:
    run = result.run("round_compression_recall", "t1")
    assert run is not None and run.questions
    for question in run.questions:
        assert question.recalled_tokens is not None and 0 < question.recalled_tokens <= 300
        assert set(question.tool_costs) == set(REPORTED_PRICINGS)
        assert all(c.cost > 0 and c.call_tokens > 0 for c in question.tool_costs.values())
    figures = tool_recall_figures(result, "round_compression_recall")
    assert figures is not None and figures.questions == len(run.questions)
    assert set(figures.extra) == set(REPORTED_PRICINGS)
    assert all(0 < share < 1 for share in figures.extra_share.values())
    assert tool_recall_figures(result, "round_compression") is None


def test_reports_show_the_tool_recall_and_say_what_is_not_measured(result: BenchResult) -> None:
    markdown = markdown_tool_recall_tables(result)
    assert "round_compression_recall (all)" in markdown and TOOL_RECALL_NOTE in markdown
    assert "one call / bill" in format_tool_recall_tables(result)
    assert "round_compression_recall" in readme_section(result)
    data = result_to_dict(result)["tool_recall"]
    assert data == json.loads(json.dumps(tool_recall_to_dict(result)))
    assert set(data["round_compression_recall"]) == {"t1", "all"}


def test_no_tool_no_table(tmp_path: Path) -> None:
    write_tiny(tmp_path / "t.json")
    config = BenchConfig(
        data=(tmp_path / "t.json",), strategies=("truncation",), overhead_sizes=(40,)
    )
    plain = run_benchmark(config, progress=io.StringIO())
    assert markdown_tool_recall_tables(plain) == "" and tool_recall_to_dict(plain) == {}
