"""The fact node's per-turn work: O(new messages) even while extraction keeps failing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.rounds import split_rounds
from langchain_histcompress.edge.extraction import (
    FactExtractor,
    _Call,
    _prompt,
    build_extraction_prompt,
)
from langchain_histcompress.faces._round_backlog import RoundScans
from langchain_histcompress.faces.memory import FactExtractionNode
from tests.fakes import ScriptedChatModel, conversation


class Reads(list[BaseMessage]):
    """A message list that counts the positions it serves and whether it was iterated."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads = 0
        self.iterated = False

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            self.reads += len(range(*key.indices(len(self))))
        else:
            self.reads += 1
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[BaseMessage]:
        self.iterated = True
        return super().__iter__()


def test_a_failing_extractor_costs_only_the_new_messages_per_turn() -> None:
    # a permanent error: every run fails, the cursor stays, the backlog grows by a round
    model = ScriptedChatModel(fail_with=PermissionError("no access"))
    node = FactExtractionNode(model, batch_rounds=2, max_retries=0, use_runtime_store=False)
    history = conversation(range(1, 401), short=True)
    cursor = history[1].id  # round 1 processed, rounds 2..400 pending
    reads: list[int] = []
    for end in range(200, 801, 2):  # one more round per turn
        messages = Reads(history[:end])
        update = node.invoke({"messages": messages, "facts_processed_through": cursor})
        assert update["facts_extraction"]["status"] == "failed"
        assert update["facts_extraction"]["processed_through"] == cursor
        assert not messages.iterated
        reads.append(messages.reads)
    # the first turn searches and scans its backlog once; later turns read the new round,
    # the remembered positions and the batch they try, however long the backlog has grown
    assert reads[0] >= 2 * 198
    assert max(reads[1:]) == min(reads[1:]) <= 12, reads
    assert node._scans.scanned == 800 - 2  # every message after the cursor scanned once
    assert update["facts_extraction"]["pending_rounds"] == 399


def test_pending_rounds_and_batches_match_a_fresh_split() -> None:
    model = ScriptedChatModel(script=["NONE"], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=3, max_batches_per_run=1)
    history = [
        SystemMessage("sys", id="s0"),
        *conversation(range(1, 9), short=True),
        HumanMessage("open", id="hq"),
    ]
    cursor = None
    for end in (5, 9, 12, len(history)):
        state = {"messages": history[:end], "facts_processed_through": cursor}
        update = node.invoke(state)
        rounds = split_rounds(history[:end]).rounds
        done = [i for i, r in enumerate(rounds) if r.messages[-1].id == cursor]
        after = rounds[done[0] + 1 :] if done else rounds
        complete = [r for r in after if isinstance(r.messages[-1], AIMessage)]
        extracted = 3 if len(complete) >= 3 else 0
        assert update["facts_extraction"]["pending_rounds"] == len(complete) - extracted
        if extracted:
            shown = [m.id for r in complete[:3] for m in r.messages]
            assert f'<message id="{shown[0]}"' in str(model.prompts[-1][1].content)
            assert update["facts_processed_through"] == shown[-1]
            cursor = shown[-1]


def test_round_scans_reuse_only_the_same_messages() -> None:
    scans = RoundScans()
    history = conversation(range(1, 4), short=True)
    assert scans.round_starts(history, 0, "") == ([0, 2, 4], 3)
    copies = [m.model_copy() for m in history]  # equal messages, other objects: rescanned
    before = scans.scanned
    assert scans.round_starts(copies, 0, "") == ([0, 2, 4], 3)
    assert scans.scanned == before + len(copies)
    assert scans.round_starts([HumanMessage("x")], 0, "") is None  # no id
    assert scans.begin_after(history, "nobody") is None


def test_round_scans_forget_the_oldest_cursors() -> None:
    scans = RoundScans(max_entries=2)
    history = conversation(range(1, 4), short=True)
    for cursor in ("a", "b", "c"):
        scans.round_starts(history, 2, cursor)
    assert scans.begin_after(history, "a") is None
    assert scans.begin_after(history, "c") == 2


def test_cached_fact_lines_give_the_public_prompt() -> None:
    facts = [
        Fact(id="f-a", content="Lives in <Oslo>", type="entity", confidence=0.9),
        Fact(id="f-b", content="May fly\non 3 May", status="uncertain", confidence=0.6),
        Fact(id="f-c", content="Budget & plans", status="draft"),
    ]
    extractor = FactExtractor(ScriptedChatModel(script=["NONE"]), max_prompt_facts=2)
    messages = [HumanMessage("I moved to Bergen", id="m1"), AIMessage("Noted", id="m2")]
    for _ in range(2):  # the second call reads the cached lines
        call = extractor._prepare(messages, facts, None)
        assert isinstance(call, _Call)
        shown = [
            f.model_copy(update={"id": call.fact_aliases.alias(f.id)})
            for f in facts
            if f.id in call.shown_ids
        ]
        shown.sort(key=lambda f: call.shown_ids.index(str(call.fact_aliases.resolve(f.id))))
        expected = build_extraction_prompt(shown, messages)
        assert [m.content for m in call.prompt] == [m.content for m in expected]
    assert _prompt('<current_facts count="0">\n\n</current_facts>', "", None)[1].content == (
        build_extraction_prompt([], [])[1].content
    )


def test_extract_still_validates_the_facts_it_is_given() -> None:
    with pytest.raises(ConfigurationError):
        FactExtractor(ScriptedChatModel(script=["NONE"])).extract(
            [HumanMessage("hi", id="m1")], {"f-1": {"id": "f-2", "content": "x"}}
        )


def test_histories_without_ids_get_derived_ids_and_each_round_once() -> None:
    model = ScriptedChatModel(script=["NONE"], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=1)
    history: list[BaseMessage] = []
    cursor = None
    for n in range(1, 6):
        history += [HumanMessage(f"q{n}"), AIMessage(f"a{n}")]
        update = node.invoke({"messages": list(history), "facts_processed_through": cursor})
        cursor = update["facts_processed_through"]
        assert cursor is not None
    assert model.calls == 5
    shown = [str(prompt[1].content) for prompt in model.prompts]
    assert all(text.count("<message ") == 2 for text in shown)
    assert len(set(shown)) == 5  # a different round each time


def test_a_bad_message_is_reported_with_or_without_a_cursor() -> None:
    node = FactExtractionNode(ScriptedChatModel(script=["NONE"], repeat_last=True))
    good = conversation(range(1, 3), short=True)
    for cursor in (None, good[1].id):
        with pytest.raises(ConfigurationError, match="must be a list of messages"):
            node.invoke({"messages": [*good, "oops"], "facts_processed_through": cursor})
