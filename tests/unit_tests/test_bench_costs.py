from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.pricing import encode_request
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.bench_config import BenchConfig
from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.cost_report import (
    BOUND,
    CEILING,
    cost_rows,
    format_cost_table,
    pricing_assumptions_markdown,
)
from langchain_histcompress.workbench.costs import (
    REPORTED_PRICINGS,
    SESSION_GAP,
    TURN_GAP,
    CostMeter,
    RequestEncoder,
    turn_times,
)
from langchain_histcompress.workbench.locomo import parse_locomo
from langchain_histcompress.workbench.metrics import UsageLedger
from langchain_histcompress.workbench.report import docs_section, readme_section, write_reports
from langchain_histcompress.workbench.runner import run_benchmark
from tests.unit_tests.test_bench_locomo import tiny_locomo_data, write_tiny

COUNTER = TiktokenCounter()


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> BenchResult:
    folder = tmp_path_factory.mktemp("data")
    write_tiny(folder / "t1.json")
    config = BenchConfig(
        data=(folder,),
        strategies=("truncation",),
        overhead_sizes=(10,),
        overhead_turns=1,
        keep_messages=2,
        counting=False,
    )
    return run_benchmark(config, progress=io.StringIO())


def test_turns_of_a_session_are_close_and_sessions_are_days_apart() -> None:
    conversation = parse_locomo(tiny_locomo_data())
    times = turn_times(conversation)
    first, second = conversation.sessions[0].turns, conversation.sessions[1].turns
    assert times[first[1].dia_id] - times[first[0].dia_id] == TURN_GAP
    gap = times[second[0].dia_id] - times[first[-1].dia_id]
    assert gap > 7 * 86_400  # 1 March 9:00 -> 9 March 18:30


def test_a_session_without_a_readable_date_starts_a_day_later() -> None:
    data = tiny_locomo_data()
    data["session_2_date_time"] = "later"
    conversation = parse_locomo(data)
    times = turn_times(conversation)
    last = conversation.sessions[0].turns[-1].dia_id
    assert times[conversation.sessions[1].turns[0].dia_id] - times[last] == SESSION_GAP


def test_request_encoder_matches_the_uncached_encoding() -> None:
    encoder = RequestEncoder(COUNTER, cache_size=2)
    messages = [SystemMessage("s", id="s"), HumanMessage("hi", id="1"), AIMessage("yo", id="2")]
    assert encoder.encode(messages) == encode_request(messages, COUNTER)
    edited = [messages[0], HumanMessage("ho", id="1")]
    assert encoder.encode(edited) == encode_request(edited, COUNTER)
    assert encoder.encode(messages, tools_text="[]") == encode_request(
        messages, COUNTER, tools_text="[]"
    )


def test_meter_shares_one_cache_between_internal_and_answering_calls() -> None:
    meter = CostMeter(COUNTER, pricings=["openai-90", "anthropic"])
    system = SystemMessage("rules " * 1500, id="s")
    meter.internal([system, HumanMessage("summarize", id="x")], output_tokens=10, at=0.0)
    meter.answer([system, HumanMessage("hi", id="1")], output_tokens=5, at=1.0)
    costs = meter.costs()
    assert costs["openai-90"].internal.cached_tokens == 0
    assert costs["openai-90"].answer.cached_tokens == 1408  # the shared system prompt
    assert costs["anthropic"].internal.requests[0].cache_write_tokens > 1500
    # a breakpoint after the system prompt: the answer reads what the internal call wrote
    [answer] = costs["anthropic"].answer.requests
    assert answer.cached_tokens == COUNTER.count_messages([system]) - len(
        COUNTER.encode_reply_priming()
    )
    assert meter.reported_cached_tokens is None


def test_ledger_reads_the_cached_tokens_a_provider_reports() -> None:
    ledger = UsageLedger(COUNTER)
    usage = {
        "input_tokens": 2000,
        "output_tokens": 10,
        "total_tokens": 2010,
        "input_token_details": {"cache_read": 1792},
    }
    model = FakeMessagesListChatModel(
        responses=[AIMessage("ok", usage_metadata=usage)],  # type: ignore[arg-type]
        callbacks=[ledger],
    )
    model.invoke([HumanMessage("hi")])
    [call] = ledger.since(0)
    assert call.cached_tokens == 1792
    assert [m.content for m in call.prompt] == ["hi"]


def test_every_run_is_priced_under_every_pricing_model(result: BenchResult) -> None:
    for run in result.runs:
        assert set(run.costs) == set(REPORTED_PRICINGS)
        assert len(run.costs["none"].answer.requests) == len(run.turns)
    for name in REPORTED_PRICINGS:
        full = result.cost("full", name)
        truncation = result.cost("truncation", name)
        assert full is not None and truncation is not None
        assert full.savings == 0.0
        assert truncation.savings is not None and truncation.savings > 0
    full = result.figures("full")
    assert full is not None
    assert result.cost("full", "none").input_tokens == full.answer_billed - sum(  # type: ignore[union-attr]
        t.completion_tokens
        for t in result.run("full", "t1").turns  # type: ignore[union-attr]
    )


def test_cost_table_json_markdown_plot_and_readme(result: BenchResult, tmp_path: Path) -> None:
    header, rows = cost_rows(result)
    assert header[:2] == ["strategy", "billed"]
    assert [r[0] for r in rows] == ["full", CEILING, "truncation"]
    text = format_cost_table(result)
    assert text.splitlines()[1].startswith("strategy")
    assert max(map(len, text.splitlines())) <= 100
    assert all(c in text for c in ("billed", "cached anthropic", "openai-90", "anthropic"))
    written = write_reports(result, tmp_path / "out")
    data = json.loads(written["json"].read_text("utf-8"))
    costs = data["costs"]
    assert set(costs["pricing_models"]) == set(REPORTED_PRICINGS)
    assert costs["totals"]["full"]["openai-90"]["savings"] == 0.0
    assert costs["provider_reported_cached_tokens"] == {"full": None, "truncation": None}
    markdown = written["markdown"].read_text("utf-8")
    assert "## Cost under prompt caching" in markdown
    assert "![cost_by_pricing](cost_by_pricing.png)" in markdown
    assert written["plot:cost_by_pricing"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pricing_assumptions_markdown() in docs_section(result)
    assert max(map(len, readme_section(result).splitlines())) <= 100


def test_reference_rows_bound_the_default(tmp_path: Path) -> None:
    write_tiny(tmp_path / "t1.json")
    config = BenchConfig(
        data=(tmp_path,),
        strategies=("no_history", "round_compression"),
        overhead_sizes=(10,),
        overhead_turns=1,
        counting=False,
    )
    result = run_benchmark(config, progress=io.StringIO())
    _, rows = cost_rows(result)
    names = [r[0] for r in rows]
    assert names == [
        "full",
        CEILING,
        "no_history",
        "round_compression",
        BOUND,
    ]
    for pricing in REPORTED_PRICINGS:
        full = result.cost("full", pricing)
        default = result.cost("round_compression", pricing)
        reference = result.cost("no_history", pricing)
        assert full is not None and default is not None and reference is not None
        assert full.output_cost > 0
        assert default.output_cost == pytest.approx(full.output_cost)  # the same answers
        assert default.answer_savings is not None and default.savings is not None
        assert default.answer_savings >= default.savings  # free summaries only help
        assert reference.savings is not None
        assert 1 - full.output_cost / full.cost > reference.savings  # the ceiling
    # without caching nothing costs less than no history at all
    none_reference = result.cost("no_history", "none")
    none_default = result.cost("round_compression", "none")
    assert none_reference is not None and none_default is not None
    assert none_reference.savings is not None and none_default.answer_savings is not None
    assert none_reference.savings >= none_default.answer_savings
    data = json.loads(write_reports(result, tmp_path / "out")["json"].read_text("utf-8"))
    totals = data["costs"]["totals"]["round_compression"]["openai-90"]
    assert totals["savings_with_free_internal_calls"] >= totals["savings"]
    assert totals["answer_output_cost_usd"] > 0


def test_anthropic_breakpoints_sit_before_package_data_messages() -> None:
    encoder = RequestEncoder(COUNTER)
    kind = {"histcompress_kind": "histcompress_context"}
    system = SystemMessage("rules " * 1500, id="s")
    plain = [system, HumanMessage("hi", id="1")]
    preamble = len(encoder.message(system))
    ids = encoder.encode(plain)
    assert encoder.encode_with_breakpoints(plain) == (ids, (preamble, len(ids)))
    data = HumanMessage("retrieved", id="d", additional_kwargs=kind)
    first = [system, HumanMessage("hi", id="1"), data, HumanMessage("q1", id="q1")]
    _, marks = encoder.encode_with_breakpoints(first)
    # after the preamble and before the data, not at the end (the varying tail)
    assert marks == (preamble, sum(len(encoder.message(m)) for m in first[:2]))
    # the stable part before the data message is read by the next request
    meter = CostMeter(COUNTER, pricings=["anthropic"])
    meter.answer(first, output_tokens=1, at=0.0)
    other = HumanMessage("other", id="d2", additional_kwargs=kind)
    grown = [*first[:2], AIMessage("yo", id="2"), other, HumanMessage("q2", id="q2")]
    meter.answer(grown, output_tokens=1, at=30.0)
    second = meter.costs()["anthropic"].answer.requests[1]
    assert second.cached_tokens == marks[-1]
    assert second.cache_write_tokens == len(encoder.message(grown[2]))  # the new verbatim turn
