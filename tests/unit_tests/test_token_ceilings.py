"""Token ceilings: upper bounds of exact counts, found without encoding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core.tokens import (
    TiktokenCounter,
    cost_ceilings,
    count_request,
    message_costs,
    request_ceiling,
    text_ceiling,
)

COUNTER = TiktokenCounter("gpt-4o-mini", cache_size=0)
texts = st.text(max_size=200)


@st.composite
def messages(draw: st.DrawFn) -> BaseMessage:
    kind = draw(st.sampled_from(["human", "ai", "call", "tool", "system"]))
    text = draw(texts)
    if kind == "human":
        return HumanMessage(text, name=draw(st.none() | texts))
    if kind == "ai":
        return AIMessage(text)
    if kind == "call":
        args = draw(st.dictionaries(texts, texts | st.integers(), max_size=3))
        call = {"name": draw(texts), "args": args, "id": draw(texts)}
        return AIMessage(text, tool_calls=[call])
    if kind == "tool":
        return ToolMessage(text, tool_call_id=draw(texts))
    return SystemMessage(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages(), max_size=5))
def test_ceilings_are_at_least_the_counts(history: list[BaseMessage]) -> None:
    ceilings = cost_ceilings(COUNTER, history)
    assert ceilings is not None
    assert all(c >= n for c, n in zip(ceilings, message_costs(COUNTER, history), strict=True))
    ceiling = request_ceiling(COUNTER, history)
    assert ceiling is not None and ceiling >= count_request(COUNTER, history)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_text_ceiling_is_at_least_the_count(text: str) -> None:
    ceiling = text_ceiling(COUNTER, text)
    assert ceiling is not None and ceiling >= COUNTER.count_text(text)


def test_no_ceiling_without_a_plain_tiktoken_counter_or_for_content_blocks() -> None:
    class Other(TiktokenCounter):
        pass

    plain = [HumanMessage("hi")]
    blocks = [HumanMessage([{"type": "text", "text": "hi"}])]
    assert cost_ceilings(count_tokens_approximately, plain) is None
    assert request_ceiling(Other(), plain) is None
    assert text_ceiling(Other(), "hi") is None
    assert cost_ceilings(COUNTER, blocks) is None
    assert request_ceiling(COUNTER, []) == 0 == count_request(COUNTER, [])
