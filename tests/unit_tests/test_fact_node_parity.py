"""The fact node's updates on a scripted conversation: fixed, and the same however state is held.

The recorded updates (``data/fact_node_updates.json``) are what the node wrote before its
per-turn work was made flat; a node reading state it saw before (shared fact objects) and one
reading state reloaded from JSON every turn (no object seen twice) must both write exactly
those updates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.facts import Fact, merge_facts
from langchain_histcompress.faces.memory import FactExtractionNode
from tests.fakes import ScriptedChatModel

GOLDEN = Path(__file__).parent / "data" / "fact_node_updates.json"
START = datetime(2025, 3, 1, tzinfo=timezone.utc)
TOPICS = ("Oslo", "tea", "trains", "Rex the dog", "a 12k budget", "jazz", "Lisbon", "chess")


def history(rounds: int) -> list[BaseMessage]:
    """A system message, then ``rounds`` exchanges about a rotating set of topics."""
    out: list[BaseMessage] = [SystemMessage("You are helpful.", id="sys")]
    for n in range(rounds):
        topic = TOPICS[n % len(TOPICS)]
        out.append(HumanMessage(f"Round {n}: tell me about {topic}, I like {topic}.", id=f"h{n}"))
        out.append(AIMessage(f"Noted, you like {topic} (round {n}).", id=f"a{n}"))
    return out


_SHOWN_FACT = re.compile(r"^(\S+) (\S+) \S+ \| (.*)$", re.MULTILINE)
_SHOWN_MESSAGE = re.compile(r'<message id="([^"]+)"')


def extraction_answer(prompt: Sequence[BaseMessage]) -> str:
    """Operations that depend only on the prompt: adds, merges, updates, deletes, todos."""
    body = str(prompt[-1].content)
    facts_block = body.split("</current_facts>")[0]
    shown = _SHOWN_FACT.findall(facts_block)
    ids = _SHOWN_MESSAGE.findall(body)
    n = int(ids[0][1:])
    topic = TOPICS[n % len(TOPICS)]
    lines = [f"ADD preference 0.8 {ids[0]} | The user likes {topic} (round {n})."]
    if n % 3 == 0:
        lines.append(f"ADD todo 0.6? {ids[-1]} | Check {topic} again.")
    if n % 4 == 0:
        lines.append(f"ADD preference 0.9 {ids[0]} | the user likes {topic} (ROUND {n})")
    if shown and n % 5 == 0:
        alias, _type, content = shown[0]
        lines.append(f"UPDATE {alias} 0.95 {ids[-1]} | {content} Confirmed in round {n}.")
    if len(shown) > 1 and n % 7 == 0:
        lines.append(f"DELETE {shown[-1][0]}")
    return "\n".join(lines)


def node(clock: list[datetime]) -> FactExtractionNode:
    return FactExtractionNode(
        ScriptedChatModel(default=extraction_answer),
        batch_rounds=2,
        max_prompt_facts=6,
        use_runtime_store=False,
        retry_backoff=0,
        ttl_by_type={"todo": timedelta(hours=5)},
        now=lambda: clock[0],
    )


def run(*, reload_state: bool, turns: int = 60) -> Iterator[dict[str, Any]]:
    """The node's update on every turn, its facts merged as a LangGraph reducer would."""
    clock = [START]
    extractor = node(clock)
    full = history(turns + 1)
    facts: Any = {}
    cursor = None
    for turn in range(1, turns + 1):
        clock[0] = START + timedelta(hours=turn)
        messages = full[: 2 * turn + 1]
        if reload_state:  # every object new: nothing matched by identity
            facts = json.loads(json.dumps(facts))
            messages = [m.model_copy() for m in messages]
        update = extractor.invoke(
            {"messages": messages, "facts": facts, "facts_processed_through": cursor}
        )
        if "facts" in update:
            facts = merge_facts(facts, update["facts"], now=clock[0])
        cursor = update.get("facts_processed_through", cursor)
        yield json.loads(json.dumps(update))
    yield {"final_facts": json.loads(json.dumps(facts))}


def test_updates_match_the_recorded_ones() -> None:
    recorded = json.loads(GOLDEN.read_text())
    updates = list(run(reload_state=False))
    assert len(updates) == len(recorded)
    for turn, (got, want) in enumerate(zip(updates, recorded, strict=True)):
        assert got == want, f"turn {turn}"
    final = updates[-1]["final_facts"]
    assert 10 < len(final) < 60  # the script adds, merges, expires and deletes facts


def test_reloaded_state_gives_the_same_updates() -> None:
    assert list(run(reload_state=True)) == list(run(reload_state=False))


def test_validations_and_reads_per_turn_do_not_grow_with_history_or_facts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validations: list[int] = [0]
    original = Fact.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Fact], *args: Any, **kwargs: Any) -> Fact:
        validations[0] += 1
        return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Fact, "model_validate", classmethod(counting))

    class Reads(list[BaseMessage]):
        reads = 0

        def __getitem__(self, key: Any) -> Any:
            if isinstance(key, slice):
                self.reads += len(range(*key.indices(len(self))))
            else:
                self.reads += 1
            return super().__getitem__(key)

    one_add = ScriptedChatModel(
        default=lambda p: (
            f"ADD entity 0.9 {_SHOWN_MESSAGE.findall(str(p[-1].content))[0]} "
            f"| Fact number {_SHOWN_MESSAGE.findall(str(p[-1].content))[0]}."
        )
    )
    extractor = FactExtractionNode(
        one_add, batch_rounds=2, max_prompt_facts=6, use_runtime_store=False
    )
    full = history(601)
    facts: dict[str, Any] = {}
    cursor = None
    per_turn: dict[int, tuple[int, int]] = {}
    for rounds in range(2, 601, 2):  # two more rounds per turn: one call, one new fact
        validations[0] = 0
        messages = Reads(full[: 2 * rounds + 1])
        update = extractor.invoke(
            {"messages": messages, "facts": facts, "facts_processed_through": cursor}
        )
        facts = merge_facts(facts, update["facts"])
        cursor = update["facts_processed_through"]
        per_turn[rounds] = (validations[0], messages.reads)
    assert len(facts) == 300
    late = {per_turn[r] for r in range(500, 601, 2)}
    early = {per_turn[r] for r in range(10, 201, 2)}
    # one validation per turn (the added fact), however many facts and messages came before:
    # the node's write, the reducer and the next turn's read reuse the validated fact
    assert early == late == {(1, per_turn[10][1])}, (early, late)
