"""Token costs of the data message's parts, remembered across the calls of one builder.

`DataCosts` holds the counts `ContextBuilder` (in `context`) charges every fact and retrieved
message by, so each line is rendered and encoded once; with a `TiktokenCounter` and the
``"compact"`` format the whole data message is counted from those lines (see `_line_tokens`).
`LineCosts` holds the retrieved-message lines' counts by message object, bounded, and can count
a batch of new messages ahead of retrieval (`LineCosts.prime`). A `DataCosts` is used under its
builder's assembly lock (one call at a time), so its caches take no lock of their own.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from langchain_core.messages import BaseMessage, SystemMessage

from langchain_histcompress.context.data import (
    _FACTS_END,
    _LEAD,
    _TURNS_END,
    DataFormat,
    _Data,
    _data_messages,
    _fact_block,
    _fact_line,
    _facts_header,
    _render_turn_line,
    _summary_text,
    _turn_line,
    _turn_text,
    _turns_header,
)
from langchain_histcompress.context.window import _Estimate
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.line_tokens import (
    JoinedLine,
    joined_parts,
    newline_tokens,
    starts_clean,
    word_lower_bound,
)
from langchain_histcompress.core.tokens import TiktokenCounter, TokenCounter, message_costs

if TYPE_CHECKING:
    from langchain_histcompress.core.running_summary import RunningSummary

_K = TypeVar("_K")
_T = TypeVar("_T")

TEXT_COSTS_CACHED = 65_536
"""Entries of each text, fact and line-break cache (each is dropped whole when full)."""
LINE_COSTS_CACHED = 262_144
"""Retrieved-message lines whose cost `LineCosts` keeps: two 100k-message histories."""


_Measure = Callable[[str], tuple[int, int]]
"""A line's cost and its cost followed by a line break."""


class LineCosts:
    """Costs of retrieved-message lines, by message object, bounded.

    An entry is keyed by ``id(message)`` and holds the message itself: it is valid only for
    that object (an identity check, so a builder shared by several conversations never
    mixes them up), and the object's id cannot be reused while it is cached. Messages are
    values, as everywhere in the builder: an in-place edit of a counted message is not seen.
    Besides the line's cost, an entry holds its cost followed by a line break once known
    (a retrieved line is never the last of the data message).

    Holds up to ``limit`` lines (the builder uses `LINE_COSTS_CACHED`). When full, the half
    counted first is dropped, so a growing history keeps its newest lines and the memory
    stays bounded however many conversations share the builder.
    """

    def __init__(self, limit: int) -> None:
        """Start empty, holding at most ``limit`` lines."""
        self.limit = limit
        self.entries: dict[int, tuple[BaseMessage, int, int | None]] = {}
        """``id(message)`` -> (message, cost of its line, cost with a line break when known);
        read inline by the hot loops."""

    def get(self, message: BaseMessage) -> int | None:
        """The cost of ``message``'s line when counted, else ``None``."""
        hit = self.entries.get(id(message))
        return hit[1] if hit is not None and hit[0] is message else None

    def put(self, message: BaseMessage, cost: int, with_break: int | None = None) -> None:
        """Remember ``message``'s line costs (dropping the older half when full)."""
        entries = self.entries
        if len(entries) >= self.limit and id(message) not in entries:
            for key in list(itertools.islice(entries, max(1, self.limit // 2))):
                del entries[key]
        entries[id(message)] = (message, cost, with_break)

    def prime(
        self,
        messages: Sequence[BaseMessage],
        render: Callable[[BaseMessage], str],
        measure: _Measure,
        *,
        cold: bool,
    ) -> int:
        """Count the lines of the ``messages`` not counted yet; return how many were counted.

        ``measure`` gives a rendered line's cost and its cost followed by a line break.
        ``cold`` (a history seen for the first time) counts them only when they all fit in
        the room left: a history longer than that is counted as its lines are first needed,
        instead of evicting the lines of the conversations already held.
        """
        entries = self.entries
        missing = []
        for message in messages:
            hit = entries.get(id(message))
            if hit is None or hit[0] is not message:
                missing.append(message)
        if not missing or (cold and len(missing) > self.limit - len(entries)):
            return 0
        # one by one: tiktoken releases the interpreter lock while encoding, but worker
        # threads were slower than this loop on a busy two-core machine
        for message in missing:
            self.put(message, *measure(render(message)))
        return len(missing)


class DataCosts:
    """What the parts of a data message cost, with ``counter``, in ``data_format``.

    Args:
        counter: The builder's token counter.
        data_format: The builder's rendering of facts and retrieved messages.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_histcompress.core.tokens import TiktokenCounter
        >>> counter = TiktokenCounter()
        >>> costs = DataCosts(counter, "compact")
        >>> history = [HumanMessage("Hi there", id="h1"), HumanMessage("Bye", id="h2")]
        >>> costs.prime_turns(history, cold=True)  # lines counted as the messages arrive
        2
        >>> costs.turn_costs.get(history[0]) == counter.count_text("[h1 user] Hi there")
        True
        >>> costs.turn_costs.get(HumanMessage("Hi there", id="h1")) is None  # another object
        True
    """

    def __init__(self, counter: TokenCounter, data_format: DataFormat) -> None:
        """Start with empty caches."""
        self.counter = counter
        self.data_format: DataFormat = data_format
        self.tiktoken = counter if type(counter) is TiktokenCounter else None
        """The counter when it is a `TiktokenCounter`: its counts of a message list are sums
        of per-message counts, text is counted exactly, so the data message can be counted
        from its lines and the prompt from its parts."""
        self.lines_exact = self.tiktoken is not None and data_format == "compact"
        """Whether a data message is counted from its lines (`content_tokens`)."""
        self.fact_costs: dict[str, tuple[Fact, int]] = {}
        """Fact id -> (fact, cost of its line); valid for the same (frozen) object."""
        self.turn_costs = LineCosts(LINE_COSTS_CACHED)
        """Costs of retrieved-message lines."""
        self._text_costs: dict[str, int] = {}
        self._empty_cost: int | None = None
        self._fact_joins: dict[str, tuple[Fact, JoinedLine]] = {}
        self._summary_line: tuple[weakref.ref[RunningSummary], str, int] | None = None
        """The last summary (held weakly: the caller's summary is freed with the caller's
        last reference, not in a later call), its line and the line's cost."""
        self._empty_costs: dict[type[BaseMessage], int] = {}
        self._newline_costs: dict[str, int] = {}

    def cost(self, messages: Sequence[BaseMessage]) -> int:
        """What ``messages`` cost as part of a list (reply priming excluded)."""
        return sum(message_costs(self.counter, messages)) if messages else 0

    def prime_turns(self, messages: Sequence[BaseMessage], *, cold: bool) -> int:
        """Count the compact lines of ``messages`` ahead of retrieval (see `LineCosts.prime`)."""
        return self.turn_costs.prime(messages, _render_turn_line, self._measure, cold=cold)

    def _measure(self, line: str) -> tuple[int, int]:
        """``line``'s tokens, and with a line break after it (tiktoken)."""
        counter = self.tiktoken
        assert counter is not None
        cost = counter.count_text(line)
        last = line[-1]  # a message line is never empty
        if last.isascii() and last.isalnum():  # a letter or a digit: see `newline_tokens`
            return cost, cost + 1
        return cost, newline_tokens(counter, line, cost)

    def data_cost(self, data: _Data) -> int:
        """The cost of ``data``'s data message, 0 when it is empty."""
        if data.empty():
            return 0
        content = self.content_tokens(data)
        if content is not None:
            return self.empty_message_cost(SystemMessage) + content
        message, _ = _data_messages(data, self.data_format, "data_first")
        return self.cost([message]) if message is not None else 0

    def empty_message_cost(self, kind: type[BaseMessage]) -> int:
        """A message's framing and role: what it costs beyond its content (tiktoken)."""
        cost = self._empty_costs.get(kind)
        if cost is None:
            cost = self._empty_costs[kind] = self.cost([kind("")])
        return cost

    def content_tokens(self, data: _Data) -> int | None:
        """Exact tokens of ``data``'s content from its lines' counts (``None``: not provable).

        Only for a `TiktokenCounter` and the ``"compact"`` format; each line's count is
        cached with what it renders, so a turn encodes only lines it has not seen.
        """
        if not self.lines_exact:
            return None
        # (line, T(line), T(line + newline) when known, whether it starts clean)
        lines: list[JoinedLine] = []
        self._text_line(lines, _LEAD)
        summary = data.summary
        if summary is not None:
            text = _summary_text(summary)
            lines.append((text, self._summary_cost(summary, text), None, starts_clean(text)))
        if data.facts:
            self._text_line(lines, _facts_header(len(data.facts), "compact"))
            joins = self._fact_joins
            for fact in data.facts:
                hit = joins.get(fact.id)
                if hit is None or hit[0] is not fact:
                    hit = self._joined(joins, fact.id, fact, _fact_line(fact), self.fact_cost)
                lines.append(hit[1])
            self._text_line(lines, _FACTS_END)
        if data.turns:
            self._text_line(lines, _turns_header(len(data.turns), "compact"))
            entries = self.turn_costs.entries
            for message in data.ordered_turns():
                known = entries.get(id(message))
                if known is not None and known[0] is message and known[2] is not None:
                    cost, with_break = known[1], known[2]
                else:
                    cost = self.turn_cost(message)
                    with_break = self.newline_cost(_turn_line(message), cost)
                    self.turn_costs.put(message, cost, with_break)
                # a compact message line starts with its bracket, so it starts clean; its
                # text is needed only for a count with a line break not known
                lines.append(("", cost, with_break, True))
            self._text_line(lines, _TURNS_END)
        return joined_parts(lines, self.newline_cost)

    def _text_line(self, lines: list[JoinedLine], text: str) -> None:
        """Append a markup line of the data message (its counts are cached by text)."""
        lines.append((text, self.text_cost(text), None, starts_clean(text)))

    def _joined(
        self,
        joins: dict[_K, tuple[_T, JoinedLine]],
        key: _K,
        item: _T,
        line: str,
        cost_of: Callable[[_T], int],
    ) -> tuple[_T, JoinedLine]:
        """Count ``item``'s line and its line break once (a fact or turn line is never last)."""
        cost = cost_of(item)
        entry = (item, (line, cost, self.newline_cost(line, cost), starts_clean(line)))
        if len(joins) >= TEXT_COSTS_CACHED:
            joins.clear()
        joins[key] = entry
        return entry

    def newline_cost(self, line: str, cost: int) -> int:
        """``line``'s cost followed by a line break, given its own (tiktoken; cached)."""
        known = self._newline_costs.get(line)
        if known is None:
            assert self.tiktoken is not None
            known = newline_tokens(self.tiktoken, line, cost, self.text_cost)
            if len(self._newline_costs) >= TEXT_COSTS_CACHED:
                self._newline_costs.clear()
            self._newline_costs[line] = known
        return known

    def _summary_cost(self, summary: RunningSummary, line: str) -> int:
        memo = self._summary_line
        if memo is not None and memo[0]() is summary and memo[1] == line:
            return memo[2]
        cost = self.text_cost(line)
        self._summary_line = (weakref.ref(summary), line, cost)
        return cost

    def text_cost(self, text: str) -> int:
        """Tokens ``text`` adds inside a message (cached; exact for tiktoken counters)."""
        cached = self._text_costs.get(text)
        if cached is not None:
            return cached
        count_text = getattr(self.counter, "count_text", None)
        if callable(count_text):
            cost = int(count_text(text))
        else:
            if self._empty_cost is None:
                self._empty_cost = self.cost([SystemMessage("")])
            cost = max(0, self.cost([SystemMessage(text)]) - self._empty_cost)
        if len(self._text_costs) >= TEXT_COSTS_CACHED:
            self._text_costs.clear()
        self._text_costs[text] = cost
        return cost

    def fact_cost(self, fact: Fact) -> int:
        """The cost of ``fact``'s line (keyed by id, valid for the same frozen object)."""
        hit = self.fact_costs.get(fact.id)
        if hit is not None and hit[0] is fact:
            return hit[1]
        line = _fact_line(fact) if self.data_format == "compact" else _fact_block(fact)
        cost = self.text_cost(line)
        if len(self.fact_costs) >= TEXT_COSTS_CACHED:
            self.fact_costs.clear()
        self.fact_costs[fact.id] = (fact, cost)
        return cost

    def turn_cost(self, message: BaseMessage) -> int:
        """The cost of ``message``'s line (rendered and counted once per message object)."""
        cost = self.turn_costs.get(message)
        if cost is not None:
            return cost
        text = _turn_text(message, self.data_format)
        cost = self.tiktoken.count_text(text) if self.tiktoken else self.text_cost(text)
        self.turn_costs.put(message, cost)
        return cost

    def fitting_turn_cost(
        self, message: BaseMessage, estimate: _Estimate, ceiling: int
    ) -> int | None:
        """The cost of ``message``'s line when it fits under ``ceiling``, else ``None``.

        A line not counted yet is not rendered nor encoded when a lower bound of its cost
        already exceeds the room: a compact line ``[id role] text`` has at least one token
        for its bracket and one per word of a string content (see `word_lower_bound`).
        """
        cost = self.turn_costs.get(message)
        if cost is None:
            content = message.content
            if self.lines_exact:
                room = ceiling - estimate.with_turn(0)
                if room < 1:
                    return None
                # words are at most every other character: split only when that could reject
                if (
                    isinstance(content, str)
                    and 1 + (len(content) + 1) // 2 > room
                    and 1 + word_lower_bound(content) > room
                ):
                    return None
            cost = self.turn_cost(message)
        return cost if estimate.with_turn(cost) <= ceiling else None

    def estimate(self, data: _Data) -> _Estimate:
        """A running estimate of ``data``'s data message, ready for more items."""
        if data.summary is not None:
            fixed = self.data_cost(_Data(summary=data.summary))
        else:
            fixed = self.lead_cost()
        fmt = self.data_format
        # sections are charged as if empty with a three-digit count
        fact_section = self.text_cost(f"{_facts_header(999, fmt)}\n\n{_FACTS_END}")
        turn_section = self.text_cost(f"{_turns_header(999, fmt)}\n\n{_TURNS_END}")
        estimate = _Estimate(
            fixed, fact_section + 1, turn_section + 1, summary=data.summary is not None
        )
        for fact in data.facts:
            estimate.add_fact(self.fact_cost(fact))
        for _, message in data.turns:
            estimate.add_turn(self.turn_cost(message))
        return estimate

    def lead_cost(self) -> int:
        """Cost of a data message holding only the lead line."""
        if self.tiktoken is not None:
            return self.empty_message_cost(SystemMessage) + self.text_cost(_LEAD)
        return self.cost([SystemMessage(_LEAD)])
