"""Hypothesis strategies that generate chat histories as groups (shared by property tests).

`history` builds the classic shapes; with ``wild=True`` (or `wild_history`) it also builds
everything providers accept or that real threads contain: tool call ids reused across
steps, invalid tool calls answered by tool messages, system messages in the middle of the
conversation, stray tool messages (answering nothing), empty contents and content-block
lists. With ``blank_ids=True`` some messages carry an empty-string id (``add_messages``
keeps those), which every face treats as no id.

`history_updates` turns a history into the writes a chat history receives: batches of
whole units, interleaved with ``RemoveMessage`` batches naming messages written before
(sometimes a ``REMOVE_ALL_MESSAGES`` followed by a fresh start).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_histcompress.core.rounds import split_units
from langchain_histcompress.storage.base import REMOVE_ALL_MESSAGES

_counter = itertools.count()

text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=40
)


def _id(prefix: str) -> str:
    return f"{prefix}-{next(_counter)}"


_REUSED = ("call-reused-1", "call-reused-2")
"""Call ids that wild tool groups draw again and again (ids repeat across steps)."""


_WILD_CONTENT = (
    st.sampled_from(["", " "])
    | text
    | st.lists(
        st.builds(lambda t: {"type": "text", "text": t}, text) | text, min_size=1, max_size=3
    )
)
"""Wild content, built once so that every draw reuses the same strategy objects."""


@st.composite
def content(draw: st.DrawFn, *, wild: bool = False) -> str | list[str | dict[str, Any]]:
    """Message content: text, or (wild) often empty or a list of content blocks."""
    if not wild:
        return draw(text)
    return draw(_WILD_CONTENT)


_CONTENT = {wild: content(wild=wild) for wild in (False, True)}


@st.composite
def tool_group(
    draw: st.DrawFn, *, in_flight: bool = False, wild: bool = False
) -> list[BaseMessage]:
    """An AI message with k parallel tool calls and its k results in random order.

    Wild groups may reuse call ids of earlier steps and make some calls invalid (arguments
    that did not parse), answered by tool messages like the others.
    """
    k = draw(st.integers(min_value=1, max_value=4))
    ids: list[str] = []
    for _ in range(k):
        reuse = wild and draw(st.booleans())
        fresh = [i for i in _REUSED if i not in ids]
        ids.append(draw(st.sampled_from(fresh)) if reuse and fresh else _id("call"))
    invalid = [wild and draw(st.integers(0, 3)) == 0 for _ in range(k)]
    calls = [
        {"name": f"tool_{i}", "args": {"x": draw(text)}, "id": ids[i]}
        for i in range(k)
        if not invalid[i]
    ]
    bad = [
        {"name": f"tool_{i}", "args": '{"x": ', "id": ids[i], "error": "invalid JSON"}
        for i in range(k)
        if invalid[i]
    ]
    ai = AIMessage(draw(_CONTENT[wild]), tool_calls=calls, invalid_tool_calls=bad, id=_id("ai"))
    if in_flight:
        return [ai]
    results: list[BaseMessage] = [
        ToolMessage(draw(_CONTENT[wild]), tool_call_id=i, id=_id("tool")) for i in ids
    ]
    order = draw(st.permutations(range(k)))
    return [ai, *[results[i] for i in order]]


_GROUPS = {
    (in_flight, wild): tool_group(in_flight=in_flight, wild=wild)
    for in_flight in (False, True)
    for wild in (False, True)
}


@st.composite
def round_(draw: st.DrawFn, *, wild: bool = False) -> list[BaseMessage]:
    """A human message, then plain AI messages and tool groups.

    Wild rounds may also hold system messages (reminders an app injects) and stray tool
    messages that answer no call.
    """
    out: list[BaseMessage] = [HumanMessage(draw(_CONTENT[wild]), id=_id("human"))]
    kinds = ["group", "ai", "system", "stray"] if wild else ["group", "ai"]
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(kinds))
        if kind == "group":
            out += draw(_GROUPS[False, wild])
        elif kind == "ai":
            out.append(AIMessage(draw(_CONTENT[wild]), id=_id("ai")))
        elif kind == "system":
            out.append(SystemMessage(draw(text) or "reminder", id=_id("sys")))
        else:
            out.append(ToolMessage(draw(text), tool_call_id=_id("stray"), id=_id("stray")))
    return out


_ROUNDS = {wild: round_(wild=wild) for wild in (False, True)}


@st.composite
def history(
    draw: st.DrawFn,
    *,
    min_rounds: int = 1,
    max_rounds: int = 12,
    allow_leading_tools: bool = True,
    allow_in_flight: bool = True,
    wild: bool = False,
    blank_ids: bool = False,
) -> list[BaseMessage]:
    """A whole history: optional system preamble, optional leading orphan tool messages,
    rounds, optionally an in-flight tool call at the tail. Always ends in a round that
    contains the latest human message. ``wild`` adds the shapes of the module docstring;
    ``blank_ids`` gives some messages an empty-string id."""
    out: list[BaseMessage] = []
    if draw(st.booleans()):
        out.append(SystemMessage(draw(text) or "system", id=_id("sys")))
    if allow_leading_tools and draw(st.booleans()):
        out += [
            ToolMessage(draw(text), tool_call_id=_id("gone"), id=_id("orphan"))
            for _ in range(draw(st.integers(1, 2)))
        ]
    for _ in range(draw(st.integers(min_value=min_rounds, max_value=max_rounds))):
        out += draw(_ROUNDS[wild])
    if allow_in_flight and draw(st.booleans()):
        out += draw(_GROUPS[True, wild])
    if blank_ids:
        blank = draw(st.lists(st.booleans(), min_size=len(out), max_size=len(out)))
        out = [m.model_copy(update={"id": ""}) if b else m for m, b in zip(out, blank, strict=True)]
    return out


def wild_history(**kwargs: Any) -> st.SearchStrategy[list[BaseMessage]]:
    """`history` with every accepted and every broken-but-real shape (``wild=True``)."""
    return history(wild=True, **kwargs)


@st.composite
def history_updates(
    draw: st.DrawFn, *, max_rounds: int = 6, wild: bool = True
) -> list[list[BaseMessage]]:
    """The batches a chat history receives for a drawn history, removals interleaved.

    Whole units are written one batch at a time (a few per batch); between them a batch
    may remove messages written before (their ids, never one twice) or start over with
    ``RemoveMessage(id=REMOVE_ALL_MESSAGES)``. Messages carry unique ids (removals need
    them).
    """
    messages = draw(history(max_rounds=max_rounds, wild=wild))
    units = split_units(messages)
    batches: list[list[BaseMessage]] = []
    live: list[str] = []
    position = 0
    while position < len(units):
        action = draw(st.sampled_from(["write", "write", "write", "remove", "reset"]))
        if action == "remove" and live:
            doomed = draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True))
            live = [i for i in live if i not in doomed]
            batches.append([RemoveMessage(id=i) for i in doomed])
            continue
        if action == "reset" and live:
            live = []
            batches.append([RemoveMessage(id=REMOVE_ALL_MESSAGES)])
            continue
        take = draw(st.integers(1, 3))
        batch = [m for unit in units[position : position + take] for m in unit]
        position += take
        live += [str(m.id) for m in batch]
        batches.append(batch)
    return batches
