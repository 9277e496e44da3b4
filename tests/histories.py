"""Hypothesis strategies that generate chat histories as groups (shared by property tests)."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

_counter = itertools.count()

text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=40
)


def _id(prefix: str) -> str:
    return f"{prefix}-{next(_counter)}"


@st.composite
def tool_group(draw: st.DrawFn, *, in_flight: bool = False) -> list[BaseMessage]:
    """An AI message with k parallel tool calls and its k results in random order."""
    k = draw(st.integers(min_value=1, max_value=4))
    calls = [{"name": f"tool_{i}", "args": {"x": draw(text)}, "id": _id("call")} for i in range(k)]
    ai = AIMessage(draw(text), tool_calls=calls, id=_id("ai"))
    if in_flight:
        return [ai]
    results: list[BaseMessage] = [
        ToolMessage(draw(text), tool_call_id=c["id"], id=_id("tool")) for c in calls
    ]
    order = draw(st.permutations(range(k)))
    return [ai, *[results[i] for i in order]]


@st.composite
def round_(draw: st.DrawFn) -> list[BaseMessage]:
    """A human message, then plain AI messages and tool groups."""
    out: list[BaseMessage] = [HumanMessage(draw(text), id=_id("human"))]
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            out += draw(tool_group())
        else:
            out.append(AIMessage(draw(text), id=_id("ai")))
    return out


@st.composite
def history(
    draw: st.DrawFn,
    *,
    min_rounds: int = 1,
    max_rounds: int = 12,
    allow_leading_tools: bool = True,
    allow_in_flight: bool = True,
) -> list[BaseMessage]:
    """A whole history: optional system preamble, optional leading orphan tool messages,
    rounds, optionally an in-flight tool call at the tail. Always ends in a round that
    contains the latest human message."""
    out: list[BaseMessage] = []
    if draw(st.booleans()):
        out.append(SystemMessage(draw(text) or "system", id=_id("sys")))
    if allow_leading_tools and draw(st.booleans()):
        out += [
            ToolMessage(draw(text), tool_call_id=_id("gone"), id=_id("orphan"))
            for _ in range(draw(st.integers(1, 2)))
        ]
    for _ in range(draw(st.integers(min_value=min_rounds, max_value=max_rounds))):
        out += draw(round_())
    if allow_in_flight and draw(st.booleans()):
        out += draw(tool_group(in_flight=True))
    return out
