"""History reducers applied in front of any chat model (Semantic Kernel's chat-history reducers).

A reducer takes the full message list and returns a shorter, provider-valid list, or
``None`` when nothing needs doing. Every reducer keeps the system preamble byte-identical,
keeps the latest user message, and never separates a tool call from its results.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableLambda

from langchain_histcompress.errors import BudgetError, ConfigurationError
from langchain_histcompress.rounds import ensure_ids, is_summary_message, split_rounds, split_units
from langchain_histcompress.summary import RunningSummary, Summarizer
from langchain_histcompress.tokens import TokenCounter, message_costs, resolve_counter

__all__ = [
    "HistoryReducer",
    "MaxTokensReducer",
    "SummarizationReducer",
    "TruncationReducer",
    "with_history_reducer",
]

_REPLY_PRIMING = 3  # tokens OpenAI adds once per request for the assistant's reply


@runtime_checkable
class HistoryReducer(Protocol):
    """What every reducer offers: ``reduce`` and ``areduce``."""

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the reduced history, or ``None`` when it needs no reduction."""

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce`."""


Unit = tuple[BaseMessage, ...]


def _body_units(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[Unit]]:
    split = split_rounds(messages)
    return list(split.preamble), split_units(split.body)


def _preamble_length(messages: Sequence[BaseMessage]) -> int:
    count = 0
    while count < len(messages) and isinstance(messages[count], SystemMessage):
        count += 1
    return count


def _without_leading_orphans(
    messages: Sequence[BaseMessage], preamble: int
) -> list[BaseMessage] | None:
    """Drop tool results that open the conversation (they answer nothing); None if none."""
    first = preamble
    while first < len(messages) and isinstance(messages[first], ToolMessage):
        first += 1
    return None if first == preamble else [*messages[:preamble], *messages[first:]]


def _window_start(messages: Sequence[BaseMessage], preamble: int, anchor: int) -> int:
    """Start of the round holding ``anchor`` (or of the body): reductions only look from here.

    Starting on a round boundary keeps every tool group whole, and everything a reducer may
    keep lies after ``anchor``, so per-turn work is O(kept) rather than O(history).
    """
    index = max(anchor, preamble)
    while index > preamble and not isinstance(messages[index], HumanMessage):
        index -= 1
    return index


def _last_human(messages: Sequence[BaseMessage], preamble: int) -> int | None:
    for index in range(len(messages) - 1, preamble - 1, -1):
        if isinstance(messages[index], HumanMessage):
            return index
    return None


def _latest_human_unit(units: Sequence[Unit]) -> int | None:
    for index in range(len(units) - 1, -1, -1):
        if isinstance(units[index][0], HumanMessage):
            return index
    return None


def _leading_orphans(units: Sequence[Unit]) -> int:
    """How many units at the start are tool results that answer nothing kept."""
    count = 0
    while count < len(units) and units[count][0].type == "tool":
        count += 1
    return count


def _clean_start(units: Sequence[Unit], start: int, *, start_on_human: bool) -> int:
    """Move ``start`` forward past orphan tool results (and to a human message if asked)."""
    latest_human = _latest_human_unit(units)
    index = start
    want_human = start_on_human and latest_human is not None
    while index < len(units):
        head = units[index][0]
        if head.type != "tool" and not (want_human and not isinstance(head, HumanMessage)):
            break
        index += 1
    if latest_human is not None:
        index = min(index, latest_human)
    return index


class TruncationReducer:
    """Keep the system preamble and roughly the last ``target_count`` messages.

    The cut falls on a unit boundary (a tool call and its results stay together), never
    starts on a tool result, and by default starts on a user message so every provider
    accepts the result. The latest user message is always kept, even if that means more
    than ``target_count`` messages. Reduction only fires once the history exceeds
    ``target_count + threshold_count`` messages, so it does not run every turn.

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
    """

    def __init__(
        self, target_count: int, threshold_count: int = 0, *, start_on_human: bool = True
    ) -> None:
        """Configure the reducer.

        Args:
            target_count: How many non-system messages to keep (at least 1).
            threshold_count: Extra messages tolerated before reducing again.
            start_on_human: Start the kept part on a user message.

        Raises:
            ConfigurationError: When a count is out of range.
        """
        if target_count < 1:
            msg = f"target_count must be >= 1, got {target_count}"
            raise ConfigurationError(msg)
        if threshold_count < 0:
            msg = f"threshold_count must be >= 0, got {threshold_count}"
            raise ConfigurationError(msg)
        self.target_count = target_count
        self.threshold_count = threshold_count
        self.start_on_human = start_on_human

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the truncated history, or ``None`` when it is short enough."""
        head = _preamble_length(messages)
        if len(messages) - head <= self.target_count + self.threshold_count:
            return _without_leading_orphans(messages, head)
        anchor = len(messages) - self.target_count
        last_human = _last_human(messages, head)
        if last_human is not None:
            anchor = min(anchor, last_human)
        window = _window_start(messages, head, anchor)
        units = split_units(messages[window:])
        start, kept = len(units), 0
        while start > 0 and kept + len(units[start - 1]) <= self.target_count:
            start -= 1
            kept += len(units[start])
        start = _clean_start(units, start, start_on_human=self.start_on_human)
        if window == head and start == 0:
            return None
        return [*messages[:head], *(m for u in units[start:] for m in u)]

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce` (no I/O, so it simply calls it)."""
        return self.reduce(messages)


class MaxTokensReducer:
    """Keep the system preamble and the newest whole rounds that fit in ``max_tokens``.

    If the latest round alone does not fit, its user message is kept with the newest whole
    tool groups / messages of that round that fit. Per-message counts come from the token
    counter's cache, so reducing a growing history costs O(new messages).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> history = [SystemMessage("be brief")]
        >>> for i in range(20):
        ...     history += [HumanMessage(f"question {i}"), AIMessage(f"answer {i}")]
        >>> reducer = MaxTokensReducer(max_tokens=60)
        >>> reduced = reducer.reduce(history)
        >>> reduced[0].content, reduced[-1].content, reducer.counter(reduced) <= 60
        ('be brief', 'answer 19', True)
    """

    def __init__(
        self,
        max_tokens: int,
        *,
        token_counter: TokenCounter | str | None = None,
        threshold_tokens: int = 0,
        start_on_human: bool = True,
    ) -> None:
        """Configure the reducer.

        Args:
            max_tokens: Budget for the whole reduced list, reply priming included.
            token_counter: Any ``(messages) -> int`` callable, a model name for an exact
                tiktoken counter, or ``None`` for the default ``TiktokenCounter``.
            threshold_tokens: Extra tokens tolerated before reducing.
            start_on_human: Drop leading assistant messages of the kept part.

        Raises:
            ConfigurationError: When a budget is out of range or the counter is invalid.
        """
        if max_tokens < 1:
            msg = f"max_tokens must be >= 1, got {max_tokens}"
            raise ConfigurationError(msg)
        if threshold_tokens < 0:
            msg = f"threshold_tokens must be >= 0, got {threshold_tokens}"
            raise ConfigurationError(msg)
        self.max_tokens = max_tokens
        self.threshold_tokens = threshold_tokens
        self.start_on_human = start_on_human
        self.counter = resolve_counter(token_counter)

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the reduced history, or ``None`` when it already fits.

        Raises:
            BudgetError: When the preamble and the latest user message alone exceed
                ``max_tokens``.
        """
        head = _preamble_length(messages)
        used = sum(message_costs(self.counter, messages[:head])) + _REPLY_PRIMING
        limit = self.max_tokens + self.threshold_tokens
        index = len(messages)
        while index > head and used <= limit:  # walk back only as far as the budget reaches
            index -= 1
            used += self._cost(messages[index])
        if used <= limit:
            return _without_leading_orphans(messages, head)
        last_human = _last_human(messages, head)
        anchor = index if last_human is None else min(index, last_human)
        window = [*messages[:head], *messages[_window_start(messages, head, anchor) :]]
        return self._reduce_window(window)

    def _cost(self, message: BaseMessage) -> int:
        count_one = getattr(self.counter, "count_message", None)
        return int(count_one(message)) if callable(count_one) else self.counter([message])

    def _reduce_window(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Reduce a window that starts on a round boundary and is known to be over budget."""
        costs = message_costs(self.counter, messages)
        preamble, units = _body_units(messages)
        cost_of = dict(zip(map(id, messages), costs, strict=True))

        def unit_cost(unit: Unit) -> int:
            return sum(cost_of[id(m)] for m in unit)

        used = sum(cost_of[id(m)] for m in preamble) + _REPLY_PRIMING
        latest_human = _latest_human_unit(units)
        if latest_human is None:
            kept = self._fit_suffix(units, 0, used)
            return preamble + [m for u in kept for m in u]
        used += unit_cost(units[latest_human])
        if used > self.max_tokens:
            msg = (
                f"the system preamble and the latest user message need {used} tokens, "
                f"more than max_tokens={self.max_tokens}"
            )
            raise BudgetError(msg)
        tail = units[latest_human + 1 :]
        tail_cost = sum(unit_cost(u) for u in tail)
        if used + tail_cost > self.max_tokens:
            kept_tail = self._fit_suffix(tail, 0, used)
            return preamble + list(units[latest_human]) + [m for u in kept_tail for m in u]
        used += tail_cost
        start = latest_human
        rounds = split_rounds([m for u in units[:latest_human] for m in u]).rounds
        for round_ in reversed(rounds):
            cost = sum(cost_of[id(m)] for m in round_.messages)
            if used + cost > self.max_tokens:
                break
            used += cost
            start -= len(split_units(round_.messages))
        start = _clean_start(units, start, start_on_human=self.start_on_human)
        return preamble + [m for u in units[start:] for m in u]

    def _fit_suffix(self, units: Sequence[Unit], floor: int, used: int) -> list[Unit]:
        """The newest contiguous units that fit the remaining budget, oldest first."""
        kept: list[Unit] = []
        for unit in reversed(units[floor:]):
            cost = sum(message_costs(self.counter, unit))
            if used + cost > self.max_tokens:
                break
            used += cost
            kept.append(unit)
        kept.reverse()
        return kept[_leading_orphans(kept) :]

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce` (no I/O, so it simply calls it)."""
        return self.reduce(messages)


def _as_messages(value: LanguageModelInput) -> list[BaseMessage]:
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, str):
        return [HumanMessage(value)]
    return convert_to_messages(value)


def with_history_reducer(
    model: Runnable[LanguageModelInput, Any], reducer: HistoryReducer
) -> Runnable[LanguageModelInput, Any]:
    """Wrap ``model`` so every call first reduces its message history with ``reducer``.

    The result is a Runnable with ``invoke``, ``ainvoke``, ``stream``, ``astream`` and
    ``batch``; the model's own output (content, tool calls, usage metadata) passes through
    untouched. Bind tools before wrapping: ``with_history_reducer(model.bind_tools(t), r)``.

    Args:
        model: A chat model or any Runnable that takes messages.
        reducer: The reducer to apply before each call.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> model = FakeMessagesListChatModel(responses=[AIMessage("ok")])
        >>> chat = with_history_reducer(model, TruncationReducer(target_count=2))
        >>> chat.invoke([HumanMessage("a"), AIMessage("b"), HumanMessage("c")]).content
        'ok'
    """
    if not isinstance(reducer, HistoryReducer):
        msg = f"reducer must offer reduce() and areduce(), got {type(reducer).__name__}"
        raise ConfigurationError(msg)

    def reduce(value: LanguageModelInput) -> list[BaseMessage]:
        messages = _as_messages(value)
        return reducer.reduce(messages) or messages

    async def areduce(value: LanguageModelInput) -> list[BaseMessage]:
        messages = _as_messages(value)
        return await reducer.areduce(messages) or messages

    step = RunnableLambda(reduce, afunc=areduce, name="histcompress_reduce_history")
    return step | model


class SummarizationReducer:
    """Summarize the older part of the history with one model call; keep the newest verbatim.

    The kept part is chosen like `TruncationReducer` (whole units, starting on a user message,
    latest user message always kept); everything older is folded into a `RunningSummary`
    that is placed right after the system preamble as a tagged ``SystemMessage``
    (``additional_kwargs["lc_source"]`` marks it, so a UI can hide it). The summary is
    extended, never re-summarized: a summary message already in the input (from an earlier
    reduction) is passed to the summarizer once, as its previous summary, together with only
    the messages it does not cover yet; and the reducer remembers its last summary per
    conversation, so calling it with the full, unreduced history every turn only summarizes
    what is new. A summarizer failure raises `SummarizationError` and leaves the input as is.

    Args:
        model: The summarizer chat model (may be cheaper than the answering one).
        target_count: Non-system messages kept verbatim (at least 1).
        threshold_count: Extra messages tolerated before reducing again.
        start_on_human: Start the kept part on a user message.
        **summarizer_options: Passed to `Summarizer` (``profile``, ``max_summary_tokens``,
            ``max_retries``, ``timeout``, ``token_counter``...).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> summarizer = GenericFakeChatModel(
        ...     messages=iter([AIMessage('{"ConversationSummary": "Asked q0-q2."}')]))
        >>> history = [SystemMessage("be brief")]
        >>> for i in range(5):
        ...     history += [HumanMessage(f"q{i}", id=f"h{i}"), AIMessage(f"a{i}", id=f"a{i}")]
        >>> reduced = SummarizationReducer(summarizer, target_count=4).reduce(history)
        >>> [m.content for m in reduced[2:]], reduced[1].additional_kwargs["lc_source"]
        (['q3', 'a3', 'q4', 'a4'], 'langchain_histcompress.summary')
    """

    _MEMORY = 64  # conversations whose last summary is remembered

    def __init__(
        self,
        model: BaseChatModel,
        target_count: int,
        threshold_count: int = 0,
        *,
        start_on_human: bool = True,
        **summarizer_options: Any,
    ) -> None:
        """Configure the reducer; see the class docstring."""
        self._keep = TruncationReducer(target_count, threshold_count, start_on_human=start_on_human)
        self.summarizer = Summarizer(model, **summarizer_options)
        self._last: OrderedDict[str, RunningSummary] = OrderedDict()
        self._lock = threading.Lock()

    def _plan(self, messages: Sequence[BaseMessage]) -> _SummaryPlan | None:
        with_ids = ensure_ids(messages)  # ids for coverage; the caller's objects are returned
        original = {id(copy): message for copy, message in zip(with_ids, messages, strict=True)}
        messages = with_ids
        originals = [m for m in messages if not is_summary_message(m)]
        kept = self._keep.reduce(originals)
        if kept is None:
            return None
        preamble = list(split_rounds(originals).preamble)
        kept_ids = {m.id for m in kept}
        older = [m for m in originals[len(preamble) :] if m.id not in kept_ids]
        previous = _summary_in(messages)
        key = str(older[0].id) if older else ""
        if previous is None:
            with self._lock:
                remembered = self._last.get(key)
            if remembered is not None and remembered.covered_ids <= {m.id for m in older}:
                previous = remembered
        if previous is not None:
            older = [m for m in older if m.id not in previous.covered_ids]
        body = [original[id(m)] for m in kept[len(preamble) :]]
        return _SummaryPlan([original[id(m)] for m in preamble], older, body, previous, key)

    def _finish(self, plan: _SummaryPlan, summary: RunningSummary | None) -> list[BaseMessage]:
        if summary is None:  # nothing new to fold: the previous summary still holds
            return (
                plan.preamble + plan.body if plan.previous is None else plan.assemble(plan.previous)
            )
        with self._lock:
            self._last[plan.key] = summary
            self._last.move_to_end(plan.key)
            while len(self._last) > self._MEMORY:
                self._last.popitem(last=False)
        return plan.assemble(summary)

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the summarized history, or ``None`` when it is short enough.

        Raises:
            SummarizationError: The summarizer failed after its retries (input untouched).
        """
        plan = self._plan(messages)
        if plan is None:
            return None
        if not plan.older:
            return self._finish(plan, None)
        update = self.summarizer.summarize(plan.older, plan.previous, rounds=plan.rounds)
        return self._finish(plan, update.summary)

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce`."""
        plan = self._plan(messages)
        if plan is None:
            return None
        if not plan.older:
            return self._finish(plan, None)
        update = await self.summarizer.asummarize(plan.older, plan.previous, rounds=plan.rounds)
        return self._finish(plan, update.summary)


_RECORD_KEY = "histcompress_summary_record"


def _summary_in(messages: Sequence[BaseMessage]) -> RunningSummary | None:
    """The summary record carried by a summary message this reducer made earlier."""
    for message in messages:
        record = message.response_metadata.get(_RECORD_KEY)
        if is_summary_message(message) and isinstance(record, dict):
            return RunningSummary.model_validate(record)
    return None


@dataclass(frozen=True)
class _SummaryPlan:
    """What one summarizing reduction keeps, folds and extends."""

    preamble: list[BaseMessage]
    older: list[BaseMessage]
    body: list[BaseMessage]
    previous: RunningSummary | None
    key: str

    @property
    def rounds(self) -> int:
        return sum(1 for m in self.older if isinstance(m, HumanMessage))

    def assemble(self, summary: RunningSummary) -> list[BaseMessage]:
        message = summary.to_message()
        message.response_metadata[_RECORD_KEY] = summary.model_dump(mode="json")
        return [*self.preamble, message, *self.body]
