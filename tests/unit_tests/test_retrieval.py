from __future__ import annotations

import itertools
import re
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall.retrieval import (
    BM25FactRetriever,
    BM25Index,
    BM25TurnRetriever,
    EmbeddingEvidenceRetriever,
    EmbeddingFactRetriever,
    EvidenceRetriever,
    FactRetriever,
    RankedEvidence,
    StoreFactRetriever,
    TurnRetriever,
    stem,
    tokenize,
    validate_namespace,
)

FACTS = [
    Fact(id="f-oslo", content="User lives in Oslo, Norway", type="entity"),
    Fact(id="f-budget", content="Travel budget is 12k EUR", type="confirmed_detail"),
    Fact(id="f-seat", content="Prefers window seats on flights", type="preference"),
    Fact(id="f-dog", content="Has a dog called Rex"),
]


def test_tokenize_is_deterministic_and_drops_stopwords() -> None:
    assert tokenize("What is THE user's budget_limit?") == ["user", "budget", "limit"]
    assert tokenize("Ａｂｃ déjà-vu 42") == ["abc", "déjà", "vu", "42"]
    assert tokenize("the a of", stopwords=()) == ["the", "a", "of"]


def test_bm25_index_ranks_and_filters() -> None:
    index = BM25Index()
    index.add("a", "apple pie recipe")
    index.add("b", "apple")
    index.add("c", "pear tart")
    assert [k for k, _ in index.search("apple pie", 5)] == ["a", "b"]
    assert [k for k, _ in index.search("apple", 5, allowed={"a"})] == ["a"]
    assert index.search("banana", 5) == []
    assert index.search("apple", 0) == []
    index.add("a", "pear")  # replaces
    assert [k for k, _ in index.search("pie", 5)] == []
    index.remove("c")
    index.remove("missing")
    assert len(index) == 2 and "c" not in index
    with pytest.raises(ConfigurationError):
        index.search("x", -1)
    with pytest.raises(ConfigurationError):
        BM25Index(b=2)


def test_bm25_ties_break_by_insertion_order() -> None:
    index = BM25Index()
    for key in ("z", "y", "x"):
        index.add(key, "same words")
    assert [k for k, _ in index.search("words", 3)] == ["z", "y", "x"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="abc d", max_size=12), max_size=8), st.text("abc d"))
def test_bm25_scores_are_positive_and_sorted(texts: list[str], query: str) -> None:
    index = BM25Index()
    for i, text in enumerate(texts):
        index.add(str(i), text)
    hits = index.search(query, 10)
    scores = [s for _, s in hits]
    assert all(s > 0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert {k for k, _ in hits} <= {str(i) for i in range(len(texts))}


def test_bm25_fact_retriever() -> None:
    retriever = BM25FactRetriever()
    assert isinstance(retriever, FactRetriever)
    assert [f.id for f in retriever.retrieve("what's my budget?", FACTS, 2)] == ["f-budget"]
    assert [f.id for f in retriever.retrieve("seat preference", FACTS, 1)] == ["f-seat"]
    assert retriever.retrieve("quantum chromodynamics", FACTS, 3) == []
    assert retriever.retrieve("dog", [], 3) == []


class CountingEmbeddings(Embeddings):
    def __init__(self) -> None:
        self.inner = DeterministicFakeEmbedding(size=32)
        self.documents: list[str] = []
        self.queries = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.queries += 1
        return self.inner.embed_query(text)


def test_embedding_retriever_caches_per_id_and_content() -> None:
    embeddings = CountingEmbeddings()
    retriever = EmbeddingFactRetriever(embeddings)
    exact = FACTS[1].content
    assert retriever.retrieve(exact, FACTS, 1)[0].id == "f-budget"
    assert len(embeddings.documents) == 4
    retriever.retrieve("anything", FACTS, 2)
    assert len(embeddings.documents) == 4  # cached
    changed = [*FACTS[:3], FACTS[3].model_copy(update={"content": "Has a cat"})]
    retriever.retrieve("cat", changed, 2)
    assert embeddings.documents[4:] == ["Has a cat"]
    assert retriever.retrieve("   ", FACTS, 2) == []
    assert retriever.retrieve("x", FACTS, 0) == []


def test_embedding_retriever_cache_is_bounded() -> None:
    embeddings = CountingEmbeddings()
    retriever = EmbeddingFactRetriever(embeddings, cache_size=2)
    retriever.retrieve("a", FACTS[:2], 1)
    retriever.retrieve("a", FACTS[2:], 1)
    retriever.retrieve("a", FACTS[:2], 1)
    assert len(embeddings.documents) == 6


def test_embedding_retriever_validates() -> None:
    with pytest.raises(ConfigurationError):
        EmbeddingFactRetriever("not embeddings")  # type: ignore[arg-type]

    class Broken(CountingEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return []

    with pytest.raises(ConfigurationError):
        EmbeddingFactRetriever(Broken()).retrieve("x", FACTS, 1)


def put_facts(store: InMemoryStore, namespace: tuple[str, ...], facts: list[Fact]) -> None:
    for fact in facts:
        store.put(namespace, fact.id, fact.to_state())


def test_store_retriever_exact_namespace_without_index() -> None:
    store = InMemoryStore()
    acme = ("histcompress", "facts", "acme")
    put_facts(store, acme, FACTS[:2])
    put_facts(store, ("histcompress", "facts", "acme-corp"), [Fact(id="f-x", content="Oslo HQ")])
    put_facts(store, (*acme, "child"), [Fact(id="f-y", content="Oslo branch")])
    retriever = StoreFactRetriever(store, acme)
    assert not retriever.semantic
    assert [f.id for f in retriever.retrieve("oslo", [], 5)] == ["f-oslo"]
    assert retriever.retrieve("oslo", [FACTS[1]], 5) == []  # restricted to given ids
    other = StoreFactRetriever(store, ("histcompress", "facts", "acme-corp"))
    assert [f.id for f in other.retrieve("oslo", [], 5)] == ["f-x"]


def test_store_retriever_uses_the_semantic_index() -> None:
    embeddings = DeterministicFakeEmbedding(size=16)
    store = InMemoryStore(index={"dims": 16, "embed": embeddings, "fields": ["content"]})
    ns = ("histcompress", "facts", "u1")
    put_facts(store, ns, FACTS)
    put_facts(store, ("histcompress", "facts", "u10"), [Fact(id="f-z", content=FACTS[0].content)])
    retriever = StoreFactRetriever(store, ns)
    assert retriever.semantic
    hits = retriever.retrieve(FACTS[2].content, [], 2)
    assert hits[0].id == "f-seat"
    assert all(h.id != "f-z" for h in retriever.retrieve(FACTS[0].content, [], 10))
    assert [f.id for f in retriever.retrieve(FACTS[2].content, [FACTS[0]], 2)] == ["f-oslo"]


@pytest.mark.parametrize("namespace", [(), "acme", ("a", ""), ("a", 3), ("a.b",), ["ok", "  "]])
def test_validate_namespace(namespace: object) -> None:
    with pytest.raises(ConfigurationError):
        validate_namespace(namespace)  # type: ignore[arg-type]


def test_store_retriever_validates() -> None:
    with pytest.raises(ConfigurationError):
        StoreFactRetriever({}, ("a",))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        StoreFactRetriever(InMemoryStore(), ("a",), scan_limit=0)


def conversation() -> list[SystemMessage | HumanMessage | AIMessage | ToolMessage]:
    call = AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "c1"}])
    return [
        SystemMessage("system words dog", id="s"),
        HumanMessage("My dog is called Rex", id="h1"),
        AIMessage("Rex is a great name.", id="a1"),
        HumanMessage("What's the weather in Oslo?", id="h2"),
        call.model_copy(update={"id": "a2"}),
        ToolMessage("Oslo: rain, 8C", tool_call_id="c1", id="t1"),
        HumanMessage("thanks", id="h3"),
    ]


def test_turn_retriever_ranks_messages() -> None:
    retriever = BM25TurnRetriever()
    assert isinstance(retriever, TurnRetriever)
    history = conversation()
    assert [m.id for m in retriever.retrieve("dog name", history, 2)] == ["h1", "a1"]
    assert [m.id for m in retriever.retrieve("dog", history, 2)] == ["h1"]
    assert [m.id for m in retriever.retrieve("oslo rain", history, 3)] == ["t1", "h2", "a2"]
    no_tools = BM25TurnRetriever(include_tool_results=False)
    assert "t1" not in [m.id for m in no_tools.retrieve("oslo rain", history, 3)]
    assert retriever.retrieve("system", history, 3) == []  # system messages are not turns


def test_turn_retriever_cache_follows_edits_and_scope() -> None:
    retriever = BM25TurnRetriever()
    history = conversation()
    retriever.retrieve("dog", history, 2)
    edited = [
        m.model_copy(update={"content": "I have a cat"}) if m.id == "h1" else m for m in history
    ]
    assert retriever.retrieve("dog", edited, 2) == []
    assert [m.id for m in retriever.retrieve("cat", edited, 2)] == ["h1"]
    # only messages passed in this call are returned, even if indexed before
    assert retriever.retrieve("cat", edited[3:], 2) == []


def test_turn_retriever_handles_messages_without_ids() -> None:
    retriever = BM25TurnRetriever(max_cached=1)
    history = [HumanMessage("alpha beta"), AIMessage("gamma"), HumanMessage("beta delta", id="x")]
    hits = retriever.retrieve("beta", history, 5)
    assert [m.content for m in hits] == ["alpha beta", "beta delta"]
    hits = retriever.retrieve("beta", history, 5)  # cache rebuilt when over max_cached
    assert len(hits) == 2


# --------------------------------------------------------------------------- stemming


@pytest.mark.parametrize(
    ("word", "stemmed"),
    [
        ("paints", "paint"),
        ("painted", "paint"),
        ("painting", "paint"),
        ("paintings", "paint"),
        ("kings", "king"),
        ("running", "run"),  # doubled consonant undone
        ("falling", "fall"),  # ...but not l, s, z
        ("hike", "hik"),  # final e dropped so hike / hiking / hiked meet
        ("hiking", "hik"),
        ("hiked", "hik"),
        ("stories", "stori"),
        ("story", "stori"),
        ("studied", "studi"),
        ("class", "class"),  # -ss, -us, -is are not plurals
        ("bus", "bus"),
        ("analysis", "analysis"),
        ("need", "need"),  # -eed is not a past tense
        ("string", "string"),  # no vowel left before -ing
        ("cat", "cat"),  # three letters or fewer: unchanged
        ("2023", "2023"),
        ("b2b", "b2b"),
    ],
)
def test_stem_hand_checked(word: str, stemmed: str) -> None:
    assert stem(word) == stemmed


@pytest.mark.parametrize(
    ("word", "related"),
    [
        ("promotion", "promote"),  # -ion after t or s
        ("promotions", "promoted"),
        ("mentorship", "mentored"),  # -ship
        ("friendship", "friends"),
        ("relationship", "related"),  # suffixes removed in turn
        ("excitement", "excited"),  # -ment
        ("creativity", "creative"),  # -ity
        ("natural", "nature"),  # -al
        ("festival", "festive"),  # -al, then -ive
        ("activities", "active"),
    ],
)
def test_derived_words_meet_the_words_they_were_made_from(word: str, related: str) -> None:
    assert stem(word) == stem(related)


@pytest.mark.parametrize(
    ("word", "other"),
    [
        ("passion", "pass"),  # too little is left of passion for -ion to go
        ("business", "busy"),  # -ness is never removed
        ("comment", "come"),
        ("question", "quest"),
    ],
)
def test_short_stems_keep_their_suffix(word: str, other: str) -> None:
    assert stem(word) != stem(other)


def test_tokenize_stems_and_drops_chat_filler() -> None:
    assert tokenize("Yeah wow, she painted two paintings!") == ["paint", "two", "paint"]
    assert tokenize("she painted", stemming=False) == ["painted"]
    assert tokenize("Thanks so much, really") == []


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcdeilnorsty", min_size=1, max_size=12))
def test_stem_is_idempotent_enough_and_never_empty(word: str) -> None:
    out = stem(word)
    assert out
    assert len(out) <= len(word) + 1  # -ies / -ied keep one letter; -y becomes -i
    assert stem(word) == out  # deterministic


# --------------------------------------------------------------------------- BM25 bounds


def test_bm25_max_postings_skips_frequent_terms_but_keeps_the_rarest() -> None:
    index = BM25Index()
    index.add("a", "common rare")
    index.add("b", "common")
    index.add("c", "common other")
    assert set(index.scores("common rare")) == {"a", "b", "c"}
    assert set(index.scores("common rare", max_postings=2)) == {"a"}  # common in 3 > 2
    # every term too frequent: the rarest is scored in its newest texts only
    assert set(index.scores("common", max_postings=2)) == {"b", "c"}
    assert set(index.scores("common", max_postings=3)) == {"a", "b", "c"}
    assert index.keys() == ["a", "b", "c"]


def test_fact_retriever_index_follows_the_fact_set() -> None:
    retriever = BM25FactRetriever()
    assert [f.id for f in retriever.retrieve("dog", FACTS, 3)] == ["f-dog"]
    renamed = [*FACTS[:3], FACTS[3].model_copy(update={"content": "Has a cat called Rex"})]
    assert retriever.retrieve("dog", renamed, 3) == []
    assert [f.id for f in retriever.retrieve("cat", renamed, 3)] == ["f-dog"]
    assert retriever.retrieve("cat", renamed[:3], 3) == []  # removed facts are forgotten
    twice = [FACTS[0], FACTS[0].model_copy(update={"content": "Lives in Bergen"})]
    assert retriever.retrieve("bergen", twice, 3) == []  # same id twice: the first counts


# --------------------------------------------------------------------------- turn index


def test_turn_retriever_speaker_names_find_the_speakers_turns() -> None:
    history = [
        HumanMessage("I baked bread today", id="h1"),
        AIMessage("I went hiking with Ann", id="a1"),
    ]
    plain = BM25TurnRetriever()
    assert [m.id for m in plain.retrieve("What did Ann do?", history, 2)] == ["a1"]
    named = BM25TurnRetriever(speaker_names={"human": "Ann", "ai": "Bob"})
    hits = named.retrieve("What did Ann bake?", history, 2)
    assert [m.id for m in hits] == ["h1"]  # "bake" retrieves; "Ann" alone retrieves nothing
    # nothing else to go by: the name finds her turns (a turn naming her is not hers)
    assert [m.id for m in named.retrieve("What did Ann do?", history, 2)] == ["h1"]
    both = [AIMessage("I baked a cake", id="a0"), *history]
    assert [m.id for m in named.retrieve("What did Ann bake?", both, 3)] == ["h1", "a0"]
    own = [HumanMessage("I baked bread", id="h1", name="Cleo")]
    assert [m.id for m in named.retrieve("cleo", own, 1)] == ["h1"]  # message name wins
    with pytest.raises(ConfigurationError, match="speaker_names"):
        BM25TurnRetriever(speaker_names={"human": 3})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="max_term_postings"):
        BM25TurnRetriever(max_term_postings=0)


def test_turn_retriever_growing_history_and_edits() -> None:
    retriever = BM25TurnRetriever()
    history: list[BaseMessage] = [HumanMessage("alpha", id="h1"), AIMessage("beta", id="a1")]
    assert [m.id for m in retriever.retrieve("beta", history, 3)] == ["a1"]
    history = [*history, HumanMessage("beta gamma", id="h2")]  # grows: only the tail is new
    assert [m.id for m in retriever.retrieve("gamma beta", history, 3)] == ["h2", "a1"]
    edited = [history[0], AIMessage("delta", id="a1"), history[2]]  # same id, new object
    assert [m.id for m in retriever.retrieve("beta", edited, 3)] == ["h2"]
    assert [m.id for m in retriever.retrieve("delta", edited, 3)] == ["a1"]
    shorter = edited[:1]
    assert retriever.retrieve("gamma", shorter, 3) == []


# --------------------------------------------------------------------------- evidence


def chat() -> list[BaseMessage]:
    return [
        HumanMessage("What did you paint last week?", id="h1"),
        AIMessage("A lake at sunrise, in oils.", id="a1"),
        HumanMessage("Lovely. My sister visits in June.", id="h2"),
        AIMessage("Say hi to her!", id="a2"),
        HumanMessage("Will do. I started a pottery class.", id="h3"),
        AIMessage("Clay is so relaxing.", id="a3"),
    ]


EVIDENCE_FACTS = [
    Fact(id="f-lake", content="The assistant painted a lake at sunrise", source_ids=["a1"]),
    Fact(id="f-sister", content="The user's sister comes in June", source_ids=["h2"]),
    Fact(id="f-class", content="The user takes lessons", source_ids=["h3"]),
]


def ids(ranked: list[RankedEvidence]) -> list[str | None]:
    return [r.item.id for r in ranked]


def test_evidence_neighbours_lend_their_score() -> None:
    history = chat()
    # "paint" is only in h1 (the question) and in a fact; the reply a1 comes as neighbour
    near = EvidenceRetriever(neighbour_window=1, source_weight=0)
    assert ids(near.rank("paint", [], history)) == ["h1", "a1"]
    wider = EvidenceRetriever(neighbour_window=2, source_weight=0)
    assert ids(wider.rank("paint", [], history)) == ["h1", "a1", "h2"]
    far = EvidenceRetriever(neighbour_window=0)
    assert ids(far.rank("paint", [], history)) == ["h1"]
    weightless = EvidenceRetriever(neighbour_weight=0)
    assert ids(weightless.rank("paint", [], history)) == ["h1"]


def test_evidence_facts_borrow_their_source_turns_score() -> None:
    history = chat()
    # "pottery" is only in h3; f-class (sourced from h3) shares no word with the query
    with_sources = EvidenceRetriever(neighbour_window=0, source_weight=0.3)
    ranked = with_sources.rank("pottery", EVIDENCE_FACTS, history)
    assert ids(ranked) == ["f-class", "h3"]
    assert [r.is_fact for r in ranked] == [True, False]
    without = EvidenceRetriever(neighbour_window=0, source_weight=0)
    assert ids(without.rank("pottery", EVIDENCE_FACTS, history)) == ["h3"]


def test_evidence_fusion_interleaves_facts_and_turns() -> None:
    history = chat()
    retriever = EvidenceRetriever(neighbour_window=0, source_weight=0)
    ranked = retriever.rank("sister June lake sunrise", EVIDENCE_FACTS, history)
    kinds = ["fact" if r.is_fact else "turn" for r in ranked]
    assert kinds == ["fact", "turn", "fact", "turn"]
    assert {r.item.id for r in ranked} == {"f-lake", "f-sister", "a1", "h2"}
    scores = [r.score for r in ranked]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == scores[1] == 1 / 61  # rank 1 in each list
    positions = {r.item.id: r.position for r in ranked}
    assert positions["h2"] == 2 and positions["f-sister"] == 1


def test_evidence_restrictions_and_limits() -> None:
    history = chat()
    retriever = EvidenceRetriever(neighbour_window=1)
    full = ids(retriever.rank("paint", EVIDENCE_FACTS, history))
    assert "a1" in full and "h1" in full
    only = ids(retriever.rank("paint", EVIDENCE_FACTS, history, turn_ids={"a1"}))
    assert "h1" not in only and "a1" in only
    before = ids(retriever.rank("paint", EVIDENCE_FACTS, history, only_before=1))
    assert "a1" not in before and "h1" in before
    assert len(retriever.rank("paint", EVIDENCE_FACTS, history, k=2)) == 2
    assert retriever.rank("paint", EVIDENCE_FACTS, history, k=0) == []
    assert retriever.rank("   ", EVIDENCE_FACTS, history) == []
    assert retriever.rank("the and of", EVIDENCE_FACTS, history) == []
    assert retriever.rank("paint", [], []) == []
    lazy = retriever.iter_rank("paint", EVIDENCE_FACTS, history)
    assert next(lazy).item.id == full[0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"neighbour_window": -1},
        {"neighbour_window": 1.5},
        {"neighbour_weight": -0.1},
        {"source_weight": "x"},
        {"rrf_k": True},
        {"max_cached": 0},
        {"max_term_postings": -5},
        {"k1": -1},
        {"speaker_names": ["Ann"]},
    ],
)
def test_evidence_retriever_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        EvidenceRetriever(**kwargs)  # type: ignore[arg-type]


words = st.sampled_from(["tea", "oslo", "dog", "rex", "bergen", "cello", "june", "paint"])
turn_text = st.lists(words, min_size=1, max_size=4).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(turn_text, min_size=1, max_size=14),
    st.lists(turn_text, min_size=0, max_size=4),
    st.integers(1, 13),
    st.lists(words, min_size=1, max_size=3).map(" ".join),
)
def test_evidence_incremental_index_equals_a_fresh_one(
    texts: list[str], fact_texts: list[str], cut: int, query: str
) -> None:
    history: list[BaseMessage] = [
        (HumanMessage if i % 2 == 0 else AIMessage)(t, id=f"m{i}") for i, t in enumerate(texts)
    ]
    facts = [
        Fact(id=f"f{i}", content=t, source_ids=[f"m{i % len(texts)}"])
        for i, t in enumerate(fact_texts)
    ]
    warm = EvidenceRetriever()
    warm.rank(query, facts[:1], history[: min(cut, len(history))])  # an earlier, shorter call
    warm.rank("cello", facts, history[:1])
    fresh = EvidenceRetriever()
    got = [(r.item.id, r.score) for r in warm.rank(query, facts, history)]
    assert got == [(r.item.id, r.score) for r in fresh.rank(query, facts, history)]
    assert all(a.score >= b.score for a, b in itertools.pairwise(warm.rank(query, facts, history)))


# --------------------------------------------------------------------------- embeddings fused

ART = frozenset({"paint", "painted", "lake", "sunrise", "oils", "pottery", "clay"})
FAMILY = frozenset({"sister", "sibling"})


class KeywordEmbeddings(Embeddings):
    """Hand-checkable vectors: [art words, family words, 1]; records what it embeds."""

    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []

    @staticmethod
    def vector(text: str) -> list[float]:
        words = re.findall(r"[a-z]+", text.lower())
        return [
            float(sum(w in ART for w in words)),
            float(sum(w in FAMILY for w in words)),
            1.0,
        ]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self.vector(text)


def scored(ranked: list[RankedEvidence]) -> list[tuple[str | None, float]]:
    return [(r.item.id, r.score) for r in ranked]


def fused_retriever(**kwargs: object) -> EmbeddingEvidenceRetriever:
    options: dict[str, object] = {"neighbour_window": 0, "source_weight": 0, **kwargs}
    return EmbeddingEvidenceRetriever(KeywordEmbeddings(), **options)  # type: ignore[arg-type]


def test_fused_ranks_by_meaning_when_no_word_is_shared() -> None:
    # no BM25 match ("sibl", "arriv"); query vector [0, 1, 1]. Turn cosines: h2 1, a2 0.71,
    # h1 / h3 / a3 0.5, a1 0.22; fact cosines: f-sister 1, f-class 0.71, f-lake 0.22.
    query = "Which sibling arrives?"
    assert EvidenceRetriever().rank(query, EVIDENCE_FACTS, chat()) == []
    ranked = fused_retriever().rank(query, EVIDENCE_FACTS, chat())
    assert scored(ranked) == [
        ("f-sister", 1 / 61),
        ("h2", 1 / 61),
        ("f-class", 1 / 62),
        ("a2", 1 / 62),
        ("f-lake", 1 / 63),
        ("h1", 1 / 63),
        ("h3", 1 / 64),
        ("a3", 1 / 65),
        ("a1", 1 / 66),
    ]
    assert [r.position for r in ranked[:4]] == [1, 2, 2, 3]
    assert [r.is_fact for r in ranked[:2]] == [True, False]


def test_fused_adds_embedding_ranks_to_bm25_ranks() -> None:
    # BM25 finds f-lake and h1 (rank 1 each). Query vector [1, 0, 1]: turn cosines h1 / h3 /
    # a3 1, a1 0.89, a2 0.71, h2 0.5; facts f-lake 0.89, f-class 0.71, f-sister 0.5.
    ranked = fused_retriever().rank("paint", EVIDENCE_FACTS, chat())
    assert [item for item, _ in scored(ranked)] == [
        "f-lake",
        "h1",
        "f-class",
        "h3",
        "f-sister",
        "a3",
        "a1",
        "a2",
        "h2",
    ]
    expected = [2 / 61, 2 / 61, 1 / 62, 1 / 62, 1 / 63, 1 / 63, 1 / 64, 1 / 65, 1 / 66]
    assert [r.score for r in ranked] == pytest.approx(expected)
    weighted = fused_retriever(embedding_weight=0.5, rrf_k=10).rank("paint", EVIDENCE_FACTS, chat())
    assert ids(weighted)[:4] == ["f-lake", "h1", "f-class", "h3"]
    assert [r.score for r in weighted[:4]] == pytest.approx(
        [1 / 11 + 0.5 / 11, 1 / 11 + 0.5 / 11, 0.5 / 12, 0.5 / 12]
    )


def test_fused_min_similarity_drops_weak_embedding_ranks() -> None:
    retriever = fused_retriever(min_similarity=0.9)
    assert scored(retriever.rank("Which sibling arrives?", EVIDENCE_FACTS, chat())) == [
        ("f-sister", 1 / 61),
        ("h2", 1 / 61),
    ]
    # BM25 matches stay below the floor: query [1, 1, 1], best cosine 0.82 (h1, h2)
    assert ids(retriever.rank("sibling lake", EVIDENCE_FACTS, chat())) == ["f-lake", "a1"]


def test_fused_respects_restrictions_duplicates_and_eligibility() -> None:
    history: list[BaseMessage] = [
        SystemMessage("You are a painter's sister.", id="s"),
        *chat(),
        AIMessage("", id="call", tool_calls=[{"name": "t", "args": {}, "id": "c1"}]),
        ToolMessage("sister found", tool_call_id="c1", id="tool"),
        HumanMessage("My sister again", id="h2"),  # duplicate id: the first one counts
    ]
    query = "Which sibling arrives?"
    ranked = ids(fused_retriever().rank(query, [], history))
    assert "s" not in ranked and "tool" in ranked
    assert ranked.count("h2") == 1
    assert [
        r.position for r in fused_retriever().rank(query, [], history) if r.item.id == "h2"
    ] == [3]
    without_tools = ids(fused_retriever(include_tool_results=False).rank(query, [], history))
    assert "tool" not in without_tools
    before = ids(fused_retriever().rank(query, [], history, only_before=3))
    assert set(before) == {"h1", "a1"}
    only = ids(fused_retriever().rank(query, EVIDENCE_FACTS, history, turn_ids={"a2", "h3"}))
    assert [i for i in only if not str(i).startswith("f-")] == ["a2", "h3"]
    assert fused_retriever().rank("   ", EVIDENCE_FACTS, history) == []
    assert fused_retriever().rank(query, [], []) == []
    assert len(fused_retriever().rank(query, EVIDENCE_FACTS, history, k=3)) == 3


def test_fused_caches_vectors_per_text_and_names_speakers() -> None:
    embeddings = KeywordEmbeddings()
    retriever = EmbeddingEvidenceRetriever(
        embeddings, speaker_names={"human": "Ann", "ai": "Bob"}, neighbour_window=0
    )
    history = chat()
    retriever.rank("paint", EVIDENCE_FACTS, history[:4])
    assert embeddings.documents[:3] == [f.content for f in EVIDENCE_FACTS]
    assert embeddings.documents[3:] == [
        "Ann: What did you paint last week?",
        "Bob: A lake at sunrise, in oils.",
        "Ann: Lovely. My sister visits in June.",
        "Bob: Say hi to her!",
    ]
    retriever.rank("sister", EVIDENCE_FACTS, history)
    assert embeddings.documents[7:] == [
        "Ann: Will do. I started a pottery class.",
        "Bob: Clay is so relaxing.",
    ]
    assert embeddings.queries == ["paint", "sister"]
    small = KeywordEmbeddings()
    bounded = EmbeddingEvidenceRetriever(small, cache_size=2)
    bounded.rank("paint", [], history[:2])
    bounded.rank("paint", [], history[2:4])
    bounded.rank("paint", [], history[:2])
    assert len(small.documents) == 6


def test_fused_weight_zero_is_the_bm25_ranking_without_embedding() -> None:
    embeddings = KeywordEmbeddings()
    retriever = EmbeddingEvidenceRetriever(embeddings, embedding_weight=0)
    for query in ("paint", "sister June lake sunrise", "Which sibling arrives?"):
        got = scored(retriever.rank(query, EVIDENCE_FACTS, chat()))
        assert got == scored(EvidenceRetriever().rank(query, EVIDENCE_FACTS, chat()))
    assert embeddings.documents == [] and embeddings.queries == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(turn_text, min_size=1, max_size=12),
    st.lists(turn_text, min_size=0, max_size=4),
    st.lists(words, min_size=1, max_size=3).map(" ".join),
    st.integers(0, 12),
)
def test_fused_ranking_keeps_every_bm25_item_in_score_order(
    texts: list[str], fact_texts: list[str], query: str, cut: int
) -> None:
    history: list[BaseMessage] = [
        (HumanMessage if i % 2 == 0 else AIMessage)(t, id=f"m{i}") for i, t in enumerate(texts)
    ]
    facts = [Fact(id=f"f{i}", content=t) for i, t in enumerate(fact_texts)]
    lexical = EvidenceRetriever().rank(query, facts, history, only_before=cut)
    fused = EmbeddingEvidenceRetriever(DeterministicFakeEmbedding(size=8)).rank(
        query, facts, history, only_before=cut
    )
    assert {r.item.id for r in lexical} <= {r.item.id for r in fused}
    # every fact and every message before the cut has an embedding rank
    assert len(fused) == len(facts) + min(cut, len(history))
    assert all(a.score >= b.score for a, b in itertools.pairwise(fused))
    for entry in fused:
        source = facts if entry.is_fact else history
        assert source[entry.position] is entry.item


@pytest.mark.parametrize(
    "kwargs",
    [
        {"embedding_weight": -1},
        {"embedding_weight": True},
        {"min_similarity": -1.5},
        {"min_similarity": "0.2"},
        {"cache_size": 0},
        {"cache_size": 2.5},
        {"neighbour_window": -1},
        {"rrf_k": -1},
    ],
)
def test_fused_retriever_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        EmbeddingEvidenceRetriever(KeywordEmbeddings(), **kwargs)  # type: ignore[arg-type]


def test_fused_retriever_rejects_other_objects_and_short_answers() -> None:
    with pytest.raises(ConfigurationError, match="LangChain Embeddings"):
        EmbeddingEvidenceRetriever("not embeddings")  # type: ignore[arg-type]

    class Short(KeywordEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return super().embed_documents(texts)[:-1]

    with pytest.raises(ConfigurationError, match="different number"):
        EmbeddingEvidenceRetriever(Short()).rank("paint", EVIDENCE_FACTS, chat())


def test_fused_retriever_plugs_into_the_context_builder() -> None:
    from langchain_core.messages.utils import count_tokens_approximately

    from langchain_histcompress.context.builder import ContextBuilder

    filler: list[BaseMessage] = []
    for i in range(12):
        filler += [HumanMessage(f"Weather talk {i}", id=f"w{i}"), AIMessage("Sunny.", id=f"v{i}")]
    history = [*chat(), *filler, HumanMessage("Which sibling arrives?", id="q")]
    builder = ContextBuilder(
        max_context_tokens=160,
        token_counter=count_tokens_approximately,
        raw_turn_retrieval=1,
        evidence_retriever=fused_retriever(),
    )
    built = builder.assemble(history)
    assert built.retrieved_ids == ("h2",)  # found by meaning only
    assert built.messages[-1].id == "q"
    bm25 = ContextBuilder(
        max_context_tokens=160,
        token_counter=count_tokens_approximately,
        raw_turn_retrieval=1,
        evidence_retriever=EvidenceRetriever(neighbour_window=0, source_weight=0),
    )
    assert bm25.assemble(history).retrieved_ids == ()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.5, 1.0, 1.25, 2.0, 3.5]), max_size=40),
    st.integers(min_value=1, max_value=45),
)
def test_top_keeps_what_nlargest_keeps(values: list[float], n: int) -> None:
    import heapq

    from langchain_histcompress.recall.bm25 import _top

    scores = {f"k{i}": v for i, v in enumerate(values)}
    expected = dict(heapq.nlargest(n, scores.items(), key=lambda item: item[1]))
    top = _top(dict(scores), n)
    assert top == expected
    assert list(top) == [k for k in scores if k in top]  # insertion order kept


def test_evidence_ties_come_earliest_first_within_the_restrictions() -> None:
    history: list[BaseMessage] = [
        HumanMessage("the lighthouse keeper", id=f"m{i}") for i in range(8)
    ]
    retriever = EvidenceRetriever(neighbour_window=0)
    ranked = retriever.rank("lighthouse", [], history)
    assert [r.position for r in ranked] == list(range(8))
    before = retriever.rank("lighthouse", [], history, only_before=5, turn_ids={"m1", "m3", "m6"})
    assert [r.item.id for r in before] == ["m1", "m3"]


def test_evidence_only_before_zero_still_scores_facts_by_their_sources() -> None:
    history: list[BaseMessage] = [
        HumanMessage("We sailed to Svalbard in June", id="h1"),
        AIMessage("Sounds cold!", id="a1"),
    ]
    facts = [
        Fact(id="f-1", content="User likes tea", source_ids=["a1"]),
        Fact(id="f-2", content="User went on a trip", source_ids=["h1"]),
    ]
    retriever = EvidenceRetriever()
    full = retriever.rank("Svalbard sailing", facts, history)
    none_before = retriever.rank("Svalbard sailing", facts, history, only_before=0)
    assert [r.item.id for r in none_before] == ["f-2"]
    assert [r.item.id for r in full if r.is_fact] == ["f-2"]
    assert none_before[0].score == full[0].score


def test_bm25_fact_retriever_builds_texts_only_for_new_fact_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import langchain_histcompress.recall.retrieval as retrieval

    built: list[str] = []
    real = retrieval._fact_text

    def counting(fact: Fact) -> str:
        built.append(fact.id)
        return real(fact)

    monkeypatch.setattr(retrieval, "_fact_text", counting)
    facts = [Fact(id=f"f-{i}", content=f"topic{i} shared words") for i in range(50)]
    retriever = BM25FactRetriever()
    retriever.retrieve("shared topic3", facts, 5)
    assert len(built) == 50
    built.clear()
    # one fact replaced in the middle, one appended: only those two are looked at
    facts[20] = facts[20].model_copy(update={"content": "topic20 changed words"})
    facts.append(Fact(id="f-new", content="topic3 appended shared"))
    got = retriever.retrieve("shared topic3", facts, 5)
    assert sorted(built) == ["f-20", "f-new"]
    fresh = BM25FactRetriever().retrieve("shared topic3", facts, 5)
    assert [f.id for f in got] == [f.id for f in fresh]
    # a fact dropped from the set leaves the index too
    del facts[3]
    assert "f-3" not in [f.id for f in retriever.retrieve("topic3", facts, 5)]
    assert [f.id for f in retriever.retrieve("topic3 words", facts, 50)] == [
        f.id for f in BM25FactRetriever().retrieve("topic3 words", facts, 50)
    ]


class _IdCounting(Fact):
    """A fact that records which facts had a field read (class-level record)."""

    reads: typing.ClassVar[list[str]] = []

    def __getattribute__(self, name: str) -> typing.Any:
        if name in Fact.model_fields:
            _IdCounting.reads.append(object.__getattribute__(self, "__dict__")["id"])
        return super().__getattribute__(name)


def test_bm25_retrieve_by_id_matches_retrieve_and_reads_only_new_facts() -> None:
    facts = {f"f-{i}": _IdCounting(id=f"f-{i}", content=f"topic{i % 7} shared") for i in range(40)}
    by_id, by_list = BM25FactRetriever(), BM25FactRetriever()
    for query in ["shared topic3", "topic5", "nothing here"]:
        got = by_id.retrieve_by_id(query, facts, 6)
        assert got == by_list.retrieve(query, list(facts.values()), 6)
    # one fact replaced, one added, one removed: only the two new objects are read
    facts["f-4"] = _IdCounting(id="f-4", content="topic3 changed words")
    facts["f-new"] = _IdCounting(id="f-new", content="topic3 appended shared")
    del facts["f-9"]
    _IdCounting.reads.clear()
    got = by_id.retrieve_by_id("shared topic3 words", facts, 8)
    assert sorted(set(_IdCounting.reads)) == ["f-4", "f-new"]
    assert got == BM25FactRetriever().retrieve("shared topic3 words", list(facts.values()), 8)
    _IdCounting.reads.clear()
    by_list.retrieve("shared topic3 words", list(facts.values()), 8)
    assert len(set(_IdCounting.reads)) == len(facts)  # the list form reads every id
    # the two entry points share one index state
    assert by_id.retrieve("topic3", list(facts.values()), 40) == by_id.retrieve_by_id(
        "topic3", facts, 40
    )
    assert by_id.retrieve_by_id("topic3", {}, 5) == []
    with pytest.raises(ConfigurationError):
        by_id.retrieve_by_id("topic3", facts, -1)
