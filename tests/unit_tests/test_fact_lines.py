from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langchain_histcompress.core.fact_lines import format_fact_lines, parse_fact_lines
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.extraction import (
    FactExtractor,
    build_extraction_prompt,
    parse_extraction_output,
)
from tests.fakes import ScriptedChatModel

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
SHOWN_FACTS = ["f-1a2b3c4d5e6f", "f-000000000001"]
MESSAGE_IDS = ["m1", "m2", "D1:3", "h-7"]


def _parse(output: str) -> tuple[list[Any], list[Any]]:
    return parse_extraction_output(
        output, shown_fact_ids=SHOWN_FACTS, message_ids=MESSAGE_IDS, now=NOW
    )


contents = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80
).filter(lambda c: c.strip() != "")
certainty = st.one_of(
    st.just({}),
    st.just({"status": "uncertain"}),
    st.builds(
        lambda c, s: {"confidence": c, "status": s},
        st.sampled_from([0.0, 0.35, 0.6, 0.9, 1.0]),
        st.sampled_from(["confirmed", "uncertain"]),
    ),
)
sources = st.lists(st.sampled_from([*MESSAGE_IDS, "m9"]), min_size=1, max_size=3, unique=True)


@st.composite
def operations(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(["ADD", "UPDATE", "DELETE"]))
    if name == "DELETE":
        return {"op": "DELETE", "id": draw(st.sampled_from([*SHOWN_FACTS, "f-unknown"]))}
    op: dict[str, Any] = {"op": name, **draw(certainty)}
    if name == "ADD":
        op["type"] = draw(st.sampled_from(["event", "todo", "preference", "confirmed_detail"]))
    else:
        op["id"] = draw(st.sampled_from([*SHOWN_FACTS, "f-unknown"]))
    if name == "ADD" or draw(st.booleans()):
        op["content"] = draw(contents)
    if draw(st.booleans()):
        op["source_ids"] = draw(sources)
    return op


@settings(max_examples=200, deadline=None)
@given(st.lists(operations(), max_size=6))
@example([{"op": "ADD", "type": "event", "content": "<THINK></THINK>"}])  # data, not reasoning
def test_lines_round_trip_to_the_same_operations_as_json(ops: list[dict[str, Any]]) -> None:
    from_lines = _parse(format_fact_lines(ops))
    from_json = _parse(json.dumps(ops, ensure_ascii=False))
    assert from_lines == from_json


@settings(max_examples=200, deadline=None)
@given(contents)
@example("<THINK></THINK>")  # reasoning tags inside a line are its data
def test_any_content_survives_the_line_format(content: str) -> None:
    text = format_fact_lines([{"op": "ADD", "type": "event", "content": content}])
    assert "\n" not in text and "\r" not in text
    [op], rejected = _parse(text)
    assert rejected == []
    assert op.fields["content"] == content.strip()


def test_mixed_and_malformed_lines_are_rejected_one_by_one() -> None:
    output = "\n".join(
        [
            "Here are the operations:",
            "```",
            "ADD preference 0.9 m1 | Likes tea | green, not black",
            "UPDATE f-unknown 0.8 m1 | Moved",  # not a shown fact
            "ADD event 0.9 m2",  # no content
            "DELETE",  # no id
            '- UPDATE f-1a2b3c4d5e6f 0.7? D1:3,m9 | Lives in "Bergen" (to confirm)',
            "ADD todo 95% h-7 | [] {} is not JSON here",
            "```",
        ]
    )
    ops, rejected = _parse(output)
    assert [(r.index, r.op, r.reason) for r in rejected] == [
        (1, "UPDATE", "unknown_id"),
        (2, "ADD", "missing_content"),
        (3, "DELETE", "unknown_id"),
    ]
    assert [op.fields["content"] for op in ops] == [
        "Likes tea | green, not black",
        'Lives in "Bergen" (to confirm)',
        "[] {} is not JSON here",
    ]
    update = ops[1]
    assert (update.id, update.fields["status"], update.fields["confidence"]) == (
        "f-1a2b3c4d5e6f",
        "uncertain",
        0.7,
    )
    assert update.fields["source_ids"] == ["D1:3"]  # m9 was not shown
    assert ops[2].fields["confidence"] == 0.95


@pytest.mark.parametrize(
    "output",
    [
        "I cannot help with that.",
        "add event 0.9 m1 | lower-case keywords are prose",
        "ADDRESS: 5 Main St",
        '[{"op": "ADD", "content": "truncated',
        "   ",
    ],
)
def test_output_in_neither_format_raises(output: str) -> None:
    with pytest.raises(ValueError, match=r"empty|no operation lines|invalid"):
        _parse(output)


@pytest.mark.parametrize(
    "output",
    [
        '[{"op": "ADD", "type": "event", "content": "ADD x | y", "source_ids": ["m1"]}]',
        '```json\n[{"op": "ADD", "content": "ADD x | y", "source_ids": ["m1"]}]\n```',
        'Sure: {"operations": [{"op": "ADD", "content": "ADD x | y", "source_ids": ["m1"]}]}',
        '{"op": "ADD", "content": "ADD x | y", "source_ids": ["m1"]}',
        'NEW facts below\n[{"op": "ADD", "content": "ADD x | y", "source_ids": ["m1"]}]',
        'ADD these:\n```json\n[{"op": "ADD", "content": "ADD x | y", "source_ids": ["m1"]}]\n```',
    ],
)
def test_json_forms_are_still_accepted(output: str) -> None:
    [op], rejected = _parse(output)
    assert rejected == []
    assert (op.fields["content"], op.fields["source_ids"]) == ("ADD x | y", ["m1"])


@pytest.mark.parametrize("output", ["NONE", "```\nNONE\n```", "[]"])
def test_nothing_new(output: str) -> None:
    assert _parse(output) == ([], [])


def test_default_prompt_asks_for_lines_and_shows_no_json_schema() -> None:
    system, body = build_extraction_prompt([], [HumanMessage("hi", id="m1")])
    assert "ADD <type> <confidence> <source ids> | <fact>" in str(system.content)
    assert '"op"' not in str(system.content)
    assert str(body.content).endswith("Reply with the operations, one per line.")
    custom = build_extraction_prompt([], [HumanMessage("hi", id="m1")], instructions="JSON!")
    assert str(custom[1].content).endswith("Reply with the operations.")


def test_aliases_map_back_in_the_line_format() -> None:
    uuid_a = "0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70"
    uuid_b = "7c1d9e2f-3a4b-4c5d-8e6f-0a1b2c3d4e5f"
    fact = Fact(id="f-1a2b3c4d5e6f", content="Lives in Oslo", source_ids=(uuid_a,))
    model = ScriptedChatModel(
        script=[
            "ADD preference 0.9 m2 | Prefers tea\n"
            "UPDATE f-1a2b3c4d5e6f 0.8? m1,m2 | Lives in Bergen"
        ]
    )
    messages = [HumanMessage("I moved to Bergen", id=uuid_a), HumanMessage("Tea!", id=uuid_b)]
    result = FactExtractor(model).extract(messages, [fact], now=NOW)
    assert result.status == "ok"
    prompt = str(model.prompts[0][1].content)
    assert uuid_a not in prompt.split("</current_facts>")[1]  # messages show aliases
    by_content = {f.content: f for f in result.facts.values()}
    assert by_content["Prefers tea"].source_ids == (uuid_b,)
    moved = by_content["Lives in Bergen"]
    assert (moved.id, moved.status, moved.source_ids) == (fact.id, "uncertain", (uuid_a, uuid_b))


def test_none_is_an_empty_extraction() -> None:
    model = ScriptedChatModel(script=["NONE"])
    result = FactExtractor(model).extract([HumanMessage("ok", id="m1")], now=NOW)
    assert (result.status, result.facts) == ("empty", {})


FIXED_OPERATIONS: list[dict[str, Any]] = [
    {
        "op": "ADD",
        "type": "event",
        "content": "Caroline attended an LGBTQ support group on 7 May 2023.",
        "confidence": 0.9,
        "status": "confirmed",
        "source_ids": ["D1:3"],
    },
    {
        "op": "ADD",
        "type": "preference",
        "content": "Melanie prefers painting landscapes with her kids.",
        "confidence": 0.8,
        "status": "confirmed",
        "source_ids": ["D1:12", "D1:14"],
    },
    {
        "op": "ADD",
        "type": "todo",
        "content": "Caroline may apply to counseling programs next year.",
        "confidence": 0.6,
        "status": "uncertain",
        "source_ids": ["m4"],
    },
    {
        "op": "UPDATE",
        "id": "f-1a2b3c4d5e6f",
        "content": "Caroline moved to Boston in June.",
        "confidence": 0.9,
        "status": "confirmed",
        "source_ids": ["D2:1"],
    },
    {"op": "DELETE", "id": "f-000000000001"},
]


def test_lines_cost_about_half_the_tokens_of_json() -> None:
    counter = TiktokenCounter()
    lines = counter.count_text(format_fact_lines(FIXED_OPERATIONS))
    as_json = counter.count_text(json.dumps(FIXED_OPERATIONS, ensure_ascii=False))
    assert lines * 2 <= as_json * 1.1, (lines, as_json)
    # and they mean the same operations
    shown = dict(shown_fact_ids=SHOWN_FACTS, now=NOW)
    ids = ["D1:3", "D1:12", "D1:14", "m4", "D2:1"]
    assert parse_extraction_output(
        format_fact_lines(FIXED_OPERATIONS), message_ids=ids, **shown
    ) == parse_extraction_output(json.dumps(FIXED_OPERATIONS), message_ids=ids, **shown)


def test_parse_fact_lines_ignores_prose() -> None:
    assert parse_fact_lines("Nothing to add.\nAll good.\nNEW: none\nKEEP f1") is None


def test_operation_aliases_are_written_with_the_prompt_keywords() -> None:
    text = format_fact_lines([{"op": "remove", "id": "f-1"}, {"op": "edit", "id": "f-2"}])
    assert text == "DELETE f-1\nUPDATE f-2"


def test_current_facts_are_shown_tersely_by_alias_and_answered_by_alias() -> None:
    oslo = Fact(id="f-1a2b3c4d5e6f", content="Lives in Oslo", confidence=0.8)
    # a real id equal to an alias the prompt would use is skipped, never ambiguous
    tea = Fact(id="f1", type="preference", content="Likes <tea> | green", status="uncertain")
    model = ScriptedChatModel(
        script=["UPDATE f2 0.9 m1 | Lives in Bergen\nDELETE f3\nDELETE f9\nDELETE f1"]
    )
    result = FactExtractor(model).extract(
        [HumanMessage("Moved to Bergen, and I hate tea", id="m1")], [oslo, tea], now=NOW
    )
    body = str(model.prompts[0][1].content)
    block = body.split("<current_facts", 1)[1].split("</current_facts>", 1)[0]
    assert block.splitlines()[1:] == [
        "f2 other 0.8 | Lives in Oslo",
        "f3 preference 0.7? | Likes &lt;tea&gt; | green",
    ]
    assert "f-1a2b3c4d5e6f" not in body
    assert result.status == "ok"
    assert result.facts[oslo.id].content == "Lives in Bergen"
    assert set(result.facts) == {oslo.id}  # f3 is the alias of the fact whose id is "f1"
    assert result.report.deleted == ("f1",)
    # f9 was never shown; the real id "f1" is accepted, but its fact is already deleted
    assert [(r["id"], r["reason"]) for r in result.report.rejected] == [
        ("f9", "unknown_id"),
        ("f1", "unknown_id"),
    ]
