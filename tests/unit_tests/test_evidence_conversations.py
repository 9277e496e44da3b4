"""One retriever shared by several conversations ranks each as a retriever of its own would."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.recall import _turn_index, evidence
from langchain_histcompress.recall.bm25 import BM25Index
from langchain_histcompress.recall.evidence import EvidenceRetriever
from langchain_histcompress.recall.turn_retriever import BM25TurnRetriever
from tests.unit_tests.test_context_line_costs import facts as fact_state
from tests.unit_tests.test_context_line_costs import grown, report

_SYSTEM = SystemMessage("You are a helpful assistant.", id="sys")
"""One message object opening every user's history (a module constant, as apps do)."""

_TOPICS = ["kitten", "pottery", "marathon", "soup", "guitar", "garden", "bread", "lake"]


def history(user: int, size: int) -> list[BaseMessage]:
    """A conversation whose ids mostly recur for every user ("1", "2", ...), texts differ."""
    out: list[BaseMessage] = [_SYSTEM]
    for i in range(size):
        topic = _TOPICS[(i * (user + 2) + user) % len(_TOPICS)]
        words = " ".join([topic] * (1 + (i + user) % 3))
        key = str(i) if i % 3 else f"{user}:{i}"
        if i % 2 == 0:
            out.append(HumanMessage(f"Tell me about {words} number {i * (user + 1)}", id=key))
        else:
            out.append(AIMessage(f"Sure, {words} and more {topic} talk", id=key))
    return out


def facts_of(user: int, messages: list[BaseMessage]) -> list[Fact]:
    """Facts whose ids collide across users, sourced from (colliding) message ids."""
    return [
        Fact(
            id=f"f-{n}",
            content=f"user {user} likes {_TOPICS[(n + user) % len(_TOPICS)]}",
            source_ids=(str(messages[1 + (n * 3) % (len(messages) - 1)].id),),
        )
        for n in range(6)
    ]


def ranked(retriever: EvidenceRetriever, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    return [(r.is_fact, r.position, r.score, r.item.id) for r in retriever.rank(*args, **kwargs)]


QUESTIONS = ["kitten soup", "what about the pottery and the lake?", "number 12 guitar"]


@pytest.mark.parametrize("use_numpy", [True, False])
def test_shared_evidence_retriever_ranks_as_separate_ones(
    monkeypatch: pytest.MonkeyPatch, use_numpy: bool
) -> None:
    if not use_numpy:
        monkeypatch.setattr(evidence, "_numpy", lambda: None)
    users = [history(0, 100), history(1, 100), history(2, 100)]
    shared = EvidenceRetriever(neighbour_window=1, max_term_postings=30)
    own = [EvidenceRetriever(neighbour_window=1, max_term_postings=30) for _ in users]
    compared = 0
    for end in range(20, 81, 6):
        for user, messages in enumerate(users):
            part = messages[: end + 7 * user]  # histories of different lengths
            facts = facts_of(user, part)
            for question in QUESTIONS:
                expected = ranked(own[user], question, facts, part)
                assert ranked(shared, question, facts, part) == expected, (user, end)
                compared += len(expected)
    assert compared > 1_000


def test_shared_turn_retriever_ranks_as_separate_ones() -> None:
    users = [history(0, 60), history(1, 60)]
    shared = BM25TurnRetriever(max_term_postings=20)
    own = [BM25TurnRetriever(max_term_postings=20) for _ in users]
    differs = False
    for end in range(10, 51, 5):
        for user, messages in enumerate(users):
            part = messages[: end + 7 * user]
            for question in QUESTIONS:
                expected = own[user].retrieve(question, part, 8)
                assert shared.retrieve(question, part, 8) == expected
                differs |= expected != own[1 - user].retrieve(question, users[1 - user][:end], 8)
    assert differs  # the users' rankings are not trivially the same


def test_context_builders_sharing_a_retriever_build_the_same_contexts() -> None:
    counter = TiktokenCounter()

    def make(retriever: EvidenceRetriever) -> ContextBuilder:
        return ContextBuilder(
            max_context_tokens=1_500,
            token_counter=counter,
            top_k_facts=1_000,
            raw_turn_retrieval=1_000,
            data_budget_ratio=0.9,
            evidence_retriever=retriever,
        )

    first, second = grown(300, "x"), grown(300, "y")
    retriever = EvidenceRetriever(max_term_postings=60)
    sharing = [make(retriever), make(retriever)]
    own = [make(EvidenceRetriever(max_term_postings=60)) for _ in range(2)]
    states = [fact_state(), fact_state()]  # the same fact ids for both users
    for end in range(200, 220, 2):
        for n, messages in enumerate((first, second)):
            got = sharing[n].assemble(messages[:end], facts=states[n], query="soup")
            want = own[n].assemble(messages[:end], facts=states[n], query="soup")
            assert report(got) == report(want), (n, end)


class _Indexed:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        add = BM25Index.add

        def counting(index: BM25Index, key: str, text: str, **kwargs: Any) -> None:
            self.count += 1
            add(index, key, text, **kwargs)

        monkeypatch.setattr(BM25Index, "add", counting)
        extends = _turn_index.extends

        def counting_extends(messages: Any, previous: Any) -> bool:
            self.compared += 1
            return extends(messages, previous)

        self.compared = 0
        monkeypatch.setattr(_turn_index, "extends", counting_extends)

    def take(self) -> tuple[int, int]:
        out = (self.count, self.compared)
        self.count = self.compared = 0
        return out


def test_alternating_conversations_index_only_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    users = [history(0, 200), history(1, 200)]
    retriever = EvidenceRetriever()
    turns = BM25TurnRetriever()
    counts = _Indexed(monkeypatch)
    for user, messages in enumerate(users):
        retriever.rank("kitten", facts_of(user, messages[:100]), messages[:100])
        turns.retrieve("kitten", messages[:100], 3)
    counts.take()
    for end in range(102, 200, 2):
        for user, messages in enumerate(users):
            facts = facts_of(user, messages[:100])  # unchanged facts: nothing re-indexed
            retriever.rank("kitten", facts, messages[:end])
            indexed, compared = counts.take()
            assert indexed == 2  # the two new messages
            # both histories open with one system message object: the other user's state is
            # tried first (the most recent), rejected by its last message at pointer speed
            assert compared == 2
            turns.retrieve("kitten", messages[:end], 3)
            assert counts.take() == (2, 2)


def test_least_recently_used_conversation_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    users = [history(user, 30) for user in range(3)]
    retriever = EvidenceRetriever(max_conversations=2)
    counts = _Indexed(monkeypatch)
    for messages in users[:2]:
        retriever.rank("kitten", [], messages)
    counts.take()
    retriever.rank("kitten", [], users[0])  # kept: the most recent again
    assert counts.take()[0] == 0
    retriever.rank("kitten", [], users[2])  # a third: the least recent (user 1) is dropped
    assert counts.take()[0] == 30
    retriever.rank("kitten", [], users[0])
    assert counts.take()[0] == 0
    expected = ranked(EvidenceRetriever(), "kitten soup", [], users[1])
    assert ranked(retriever, "kitten soup", [], users[1]) == expected
    assert counts.take()[0] == 30 + 30  # user 1 indexed afresh (and by the fresh retriever)
    assert len(retriever._conversations.states) == 2


def test_a_cut_history_is_indexed_afresh() -> None:
    messages = history(0, 40)
    retriever = EvidenceRetriever()
    retriever.rank("kitten", [], messages)
    cut = [messages[0], *messages[25:]]  # the dropped messages no longer weigh on the ranking
    expected = ranked(EvidenceRetriever(), "kitten soup", [], cut)
    assert ranked(retriever, "kitten soup", [], cut) == expected
    assert len(retriever._conversations.states) == 2  # the cut list is another list


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2", None])
@pytest.mark.parametrize("kind", [EvidenceRetriever, BM25TurnRetriever])
def test_max_conversations_is_validated(kind: Any, value: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_conversations must be an int >= 1"):
        kind(max_conversations=value)


def test_a_history_read_back_as_copies_keeps_its_index(monkeypatch: pytest.MonkeyPatch) -> None:
    users = [history(0, 60), history(1, 60)]
    retriever = EvidenceRetriever()
    for messages in users:
        retriever.rank("kitten", [], messages[:40])
    counts = _Indexed(monkeypatch)
    for messages in users:
        copies = [m.model_copy() for m in messages[:50]]  # new objects, equal values
        expected = ranked(EvidenceRetriever(), "kitten soup", [], copies)
        counts.take()
        assert ranked(retriever, "kitten soup", [], copies) == expected
        assert counts.take()[0] == 10  # only the messages it had not seen
    assert len(retriever._conversations.states) == 2
