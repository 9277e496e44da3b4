from __future__ import annotations

import copy
import logging

import pytest
from hypothesis import given, settings
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_histcompress.core.rounds import (
    REPAIR_SOURCE,
    ensure_ids,
    is_pinned,
    repair_history,
    split_rounds,
    split_units,
    validate_history,
)
from tests.histories import history


def _call(*ids: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": i} for i in ids])


def test_split_rounds_preamble_head_and_rounds() -> None:
    msgs = [
        SystemMessage("s"),
        AIMessage("greeting"),
        HumanMessage("q1"),
        AIMessage("a1"),
        HumanMessage("q2"),
        _call("c1"),
        ToolMessage("r", tool_call_id="c1"),
        AIMessage("a2"),
    ]
    split = split_rounds(msgs)
    assert [m.content for m in split.preamble] == ["s"]
    assert split.rounds[0].human is None
    assert [len(r.messages) for r in split.rounds] == [1, 2, 4]
    assert split.body == msgs[1:]
    assert [len(u) for u in split.rounds[2].units] == [1, 2, 1]


def test_parallel_calls_results_in_any_order_form_one_unit() -> None:
    msgs = [
        _call("a", "b", "c"),
        ToolMessage("3", tool_call_id="c"),
        ToolMessage("1", tool_call_id="a"),
        ToolMessage("2", tool_call_id="b"),
        AIMessage("done"),
    ]
    assert [len(u) for u in split_units(msgs)] == [4, 1]


def test_validate_lists_every_kind_of_violation() -> None:
    msgs = [
        SystemMessage("s", id="x"),
        HumanMessage("q", id="x"),
        ToolMessage("orphan", tool_call_id="nope"),
        _call("c1", "c2"),
        ToolMessage("r1", tool_call_id="c1"),
        ToolMessage("r1 again", tool_call_id="c1"),
        HumanMessage("interrupts before c2 is answered"),
        _call("c3", "c3"),
        ToolMessage("r", tool_call_id="c3"),
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}]),
    ]
    kinds = [v.kind for v in validate_history(msgs)]
    assert kinds == [
        "duplicate_message_id",
        "orphan_tool_result",
        "duplicate_tool_result",
        "unanswered_tool_calls",
        "duplicate_tool_call_id",
        "missing_tool_call_id",
    ]


def test_what_providers_accept_is_valid() -> None:
    invalid = AIMessage(
        "",
        invalid_tool_calls=[{"name": "f", "args": "{oops", "id": "bad", "error": "json"}],
    )
    msgs = [
        SystemMessage("policy"),
        HumanMessage("q"),
        _call("c1"),
        ToolMessage("first", tool_call_id="c1"),
        _call("c1", "c2"),  # the id repeats in a later step: pairing is positional
        ToolMessage("second", tool_call_id="c2"),
        ToolMessage("third", tool_call_id="c1"),
        SystemMessage("reminder injected by the app"),
        invalid,
        ToolMessage("Error: invalid arguments", tool_call_id="bad"),
        AIMessage([{"type": "text", "text": ""}]),
        HumanMessage(""),
    ]
    assert validate_history(msgs, allow_in_flight=False) == []
    assert [len(u) for u in split_units(msgs[1:])] == [1, 2, 3, 1, 2, 1, 1]
    split = split_rounds(msgs)
    assert [len(r.messages) for r in split.rounds] == [10, 1]
    assert msgs[7] not in split.rounds[0].foldable
    assert is_pinned(msgs[7]) and not is_pinned(msgs[1])


def test_a_result_pairs_only_with_its_own_step() -> None:
    msgs = [
        HumanMessage("q"),
        _call("c1"),
        ToolMessage("r", tool_call_id="c1"),
        AIMessage("x"),
        ToolMessage("late", tool_call_id="c1"),
    ]
    [violation] = validate_history(msgs)
    assert (violation.kind, violation.index) == ("orphan_tool_result", 4)
    assert [len(u) for u in split_units(msgs)] == [1, 2, 1, 1]


def test_repair_leaves_valid_histories_alone() -> None:
    msgs = [HumanMessage("q"), _call("c1"), ToolMessage("r", tool_call_id="c1")]
    fixed = repair_history(msgs)
    assert not fixed.repaired and fixed.dropped == ()
    assert all(a is b for a, b in zip(fixed.messages, msgs, strict=True))


def test_repair_makes_every_broken_shape_provider_valid(caplog: pytest.LogCaptureFixture) -> None:
    no_id = AIMessage(
        "kept text",
        tool_calls=[{"name": "f", "args": {}, "id": None}, {"name": "g", "args": {}, "id": "ok"}],
    )
    stray = ToolMessage("stray", tool_call_id="nope", id="stray")
    msgs = [
        HumanMessage("q", id="h1"),
        stray,
        _call("c1", "c2"),
        ToolMessage("r1", tool_call_id="c1", id="r1"),
        ToolMessage("r1 again", tool_call_id="c1", id="dup"),
        HumanMessage("user text survives", id="h2"),
        no_id,
        ToolMessage("g result", tool_call_id="ok"),
        _call("c3", "c3"),
    ]
    before = copy.deepcopy(msgs)
    with caplog.at_level(logging.WARNING, logger="langchain_histcompress.core.rounds"):
        fixed = repair_history(msgs, allow_in_flight=False)
    assert msgs == before
    assert validate_history(fixed.messages, allow_in_flight=False) == []
    assert [m.id for m in fixed.dropped] == ["stray", "dup"]
    assert {m.id for m in msgs if isinstance(m, HumanMessage)} <= {m.id for m in fixed.messages}
    placeholders = [
        m for m in fixed.messages if m.additional_kwargs.get("lc_source") == REPAIR_SOURCE
    ]
    assert [m.tool_call_id for m in placeholders] == ["c2", "c3"]  # type: ignore[attr-defined]
    assert [m.id for m in fixed.messages[2:5]] == ["r1", placeholders[0].id, "h2"]
    repaired_ai = fixed.messages[5]
    assert repaired_ai.content == "kept text" and [c["id"] for c in repaired_ai.tool_calls] == [
        "ok"
    ]
    assert "orphan_tool_result=1" in caplog.text and "stray" not in caplog.text


def test_in_flight_tail_allowed_unless_disabled() -> None:
    msgs = [HumanMessage("q"), _call("c1")]
    assert validate_history(msgs) == []
    [violation] = validate_history(msgs, allow_in_flight=False)
    assert violation.kind == "unanswered_tool_calls"
    assert violation.index == 1
    assert "c1" in str(violation)


def test_ensure_ids_is_stable_and_does_not_mutate() -> None:
    msgs = [HumanMessage("hi"), AIMessage("hi"), HumanMessage("x", id="keep")]
    before = copy.deepcopy(msgs)
    first = ensure_ids(msgs, namespace="s1")
    assert msgs == before
    assert first[2] is msgs[2]
    assert first[0].id != first[1].id
    assert [m.id for m in ensure_ids(msgs, namespace="s1")] == [m.id for m in first]
    assert ensure_ids(msgs, namespace="s2")[0].id != first[0].id


@settings(max_examples=120, deadline=None)
@given(history(allow_leading_tools=False))
def test_generated_histories_without_orphans_are_valid(msgs: list) -> None:
    assert validate_history(msgs) == []
    split = split_rounds(msgs)
    assert list(split.preamble) + split.body == msgs
    assert [m for u in split_units(split.body) for m in u] == split.body


def test_an_invalid_call_left_unanswered_is_accepted_and_answered_in_views() -> None:
    bad = {"name": "f", "args": "{", "id": "bad", "error": "json"}
    state = [HumanMessage("q"), AIMessage("", invalid_tool_calls=[bad]), HumanMessage("again")]
    [violation] = validate_history(state)  # what create_agent keeps in its state
    assert violation.kind == "unanswered_invalid_tool_calls"
    fixed = repair_history(state)
    assert validate_history(fixed.messages) == []
    assert "not run" in str(fixed.messages[2].content)
