"""Reducer behaviour users bring from trim_messages and Semantic Kernel, and argument checks."""

from __future__ import annotations

from collections.abc import Sequence
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
from langchain_core.runnables import RunnableLambda

from langchain_histcompress.core.errors import ConfigurationError, SummarizationError
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.core.tokens import TiktokenCounter, resolve_counter
from langchain_histcompress.faces.reducers import (
    MaxTokensReducer,
    SummarizationReducer,
    TruncationReducer,
    with_history_reducer,
)
from tests.fakes import ScriptedChatModel, conversation, numbered, prompt_text, summary_json


def _summarizer() -> ScriptedChatModel:
    return ScriptedChatModel(default=numbered(lambda n: summary_json(f"summary #{n}")))


def _tool_round(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"question {n} " * 5),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"n": n}, "id": f"c{n}"}]),
        ToolMessage(f"result {n} " * 5, tool_call_id=f"c{n}"),
        AIMessage(f"answer {n} " * 5),
    ]


class _RecordingCounter:
    """A plain counter (like a provider's token-count endpoint) that records each request."""

    def __init__(self) -> None:
        self.requests: list[list[BaseMessage]] = []

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        self.requests.append(list(messages))
        return count_tokens_approximately(messages)


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize("value", ["5", True, 2.0, None])
@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda v: TruncationReducer(target_count=v), "target_count"),
        (lambda v: TruncationReducer(target_count=3, threshold_count=v), "threshold_count"),
        (lambda v: MaxTokensReducer(max_tokens=v), "max_tokens"),
        (lambda v: MaxTokensReducer(max_tokens=50, threshold_tokens=v), "threshold_tokens"),
        (lambda v: SummarizationReducer(_summarizer(), target_count=v), "target_count"),
        (
            lambda v: SummarizationReducer(_summarizer(), target_count=2, threshold_count=v),
            "threshold_count",
        ),
        (
            lambda v: SummarizationReducer(_summarizer(), target_count=2, max_conversations=v),
            "max_conversations",
        ),
    ],
)
def test_counts_must_be_real_integers(make: Any, name: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"{name} must be an integer"):
        make(value)


# --------------------------------------------------------------------------- deviations


def test_with_history_reducer_sends_an_empty_reduction_as_is() -> None:
    class Everything:
        def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
            return []

        async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
            return []

    model = ScriptedChatModel(script=["ok"])
    with_history_reducer(model, Everything()).invoke(conversation(2))
    assert model.prompts == [[]]


def test_custom_counter_only_sees_whole_valid_requests_a_few_times() -> None:
    counter = _RecordingCounter()
    reducer = MaxTokensReducer(max_tokens=10_000, token_counter=counter)
    assert reducer.reduce(_tool_round(0)[:3]) is None
    assert len(counter.requests) == 1
    assert counter.requests[0][0].type == "human"

    counter.requests.clear()
    history = [SystemMessage("be brief")] + [m for n in range(60) for m in _tool_round(n)]
    small = MaxTokensReducer(max_tokens=400, token_counter=counter)
    reduced = small.reduce(history)
    assert reduced is not None and count_tokens_approximately(reduced) <= 400
    assert 1 < len(counter.requests) <= 12  # a galloping search, not one call per message
    for request in counter.requests:
        assert validate_history(request) == []
        assert request[1].type == "human"


def test_truncation_drops_an_orphaned_tool_result_inside_the_kept_part() -> None:
    stray = ToolMessage("stray", tool_call_id="lost")
    broken = [SystemMessage("s"), HumanMessage("q1"), stray, AIMessage("a1"), HumanMessage("q2")]
    for reducer in (TruncationReducer(target_count=10), TruncationReducer(target_count=3)):
        out = reducer.reduce(broken)
        assert out is not None
        assert validate_history(out) == []
        assert [m.content for m in out if m.type != "system"][-1] == "q2"
        assert all(m.type != "tool" for m in out)


# --------------------------------------------------------------------------- trim_messages


class _Counting(ScriptedChatModel):
    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        self.prompts.append(list(messages))
        return 10 * len(messages)


def test_chat_model_as_token_counter() -> None:
    model = _Counting()
    reduced = MaxTokensReducer(max_tokens=45, token_counter=model).reduce(conversation(5))
    assert reduced is not None and len(reduced) == 4
    assert model.calls > 0


def test_a_bound_chat_model_counts_with_the_model_it_binds() -> None:
    model = _Counting()
    bound = model.bind(stop=["\n\n"]).with_config(tags=["answering"])
    reduced = MaxTokensReducer(max_tokens=45, token_counter=bound).reduce(conversation(5))
    assert reduced is not None and len(reduced) == 4
    assert model.calls > 0
    assert resolve_counter(bound)([HumanMessage("hi")]) == 10
    with pytest.raises(ConfigurationError, match="binding of RunnableLambda"):
        resolve_counter(RunnableLambda(lambda x: x).bind(stop=["x"]))


def test_bound_tools_count_toward_the_budget() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "search_the_flight_database",
            "description": "Search flights by origin, destination and date. " * 10,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    history = [SystemMessage("be brief"), *conversation(20)]
    plain = ScriptedChatModel(script=["ok"])
    with_history_reducer(plain, MaxTokensReducer(max_tokens=300)).invoke(history)
    bound = ScriptedChatModel(script=["ok"])
    with_history_reducer(bound.bind(tools=[tool]), MaxTokensReducer(max_tokens=300)).invoke(history)
    counter = TiktokenCounter()
    reducer = MaxTokensReducer(max_tokens=300).with_tools([tool])
    assert reducer.tool_tokens > 50
    assert len(bound.prompts[0]) < len(plain.prompts[0])
    assert counter(bound.prompts[0]) + reducer.tool_tokens <= 300


def test_allow_partial_keeps_the_newest_lines_of_the_next_message() -> None:
    lines = "\n".join(f"line {i} of a long answer" for i in range(40))
    history = [HumanMessage("question"), AIMessage(lines), HumanMessage("follow-up")]
    counter = TiktokenCounter()
    whole = MaxTokensReducer(max_tokens=80, start_on_human=False).reduce(history)
    assert whole is not None and [m.content for m in whole] == ["follow-up"]
    reducer = MaxTokensReducer(max_tokens=80, start_on_human=False, allow_partial=True)
    out = reducer.reduce(history)
    assert out is not None and len(out) == 2 and out[-1] is history[-1]
    assert str(out[0].content).endswith("line 39 of a long answer")
    assert lines.endswith(str(out[0].content)) and out[0].content != lines
    assert counter(out) <= 80
    words = MaxTokensReducer(
        max_tokens=80, start_on_human=False, allow_partial=True, text_splitter=str.split
    ).reduce(history)
    assert words is not None and str(words[0].content).endswith("answer")


def test_allow_partial_splits_text_blocks_and_keeps_other_blocks_whole() -> None:
    """As ``trim_messages(allow_partial=True)``: newest blocks first, text blocks split."""
    lines = "\n".join(f"line {i} of a long answer" for i in range(40))
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    blocks: list[Any] = [{"type": "text", "text": lines, "cache_control": {"x": 1}}, image]
    history = [HumanMessage("question"), HumanMessage(blocks), HumanMessage("follow-up")]
    counter = TiktokenCounter()
    reducer = MaxTokensReducer(max_tokens=150, start_on_human=False, allow_partial=True)
    out = reducer.reduce(history)
    assert out is not None and len(out) == 2 and out[-1] is history[-1]
    text, kept_image = out[0].content
    assert kept_image == image  # never split
    assert text["cache_control"] == {"x": 1} and text["type"] == "text"
    assert lines.endswith(text["text"]) and text["text"].endswith("line 39 of a long answer")
    assert text["text"] != lines and counter(out) <= 150
    assert history[1].content == blocks  # the caller's message is untouched
    # plain strings in a block list are text blocks too
    mixed = [HumanMessage("question"), AIMessage([lines, image]), HumanMessage("follow-up")]
    out = reducer.reduce(mixed)
    assert out is not None and len(out) == 2
    assert isinstance(out[0].content[0], str) and out[0].content[1] == image
    # an image too large to fit is left out whole, with the blocks before it
    tight = MaxTokensReducer(max_tokens=40, start_on_human=False, allow_partial=True)
    out = tight.reduce([HumanMessage("question"), HumanMessage([lines, image, "tail"]), mixed[2]])
    assert out is not None and [m.content for m in out] == [["tail"], "follow-up"]


# --------------------------------------------------------------------------- Semantic Kernel


def test_threshold_count_delays_folds_on_a_full_history() -> None:
    model = _summarizer()
    reducer = SummarizationReducer(model, target_count=2, threshold_count=6)
    history = conversation(3)
    for n in range(3, 15):
        history = [*history, *conversation(range(n, n + 1))]
        reducer.reduce(history)
    assert 2 <= model.calls <= 4  # one fold per ~4 turns, not one per turn


def test_fail_on_error_false_keeps_the_previous_summary_and_the_rest() -> None:
    model = _summarizer()
    reducer = SummarizationReducer(model, target_count=2, fail_on_error=False, max_retries=0)
    first = reducer.reduce(conversation(4))
    assert first is not None and model.calls == 1
    model.fail_with = RuntimeError("down")
    grown = conversation(6)
    out = reducer.reduce(grown)
    assert out is not None
    assert "summary #1" in str(out[0].content)
    assert out[1:] == grown[6:]
    strict = SummarizationReducer(model, target_count=2, max_retries=0)
    with pytest.raises(SummarizationError):
        strict.reduce(grown)


def test_several_summaries_mode_keeps_each_fold() -> None:
    model = _summarizer()
    reducer = SummarizationReducer(model, target_count=2, single_summary=False)
    first = reducer.reduce(conversation(3))
    assert first is not None
    second = reducer.reduce([*first, *conversation(range(3, 5))])
    assert second is not None
    summaries = [m for m in second if is_summary_message(m)]
    assert summaries[0].content == first[0].content
    assert len(summaries) == 2 and "summary #2" in str(summaries[1].content)
    assert "summary #1" not in prompt_text(model.prompts[1])
    assert validate_history(second) == []


def test_reducers_are_equal_by_configuration() -> None:
    model = _summarizer()
    assert TruncationReducer(target_count=4) == TruncationReducer(target_count=4)
    assert hash(TruncationReducer(target_count=4)) == hash(TruncationReducer(target_count=4))
    assert TruncationReducer(target_count=4) != TruncationReducer(target_count=5)
    assert MaxTokensReducer(max_tokens=9) == MaxTokensReducer(max_tokens=9)
    assert MaxTokensReducer(max_tokens=9) != MaxTokensReducer(max_tokens=9, allow_partial=True)
    assert len({MaxTokensReducer(max_tokens=9), MaxTokensReducer(max_tokens=9)}) == 1
    same = SummarizationReducer(model, target_count=3)
    assert same == SummarizationReducer(model, target_count=3)
    assert hash(same) == hash(SummarizationReducer(model, target_count=3))
    assert same != SummarizationReducer(model, target_count=3, single_summary=False)
    assert same != SummarizationReducer(_summarizer(), target_count=3)
    assert same != TruncationReducer(target_count=3)


def test_a_reply_to_an_invalid_tool_call_is_not_an_orphan() -> None:
    call = AIMessage(
        "",
        tool_calls=[{"name": "ok", "args": {}, "id": "c1"}],
        invalid_tool_calls=[{"name": "bad", "args": "{oops", "id": "c2", "error": "json"}],
    )
    replies = [
        ToolMessage("error: bad args", tool_call_id="c2"),
        ToolMessage("r", tool_call_id="c1"),
    ]
    history = [HumanMessage("q1"), call, *replies, AIMessage("a1"), HumanMessage("q2")]
    older = [HumanMessage("q0"), AIMessage("a0")]
    assert TruncationReducer(target_count=10).reduce(history) is None
    assert TruncationReducer(target_count=6).reduce([*older, *history]) == history
    assert MaxTokensReducer(max_tokens=10_000).reduce(history) is None


def test_a_call_left_unanswered_before_the_last_step_gets_a_placeholder() -> None:
    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
    interrupted = [HumanMessage("q1"), call, HumanMessage("never mind"), AIMessage("ok")]
    history = [*interrupted, HumanMessage("q3")]
    model = _summarizer()
    for reducer in (
        TruncationReducer(target_count=10),
        TruncationReducer(target_count=4),
        MaxTokensReducer(max_tokens=10_000),
        MaxTokensReducer(max_tokens=10_000, token_counter=count_tokens_approximately),
        SummarizationReducer(model, target_count=10),
    ):
        out = reducer.reduce(history)
        assert out is not None, reducer
        assert validate_history(out) == [], reducer
        assert out[-1] is history[-1]
    shown = SummarizationReducer(model, target_count=2).reduce(history)
    assert shown is not None and validate_history(shown) == []
