"""The defaults keep every view inside the answering model's window, and failures never stick.

Agent histories with tool results far larger than any summary, a message larger than the
whole window, reminders injected every turn: whatever the trigger and the pricing, the view
sent to the model stays within 85% of the window, no summarizer prompt exceeds the
summarizer's own window, and the originals stay whole in state and storage.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress import RoundCompressor
from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.budget import SHORTENED_KEY, context_budget
from langchain_histcompress.core.errors import BudgetError, SummarizationError
from langchain_histcompress.core.pricing import PRICING_MODELS
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import count_request
from tests.fakes import CountingSummarizer

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
TOKENS = count_tokens_approximately


def words(tokens: int, seed: int = 0) -> str:
    """About ``tokens`` approximate tokens of text (4 characters a token)."""
    return f"report {seed} line " * (tokens * 4 // 16)


def at(seconds: float) -> dict[str, Any]:
    return {"timestamp": (T0 + timedelta(seconds=seconds)).isoformat()}


def agent_round(n: int, tool_tokens: int, *, start: float) -> list[BaseMessage]:
    """A question, a tool call, a large tool result and the final answer."""
    return [
        HumanMessage(f"fetch report {n}", id=f"h{n}", additional_kwargs=at(start)),
        AIMessage(
            "",
            tool_calls=[{"name": "fetch", "args": {"n": n}, "id": f"c{n}"}],
            id=f"a{n}",
            additional_kwargs=at(start + 1),
        ),
        ToolMessage(
            words(tool_tokens, n), tool_call_id=f"c{n}", id=f"t{n}", additional_kwargs=at(start + 2)
        ),
        AIMessage(f"report {n} read", id=f"f{n}", additional_kwargs=at(start + 3)),
    ]


def summarizer(window: int | None = None) -> CountingSummarizer:
    profile = {"max_input_tokens": window} if window else None
    return CountingSummarizer(profile=profile)


def replay(
    compressor: RoundCompressor, rounds: Sequence[list[BaseMessage]]
) -> tuple[list[int], RunningSummary | None, list[BaseMessage]]:
    """Compress before every model call of every round; the sizes of the views sent."""
    history: list[BaseMessage] = [SystemMessage("You are an analyst.", id="sys")]
    summary: RunningSummary | None = None
    sizes: list[int] = []
    for messages in rounds:
        for count in (1, 3):  # before the first and the second model call of the round
            shown = [*history, *messages[:count]]
            result = compressor.compress(shown, summary)
            summary = result.summary
            assert not validate_history(result.messages, allow_in_flight=True)
            sizes.append(TOKENS(result.messages))
        history = [*history, *messages]
    return sizes, summary, history


@pytest.mark.parametrize("trigger", ["cost", *(("cost", p) for p in PRICING_MODELS), None])
def test_fourteen_rounds_of_large_tool_results_stay_in_the_window(trigger: Any) -> None:
    compressor = RoundCompressor(summarizer(), trigger=trigger, token_counter=TOKENS)
    rounds = [agent_round(n, 22_000, start=30.0 * n) for n in range(14)]
    sizes, _, history = replay(compressor, rounds)
    budget = context_budget(None).tokens
    assert max(sizes) <= budget < 128_000
    assert history[1:] == [m for r in rounds for m in r]  # the originals are untouched


def test_a_smaller_window_from_the_answering_model_bounds_every_view() -> None:
    answering = CountingSummarizer(profile={"max_input_tokens": 32_000})
    compressor = RoundCompressor(summarizer(), context_window=answering, token_counter=TOKENS)
    sizes, _, _ = replay(compressor, [agent_round(n, 22_000, start=30.0 * n) for n in range(14)])
    assert max(sizes) <= int(32_000 * 0.85)


@pytest.mark.parametrize("pricing", list(PRICING_MODELS))
def test_sixty_rounds_of_seven_thousand_tokens_under_every_pricing(pricing: str) -> None:
    compressor = RoundCompressor(summarizer(), trigger=("cost", pricing), token_counter=TOKENS)
    rounds = [agent_round(n, 7_000, start=30.0 * n) for n in range(60)]
    sizes, summary, _ = replay(compressor, rounds)
    assert max(sizes) <= context_budget(None).tokens
    assert summary is not None  # the budget folded even where cost alone would not


def test_a_tool_result_larger_than_the_window_is_shortened_in_the_view_only() -> None:
    compressor = RoundCompressor(summarizer(), token_counter=TOKENS)
    huge = agent_round(0, 300_000, start=0)
    history = [SystemMessage("You are an analyst.", id="sys"), *huge[:3]]
    result = compressor.compress(history)
    assert TOKENS(result.messages) <= context_budget(None).tokens
    shown = {m.id: m for m in result.messages}
    assert SHORTENED_KEY in shown["t0"].additional_kwargs
    assert shown["h0"].content == "fetch report 0"  # the question is never cut
    assert history[3].content == huge[2].content  # the caller's message is untouched
    assert "left out to fit the model's context window" in str(shown["t0"].content)


def test_a_message_larger_than_the_summarizer_window_folds_in_bounded_calls() -> None:
    model = summarizer(window=200_000)
    compressor = RoundCompressor(model, token_counter=TOKENS)
    old = [
        HumanMessage("here is the dump", id="h0"),
        AIMessage(words(1_000_000), id="a0"),
    ]
    rounds = [old] + [
        [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")] for n in range(1, 4)
    ]
    history = [m for r in rounds for m in r] + [HumanMessage("and now?", id="h9")]
    result = compressor.compress(history)
    assert TOKENS(result.messages) <= context_budget(None).tokens
    assert result.summary is not None and "a0" in result.summary.covered_ids
    limit = compressor.summarizer.max_input_tokens
    assert model.prompts and all(TOKENS(p) <= limit for p in model.prompts)
    assert len(history[1].content) == len(words(1_000_000))


def test_reminders_injected_every_turn_do_not_accumulate() -> None:
    compressor = RoundCompressor(summarizer(), trigger=("rounds", 5), token_counter=TOKENS)
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    summary = None
    sizes = []
    for n in range(150):
        history = [
            *history,
            SystemMessage(f"Reminder: today is day {n} of the trip.", id=f"r{n}"),
            HumanMessage(f"question {n}", id=f"h{n}"),
        ]
        result = compressor.compress(history, summary)
        summary = result.summary
        sizes.append(TOKENS(result.messages))
        history = [*history, AIMessage(f"answer {n}", id=f"a{n}")]
    assert max(sizes[100:]) <= max(sizes[40:60]) + 20
    pinned = [m for m in result.messages if m.id and m.id.startswith("r")]
    assert pinned[-1].id == "r149" and len(pinned) < 30


def test_the_context_builder_keeps_building_with_a_reminder_every_turn() -> None:
    builder = ContextBuilder(max_context_tokens=800, token_counter=TOKENS)
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for n in range(40):
        history += [
            SystemMessage(f"Reminder {n}: the timezone is UTC+2, it is day {n}.", id=f"r{n}"),
            HumanMessage(f"question {n}", id=f"h{n}"),
            AIMessage(f"answer {n}", id=f"a{n}"),
        ]
    history.append(HumanMessage("last question", id="hq"))
    built = builder.build(history)
    assert TOKENS(built) <= 800
    assert any(m.id == "r39" for m in built) and built[-1].id == "hq"


def test_a_budget_error_names_what_does_not_fit() -> None:
    builder = ContextBuilder(max_context_tokens=100, token_counter=TOKENS)
    history = [SystemMessage("x " * 400, id="sys"), HumanMessage("hi", id="h")]
    with pytest.raises(BudgetError, match=r"system preamble \(\d+\)"):
        builder.build(history)


def test_a_failed_fold_never_fails_a_view_that_fits() -> None:
    model = CountingSummarizer(fail_with=RuntimeError("down"))
    compressor = RoundCompressor(model, trigger=("rounds", 3), token_counter=TOKENS, max_retries=0)
    history: list[BaseMessage] = []
    for n in range(6):
        history += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
    with pytest.raises(SummarizationError):
        compressor.compress(history)
    # the faces go on with the view that fits: it is what view() builds
    assert [m.id for m in compressor.view(history)] == [m.id for m in history]


def test_a_view_that_cannot_fit_raises_with_what_is_waiting() -> None:
    compressor = RoundCompressor(summarizer(), context_window=1_000, token_counter=TOKENS)
    history = [
        HumanMessage("a" * 4_000, id="h0"),
        AIMessage("b", id="a0"),
        HumanMessage("now", id="h1"),
    ]
    with pytest.raises(BudgetError, match="context_window=1,000"):
        compressor.view(history)
    assert not any(is_summary_message(m) for m in history)


def test_plan_says_why_a_short_chat_does_not_fold() -> None:
    compressor = RoundCompressor(summarizer(), token_counter=TOKENS)
    history = list(
        itertools.chain.from_iterable(
            (HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")) for n in range(4)
        )
    )
    reason = compressor.plan(history).reason
    assert reason.startswith("no fold: 4 rounds pending")
    assert "openai-50, the default pricing" in reason and "108,800" in reason


def test_pricing_follows_the_answering_model() -> None:
    from langchain_openai import ChatOpenAI

    gpt5 = ChatOpenAI(model="gpt-5-mini", api_key="sk-none")  # type: ignore[arg-type]
    compressor = RoundCompressor(summarizer(), context_window=gpt5, token_counter=TOKENS)
    assert compressor.target.schedule is not None
    assert compressor.target.schedule.pricing.name == "openai-90"
    assert compressor.target.budget.window == 272_000
    named = RoundCompressor(
        summarizer(), trigger=("cost", "none"), context_window=gpt5, token_counter=TOKENS
    )
    assert named.target.schedule is not None and named.target.schedule.pricing.name == "none"


def _imported_summary() -> SystemMessage:
    text = words(60, 99)
    return RunningSummary(content=text, text=text).to_message()


def test_plan_counts_a_summary_carried_in_the_history() -> None:
    """A summary message imported with the history is shown until a fold replaces it: the
    plan's view size includes it, so a budget check sees the view the model gets."""
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="s"), _imported_summary()]
    for n in range(3):
        history += [HumanMessage(words(40, n), id=f"h{n}"), AIMessage(words(40, n), id=f"a{n}")]
    c = RoundCompressor(CountingSummarizer(), token_counter=TOKENS)
    plan = c.plan(history)
    assert plan.view_tokens == count_request(TOKENS, history)


def test_a_view_that_fits_folds_nothing_though_a_summary_at_its_cap_would_not() -> None:
    """Older tool steps of the latest round fold only when the view does not fit: a view
    within the budget gets no summary added to it, whatever the summary's cap."""
    tools: list[BaseMessage] = []
    for n in range(4):
        tools += [
            AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": f"c{n}"}], id=f"a{n}"),
            ToolMessage(words(60, n), tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    history = [HumanMessage("look it up", id="h"), *tools]
    model = CountingSummarizer()
    c = RoundCompressor(model, token_counter=TOKENS, max_summary_tokens=2048)
    assert count_request(TOKENS, history) <= context_budget(800).tokens
    result = c.compress(history, context_window=800)
    assert (result.calls, model.calls) == (0, 0)
    assert result.messages == history
