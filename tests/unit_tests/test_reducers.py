from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import (
    GenericFakeChatModel,
)
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core.errors import BudgetError, ConfigurationError
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.faces.reducers import (
    MaxTokensReducer,
    TruncationReducer,
    with_history_reducer,
)
from tests.fakes import ScriptedChatModel


def _chat(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("system prompt")]
    for i in range(n):
        out += [HumanMessage(f"question number {i}"), AIMessage(f"answer number {i}")]
    return out


def _agent_round() -> list[BaseMessage]:
    return [
        HumanMessage("do the thing"),
        AIMessage(
            "",
            tool_calls=[{"name": "a", "args": {}, "id": "1"}, {"name": "b", "args": {}, "id": "2"}],
        ),
        ToolMessage("r2", tool_call_id="2"),
        ToolMessage("r1", tool_call_id="1"),
        AIMessage("", tool_calls=[{"name": "c", "args": {}, "id": "3"}]),
        ToolMessage("r3", tool_call_id="3"),
        AIMessage("finished"),
    ]


class TestTruncation:
    def test_threshold_delays_reduction(self) -> None:
        reducer = TruncationReducer(target_count=4, threshold_count=2)
        assert reducer.reduce(_chat(3)) is None  # 6 messages <= 4 + 2
        reduced = reducer.reduce(_chat(4))
        assert reduced is not None
        assert [m.content for m in reduced[1:]] == [
            "question number 2",
            "answer number 2",
            "question number 3",
            "answer number 3",
        ]

    def test_never_splits_tool_group_or_starts_on_tool(self) -> None:
        msgs = [SystemMessage("s"), *_agent_round()]
        reduced = TruncationReducer(target_count=2).reduce([*msgs, HumanMessage("next")])
        assert reduced is not None
        assert validate_history(reduced) == []
        assert reduced[-1].content == "next"

    def test_latest_user_message_kept_even_beyond_target(self) -> None:
        msgs = [HumanMessage("old"), AIMessage("x"), *_agent_round()]
        reduced = TruncationReducer(target_count=1).reduce(msgs)
        assert reduced is not None
        assert reduced[0].content == "do the thing"
        assert validate_history(reduced) == []

    def test_strips_leading_orphan_even_when_short(self) -> None:
        msgs = [SystemMessage("s"), ToolMessage("x", tool_call_id="gone"), HumanMessage("q")]
        assert TruncationReducer(target_count=10).reduce(msgs) == [msgs[0], msgs[2]]

    def test_system_message_is_the_same_object(self) -> None:
        msgs = _chat(10)
        reduced = TruncationReducer(target_count=2).reduce(msgs)
        assert reduced is not None and reduced[0] is msgs[0]

    @pytest.mark.parametrize(
        "kwargs", [{"target_count": 0}, {"target_count": 2, "threshold_count": -1}]
    )
    def test_bad_config(self, kwargs: dict) -> None:
        with pytest.raises(ConfigurationError, match="must be"):
            TruncationReducer(**kwargs)


class TestMaxTokens:
    def test_fits_returns_none(self) -> None:
        assert MaxTokensReducer(max_tokens=10_000).reduce(_chat(3)) is None

    def test_keeps_newest_whole_rounds_within_budget(self) -> None:
        counter = TiktokenCounter()
        msgs = _chat(30)
        reducer = MaxTokensReducer(max_tokens=100, token_counter=counter)
        reduced = reducer.reduce(msgs)
        assert reduced is not None
        assert counter(reduced) <= 100
        assert reduced[0] is msgs[0]
        assert reduced[1].content.startswith("question")
        assert reduced[-2:] == msgs[-2:]
        # one more round would not have fit
        k = len(reduced) - 1
        assert counter([msgs[0], *msgs[-k - 2 :]]) > 100

    def test_oversized_latest_round_keeps_question_and_newest_groups(self) -> None:
        counter = TiktokenCounter()
        big = [
            HumanMessage("q"),
            *[
                m
                for i in range(10)
                for m in (
                    AIMessage("", tool_calls=[{"name": "t", "args": {"i": i}, "id": f"c{i}"}]),
                    ToolMessage("result " * 30, tool_call_id=f"c{i}"),
                )
            ],
        ]
        reduced = MaxTokensReducer(max_tokens=200, token_counter=counter).reduce(
            [SystemMessage("s"), *big]
        )
        assert reduced is not None
        assert reduced[1].content == "q"
        assert counter(reduced) <= 200
        assert validate_history(reduced) == []
        assert reduced[-1] is big[-1]

    def test_impossible_budget_is_a_clear_error(self) -> None:
        msgs = [SystemMessage("a long system prompt " * 20), HumanMessage("question")]
        with pytest.raises(BudgetError, match="max_tokens=10"):
            MaxTokensReducer(max_tokens=10).reduce(msgs)

    def test_any_callable_counter(self) -> None:
        reducer = MaxTokensReducer(max_tokens=60, token_counter=count_tokens_approximately)
        reduced = reducer.reduce(_chat(20))
        assert reduced is not None and count_tokens_approximately(reduced) <= 60

    def test_bad_counter(self) -> None:
        with pytest.raises(ConfigurationError):
            MaxTokensReducer(max_tokens=10, token_counter=42)  # type: ignore[arg-type]


def _recorder(n: int) -> ScriptedChatModel:
    reply = AIMessage(
        "ok", usage_metadata={"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}
    )
    return ScriptedChatModel(script=[reply] * n)


def test_with_history_reducer_invoke_keeps_usage_and_reduces() -> None:
    model = _recorder(1)
    chat = with_history_reducer(model, TruncationReducer(target_count=2))
    out = chat.invoke(_chat(5))
    assert out.usage_metadata["total_tokens"] == 6
    assert [m.content for m in model.prompts[0]] == [
        "system prompt",
        "question number 4",
        "answer number 4",
    ]


async def test_with_history_reducer_async_stream_batch() -> None:
    model = _recorder(4)
    chat = with_history_reducer(model, TruncationReducer(target_count=2))
    assert (await chat.ainvoke(_chat(5))).content == "ok"
    streaming = with_history_reducer(
        GenericFakeChatModel(messages=iter([AIMessage("streamed reply here")])),
        TruncationReducer(target_count=2),
    )
    chunks = [c async for c in streaming.astream(_chat(5))]
    assert len(chunks) > 1 and all(isinstance(c, AIMessageChunk) for c in chunks)
    assert "".join(str(c.content) for c in chunks) == "streamed reply here"
    outs = chat.batch([_chat(3), "just a string"])
    assert [o.content for o in outs] == ["ok", "ok"]
    assert all(len(seen) <= 3 for seen in model.prompts)


def test_with_history_reducer_rejects_non_reducer() -> None:
    with pytest.raises(ConfigurationError, match="reduce"):
        with_history_reducer(_recorder(1), object())  # type: ignore[arg-type]
