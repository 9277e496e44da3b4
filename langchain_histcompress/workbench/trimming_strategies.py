"""Strategies that only cut the history, without any model call.

``full`` (the baseline), ``no_history`` (the floor), the package's reducers and
langchain-core's ``trim_messages``. See docs/design/workbench.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, trim_messages

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.faces.reducers import MaxTokensReducer, TruncationReducer
from langchain_histcompress.workbench.strategy import Strategy

__all__ = [
    "FullHistory",
    "NoHistory",
    "ReducerStrategy",
    "TrimMessagesStrategy",
]


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
