"""Property tests: the compressor's invariants over generated histories."""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core.budget import SHORTENED_KEY
from langchain_histcompress.core.rounds import (
    is_summary_message,
    repair_history,
    split_units,
    validate_history,
)
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import count_request
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import RoundCompressor, view
from langchain_histcompress.edge.round_planning import pending_rounds
from tests.fakes import ScriptedSummarizer, prompt_ids
from tests.histories import history

_stale = itertools.count()
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


@st.composite
def triggers(draw: st.DrawFn) -> Any:
    """A trigger spec: a lone threshold, a list (OR) with dict clauses (AND), idle, cost, None."""
    items: list[Any] = []
    if draw(st.booleans()) or draw(st.booleans()):
        items.append(("rounds", draw(st.integers(1, 7))))
    if draw(st.booleans()):
        items.append(("tokens", draw(st.integers(10, 400))))
    if draw(st.integers(0, 3)) == 0:
        items.append({"messages": draw(st.integers(2, 30)), "rounds": draw(st.integers(1, 4))})
    if draw(st.integers(0, 3)) == 0:
        items.append(("cost", "none"))
    if draw(st.booleans()):
        items.append(("idle", timedelta(hours=1)))
    if not items:
        return None
    return items[0] if len(items) == 1 else items


@st.composite
def options(draw: st.DrawFn) -> dict[str, Any]:
    narrow = draw(st.booleans())  # a summarizer whose own window splits a fold into calls
    return {
        "trigger": draw(triggers()),
        "keep": draw(
            st.tuples(st.just("rounds"), st.integers(0, 4))
            | st.tuples(st.just("messages"), st.integers(1, 12))
            | st.tuples(st.just("tokens"), st.integers(10, 300))
        ),
        "max_calls_per_compress": draw(st.integers(1, 4)),
        "context_window": draw(st.sampled_from([None, None, 800, 1500, 3000])),
        "summarizer_window": 2000 if narrow else None,
        "max_summary_tokens": 300 if narrow else 2048,
        "placement": draw(st.sampled_from(["system_message", "append_to_system"])),
    }


@st.composite
def scenario(draw: st.DrawFn, *, allow_leading_tools: bool = False) -> list[BaseMessage]:
    """A generated history, optionally with an earlier summary message after the preamble and
    timestamps with occasional long pauses."""
    messages = draw(history(allow_leading_tools=allow_leading_tools, max_rounds=12))
    if draw(st.booleans()):
        lead = 0
        while lead < len(messages) and isinstance(messages[lead], SystemMessage):
            lead += 1
        text = f"earlier summary {next(_stale)}"
        messages.insert(lead, RunningSummary(content=text, text=text).to_message())
    if draw(st.booleans()):
        stamped: list[BaseMessage] = []
        when = T0
        for message in messages:
            gap = draw(st.sampled_from([timedelta(minutes=1), timedelta(days=1)]))
            when += gap
            stamped.append(
                message.model_copy(
                    update={
                        "additional_kwargs": {
                            **message.additional_kwargs,
                            "timestamp": when.isoformat(),
                        }
                    }
                )
            )
        messages = stamped
    return messages


def make(opts: dict[str, Any], **extra: Any) -> tuple[RoundCompressor, ScriptedSummarizer]:
    settings = {**opts, **extra}
    window = settings.pop("summarizer_window", None)
    model = ScriptedSummarizer(profile={"max_input_tokens": window} if window else None)
    c = RoundCompressor(model, token_counter=count_tokens_approximately, timeout=None, **settings)
    return c, model


def budget_of(opts: dict[str, Any]) -> int:
    """Tokens the view may hold under ``opts``."""
    return int(0.85 * (opts["context_window"] or 128_000))


def conversation(messages: list[BaseMessage]) -> list[BaseMessage]:
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], SystemMessage):
        lead += 1
    return [m for m in messages[lead:] if not is_summary_message(m)]


def check(
    messages: list[BaseMessage],
    before: list[BaseMessage],
    previous: RunningSummary | None,
    result: CompressionResult,
    model: ScriptedSummarizer,
    calls_before: int,
    opts: dict[str, Any],
) -> None:
    assert messages == before, "input mutated"
    placement = opts["placement"]
    out = result.messages
    assert validate_history(out) == []
    assert count_request(count_tokens_approximately, out) <= budget_of(opts), "view over budget"
    body = conversation(messages)
    body_ids = [str(m.id) for m in body]
    lead = itertools.takewhile(lambda m: isinstance(m, SystemMessage), messages)
    preamble = [m for m in lead if not is_summary_message(m)]

    # Preamble byte-identical (the last one is a copy when the summary is appended to it).
    appended = placement == "append_to_system" and result.summary is not None and preamble
    untouched = preamble[:-1] if appended else preamble
    for i, system in enumerate(untouched):
        assert out[i] is system
    if appended:
        copy_ = out[len(preamble) - 1]
        assert copy_ is not preamble[-1]
        assert str(copy_.content).startswith(str(preamble[-1].content))

    # One summary at most; exactly where it belongs.
    summaries = [m for m in out if is_summary_message(m)]
    if result.summary is None:
        assert out == messages
    elif not appended:
        assert summaries == [result.summary.to_message()]
        assert out[len(preamble)] == result.summary.to_message()
    else:
        assert summaries == []

    # Nothing lost, nothing twice.
    covered = result.summary.covered_ids if result.summary else frozenset()
    shown = [m for m in out if not isinstance(m, SystemMessage)]
    shown_ids = [str(m.id) for m in shown]
    assert len(set(shown_ids)) == len(shown_ids)
    for message_id in body_ids:
        assert (message_id in shown_ids) != (message_id in covered), message_id
    # Shown messages are the caller's own objects (or shortened copies of them, marked and
    # carrying their id), in the original order.
    position = {id(m): i for i, m in enumerate(body)}
    by_id = {str(m.id): i for i, m in enumerate(body)}
    indexes = [
        by_id[str(m.id)] if SHORTENED_KEY in m.additional_kwargs else position[id(m)] for m in shown
    ]
    assert indexes == sorted(indexes)

    # Coverage grows by exactly what was sent to the summarizer, whole units only.
    sent = [i for prompt in model.prompts[calls_before:] for i in prompt_ids(prompt)]
    old = previous.covered_ids if previous else frozenset()
    assert set(sent) <= set(body_ids)
    assert covered == old | set(sent)
    assert model.calls - calls_before == result.calls
    for unit in split_units(body):
        flags = {str(m.id) in covered for m in unit}
        assert len(flags) == 1, "a tool group was split"

    # The newest message and the latest human message are never summarized, unless keep is
    # zero rounds and the latest round is answered: then the whole exchange may fold.
    humans = [m for m in body if isinstance(m, HumanMessage)]
    last = body[-1] if body else None
    answered = isinstance(last, AIMessage) and not last.tool_calls and not last.invalid_tool_calls
    if answered and opts["keep"] == ("rounds", 0) and last is not None and last.id in covered:
        start = body.index(humans[-1]) if humans else 0
        assert all(m.id in covered for m in body[start:])
    else:
        if last is not None:
            assert out[-1] is last or out[-1].id == last.id
        if humans:
            assert any(m is humans[-1] for m in out)  # never shortened either
            assert humans[-1].id not in covered
    if result.summary is not None and previous is not None and result.compressed:
        assert result.summary.version == previous.version + result.calls


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), options())
def test_one_shot_invariants(messages: list[BaseMessage], opts: dict[str, Any]) -> None:
    c, model = make(opts)
    before = copy.deepcopy(messages)
    result = c.compress(messages)
    event(f"calls: {min(result.calls, 3)}")
    event(f"reasons: {','.join(c.plan(messages).reasons)}")
    check(messages, before, None, result, model, 0, opts)
    assert result.messages == c.view(messages, result.summary)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), options(), st.data())
def test_replay_invariants(
    messages: list[BaseMessage], opts: dict[str, Any], data: st.DataObject
) -> None:
    """Grow the history message by message (at valid cut points) and compress each time."""
    c, model = make(opts)
    summary: RunningSummary | None = None
    valid_ends = [n for n in range(1, len(messages) + 1) if validate_history(messages[:n]) == []]
    ends = [
        *data.draw(st.lists(st.sampled_from(valid_ends), max_size=8).map(sorted)),
        len(messages),
    ]
    for end in ends:
        prefix = messages[:end]
        before = copy.deepcopy(prefix)
        calls_before = model.calls
        result = c.compress(prefix, summary)
        check(prefix, before, summary, result, model, calls_before, opts)
        summary = result.summary
    # Steady state: once the call cap is out of the way, a rounds threshold leaves fewer
    # rounds pending than it fires at, or no more than the kept rounds.
    trigger, keep = opts["trigger"], opts["keep"]
    if isinstance(trigger, tuple) and trigger[0] == "rounds" and keep[0] == "rounds":
        while (again := c.compress(messages, summary)).compressed:
            summary = again.summary
        pending = len(pending_rounds(messages, summary))
        assert pending < trigger[1] or pending <= max(keep[1], 1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(allow_leading_tools=True), options())
def test_broken_histories_are_repaired_and_lose_nothing(
    messages: list[BaseMessage], opts: dict[str, Any]
) -> None:
    c, _ = make(opts)
    result = c.compress(messages)
    assert validate_history(result.messages) == []
    covered = result.summary.covered_ids if result.summary else frozenset()
    shown = {m.id for m in result.messages}
    strays = {m.id for m in repair_history(messages).dropped}
    for message in conversation(messages):
        if message.id in strays:  # left out of the view; folded with its round or kept
            assert message.id not in shown
        else:
            assert (message.id in shown) != (message.id in covered)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), options())
def test_async_matches_sync(messages: list[BaseMessage], opts: dict[str, Any]) -> None:
    sync_c, sync_model = make(opts)
    async_c, async_model = make(opts)
    sync = sync_c.compress(messages)
    result = asyncio.run(async_c.acompress(messages))
    assert [m.id for m in result.messages if not is_summary_message(m)] == [
        m.id for m in sync.messages if not is_summary_message(m)
    ]
    assert [prompt_ids(p) for p in async_model.prompts] == [
        prompt_ids(p) for p in sync_model.prompts
    ]
    assert (result.calls, result.deferred_rounds) == (sync.calls, sync.deferred_rounds)


def naive_view(messages: list[BaseMessage], summary: RunningSummary) -> list[BaseMessage]:
    """The view computed over the whole history, unit by unit, with no shortcut."""
    lead = list(itertools.takewhile(lambda m: isinstance(m, SystemMessage), messages))
    preamble = [m for m in lead if not is_summary_message(m)]
    body = [m for m in messages[len(lead) :] if not is_summary_message(m)]
    shown = [
        m
        for unit in split_units(body)
        if not all(u.id in summary.covered_ids for u in unit)
        for m in unit
    ]
    return repair_history([*preamble, summary.to_message(), *shown]).messages


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(allow_leading_tools=True), st.data())
def test_view_matches_naive_definition_for_any_coverage(
    messages: list[BaseMessage], data: st.DataObject
) -> None:
    """Whatever ``covered_ids`` holds (even a record that does not match the history), the
    fast tail-only view equals the unit-by-unit definition and loses nothing."""
    ids = [str(m.id) for m in conversation(messages)]
    prefix = data.draw(st.integers(0, len(ids)))
    extra = data.draw(st.lists(st.sampled_from(ids), max_size=5)) if ids else []
    covered = frozenset(ids[:prefix]) | frozenset(extra)
    summary = RunningSummary(content="x", text="x", covered_ids=covered)
    out = view(messages, summary)
    assert out == naive_view(messages, summary)
    shown = {m.id for m in out}
    strays = {m.id for m in repair_history(messages).dropped}
    for message_id in ids:
        assert message_id in shown or message_id in covered or message_id in strays
    rounds = pending_rounds(messages, summary)
    pending = [m for r in rounds for m in r.messages if m.id not in strays]
    assert pending == out[len(out) - len(pending) :]
