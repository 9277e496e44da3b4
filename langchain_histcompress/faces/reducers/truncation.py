"""`TruncationReducer`: keep the system preamble and the last N messages."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from langchain_core.messages import BaseMessage

from langchain_histcompress.faces.reducers._units import (
    ConfigEquality,
    check_count,
    flatten,
    newest_units,
    preamble_length,
    provider_valid,
    unchanged,
)

__all__ = ["TruncationReducer"]


class TruncationReducer(ConfigEquality):
    """Keep the system preamble and roughly the last ``target_count`` messages.

    The cut falls on a unit boundary (a tool call and its results stay together), never
    starts on a tool result, and by default starts on a user message so every provider
    accepts the result. The latest user message is always kept, even if that means more
    than ``target_count`` messages. Reduction only fires once the history exceeds
    ``target_count + threshold_count`` messages, so it does not run every turn. A tool
    result whose call is missing from the input (an already broken history) is dropped and
    a call left unanswered before the last step gets a placeholder result, with a logged
    warning (`rounds.repair_history`), since no provider accepts either. Two reducers with the same
    configuration are equal (and hash alike).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> history = [SystemMessage("be brief")]
        >>> for i in range(5):
        ...     history += [HumanMessage(f"q{i}"), AIMessage(f"a{i}")]
        >>> reduced = TruncationReducer(target_count=4).reduce(history)
        >>> [m.content for m in reduced]
        ['be brief', 'q3', 'a3', 'q4', 'a4']
        >>> TruncationReducer(target_count=4, threshold_count=10).reduce(history) is None
        True
        >>> TruncationReducer(target_count=4) == TruncationReducer(target_count=4)
        True

        A tool result whose call is gone is dropped:

        >>> from langchain_core.messages import ToolMessage
        >>> broken = [HumanMessage("q"), ToolMessage("stray", tool_call_id="lost"), AIMessage("a")]
        >>> [m.content for m in TruncationReducer(target_count=4).reduce(broken)]
        ['q', 'a']
    """

    def __init__(
        self, target_count: int, threshold_count: int = 0, *, start_on_human: bool = True
    ) -> None:
        """Configure the reducer.

        Args:
            target_count: How many non-system messages to keep (an integer >= 1).
            threshold_count: Extra messages tolerated before reducing again (an integer >= 0).
            start_on_human: Start the kept part on a user message.

        Raises:
            ConfigurationError: When a count is not an integer (bools and floats included)
                or is out of range.
        """
        self.target_count = check_count("target_count", target_count, minimum=1)
        self.threshold_count = check_count("threshold_count", threshold_count, minimum=0)
        self.start_on_human = bool(start_on_human)

    def _config(self) -> tuple[Hashable, ...]:
        return (self.target_count, self.threshold_count, self.start_on_human)

    def __repr__(self) -> str:
        """Show the configuration."""
        return (
            f"TruncationReducer(target_count={self.target_count}, "
            f"threshold_count={self.threshold_count}, start_on_human={self.start_on_human})"
        )

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the truncated history, or ``None`` when it is short enough and valid."""
        head = preamble_length(messages)
        if len(messages) - head <= self.target_count + self.threshold_count:
            out = provider_valid(list(messages))  # short: checking it all is cheap
            return None if unchanged(out, messages) else out
        start, units = newest_units(
            messages, head, self.target_count, start_on_human=self.start_on_human
        )
        out = provider_valid([*messages[:head], *flatten(units)])
        return None if start == head and unchanged(out, messages) else out

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce` (no I/O, so it simply calls it)."""
        return self.reduce(messages)
