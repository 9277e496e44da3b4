from __future__ import annotations

import asyncio
import copy
import json
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

from langchain_histcompress.core.budget import SHORTENED_KEY
from langchain_histcompress.core.errors import (
    ConfigurationError,
    InvalidHistoryError,
    SummarizationError,
)
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.timestamps import message_timestamp
from langchain_histcompress.core.tokens import count_request
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import SUMMARY_METADATA_KEY, RoundCompressor, view
from langchain_histcompress.edge.round_planning import pending_rounds
from langchain_histcompress.edge.thread_summary import (
    acompress_in_background,
    compress_in_background,
    thread_summarizer,
)
from tests.fakes import (
    CallRecorder,
    Hang,
    RateLimitError,
    ScriptedSummarizer,
    Sleeps,
    cancel_once_called,
    conversation,
    exchange,
    prompt_ids,
    summary_json,
)

SYSTEM = SystemMessage("You are a helpful assistant.", id="sys")


def history(rounds: int, *, system: bool = True) -> list[BaseMessage]:
    return conversation(rounds, system=SYSTEM if system else None)


def compressor(model: ScriptedSummarizer | None = None, **kwargs: Any) -> RoundCompressor:
    """Folds once 5 rounds are pending and keeps the newest 3, unless told otherwise."""
    sleeps = Sleeps()
    options: dict[str, Any] = {
        "trigger": ("rounds", 5),
        "keep": ("rounds", 3),
        "token_counter": count_tokens_approximately,
        "sleep": sleeps,
        "async_sleep": sleeps.asleep,
        **kwargs,
    }
    return RoundCompressor(model if model is not None else ScriptedSummarizer(), **options)


def body_ids(messages: list[BaseMessage]) -> list[str]:
    return [
        str(m.id)
        for m in messages
        if not isinstance(m, SystemMessage) and not is_summary_message(m)
    ]


def assert_partition(original: list[BaseMessage], result: CompressionResult) -> None:
    """Every original conversation message is either in the view or covered, never both."""
    covered = result.summary.covered_ids if result.summary else frozenset()
    shown = {m.id for m in result.messages if not is_summary_message(m)}
    for message_id in body_ids(original):
        assert (message_id in shown) != (message_id in covered), message_id
    assert validate_history(result.messages) == []


MODES = ["sync", "async"]


async def run(c: RoundCompressor, mode: str, *args: Any, **kwargs: Any) -> CompressionResult:
    if mode == "sync":
        return c.compress(*args, **kwargs)
    return await c.acompress(*args, **kwargs)


# --------------------------------------------------------------------------- the rolling rule


@pytest.mark.parametrize("mode", MODES)
async def test_replaying_100_rounds_costs_48_calls(mode: str) -> None:
    model = ScriptedSummarizer()
    c = compressor(model)
    messages: list[BaseMessage] = [SYSTEM]
    summary: RunningSummary | None = None
    first_call_at = None
    for n in range(100):
        messages += exchange(n)
        result = await run(c, mode, messages, summary)
        summary = result.summary
        assert_partition(messages, result)
        assert result.messages[0] is SYSTEM
        assert any(m is messages[-2] for m in result.messages)  # latest human verbatim
        if result.compressed and first_call_at is None:
            first_call_at = n + 1
            assert len(pending_rounds(messages, summary)) == 3
            assert [m.id for m in result.messages[2:]] == body_ids(messages)[4:]
        if result.compressed:
            assert result.calls == 1
            assert len(pending_rounds(messages, summary)) == 3
    assert first_call_at == 5
    assert model.calls == 48
    assert summary is not None
    assert summary.version == 48
    assert summary.rounds_covered == 96
    assert len(pending_rounds(messages, summary)) == 4


def test_nothing_happens_before_compress_plus_retain_rounds() -> None:
    model = ScriptedSummarizer()
    c = compressor(model)
    for rounds in range(1, 5):
        messages = history(rounds)
        before = copy.deepcopy(messages)
        result = c.compress(messages)
        assert messages == before
        assert (result.compressed, result.calls, result.summary) == (False, 0, None)
        assert result.messages == messages
        assert result.messages is not messages
    assert model.calls == 0


def test_first_compression_sends_exactly_the_oldest_rounds() -> None:
    model = ScriptedSummarizer()
    result = compressor(model).compress(history(5))
    (prompt,) = model.prompts
    assert prompt_ids(prompt) == ["h0", "a0", "h1", "a1"]
    assert result.summary is not None
    assert result.summary.covered_ids == {"h0", "a0", "h1", "a1"}
    assert [m.id for m in result.messages[2:]] == ["h2", "a2", "h3", "a3", "h4", "a4"]
    summary_message = result.messages[1]
    assert is_summary_message(summary_message)
    assert "covers h0,a0,h1,a1" in str(summary_message.content)


def test_previous_summary_is_input_once_never_conversation() -> None:
    model = ScriptedSummarizer()
    c = compressor(model)
    first = c.compress(history(5))
    full = history(7)
    fed_back = [*first.messages, *exchange(5), *exchange(6)]  # a caller storing the view
    for messages in (full, fed_back):
        second = c.compress(messages, first.summary)
        prompt = str(model.prompts[-1][-1].content)
        assert prompt_ids(model.prompts[-1]) == ["h2", "a2", "h3", "a3"]
        assert prompt.count("covers h0,a0,h1,a1") == 1
        assert "histcompress-summary" not in prompt
        assert second.summary is not None and second.summary.version == 2
        assert sum(is_summary_message(m) for m in second.messages) == 1


def test_stale_summary_messages_in_input_are_replaced_not_summarized() -> None:
    model = ScriptedSummarizer()
    c = compressor(model)
    old = RunningSummary(content="The user is Ada.", text="The user is Ada.")
    messages = [SYSTEM, old.to_message(), *history(5, system=False)]
    assert validate_history(messages) == []
    result = c.compress(messages)  # no record: the old text is imported as previous summary
    prompt = str(model.prompts[0][-1].content)
    assert prompt.count("The user is Ada.") == 1
    assert '<previous_summary version="imported">' in prompt
    assert old.to_message().id not in prompt_ids(model.prompts[0])
    summaries = [m for m in result.messages if is_summary_message(m)]
    assert len(summaries) == 1 and summaries[0].id != old.to_message().id
    assert result.messages[0] is SYSTEM
    # Nothing due: stale summary message kept as is.
    small = [SYSTEM, old.to_message(), *history(2, system=False)]
    assert c.compress(small).messages == small


# --------------------------------------------------------------------------- backlog


def narrow(**kwargs: Any) -> ScriptedSummarizer:
    """A summarizer whose own window lets one call read two short rounds (with the
    compressor's ``max_summary_tokens=100``)."""
    return ScriptedSummarizer(profile={"max_input_tokens": 585}, **kwargs)


@pytest.mark.parametrize("mode", MODES)
async def test_backlog_is_folded_in_calls_the_summarizer_window_bounds(mode: str) -> None:
    model = narrow()
    c = compressor(model, max_calls_per_compress=8, max_summary_tokens=100)
    messages = history(100)
    result = await run(c, mode, messages)
    assert result.calls == model.calls == 8
    assert [u.version for u in result.updates] == list(range(1, 9))
    assert result.updates[-1] == result.summary
    assert result.summary is not None and result.summary.rounds_covered == 16
    assert result.deferred_rounds == 100 - 3 - 16  # due down to keep, left for later calls
    for i, prompt in enumerate(model.prompts):
        assert prompt_ids(prompt) == [f"{p}{n}" for n in (2 * i, 2 * i + 1) for p in "ha"]
    for i, update in enumerate(result.updates):
        assert len(update.covered_ids) == 4 * (i + 1)  # coverage recorded per chunk
    assert_partition(messages, result)
    assert len(pending_rounds(messages, result.summary)) == 84  # nothing dropped
    summary = result.summary
    calls = 8
    while True:
        again = await run(c, mode, messages, summary)
        assert_partition(messages, again)
        if not again.compressed:
            break
        calls += again.calls
        summary = again.summary
    assert calls == 48
    # the last fold stopped at 8 calls one round short of keep; 4 pending fire no trigger
    assert len(pending_rounds(messages, summary)) == 4


@pytest.mark.parametrize("mode", MODES)
async def test_backlog_within_the_summarizer_window_is_folded_in_one_call(mode: str) -> None:
    model = ScriptedSummarizer()
    c = compressor(model)
    messages = history(100)
    result = await run(c, mode, messages)
    assert (result.calls, result.deferred_rounds) == (1, 0)
    assert result.summary is not None and result.summary.rounds_covered == 97
    assert prompt_ids(model.prompts[0]) == body_ids(messages)[: 2 * 97]
    assert [m.id for m in result.messages[2:]] == body_ids(messages)[2 * 97 :]
    assert_partition(messages, result)


@pytest.mark.parametrize("mode", MODES)
async def test_failure_mid_backlog_changes_nothing(mode: str) -> None:
    model = narrow(script=[summary_json("one"), ValueError("bug")])
    c = compressor(model, max_summary_tokens=100)
    messages = history(20)
    before = copy.deepcopy(messages)
    with pytest.raises(SummarizationError):
        await run(c, mode, messages)
    assert model.calls >= 2  # the first call succeeded; its summary was not kept
    assert messages == before


# --------------------------------------------------------------------------- other triggers


def big_exchange(n: int, words: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"question {n} " + "lorem " * words, id=f"h{n}"),
        AIMessage(f"answer {n} " + "ipsum " * words, id=f"a{n}"),
    ]


def test_token_threshold_trigger_folds_down_to_keep() -> None:
    model = ScriptedSummarizer()
    c = compressor(model, trigger=("tokens", 1000), keep=("rounds", 1))
    messages: list[BaseMessage] = [SYSTEM]
    for n in range(3):
        messages += big_exchange(n, 100)
    assert not c.compress(messages).compressed  # about 940 approximate tokens
    messages += big_exchange(3, 100)
    plan = c.plan(messages)
    assert plan.reasons == ("tokens",)
    result = c.compress(messages)
    assert result.calls == 1
    assert result.summary is not None
    assert result.summary.covered_ids == {"h0", "a0", "h1", "a1", "h2", "a2"}
    assert [m.id for m in result.messages[2:]] == ["h3", "a3"]
    assert_partition(messages, result)


def test_token_threshold_never_folds_the_current_question() -> None:
    c = compressor(trigger=("tokens", 10), keep=("rounds", 0))
    question = HumanMessage("question 0 " + "lorem " * 100, id="h0")
    messages: list[BaseMessage] = [SYSTEM, question]
    assert c.plan(messages).chunks == ()
    answered = [SYSTEM, *big_exchange(0, 100)]  # keep zero rounds: after the reply it folds
    assert c.plan(answered).chunks == ()
    after = c.plan(answered, after_reply=True).chunks
    assert [[m.id for m in ch.messages] for ch in after] == [["h0", "a0"]]
    messages = [*answered, HumanMessage("question 1 " + "lorem " * 100, id="h1")]
    plan = c.plan(messages)
    assert [[m.id for m in ch.messages] for ch in plan.chunks] == [["h0", "a0"]]


def stamped(message: BaseMessage, when: datetime) -> BaseMessage:
    return message.model_copy(update={"additional_kwargs": {"timestamp": when.isoformat()}})


def test_idle_gap_folds_everything_before_the_resumed_round() -> None:
    model = ScriptedSummarizer()
    c = compressor(model, trigger=[("rounds", 5), ("idle", timedelta(hours=1))])
    t0 = datetime(2024, 1, 1, 9, tzinfo=timezone.utc)
    messages: list[BaseMessage] = [SYSTEM]
    for n in range(3):
        h, a = exchange(n)
        messages += [
            stamped(h, t0 + timedelta(minutes=2 * n)),
            stamped(a, t0 + timedelta(minutes=2 * n + 1)),
        ]
    assert not c.compress(messages).compressed
    resumed = stamped(HumanMessage("back again", id="h9"), t0 + timedelta(days=1))
    messages.append(resumed)
    result = c.compress(messages)
    assert c.plan(messages).reasons == ("idle_gap",)
    assert result.calls == 1  # the 3 earlier rounds in one call
    assert [m.id for m in result.messages] == ["sys", result.messages[1].id, "h9"]
    assert_partition(messages, result)


def test_idle_gap_uses_custom_getter_and_ignores_missing_times() -> None:
    times = {"h0": 0, "a0": 10, "h1": 20, "a1": 30, "h2": 100_000}
    c = compressor(
        trigger=[("rounds", 5), ("idle", timedelta(minutes=5))],
        timestamp_getter=lambda m: (
            datetime.fromtimestamp(times[str(m.id)], tz=timezone.utc) if m.id in times else None
        ),
    )
    messages = history(3)
    assert c.plan(messages).reasons == ("idle_gap",)
    del times["h2"]
    assert c.plan(messages).reasons == ()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, tzinfo=timezone.utc)),
        ("2024-05-01T12:00:00+02:00", datetime(2024, 5, 1, 10, tzinfo=timezone.utc)),
        (1714557600, datetime(2024, 5, 1, 10, tzinfo=timezone.utc)),
        (1714557600000, datetime(2024, 5, 1, 10, tzinfo=timezone.utc)),
        ("1714557600", datetime(2024, 5, 1, 10, tzinfo=timezone.utc)),
        (datetime(2024, 5, 1, 10), datetime(2024, 5, 1, 10, tzinfo=timezone.utc)),
        ("yesterday", None),
        (True, None),
    ],
)
def test_message_timestamp_formats(value: Any, expected: datetime | None) -> None:
    assert message_timestamp(HumanMessage("x", additional_kwargs={"timestamp": value})) == expected
    assert message_timestamp(AIMessage("x", response_metadata={"created_at": value})) == expected


def agent_round(steps: int, *, in_flight: bool = False) -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage("research this", id="q")]
    for s in range(steps):
        calls = [
            {"name": "search", "args": {"q": f"s{s}-{k}"}, "id": f"c{s}-{k}"} for k in range(2)
        ]
        out.append(AIMessage("", tool_calls=calls, id=f"ai{s}"))
        out += [
            ToolMessage("result " * 60, tool_call_id=f"c{s}-{k}", id=f"t{s}-{k}") for k in (1, 0)
        ]
    if in_flight:
        out.append(AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "cx"}], id="aix"))
    return out


@pytest.mark.parametrize("window", [800, 1000])
@pytest.mark.parametrize("in_flight", [False, True])
def test_oversized_round_folds_older_tool_groups(in_flight: bool, window: int) -> None:
    model = ScriptedSummarizer()
    c = compressor(model, context_window=window)
    budget = int(0.85 * window)
    messages = [SYSTEM, *agent_round(8, in_flight=in_flight)]
    assert count_tokens_approximately(messages) > 2 * budget
    result = c.compress(messages)
    assert result.calls == 1
    assert c.plan(messages).reasons == ("budget",)
    sent = prompt_ids(model.prompts[0])
    assert "q" not in sent
    assert "still in progress" in str(model.prompts[0][0].content)
    assert result.summary is not None
    assert result.summary.covered_ids == set(sent)
    assert result.summary.rounds_covered == 0
    shown = [m.id for m in result.messages]
    assert shown[:3] == ["sys", result.messages[1].id, "q"]
    assert shown[-1] == ("aix" if in_flight else "t7-0")
    for s in range(8):  # groups are whole: either all shown or all covered
        group = {f"ai{s}", f"t{s}-0", f"t{s}-1"}
        assert group <= result.summary.covered_ids or group <= set(shown)
    # folding older tool groups is enough: the view fits without shortening any message
    assert count_request(c.token_counter, result.messages) <= budget
    assert not any(SHORTENED_KEY in m.additional_kwargs for m in result.messages)
    assert_partition(messages, result)
    # Once the round is old, its remainder is folded as a whole round.
    later = messages if not in_flight else messages[:-1]
    later = [*later, AIMessage("done", id="done")]
    for n in range(4):
        later += exchange(n)
    again = compressor(model, context_window=window).compress(later, result.summary)
    assert again.summary is not None
    assert {"q", "done"} <= again.summary.covered_ids
    assert_partition(later, again)


# --------------------------------------------------------------------------- the view


def test_append_to_system_never_mutates_the_callers_message() -> None:
    system = SystemMessage("Be brief.", id="sys", additional_kwargs={"k": 1})
    messages = [system, *history(5, system=False)]
    before = copy.deepcopy(messages)
    result = compressor(placement="append_to_system").compress(messages)
    assert messages == before
    first = result.messages[0]
    assert first is not system
    assert str(first.content).startswith("Be brief.\n\nSummary of the earlier part")
    assert first.additional_kwargs["k"] == 1
    assert result.summary is not None
    assert first.additional_kwargs[SUMMARY_METADATA_KEY]["sha256"] == result.summary.sha256
    assert not is_summary_message(first)
    assert [m.id for m in result.messages[1:]] == body_ids(messages)[4:]
    assert validate_history(result.messages) == []


def test_append_to_system_with_block_content_and_without_preamble() -> None:
    s = RunningSummary(content="x", text="Ada likes tea.", covered_ids=frozenset({"h0", "a0"}))
    blocks = SystemMessage([{"type": "text", "text": "Be brief."}], id="sys")
    out = view([blocks, *history(2, system=False)], s, placement="append_to_system")
    assert out[0].content[0] == {"type": "text", "text": "Be brief."}
    assert "Ada likes tea." in out[0].content[1]["text"]
    assert blocks.content == [{"type": "text", "text": "Be brief."}]
    out = view(history(2, system=False), s, placement="append_to_system")
    assert is_summary_message(out[0])
    assert [m.id for m in out[1:]] == ["h1", "a1"]


def test_view_preamble_is_byte_identical() -> None:
    preamble = [SystemMessage("a", id="s1"), SystemMessage("b", id="s2")]
    messages = [*preamble, *history(6, system=False)]
    result = compressor().compress(messages)
    assert result.messages[0] is preamble[0] and result.messages[1] is preamble[1]
    assert is_summary_message(result.messages[2])


@pytest.mark.parametrize("mode", MODES)
async def test_without_a_trigger_only_the_budget_folds(mode: str) -> None:
    model = ScriptedSummarizer()
    c = compressor(model, trigger=None)
    messages = history(30)
    result = await run(c, mode, messages)
    assert (result.compressed, result.calls, result.messages) == (False, 0, messages)
    s = RunningSummary(content="x", text="x", covered_ids=frozenset({"h0", "a0"}))
    result = await run(c, mode, messages, s)
    assert result.summary is s
    assert [m.id for m in result.messages[2:]] == body_ids(messages)[2:]
    assert model.calls == 0
    # over the budget it folds all the same
    tight = compressor(model, trigger=None, context_window=500, max_summary_tokens=200)
    assert tight.plan(messages).reasons == ("budget",)
    result = await run(tight, mode, messages)
    assert result.compressed and model.calls == 1
    assert count_request(tight.token_counter, result.messages) <= int(0.85 * 500)
    assert_partition(messages, result)


def test_partly_covered_group_is_shown_whole() -> None:
    messages = [SYSTEM, *agent_round(2)]
    s = RunningSummary(content="x", text="x", covered_ids=frozenset({"ai0", "t0-1"}))
    shown = [m.id for m in view(messages, s)]
    assert {"ai0", "t0-0", "t0-1"} <= set(shown)
    assert validate_history(view(messages, s)) == []


# --------------------------------------------------------------------------- thread summary


def test_thread_summarizer_folds_each_finished_exchange_never_the_question() -> None:
    model = ScriptedSummarizer()
    c = thread_summarizer(model, token_counter=count_tokens_approximately)
    assert (c.trigger.clauses, c.keep, c.placement) == (
        ({"rounds": 1},),
        ("rounds", 0),
        "system_message",
    )
    messages: list[BaseMessage] = [SYSTEM, HumanMessage("hi", id="h0")]
    summary = None
    result = c.compress(messages)
    assert not result.compressed  # the current question is never summarized
    messages.append(AIMessage("hello", id="a0"))
    assert not c.compress(messages).compressed  # before the reply the latest round stays
    after_reply = c.compress(messages, after_reply=True)  # after it, the exchange folds
    assert after_reply.calls == 1 and prompt_ids(model.prompts[-1]) == ["h0", "a0"]
    assert [m.id for m in after_reply.messages] == ["sys", after_reply.messages[1].id]
    for n in range(1, 6):
        messages.append(HumanMessage(f"q{n}", id=f"h{n}"))
        result = c.compress(messages, summary)
        summary = result.summary
        assert result.calls == 1
        assert prompt_ids(model.prompts[-1]) == [f"h{n - 1}", f"a{n - 1}"]
        assert [m.id for m in result.messages][::2] == ["sys", f"h{n}"]
        assert result.messages[0] is SYSTEM  # the summary follows it: the preamble stays cached
        messages.append(AIMessage(f"a{n}", id=f"a{n}"))
    assert summary is not None and summary.version == 5


def test_compress_in_background_returns_first_and_updates_after() -> None:
    model = ScriptedSummarizer(script=[Hang(30.0, summary_json("folded"))])
    c = thread_summarizer(model, token_counter=count_tokens_approximately, timeout=None)
    messages = [*history(2), HumanMessage("next", id="h9")]
    future = compress_in_background(c, messages)
    messages.append(AIMessage("reply", id="a9"))  # the caller keeps going; snapshot unaffected
    assert not future.done()
    model.release.set()
    result = future.result(timeout=30)
    assert result.calls == 1  # both finished exchanges in one call
    assert result.updates[0].text == "folded"
    assert result.summary is not None
    assert result.summary.covered_ids == {"h0", "a0", "h1", "a1"}


def test_compress_in_background_with_executor_and_errors() -> None:
    import concurrent.futures

    model = ScriptedSummarizer(script=[ValueError("bug")])
    c = thread_summarizer(model, token_counter=count_tokens_approximately)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = compress_in_background(c, history(3), executor=pool)
        with pytest.raises(SummarizationError):
            future.result(timeout=30)
    future = compress_in_background(c, history(3))
    assert future.result(timeout=30).compressed


async def test_acompress_in_background_task() -> None:
    model = ScriptedSummarizer(script=[Hang(0.01, summary_json("folded"))])
    c = thread_summarizer(model, token_counter=count_tokens_approximately)
    task = acompress_in_background(c, history(2))
    assert isinstance(task, asyncio.Task)
    result = await task
    assert result.updates[0].text == "folded"


async def test_acompress_cancellation_propagates() -> None:
    model = ScriptedSummarizer(script=[Hang(30.0)])
    c = compressor(model)
    messages = history(5)
    before = copy.deepcopy(messages)
    task = await cancel_once_called(model, c.acompress(messages))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert messages == before


# --------------------------------------------------------------------------- retries and tags


@pytest.mark.parametrize("mode", MODES)
async def test_transient_error_then_success_counts_attempts(mode: str) -> None:
    model = ScriptedSummarizer(script=[RateLimitError("429")])
    result = await run(compressor(model), mode, history(5))
    assert (result.calls, result.attempts) == (1, 2)


def test_caller_config_is_forwarded_and_not_mutated() -> None:
    recorder = CallRecorder()
    config: Any = {"callbacks": [recorder], "tags": ["app"]}
    compressor().compress(history(5), config=config)
    assert config["tags"] == ["app"]
    seen = recorder.tags
    assert seen and {"app", "langchain_histcompress:internal", "nostream"} <= set(seen[0])


# --------------------------------------------------------------------------- bad input / config


def test_invalid_history_raises_only_when_asked() -> None:
    model = ScriptedSummarizer()
    bad = [*history(5), ToolMessage("x", tool_call_id="nope", id="orphan")]
    with pytest.raises(InvalidHistoryError, match="orphan_tool_result"):
        compressor(model, on_invalid_history="raise").compress(bad)
    assert model.calls == 0
    result = compressor(model).compress(bad)  # default: compress, repair the view
    assert result.compressed and "orphan" not in {m.id for m in result.messages}
    assert validate_history(result.messages) == []
    assert bad[-1].id == "orphan"  # the caller's history is untouched


def test_messages_without_ids_are_rejected() -> None:
    messages = [SYSTEM, HumanMessage("no id"), AIMessage("x", id="a")]
    with pytest.raises(ConfigurationError, match=r"messages\[1\] \(human\) has no id"):
        compressor().compress(messages)
    with pytest.raises(ConfigurationError, match="RunningSummary"):
        compressor().compress(history(1), {"text": "x"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"trigger": ("rounds", 1.5)}, "trigger"),
        ({"trigger": ("tokens", -1)}, "trigger"),
        ({"trigger": "always"}, "trigger"),
        ({"trigger": []}, "trigger"),
        ({"trigger": ("idle", timedelta(0))}, "idle gap"),
        ({"trigger": ("idle", "soon")}, "idle gap"),
        ({"trigger": ("cost", "openai-99")}, "openai-99"),
        ({"keep": ("rounds", -1)}, "keep"),
        ({"keep": ("turns", 3)}, "keep"),
        ({"keep": ("fraction", 1.5)}, "keep"),
        ({"context_window": 0}, "context_window"),
        ({"context_window": True}, "context_window"),
        ({"max_calls_per_compress": 0}, "max_calls_per_compress"),
        ({"placement": "top"}, "placement"),
        ({"timestamp_getter": 3}, "timestamp_getter"),
        ({"on_invalid_history": "ignore"}, "on_invalid_history"),
        ({"profile": "nope"}, "profile"),
        ({"timeout": -1}, "timeout"),
    ],
)
def test_configuration_is_validated(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        compressor(**kwargs)


def test_keep_zero_rounds_folds_the_latest_round_only_once_answered() -> None:
    c = compressor(trigger=("rounds", 3), keep=("rounds", 0))
    assert c.plan(history(2)).chunks == ()
    (chunk,) = c.plan(history(3)).chunks  # before the reply the latest round stays
    assert [m.id for m in chunk.messages] == ["h0", "a0", "h1", "a1"]
    (chunk,) = c.plan(history(3), after_reply=True).chunks
    assert [m.id for m in chunk.messages] == ["h0", "a0", "h1", "a1", "h2", "a2"]
    asked = [*history(3), HumanMessage("next", id="h3")]
    (chunk,) = c.plan(asked).chunks
    assert [m.id for m in chunk.messages] == ["h0", "a0", "h1", "a1", "h2", "a2"]


def test_code_profile_through_the_compressor() -> None:
    model = ScriptedSummarizer(
        script=[
            json.dumps(
                {
                    "ConversationSummary": "Loaded the sales data.",
                    "Variables": [{"name": "df", "type": "DataFrame", "description": "sales"}],
                }
            )
        ]
    )
    result = compressor(model, profile="code").compress(history(5))
    assert result.summary is not None
    assert "- df (DataFrame): sales" in str(result.messages[1].content)


def test_repr_shows_settings_not_content() -> None:
    text = repr(compressor())
    assert "trigger=CompressionTrigger(('rounds', 5))" in text
    assert "keep=('rounds', 3)" in text and "scripted-summarizer" in text


def test_only_the_uncovered_tail_is_shape_checked() -> None:
    c = compressor(on_invalid_history="raise")
    summary = RunningSummary(content="x", text="x", covered_ids=frozenset({"h0", "a0", "orphan"}))
    early_orphan = [
        SYSTEM,
        HumanMessage("q", id="h0"),
        AIMessage("a", id="a0"),
        ToolMessage("x", tool_call_id="gone", id="orphan"),
        *history(2, system=False)[2:],
    ]
    with pytest.raises(InvalidHistoryError):
        c.plan(early_orphan)  # no summary: the orphan is shown, so it is an error
    assert c.plan(early_orphan, summary).chunks == ()  # covered: never shown again
    late = [*history(3), ToolMessage("x", tool_call_id="nope", id="late")]
    with pytest.raises(InvalidHistoryError) as info:
        c.plan(late, summary)
    (violation,) = info.value.violations
    assert (violation.kind, violation.index, violation.message_id) == (
        "orphan_tool_result",
        7,
        "late",
    )


def test_reusing_a_covered_id_is_an_error() -> None:
    summary = RunningSummary(content="x", text="x", covered_ids=frozenset({"h0", "a0"}))
    messages = [*history(2), HumanMessage("again", id="h0")]
    with pytest.raises(InvalidHistoryError, match="duplicate_message_id") as info:
        compressor().plan(messages, summary)
    assert info.value.violations[0].index == 5
