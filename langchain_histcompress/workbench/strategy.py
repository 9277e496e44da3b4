"""The strategy protocol: what every history strategy of the benchmark implements.

A strategy sees the replayed conversation turn by turn: before each assistant turn it gets the
full original history so far (system message first; the list only ever grows) and returns what
the answering model receives. After the replay it builds the context for each recall question
(`Strategy.context_for_question`). Factories receive a `StrategyEnv`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.recall import QuestionContext

__all__ = [
    "Strategy",
    "StrategyEnv",
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
