"""Strategies built on extracted facts and retrieval: `FactsStrategy`, `CachedFactsStrategy`.

Facts come from ``FactExtractionNode``; contexts are assembled by ``ContextBuilder`` (or the
cache-stable ``CacheStableContext``) with data ranked for the question. See
docs/design/workbench.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import LLMResult

from langchain_histcompress.core.rounds import split_rounds
from langchain_histcompress.workbench.recall import QuestionContext
from langchain_histcompress.workbench.strategy import Strategy, StrategyEnv
from langchain_histcompress.workbench.summary_strategies import CompressorStrategy

__all__ = [
    "CACHED_PREFIX_FACT_TOKENS",
    "CACHED_PRICING",
    "CACHED_TAIL_TOKENS",
    "DATA_BUDGET_RATIO",
    "EXTRACTION_PROMPT_FACTS",
    "CachedFactsStrategy",
    "FactsStrategy",
]


DATA_BUDGET_RATIO = 0.9
"""Share of a facts / hybrid context (after system prompt and question) given to retrieved
data; the rest keeps the newest rounds verbatim (about two LoCoMo rounds at 1,500 tokens)."""

EXTRACTION_PROMPT_FACTS = 20
"""Current facts shown to the extractor (the most relevant to the new rounds), so it can
update or skip known facts; the rest of the fact set stays out of the prompt."""

_AS_MANY_AS_FIT = 100_000


class FactsStrategy(Strategy):
    """Fact memory + context assembly: ``FactExtractionNode`` and ``ContextBuilder``.

    Every turn the node extracts facts from completed rounds it has not seen (one call per
    two rounds) and the builder assembles, within ``context_tokens``: system + data + the
    newest rounds. The data is ranked for the latest question by an ``EvidenceRetriever``
    (facts, plus older raw turns in hybrid mode, ranked together) and filled in that order
    until `DATA_BUDGET_RATIO` of the budget is spent; the running summary comes first in
    hybrid mode.
    """

    def __init__(
        self,
        env: StrategyEnv,
        *,
        summaries: CompressorStrategy | None = None,
        raw_turns: bool = False,
        fact_retriever: Any = None,
        evidence_retriever: Any = None,
        layout: str = "data_first",
        batch_rounds: int | None = 2,
    ) -> None:
        """Build the node and the builder.

        Args:
            env: The strategy environment.
            summaries: Adds a running summary (hybrid).
            raw_turns: Also rank older raw turns (hybrid).
            fact_retriever: Rank facts with this ``FactRetriever`` instead of an
                ``EvidenceRetriever`` (facts only; ``raw_turns`` then uses BM25 turns).
            evidence_retriever: The ``EvidenceRetriever`` ranking facts and turns (default:
                BM25 with the environment's speaker names).
            layout: ``ContextBuilder`` layout (``layout.PromptLayout``).
            batch_rounds: Completed rounds per extraction call (``None``: all pending).
        """
        memory = importlib.import_module("langchain_histcompress.faces.memory")
        context = importlib.import_module("langchain_histcompress.context.builder")
        facts_module = importlib.import_module("langchain_histcompress.core.facts")
        retrieval = importlib.import_module("langchain_histcompress.recall.retrieval")
        self._merge: Callable[[Any, Any], dict[str, Any]] = facts_module.merge_facts
        self.node = memory.FactExtractionNode(
            env.model,
            batch_rounds=batch_rounds,
            use_runtime_store=False,
            max_prompt_facts=EXTRACTION_PROMPT_FACTS,
        )
        self.builder = context.ContextBuilder(
            max_context_tokens=env.context_tokens,
            token_counter=env.counter,
            top_k_facts=_AS_MANY_AS_FIT,
            raw_turn_retrieval=_AS_MANY_AS_FIT if raw_turns else 0,
            data_budget_ratio=DATA_BUDGET_RATIO,
            layout=layout,
            fact_retriever=fact_retriever,
            evidence_retriever=None
            if fact_retriever is not None
            else evidence_retriever or retrieval.EvidenceRetriever(speaker_names=env.speaker_names),
        )
        self.summaries = summaries
        self._facts: dict[str, Any] = {}
        self._cursor: str | None = None

    def reset(self) -> None:
        """Forget facts, cursor and summary."""
        self._facts = {}
        self._cursor = None
        if self.summaries is not None:
            self.summaries.reset()

    def _extract(self, history: Sequence[BaseMessage]) -> None:
        state = {
            self.node.messages_key: history,
            self.node.state_key: self._facts,
            self.node.cursor_key: self._cursor,
        }
        update = self.node.invoke(state)
        if self.node.state_key in update:
            self._facts = self._merge(self._facts, update[self.node.state_key])
        self._cursor = update.get(self.node.cursor_key, self._cursor)

    def _summary(self) -> Any:
        return self.summaries.summary if self.summaries is not None else None

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Extract new facts, update the summary (hybrid), assemble the context."""
        self._extract(history)
        if self.summaries is not None:
            self.summaries.model_input(history)
        return list(self.builder.build(history, summary=self._summary(), facts=self._facts))

    def warm_start(self, history: Sequence[BaseMessage]) -> None:
        """Extract from the newest 40 rounds only, then continue from there.

        Catching up on a long backlog would take one extraction call per two rounds.
        """
        rounds = split_rounds(history).rounds
        window = [m for r in rounds[-40:] for m in r.messages]
        self._extract(window)
        if self.summaries is not None:
            self.summaries.warm_start(history)
        self.model_input(history)

    def context_for_question(
        self, history: Sequence[BaseMessage], question: HumanMessage
    ) -> QuestionContext:
        """Assemble the context for ``question``, reporting the facts and turns shown."""
        built = self.builder.assemble(
            [*history, question], summary=self._summary(), facts=self._facts
        )
        return QuestionContext(
            tuple(built.messages),
            fact_source_ids=frozenset(built.fact_source_ids),
            retrieved_ids=frozenset(built.retrieved_ids),
        )


CACHED_PRICING = "openai-90"
"""Pricing model `CachedFactsStrategy` plans for when its environment names none."""
CACHED_PREFIX_FACT_TOKENS = 8192
"""Facts kept in `CachedFactsStrategy`'s cached prefix: read at a tenth of the input price on
every request of a session, written once per fold."""
CACHED_TAIL_TOKENS = 300
"""Budget of `CachedFactsStrategy`'s question-dependent tail, data and question (paid in full
on every request, where the cached prefix is paid a tenth)."""


class _OutputTokens(BaseCallbackHandler):
    """Counts the output tokens a model reports (``usage_metadata``) over its calls."""

    def __init__(self) -> None:
        self.tokens = 0

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                usage = getattr(message, "usage_metadata", None)
                if usage:
                    self.tokens += int(usage.get("output_tokens", 0))


class CachedFactsStrategy(FactsStrategy):
    """Facts + retrieved turns in a cache-stable prompt (``cached_context.CacheStableContext``).

    The prompt is the preamble, the verbatim rounds since the last fold (they only grow),
    then the facts and older turns ranked for the question, then the question. A fold, and
    the extraction of the fact backlog with it, happens when it pays under the pricing model
    (``CacheStableContext(by_cost=True)``), priced at the output the extractions of this
    conversation really wrote per token read (`CacheStableContext.record_extraction`).
    """

    def __init__(
        self,
        env: StrategyEnv,
        *,
        tail_tokens: int = CACHED_TAIL_TOKENS,
        prefix_fact_tokens: int = CACHED_PREFIX_FACT_TOKENS,
        by_cost: bool = True,
    ) -> None:
        """Build the node (one call per backlog), the builder and the cache-stable context.

        Args:
            env: The strategy environment (its ``context_tokens`` is not used: the prompt is
                sized by the three budgets below).
            tail_tokens: Budget of the question-dependent part: facts and old turns ranked
                for the question, and the question.
            prefix_fact_tokens: Facts kept in the cached prefix, newest first.
            by_cost: Fold when it pays under the pricing model (else at every cold cache).
        """
        self._written = _OutputTokens()
        callbacks = env.model.callbacks if isinstance(env.model.callbacks, list) else []
        model = env.model.model_copy(update={"callbacks": [*callbacks, self._written]})
        env = StrategyEnv(**{**env.__dict__, "context_tokens": tail_tokens, "model": model})
        super().__init__(env, raw_turns=True, layout="cache_stable", batch_rounds=None)
        self._counter = env.counter
        # the verbatim rounds come from the stable prefix: the tail budget is all data
        self.builder.data_budget_ratio = 1.0
        module = importlib.import_module("langchain_histcompress.context.cache_stable")
        self.context = module.CacheStableContext(
            self.builder,
            pricing=env.pricing or CACHED_PRICING,
            prefix_fact_tokens=prefix_fact_tokens,
            by_cost=by_cost,
        )

    def reset(self) -> None:
        """Forget facts, cursor and anchor."""
        super().reset()
        self.context.reset()

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Extract the backlog when a fold is due, then assemble the context."""
        if self.context.fold_due(history):
            self._extract_backlog(history)
        return list(self.context.assemble(history, facts=self._facts).messages)

    def _extract_backlog(self, history: Sequence[BaseMessage]) -> None:
        """Extract the rounds after the cursor in as few calls as the extractor allows.

        The extractor applies at most ``max_ops`` operations per call and rejects the rest;
        a message yields about one fact, so each call gets whole rounds of at most
        ``max_ops`` messages (a longer round alone).
        """
        limit = self.node.extractor.max_ops
        begin = next(
            (i + 1 for i in range(len(history) - 1, -1, -1) if history[i].id == self._cursor),
            0,
        )
        cuts: list[int] = []
        first = begin
        for index in range(begin, len(history)):
            if isinstance(history[index], HumanMessage) and index - first > limit:
                cuts.append(index)
                first = index
        end = next(
            (i for i in range(len(history) - 1, begin - 1, -1) if history[i].type == "human"),
            begin,
        )  # the current round is not complete: it waits for the next extraction
        written = self._written.tokens
        for cut in cuts:
            self._extract(history[:cut])
        self._extract(history)
        # what the extraction really wrote per token read sets the next folds' price
        self.context.record_extraction(
            read_tokens=self._counter.count_messages(history[begin:end]),
            written_tokens=self._written.tokens - written,
        )

    def warm_start(self, history: Sequence[BaseMessage]) -> None:
        """Extract from the newest 40 rounds in one call, then fold there and continue.

        A conversation replayed turn by turn has folded at its last cold cache; caught up
        in one call it would keep every round verbatim until the next one, so the warm-up
        folds whatever the cost (the verbatim cap set to its minimum for that call).
        """
        rounds = split_rounds(history).rounds
        self._extract([m for r in rounds[-40:] for m in r.messages])
        cap = self.context.max_verbatim_tokens
        self.context.max_verbatim_tokens = 1
        try:
            self.model_input(history)
        finally:
            self.context.max_verbatim_tokens = cap

    def context_for_question(
        self, history: Sequence[BaseMessage], question: HumanMessage
    ) -> QuestionContext:
        """The context for ``question`` from the current state (no fold, no extraction)."""
        built = self.context.assemble([*history, question], facts=self._facts, advance=False)
        return QuestionContext(
            tuple(built.messages),
            fact_source_ids=frozenset(built.fact_source_ids),
            retrieved_ids=frozenset(built.retrieved_ids),
        )
