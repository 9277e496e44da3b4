"""`SummarizationReducer`: fold the older part of a history into a running summary."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import SummarizationError
from langchain_histcompress.core.fold_plan import call_sizes
from langchain_histcompress.core.prefix import holds
from langchain_histcompress.core.rounds import ensure_ids, is_summary_message
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import cost_ceilings, message_costs
from langchain_histcompress.edge.summarizer import Summarizer
from langchain_histcompress.faces.reducers import _units as cut

__all__ = ["SummarizationReducer"]

logger = logging.getLogger(__name__)

_RECORD_KEY = "histcompress_summary_record"


def _summary_message(summary: RunningSummary) -> SystemMessage:
    """The tagged message that carries ``summary`` and its record, to extend it later.

    The record leaves out the covered ids (the provenance keeps their count). A summary
    rebuilt from a record lists in its ``covered_ids`` only what it folds from then on.
    """
    message = summary.to_message()
    message.response_metadata[_RECORD_KEY] = summary.model_dump(
        mode="json", exclude={"covered_ids"}
    )
    return message


def _records_in(preamble: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The summary messages an earlier reduction put in the preamble, in order."""
    return [
        m
        for m in preamble
        if is_summary_message(m) and isinstance(m.response_metadata.get(_RECORD_KEY), dict)
    ]


def _pinned(messages: Sequence[BaseMessage]) -> list[SystemMessage]:
    """System messages from the middle of a conversation: shown verbatim, never summarized."""
    return [m for m in messages if isinstance(m, SystemMessage) and not is_summary_message(m)]


def _reduced(out: list[BaseMessage], messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
    """``out``, or ``None`` when it is the input itself: nothing was reduced.

    That is a reduced history fed back with nothing new to fold (or a failed fold).
    """
    return None if cut.unchanged(out, messages) else out


@dataclass(frozen=True)
class _Folded:
    """What one conversation's summaries cover: the originals they fold, in order.

    ``originals`` is an append-only list shared by successive states of one conversation:
    ``head`` preamble slots, then the folded messages; this state covers its first ``count``
    folded messages. The state holds references to them, so identity comparisons against
    them are sound (an object id cannot be reused while the object is alive).
    """

    originals: list[BaseMessage]
    head: int
    count: int
    summaries: tuple[RunningSummary, ...]
    messages: tuple[SystemMessage, ...]
    pinned: tuple[SystemMessage, ...] = ()

    def starts_with(self, message: BaseMessage) -> bool:
        """Whether ``message`` is the very object this state folded first."""
        return self.count > 0 and self.originals[self.head] is message

    def covers_start_of(self, messages: list[BaseMessage], head: int) -> bool:
        """Whether ``messages[head:]`` begins with exactly the messages this state folded.

        Each position is compared by identity first, by value only for messages that are
        not the same objects (a history reloaded from storage). So a state is reused only
        for a history that holds the very messages it summarized: two conversations never
        share a summary, whatever their message ids (the comparison is `prefix.holds`).
        Call it under the reducer's lock (it writes the caller's preamble into the preamble
        slots).
        """
        end = head + self.count
        if head != self.head or len(messages) <= end:
            return False
        # the preamble slots take the caller's preamble: it is not part of what was folded
        return holds(messages, self.originals, end, start=head, by_value=True)


@dataclass(frozen=True)
class _Plan:
    """What one reduction shows, folds and extends."""

    preamble: list[BaseMessage]
    """The system preamble without earlier summary messages."""
    folded: _Folded | None
    """The conversation's state before this reduction (from memory or the input)."""
    older: list[BaseMessage]
    """Originals to fold now (empty when nothing new needs folding)."""
    offset: int
    """Position of the first of ``older`` in the input (names generated ids)."""
    body: list[BaseMessage]
    """Originals shown verbatim after the summaries."""
    remember: bool
    """Whether the new state goes to memory (the input was an unreduced history)."""


class SummarizationReducer(cut.ConfigEquality):
    """Summarize the older part of the history with one model call; keep the newest verbatim.

    The kept part is chosen like `TruncationReducer` (whole units, starting on a user message,
    latest user message always kept); everything older is folded into a `RunningSummary`
    placed right after the system preamble as a tagged ``SystemMessage``
    (``additional_kwargs["lc_source"]`` marks it, so a UI can hide it). The summary is
    extended, never re-summarized, and it is fed either way:

    - the reduced output back (Semantic Kernel's way): the summary message in the input is
      extended with the messages after it;
    - the full, unreduced history every turn (``RunnableWithMessageHistory``'s way): the
      reducer remembers, for a few recent conversations, which messages it folded and
      reuses that summary only for a history that begins with those very messages (compared
      by object, or by value for a reloaded history), never by message id. So one reducer
      can serve every user of a server: conversations whose ids collide never share
      anything.

    A system message in the middle of the conversation (an app's reminder) is never folded:
    it stays verbatim, right after the summaries, once its part of the conversation is
    summarized. A fold happens when more than ``target_count + threshold_count`` messages
    are not yet summarized, as Semantic Kernel's ``ChatHistorySummarizationReducer`` does. With
    ``single_summary=False`` every fold adds its own summary message (of only its messages)
    and earlier ones are kept. With ``fail_on_error=False`` a summarizer failure is logged and
    the history is returned without a new fold (earlier summaries still apply) instead of
    raising `SummarizationError`; when that leaves the input as it was (a reduced history
    fed back), the result is ``None``, as when nothing needs folding. Two reducers with the
    same model object and configuration are equal.

    Args:
        model: The summarizer chat model (may be cheaper than the answering one).
        target_count: Non-system messages kept verbatim (an integer >= 1).
        threshold_count: Extra unsummarized messages tolerated before folding (>= 0).
        start_on_human: Start the kept part on a user message.
        single_summary: Keep one running summary (default) or one message per fold.
        fail_on_error: Raise `SummarizationError` when the summarizer fails (default), or
            log it and leave the history unfolded.
        max_conversations: Conversations whose folded messages are remembered, most
            recently used first (only for full histories; a conversation forgotten is
            summarized again from its start on its next turn). A server with more
            concurrent conversations should raise it, or feed reduced outputs back.
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
        >>> reducer = SummarizationReducer(summarizer, target_count=4)
        >>> reduced = reducer.reduce(history)
        >>> [m.content for m in reduced[2:]], reduced[1].additional_kwargs["lc_source"]
        (['q3', 'a3', 'q4', 'a4'], 'langchain_histcompress.summary')
        >>> reducer == SummarizationReducer(summarizer, target_count=4)
        True

        Several summaries, and no exception when the summarizer fails:

        >>> failing = GenericFakeChatModel(messages=iter([]))
        >>> lenient = SummarizationReducer(failing, target_count=4, single_summary=False,
        ...                                fail_on_error=False, max_retries=0)
        >>> lenient.reduce(history) is None
        True
    """

    def __init__(
        self,
        model: BaseChatModel,
        target_count: int,
        threshold_count: int = 0,
        *,
        start_on_human: bool = True,
        single_summary: bool = True,
        fail_on_error: bool = True,
        max_conversations: int = 64,
        **summarizer_options: Any,
    ) -> None:
        """Configure the reducer; see the class docstring."""
        self.target_count = cut.check_count("target_count", target_count, minimum=1)
        self.threshold_count = cut.check_count("threshold_count", threshold_count, minimum=0)
        self.start_on_human = bool(start_on_human)
        self.single_summary = bool(single_summary)
        self.fail_on_error = bool(fail_on_error)
        self.max_conversations = cut.check_count("max_conversations", max_conversations, minimum=1)
        self.summarizer = Summarizer(model, **summarizer_options)
        self._memory: OrderedDict[int, _Folded] = OrderedDict()
        self._lock = threading.Lock()

    def _config(self) -> tuple[Hashable, ...]:
        return (
            id(self.summarizer.model),
            self.target_count,
            self.threshold_count,
            self.start_on_human,
            self.single_summary,
            self.fail_on_error,
            self.max_conversations,
            self.summarizer.config,
            self.summarizer.token_counter
            if isinstance(self.summarizer.token_counter, Hashable)
            else id(self.summarizer.token_counter),
        )

    # ------------------------------------------------------------------ planning

    def _recall(self, messages: list[BaseMessage], head: int) -> _Folded | None:
        """This conversation's remembered state, if ``messages`` begins with what it folded.

        The states whose first folded message is the very object at ``head`` are tried
        first, most recent first (conversations sharing that object, a fixed greeting, each
        have their own); then, for a history read back from storage, every state by value.
        """
        if len(messages) <= head:
            return None
        first = messages[head]
        with self._lock:
            states = list(reversed(self._memory.values()))
            for state in states:
                if state.starts_with(first) and state.covers_start_of(messages, head):
                    return state
            for state in states:
                if not state.starts_with(first) and state.covers_start_of(messages, head):
                    return state
        return None

    def _from_input(self, records: list[BaseMessage]) -> _Folded:
        """State rebuilt from summary messages an earlier reduction returned."""
        summaries = tuple(
            RunningSummary.model_validate(m.response_metadata[_RECORD_KEY]) for m in records
        )
        return _Folded([], 0, 0, summaries, tuple(records))  # type: ignore[arg-type]

    def _plan(self, messages: Sequence[BaseMessage]) -> _Plan | None:
        history = messages if isinstance(messages, list) else list(messages)
        head = cut.preamble_length(history)
        preamble = [m for m in history[:head] if not is_summary_message(m)]
        records = _records_in(history[:head])
        folded = self._from_input(records) if records else self._recall(history, head)
        floor = head + (folded.count if folded is not None else 0)
        if len(history) - floor <= self.target_count + self.threshold_count:
            body = history[floor:]
            if folded is None and cut.unchanged(cut.provider_valid(list(history)), history):
                return None
            return _Plan(preamble, folded, [], floor, body, remember=False)
        start, units = cut.newest_units(
            history, floor, self.target_count, start_on_human=self.start_on_human
        )
        older = history[floor:start]
        body = cut.flatten(units)
        whole = folded is None and start == floor  # nothing cut: the input is short
        if whole and cut.unchanged(cut.provider_valid(list(history)), history):
            return None
        return _Plan(preamble, folded, older, floor, body, remember=not records)

    # ------------------------------------------------------------------ finishing

    def _assemble(self, plan: _Plan, state: _Folded | None) -> list[BaseMessage]:
        if state is None:
            return cut.provider_valid([*plan.preamble, *plan.body])
        return cut.provider_valid([*plan.preamble, *state.messages, *state.pinned, *plan.body])

    def _previous(self, plan: _Plan) -> RunningSummary | None:
        if plan.folded is None or not self.single_summary or not plan.folded.summaries:
            return None
        return plan.folded.summaries[-1]

    def _fold(self, plan: _Plan, summary: RunningSummary) -> _Folded:
        """The conversation's state after folding ``plan.older`` into ``summary``."""
        before = plan.folded
        message = _summary_message(summary)
        summaries: tuple[RunningSummary, ...] = (summary,)
        shown: tuple[SystemMessage, ...] = (message,)
        if before is not None and not self.single_summary:
            summaries, shown = (*before.summaries, *summaries), (*before.messages, *shown)
        pinned = (*(before.pinned if before else ()), *_pinned(plan.older))
        head = len(plan.preamble)
        if not plan.remember:
            return _Folded([], head, 0, summaries, shown, pinned)
        with self._lock:
            if before is not None and len(before.originals) == before.head + before.count:
                originals = before.originals  # nobody extended it: append in place
            elif before is not None:
                originals = before.originals[: before.head + before.count]
            else:
                originals = list(plan.preamble)
            originals.extend(plan.older)
            state = _Folded(originals, head, len(originals) - head, summaries, shown, pinned)
            # one entry per list of folded originals (a conversation), which the state keeps
            # alive: conversations sharing their first messages never replace each other's
            key = id(originals)
            self._memory[key] = state
            self._memory.move_to_end(key)
            while len(self._memory) > self.max_conversations:
                self._memory.popitem(last=False)
        return state

    def _chunks(self, plan: _Plan) -> list[list[BaseMessage]]:
        """``plan.older`` to fold, in summarizer calls that each fit its window.

        Pinned system messages stay out (they are kept verbatim); calls split between
        rounds, so a tool call and its results are always sent together.
        """
        fresh = [m for m in plan.older if not isinstance(m, SystemMessage)]
        older = ensure_ids(fresh, namespace=f"reducer-{plan.offset}")
        summarizer = self.summarizer
        limit = summarizer.max_input_tokens
        # room left beside the prompt's own text and the previous summary (at most a quarter)
        room = (limit - 2 * min(summarizer.config.max_summary_tokens, limit // 4) - 2_000) * 5 // 6
        ceilings = cost_ceilings(summarizer.token_counter, older)
        if ceilings is not None and sum(ceilings) <= max(room, 1):
            return [older]  # one call holds them all: the costs are at most their ceilings
        starts = [0, *(i for i, m in enumerate(older) if i and isinstance(m, HumanMessage))]
        units = [older[a:b] for a, b in zip(starts, [*starts[1:], len(older)], strict=True)]
        costs = [sum(message_costs(summarizer.token_counter, unit)) for unit in units]
        out: list[list[BaseMessage]] = []
        at = 0
        for size in call_sizes(costs, max(room, 1)):
            out.append([m for unit in units[at : at + size] for m in unit])
            at += size
        return out or [older]

    def _folded(self, plan: _Plan) -> RunningSummary:
        """The summary after folding ``plan.older`` (sync summarizer calls)."""
        summary = self._previous(plan)
        for chunk in self._chunks(plan):
            rounds = sum(1 for m in chunk if isinstance(m, HumanMessage))
            summary = self.summarizer.summarize(chunk, summary, rounds=rounds).summary
        assert summary is not None  # at least one call
        return summary

    async def _afolded(self, plan: _Plan) -> RunningSummary:
        """Async `_folded`."""
        summary = self._previous(plan)
        for chunk in self._chunks(plan):
            rounds = sum(1 for m in chunk if isinstance(m, HumanMessage))
            summary = (await self.summarizer.asummarize(chunk, summary, rounds=rounds)).summary
        assert summary is not None  # at least one call
        return summary

    def _failed(
        self, plan: _Plan, error: SummarizationError, messages: Sequence[BaseMessage]
    ) -> list[BaseMessage] | None:
        if self.fail_on_error:
            raise error
        logger.warning("summarizer failed; history left unfolded: %s", type(error).__name__)
        if plan.folded is None:
            return None
        folded = plan.folded
        shown = [*plan.preamble, *folded.messages, *folded.pinned, *plan.older, *plan.body]
        return _reduced(cut.provider_valid(shown), messages)

    def _unfolded(
        self, plan: _Plan | None, messages: Sequence[BaseMessage]
    ) -> list[BaseMessage] | None:
        """The result when nothing new needs folding."""
        return None if plan is None else _reduced(self._assemble(plan, plan.folded), messages)

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the summarized history, or ``None`` when there is nothing to reduce.

        ``None`` when the history is short enough, and when the input already holds its
        summary and nothing new folds (the reduced output fed back as is, also after a
        failed fold with ``fail_on_error=False``), as Semantic Kernel's reducers do.

        Raises:
            SummarizationError: The summarizer failed after its retries (input untouched),
                unless ``fail_on_error=False``.
        """
        plan = self._plan(messages)
        if plan is None or not plan.older:
            return self._unfolded(plan, messages)
        try:
            summary = self._folded(plan)
        except SummarizationError as error:
            return self._failed(plan, error, messages)
        return self._assemble(plan, self._fold(plan, summary))

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce`."""
        plan = self._plan(messages)
        if plan is None or not plan.older:
            return self._unfolded(plan, messages)
        try:
            summary = await self._afolded(plan)
        except SummarizationError as error:
            return self._failed(plan, error, messages)
        return self._assemble(plan, self._fold(plan, summary))
