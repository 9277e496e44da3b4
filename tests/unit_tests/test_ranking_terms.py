"""What a query's words match: speaker names rank without retrieving, dates match by term.

A speaker's name in a question says whose turn is meant, not what it is about: a turn
that matches only the name is not retrieved (it would be ranked by its brevity), yet among
the turns a content word retrieves, the named speaker's rank first. A month named in a
question ("in June") matches the turns written that month, through date terms that no
word of a text can produce; a speaker is matched the same way, so a name a turn mentions
("Thanks, Bob!") does not make it that person's turn.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_histcompress.recall._turn_index import message_date_terms
from langchain_histcompress.recall.bm25 import BM25Index, date_terms, query_terms, speaker_terms
from langchain_histcompress.recall.retrieval import BM25TurnRetriever, EvidenceRetriever

np = pytest.importorskip("numpy")


def _index() -> BM25Index:
    index = BM25Index()
    for key, text in [
        ("a", "Ann: hi there"),
        ("b", "Bob: I painted a boat"),
        ("c", "Ann: I painted a lake, Ann said"),
        ("d", "Ann: wow"),
        ("e", "Bob: thanks Ann"),
    ]:
        index.add(key, text)
    return index


def test_modifiers_rank_only_what_another_word_retrieves() -> None:
    index = _index()
    plain = index.scores("what did ann paint")
    assert set(plain) == {"a", "b", "c", "d", "e"}
    modified = index.scores("what did ann paint", modifiers={"ann"})
    assert set(modified) == {"b", "c"}
    assert modified["c"] == plain["c"] and modified["c"] > modified["b"]
    assert modified["b"] == index.scores("paint")["b"]
    # nothing but modifiers in the query: they retrieve as plain words
    assert index.scores("ann", modifiers={"ann"}) == index.scores("ann")
    # a retrieving word that is not indexed does not make the name retrieve
    assert index.scores("ann zebra", modifiers={"ann"}) == index.scores("ann")
    assert index.scores("ann paint", modifiers={"ann"}, allowed={"b"}) == {"b": modified["b"]}


@pytest.mark.parametrize("max_postings", [None, 1, 2, 10])
@pytest.mark.parametrize(
    "query", ["what did ann paint", "ann boat lake", "ann", "thanks ann bob", "paint"]
)
def test_modifier_scores_over_arrays_equal_the_python_ones(
    query: str, max_postings: int | None
) -> None:
    index = _index()
    index.remove("a")  # a stale column
    index.add("a", "Ann: a boat, Bob")
    for modifiers in [(), {"ann"}, {"ann", "bob"}]:
        expected = index.scores(query, max_postings=max_postings, modifiers=modifiers)
        slots, scores = index.slot_scores(np, query, max_postings=max_postings, modifiers=modifiers)
        got = dict(zip([index.slot_key(s) for s in slots.tolist()], scores.tolist(), strict=True))
        assert got == expected


def test_date_terms_never_collide_with_words() -> None:
    assert date_terms(date(2023, 5, 8)) == ("@may", "@2023")
    assert query_terms("She may come") == ("may", "com")  # the verb names no month
    assert query_terms("What did she do in May?")[-1:] == ("@may",)
    assert "@1999" in query_terms("back in 1999.") and "@99" not in query_terms("in 99")
    assert not any(t.startswith("@") for t in query_terms("room 20234 or b2023"))


def test_date_terms_do_not_lengthen_a_text() -> None:
    dated, plain = BM25Index(), BM25Index()
    for index, terms in [(dated, date_terms(date(2023, 6, 1))), (plain, ())]:
        index.add("a", "we went camping at the lake", terms=terms)
        index.add("b", "a long day at the office with many meetings", terms=())
    assert dated.scores("camping lake") == plain.scores("camping lake")
    assert set(dated.scores("what happened in June")) == {"a"}


@pytest.mark.parametrize(
    "stamp",
    [
        "2023-06-27T13:56:00+00:00",
        "2023-06-27T13:56:00Z",
        datetime(2023, 6, 27, 13, 56, tzinfo=timezone.utc),
        1_687_874_160,
        1_687_874_160_000,
    ],
)
def test_message_times_in_every_accepted_form(stamp: Any) -> None:
    message = HumanMessage("hi", additional_kwargs={"timestamp": stamp})
    assert message_date_terms(message) == ("@june", "@2023")
    meta = AIMessage("hi", response_metadata={"created_at": stamp})
    assert message_date_terms(meta) == ("@june", "@2023")


@pytest.mark.parametrize("stamp", ["yesterday", "", None, True, float("inf"), 10**30])
def test_unreadable_message_times_give_no_terms(stamp: Any) -> None:
    assert message_date_terms(HumanMessage("hi", additional_kwargs={"timestamp": stamp})) == ()


def _dated(text: str, month: int, kind: type[BaseMessage], n: int) -> BaseMessage:
    stamp = f"2023-{month:02d}-10T12:00:00Z"
    return kind(text, id=f"m{n}", additional_kwargs={"timestamp": stamp})


def test_a_month_named_in_a_question_finds_that_months_turns() -> None:
    history = [
        _dated("We went camping by the river", 5, HumanMessage, 1),
        _dated("Sounds lovely!", 5, AIMessage, 2),
        _dated("Camping again, this time in the hills", 6, HumanMessage, 3),
        _dated("Fun!", 6, AIMessage, 4),
    ]
    retriever = EvidenceRetriever(neighbour_window=0)
    ranked = [r.item.id for r in retriever.rank("Where did Ann go camping in June?", [], history)]
    assert ranked[0] == "m3"
    ranked = [r.item.id for r in retriever.rank("Where did Ann go camping in May?", [], history)]
    assert ranked[0] == "m1"
    turns = BM25TurnRetriever()
    assert [m.id for m in turns.retrieve("camping in June", history, 1)] == ["m3"]


def test_a_speaker_name_alone_retrieves_no_turn() -> None:
    history: list[BaseMessage] = [
        HumanMessage("Hey Bob!", id="h1"),
        AIMessage("Hi Ann, how are you?", id="a1"),
        HumanMessage("I adopted a kitten last week", id="h2"),
        AIMessage("A kitten! I adopted one too", id="a2"),
    ]
    names = {"human": "Ann", "ai": "Bob"}
    retriever = EvidenceRetriever(speaker_names=names, neighbour_window=0)
    ranked = [r.item.id for r in retriever.rank("What did Ann adopt?", [], history)]
    assert ranked == ["h2", "a2"]  # her turn first; greetings naming her are not retrieved
    # a message's own name is a speaker name too
    named = [HumanMessage("Cleo here", id="c1", name="Cleo"), *history]
    ranked = [r.item.id for r in retriever.rank("What did Cleo adopt?", [], named)]
    assert sorted(ranked) == ["a2", "h2"]  # not her greeting
    assert [r.item.id for r in retriever.rank("Cleo", [], named)] == ["c1"]


def test_a_name_a_turn_mentions_is_not_its_speaker() -> None:
    """A question naming a speaker ranks that speaker's turns, not the turns greeting them."""
    history: list[BaseMessage] = [
        HumanMessage("Thanks, Bob! I painted a lake", id="h1"),
        AIMessage("I painted a boat", id="a1"),
    ]
    names = {"human": "Ann", "ai": "Bob"}
    retriever = EvidenceRetriever(speaker_names=names, neighbour_window=0)
    assert [r.item.id for r in retriever.rank("What did Bob paint?", [], history)] == ["a1", "h1"]
    assert [r.item.id for r in retriever.rank("What did Ann paint?", [], history)] == ["h1", "a1"]
    turns = BM25TurnRetriever(speaker_names=names)
    assert [m.id for m in turns.retrieve("What did Bob paint?", history, 1)] == ["a1"]


def test_speaker_terms_never_collide_with_words() -> None:
    index = BM25Index()
    index.add("a", "Ann painted", terms=speaker_terms("Bob"))
    index.add("b", "Bob painted", terms=speaker_terms("Ann"))
    assert [key for key, _ in index.search("bob paint", 2)] == ["b", "a"]  # the word "bob"
    speaker = index.scores("bob paint", modifiers={"~bob"})  # Bob, who wrote "a"
    assert speaker["a"] > speaker["b"]
    assert list(index.scores("bob", modifiers={"~bob"})) == ["a"]  # never the word
    assert list(index.scores("~bob")) == ["b"]  # a query cannot write a speaker term


def test_speaker_names_are_kept_per_conversation() -> None:
    """A name one conversation's messages carry is a plain word in another's."""
    retriever = EvidenceRetriever(neighbour_window=0)
    first = [HumanMessage("Hello there", id="m1", name="Rex"), AIMessage("Hi", id="m2")]
    assert [r.item.id for r in retriever.rank("hello", [], first)] == ["m1"]
    other = [
        HumanMessage("Rex chased the ball", id="m1"),
        AIMessage("Our dog naps all day", id="m2"),
    ]
    ranked = [r.item.id for r in retriever.rank("What did the dog Rex do?", [], other)]
    assert sorted(ranked) == ["m1", "m2"]  # "rex" retrieves here: no speaker is called Rex
    ranked = [r.item.id for r in retriever.rank("What did Rex say, hello?", [], first)]
    assert ranked == ["m1"]
