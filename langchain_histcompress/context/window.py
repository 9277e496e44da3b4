"""Budget bookkeeping of context assembly: the prepared input and the verbatim window.

`ContextBuilder` (in `context`) grows a `_Prepared` view of its input as the history grows
(rounds, preamble, pinned messages; nothing proportional to the history is copied again),
looks at the older rounds through a `_Window` (round costs counted once per call, as the
window reaches them) and keeps a running `_Estimate` of its data message.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    >>> history = [SystemMessage("s", id="s"), HumanMessage("q", id="h")]
    >>> prepared = _Prepared(history)
    >>> prepared.extend([*history, AIMessage("a", id="a")]), len(prepared.rounds)
    (True, 1)
    >>> is_context_message(SystemMessage("hi"))
    False
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Sequence

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_histcompress.core.identified import identified
from langchain_histcompress.core.prefix import extends
from langchain_histcompress.core.rounds import Round, is_pinned, repair_history, split_rounds

__all__ = ["CONTEXT_KIND", "is_context_message"]

CONTEXT_KIND = "histcompress_context"
"""Value of ``additional_kwargs["histcompress_kind"]`` on the data message `ContextBuilder` adds."""


def is_context_message(message: BaseMessage) -> bool:
    """Whether ``message`` is a data message made by `ContextBuilder`.

    Example:
        >>> from langchain_core.messages import SystemMessage
        >>> is_context_message(SystemMessage("hi"))
        False
    """
    return message.additional_kwargs.get("histcompress_kind") == CONTEXT_KIND


class _Estimate:
    """Running token estimate of the data message, updated per added item.

    The fixed part (lead + summary) is counted exactly; each fact or retrieved message adds
    the cost of its own line, and each non-empty section adds its delimiters (with room for
    a three-digit count). Line breaks are not counted; the builder checks the final message
    list with the real counter and drops the lowest-ranked items if it is over.
    """

    def __init__(self, fixed: int, fact_section: int, turn_section: int, *, summary: bool) -> None:
        self.fixed = fixed
        self.summary = summary
        self.fact_section = fact_section
        self.turn_section = turn_section
        self.facts = 0
        self.turns = 0
        self.fact_count = 0
        self.turn_count = 0
        self.total = fixed if summary else 0
        """The estimate (0 while the message would be empty); kept up to date."""

    def _update(self) -> None:
        if not self.summary and not self.fact_count and not self.turn_count:
            self.total = 0
            return
        total = self.fixed + self.facts + self.turns
        if self.fact_count:
            total += self.fact_section
        if self.turn_count:
            total += self.turn_section
        self.total = total

    def with_fact(self, cost: int) -> int:
        return (self.total or self.fixed) + cost + (0 if self.fact_count else self.fact_section)

    def with_turn(self, cost: int) -> int:
        return (self.total or self.fixed) + cost + (0 if self.turn_count else self.turn_section)

    def add_fact(self, cost: int) -> None:
        self.facts += cost
        self.fact_count += 1
        self._update()

    def add_turn(self, cost: int) -> None:
        self.turns += cost
        self.turn_count += 1
        self._update()


def _same(message: BaseMessage) -> BaseMessage:
    return message


def _unchanged(messages: list[BaseMessage]) -> bool:
    """Whether ``messages`` is provider-valid as it is (`repair_history` returns the same)."""
    fixed = repair_history(messages).messages
    return len(fixed) == len(messages) and all(map(operator.is_, fixed, messages))


class _Prepared:
    """What `ContextBuilder.assemble` derives from its input before choosing anything.

    Kept between calls and grown in place: when the next input starts with the previous
    input (the same objects, one pointer comparison at C speed, see `extends`), only the new
    messages are checked, filtered, given ids and split (with the last round and the last
    tool step they may complete), and every list below is appended to; nothing proportional
    to the history is copied or read again. Messages without an id get the id
    `rounds.ensure_ids` gives them (from their position among the input's conversation
    messages), each once, when it first arrives. Input that needed a repair is prepared
    from scratch on every call.
    """

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        """Prepare ``messages`` from scratch (repaired first when a provider would reject them)."""
        self.raw: list[BaseMessage] = list(messages)
        """The input messages (a copy of the list, same objects)."""
        self.valid = _unchanged(self.raw)
        """Whether the input needed no repair (only then is it grown in place)."""
        self.step = self._last_step(0)
        """Index in ``raw`` of the last message that is not a tool result (its step's start)."""
        repaired = self.raw if self.valid else repair_history(self.raw).messages
        source = [m for m in repaired if not is_context_message(m)]
        split = split_rounds(source)
        self.preamble: tuple[BaseMessage, ...] = split.preamble
        """Leading system messages of the input (context messages left out)."""
        self.rounds: list[Round] = list(split.rounds)
        """Rounds of the input (context messages left out)."""
        self.by_object: dict[int, BaseMessage] | None = None
        """Original message (by ``id()``) -> copy with an id, for the messages without one
        (``None`` while every message has an id)."""
        self._sourced = len(source)
        """Conversation messages prepared so far (the position the next one's id comes from)."""
        self.body: list[BaseMessage] = self._identified(source, 0)[len(split.preamble) :]
        """The messages of ``rounds`` in order, each with an id."""
        last = len(self.rounds[-1].messages) if self.rounds else 0
        self.older: list[BaseMessage] = self.body[: len(self.body) - last]
        """The messages of every round but the last, each with an id."""
        self.pinned: list[tuple[int, BaseMessage]] = []
        """Pinned messages (`is_pinned`) with the index of their round, in order."""
        self._pin(0)
        self._positions: dict[int, int] = {}
        """Message of ``body`` (by ``id()``) -> its index, for the first ``_positioned``."""
        self._positioned = 0
        self._candidates: list[BaseMessage] = []
        """A prefix of ``body`` handed to a turn retriever, grown in place (see `candidates`)."""

    def _identified(self, messages: list[BaseMessage], first: int) -> list[BaseMessage]:
        """``messages``, the ``first``-th conversation message on, each with an id.

        A message without one is replaced by the copy `rounds.ensure_ids` makes of it at its
        position among the input's conversation messages, recorded in `by_object`.
        """
        if all(m.id for m in messages):  # an empty-string id counts as no id
            return messages
        copies = self.by_object = self.by_object if self.by_object is not None else {}
        out: list[BaseMessage] = []
        for index, message in enumerate(messages, first):
            if not message.id:
                copy = copies[id(message)] = identified(message, index)
                out.append(copy)
            else:
                out.append(message)
        return out

    def _last_step(self, start: int) -> int:
        for index in range(len(self.raw) - 1, start - 1, -1):
            if not isinstance(self.raw[index], ToolMessage):
                return index
        return self.step if start else 0

    def _pin(self, start: int) -> None:
        self.pinned += [
            (i, m)
            for i in range(start, len(self.rounds))
            for m in self.rounds[i].messages
            if is_pinned(m)
        ]

    def ided(self, message: BaseMessage) -> BaseMessage:
        """``message`` with an id (itself when it has one)."""
        if self.by_object is None:
            return message
        return self.by_object.get(id(message), message)

    def position(self, message: BaseMessage) -> int | None:
        """Index of ``message`` (an object of ``body``) in ``body``; ``None`` if it is not one.

        The index is kept between calls and extended with the messages added since.
        """
        body, positions = self.body, self._positions
        for index in range(self._positioned, len(body)):
            positions[id(body[index])] = index
        self._positioned = len(body)
        found = positions.get(id(message))
        return found if found is not None and body[found] is message else None

    def candidates(self, stop: int) -> tuple[list[BaseMessage], int]:
        """``body[:stop]`` as one list kept between calls, and its length past ``stop``.

        The list only grows (in place), so a retriever that indexes the messages it is given
        sees one growing conversation; when ``stop`` moves back (the verbatim window took
        more rounds), the messages past it stay in the list and the caller skips them.
        """
        kept = self._candidates
        if len(kept) < stop:
            kept += self.body[len(kept) : stop]
        return kept, len(kept) - stop

    def extend(self, messages: Sequence[BaseMessage]) -> bool:
        """Grow to ``messages`` in place when they extend the input; ``False`` otherwise."""
        known = len(self.raw)
        if not self.valid or not self.rounds or not extends(messages, self.raw):
            return False
        tail = list(messages[known:])
        new = [m for m in tail if not is_context_message(m)]
        if not _unchanged(self.raw[self.step :] + tail):
            return False
        self.raw += tail
        self.step = self._last_step(known)
        if not new:
            return True
        self.body += self._identified(new, self._sourced)
        self._sourced += len(new)
        start = len(self.rounds) - 1
        grown = split_rounds([*self.rounds[start].messages, *new]).rounds
        del self.rounds[start:]
        self.rounds += grown
        for finished in grown[:-1]:
            self.older += map(self.ided, finished.messages)
        while self.pinned and self.pinned[-1][0] >= start:
            self.pinned.pop()
        self._pin(start)
        return True


class _RoundCosts:
    """Round costs kept between calls: a `Round` is frozen, so the same object costs the same.

    Messages are values here as everywhere in the builder (an in-place edit of a message
    already counted is not seen; copy it instead, as ``add_messages`` does). Bounded: the
    whole cache is dropped when it reaches ``limit`` rounds.
    """

    def __init__(self, cost: Callable[[Sequence[BaseMessage]], int], limit: int) -> None:
        self._cost = cost
        self._limit = limit
        self._costs: dict[int, tuple[Round, int]] = {}

    def __call__(self, round_: Round) -> int:
        """The cost of ``round_``'s messages."""
        hit = self._costs.get(id(round_))
        if hit is not None and hit[0] is round_:
            return hit[1]
        cost = self._cost(round_.messages)
        if len(self._costs) >= self._limit:
            self._costs.clear()
        self._costs[id(round_)] = (round_, cost)
        return cost


class _Window:
    """The older rounds of one `ContextBuilder.assemble` call, as a verbatim window.

    The older rounds are the first ``count`` of ``rounds``; the window is the newest ``kept``
    of them (whole rounds, contiguous). Round costs come from ``cost`` (a `_RoundCosts`, so
    rounds already counted in an earlier call are not counted again), as the window first
    reaches them. Nothing here reads more than the rounds the window looks at.
    """

    def __init__(
        self,
        cost: Callable[[Round], int],
        rounds: Sequence[Round],
        count: int,
        body: list[BaseMessage],
        current_ids: set[str],
    ) -> None:
        self._cost = cost
        self.rounds = rounds
        self.count = count
        """How many of ``rounds`` are older rounds (the rest is the current round)."""
        self.body = body
        """The messages of the older rounds in order, each with an id."""
        self.current_ids = current_ids
        """Ids of the current round's messages that are sent."""
        self._sums = [0]
        """``_sums[k]``: tokens of the newest ``k`` rounds, as far as the window has looked
        (nondecreasing: a cost is never negative)."""

    def _reach(self, budget: int) -> None:
        """Extend `_sums` until it passes ``budget`` or covers every older round."""
        sums, rounds, cost = self._sums, self.rounds, self._cost
        total = sums[-1]
        for index in range(self.count - len(sums), -1, -1):
            if total > budget:
                break
            total += max(0, cost(rounds[index]))
            sums.append(total)

    def fit(self, budget: int) -> int:
        """How many of the newest rounds fit in ``budget`` tokens."""
        sums = self._sums
        if sums[-1] <= budget and len(sums) <= self.count:
            self._reach(budget)
        return max(0, bisect.bisect_right(sums, budget) - 1)

    def cost(self, kept: int) -> int:
        """Tokens of the newest ``kept`` rounds (each counted once per call)."""
        sums = self._sums
        while len(sums) <= kept:
            sums.append(sums[-1] + max(0, self._cost(self.rounds[self.count - len(sums)])))
        return sums[kept]

    def _newest(self, kept: int) -> range:
        return range(self.count - kept, self.count)

    def start(self, kept: int) -> int:
        """Index in `body` of the first message of the newest ``kept`` rounds."""
        return len(self.body) - sum(len(self.rounds[i].messages) for i in self._newest(kept))

    def messages(self, kept: int) -> list[BaseMessage]:
        """The original messages of the newest ``kept`` rounds."""
        return [m for i in self._newest(kept) for m in self.rounds[i].messages]

    def shown(self, kept: int) -> set[str]:
        """Ids shown verbatim with the newest ``kept`` rounds (current round included)."""
        return {str(m.id) for m in self.body[self.start(kept) :]} | self.current_ids
