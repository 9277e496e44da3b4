from __future__ import annotations

import copy

from hypothesis import given, settings
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_histcompress.rounds import (
    ensure_ids,
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
        SystemMessage("late"),
        _call("c1"),
        ToolMessage("r", tool_call_id="c1"),
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}]),
    ]
    kinds = [v.kind for v in validate_history(msgs)]
    assert kinds == [
        "duplicate_message_id",
        "orphan_tool_result",
        "duplicate_tool_result",
        "unanswered_tool_calls",
        "system_after_preamble",
        "duplicate_tool_call_id",
        "duplicate_tool_result",  # the reused id was answered before
        "missing_tool_call_id",
    ]


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


@settings(max_examples=300, deadline=None)
@given(history(allow_leading_tools=False))
def test_generated_histories_without_orphans_are_valid(msgs: list) -> None:
    assert validate_history(msgs) == []
    split = split_rounds(msgs)
    assert list(split.preamble) + split.body == msgs
    assert [m for u in split_units(split.body) for m in u] == split.body
