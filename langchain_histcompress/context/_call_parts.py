"""The parts one `ContextBuilder.assemble` call sends besides the data, and its outputs.

Every candidate output of a call shares the preamble, the pinned message, the latest
question and the current round's units; `Call.compose` arranges them around a data choice
and a verbatim window, and counts the result (from cached part counts with a tiktoken
counter, else with the counter on the whole list).
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.context._data_costs import DataCosts
from langchain_histcompress.context.data import DataFormat, _Data, _data_messages, _layout_data
from langchain_histcompress.context.window import _Window
from langchain_histcompress.core.layout import PromptLayout, arrange
from langchain_histcompress.core.tokens import REPLY_PRIMING_TOKENS, TokenCounter

Composed = tuple[list[BaseMessage], int, list[BaseMessage], list[BaseMessage]]
"""An output, its cost, and its verbatim and current parts (the messages it sends as
they are, in order)."""


class Call:
    """The parts of one `ContextBuilder.assemble` call that every candidate output shares."""

    def __init__(
        self,
        preamble: list[BaseMessage],
        pinned: list[tuple[int, BaseMessage]],
        head: list[BaseMessage],
        fixed: bool,
        base: int,
        count: int,
        older: list[BaseMessage],
        *,
        costs: DataCosts,
        token_counter: TokenCounter,
        data_format: DataFormat,
        layout: PromptLayout,
    ) -> None:
        self.preamble = preamble
        """The system preamble sent (without a package summary when one is given)."""
        self.pinned = pinned
        """The newest pinned system message of the older rounds, with its round's index."""
        self.head = head
        """The latest human message (empty when the history ends without one)."""
        self.fixed = fixed
        """Whether preamble, pinned message and head send anything."""
        self.base = base
        """Their cost together."""
        self.count = count
        """How many rounds are older rounds (the rest is the current round)."""
        self.older = older
        """The messages of the older rounds, in order."""
        self.tail: list[tuple[BaseMessage, ...]] = []
        """The current round's units sent after the question, in order."""
        self.tail_costs: list[int] = []
        """Their costs."""
        self.win: _Window
        """The verbatim window over the older rounds (set once the tail is chosen)."""
        self._costs = costs
        self._token_counter = token_counter
        self._data_format: DataFormat = data_format
        self._layout: PromptLayout = layout

    def compose(self, data: _Data, kept: int) -> Composed:
        """The output, its cost, and its verbatim and current parts (no data message)."""
        stable, volatile = _data_messages(data, self._data_format, self._layout)
        omitted = self.count - kept
        verbatim = [*(m for i, m in self.pinned if i < omitted), *self.win.messages(kept)]
        sent = [*self.head, *(m for unit in self.tail for m in unit)]
        out = arrange(
            self._layout,
            preamble=self.preamble,
            stable=[stable] if stable else [],
            verbatim=verbatim,
            volatile=[volatile] if volatile else [],
            current=sent,
        )
        total = self._parts_total(data, kept) if out else None
        return out, self._token_counter(out) if total is None else total, verbatim, sent

    def _parts_total(self, data: _Data, kept: int) -> int | None:
        """``token_counter(out)`` from the parts' cached counts (tiktoken counters)."""
        costs = self._costs
        if costs.tiktoken is None:
            return None
        stable_data, volatile_data = _layout_data(data, self._layout)
        total = 0
        for part, kind in ((stable_data, SystemMessage), (volatile_data, HumanMessage)):
            if part is None or part.empty():
                continue
            content = costs.content_tokens(part)
            if content is None:
                return None
            total += costs.empty_message_cost(kind) + content
        omitted = self.count - kept
        # pinned messages of kept rounds are counted in ``base`` and in their rounds
        twice = costs.cost([m for i, m in self.pinned if omitted <= i])
        fixed_cost = self.base - REPLY_PRIMING_TOKENS if self.fixed else 0
        total += fixed_cost - twice + self.win.cost(kept) + sum(self.tail_costs)
        return total + REPLY_PRIMING_TOKENS
