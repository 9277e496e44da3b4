"""Rolling round compression: fold the oldest rounds into a running summary, keep the newest.

`RoundCompressor` folds the oldest uncompressed rounds into a running summary (one summarizer
call builds the new summary from the previous summary and those rounds); the newest rounds
stay verbatim. *When* it folds is the ``trigger`` (by default, when folding pays under the
answering model's pricing); *that* it folds is the answering model's budget: a view over 85%
of its window is always folded (see `fold_plan`). ``plan`` says what a call would do and why.

Rules every setting keeps:

* Cuts fall between rounds; inside one oversized round only between whole tool groups, so an
  ``AIMessage`` with ``tool_calls`` is never separated from its ``ToolMessage`` objects.
* The latest round (the one holding the latest human message) is never folded as a whole,
  except with ``keep=("rounds", 0)`` once it is answered.
* Nothing is lost: every original message is either in the view verbatim or in the summary's
  ``covered_ids`` (the exact ids sent to the summarizer), never both. The one exception: a
  message too large for the budget on its own is shown shortened, with a marker.
* Compression is pure: ``compress`` returns a new view and summary and never changes its inputs;
  on a model failure it raises `SummarizationError` and the caller's state is untouched.
* Every history providers accept is valid input (`~langchain_histcompress.core.rounds`). A system
  message inside the conversation is pinned: once the rest of its round is folded it is shown
  verbatim after the summary until a newer one is folded (then it is folded too). A broken
  history is compressed as it is and its view repaired.
* Work per call follows the uncovered tail, not the history (see `_tail` and `_tail_state`).

Example:
    >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    >>> model = GenericFakeChatModel(messages=iter(
    ...     [AIMessage('{"ConversationSummary": "The user counted to two."}')]))
    >>> compressor = RoundCompressor(model, trigger=("rounds", 3), keep=("rounds", 1),
    ...                              token_counter="approximate")
    >>> history = [SystemMessage("Be brief.")]
    >>> for n in range(3):
    ...     history += [HumanMessage(f"say {n}", id=f"h{n}"), AIMessage(str(n), id=f"a{n}")]
    >>> result = compressor.compress(history)
    >>> result.calls, sorted(result.summary.covered_ids)
    (1, ['a0', 'a1', 'h0', 'h1'])
    >>> [m.type for m in result.messages], result.messages[0] is history[0]
    (['system', 'system', 'human', 'ai'], True)
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from langchain_histcompress.core.budget import (
    ContextBudget,
    context_budget,
    context_window_of,
    fit_messages,
)
from langchain_histcompress.core.errors import BudgetError, ConfigurationError, InvalidHistoryError
from langchain_histcompress.core.fold_plan import FoldChoice, decide_fold
from langchain_histcompress.core.memos import memo
from langchain_histcompress.core.pricing import DEFAULT_PRICING, PRICING_MODELS, preset_for_model
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.rounds import (
    ACCEPTED_KINDS,
    HistoryViolation,
    Round,
    is_pinned,
    is_summary_message,
    repair_history,
    split_rounds,
    split_units,
    validate_history,
)
from langchain_histcompress.core.running_summary import RunningSummary, SummaryUpdate
from langchain_histcompress.core.schedule import FoldDecision, FoldSchedule, RoundLoad, round_loads
from langchain_histcompress.core.tail import TailParts, covered_prefix_ids, preamble_end
from langchain_histcompress.core.tail import locate_tail as locate_tail
from langchain_histcompress.core.tail import summary_detached as summary_detached
from langchain_histcompress.core.tail import with_ids as with_ids
from langchain_histcompress.core.tail_state import TailState, TailTiming, carry, grow, record
from langchain_histcompress.core.tokens import TokenCounter, count_request, message_costs
from langchain_histcompress.core.triggers import (
    CompressionTrigger,
    ContextSize,
    ConversationSize,
    TriggerSpec,
    check_size,
    kept_rounds,
    model_provider_of,
)
from langchain_histcompress.core.views import SUMMARY_METADATA_KEY as SUMMARY_METADATA_KEY
from langchain_histcompress.core.views import Placement as Placement
from langchain_histcompress.core.views import check_placement, visible_messages, with_summary
from langchain_histcompress.core.views import tail_view as tail_view
from langchain_histcompress.core.views import view as view
from langchain_histcompress.edge.summarizer import Summarizer
from langchain_histcompress.edge.summary_prompt import SummaryProfile, build_summary_prompt

_SUMMARY_TOKENS_KEY = "schedule_summary_tokens"

__all__ = [
    "SUMMARY_METADATA_KEY",
    "CompressionChunk",
    "CompressionPlan",
    "CompressionResult",
    "OnInvalidHistory",
    "Placement",
    "RoundCompressor",
    "TriggerReason",
    "message_timestamp",
    "pending_rounds",
    "view",
]

logger = logging.getLogger(__name__)

TriggerReason = Literal[
    "cost", "rounds", "tokens", "messages", "fraction", "threshold", "idle_gap", "budget"
]
"""Why a fold was planned: the cost schedule, a threshold of the trigger (its unit, or
``"threshold"`` for a clause of several), the idle gap, or the budget."""

OnInvalidHistory = Literal["repair", "raise"]
"""What `RoundCompressor` does with a history a provider would reject (see
`~langchain_histcompress.core.rounds`): compress it and send a repaired view, or raise."""

_ON_INVALID = ("repair", "raise")

_TIMESTAMP_KEYS = ("timestamp", "created_at")


def _answered(pending: Sequence[Round]) -> bool:
    """The latest round ends with a final answer (an AI message without any tool call)."""
    if not pending:
        return False
    last = pending[-1].messages[-1]
    return isinstance(last, AIMessage) and not last.tool_calls and not last.invalid_tool_calls


def _pending(tail: Sequence[BaseMessage], covered: AbstractSet[str]) -> list[Round]:
    """The tail's rounds with their uncovered messages.

    Rounds with nothing left to fold (every message covered or pinned) are not pending.
    """
    out: list[Round] = []
    for round_ in split_rounds(tail).rounds:
        kept = visible_messages(round_.messages, covered)
        if any(not is_pinned(m) for m in kept):
            out.append(Round(tuple(kept)))
    return out


def pending_rounds(
    messages: Sequence[BaseMessage], summary: RunningSummary | None = None
) -> list[Round]:
    """The rounds not yet folded into ``summary``, each holding only its uncovered messages.

    The system preamble and package summary messages are never part of a round. A round
    partly folded (older tool groups of an oversized round) appears with its remaining
    messages; a round whose only uncovered messages are pinned system messages (see
    `rounds.is_pinned`) is not pending.

    Args:
        messages: The full original history.
        summary: The current summary (``None``: nothing is covered).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> history = [HumanMessage("a", id="h1"), AIMessage("b", id="a1"),
        ...            HumanMessage("c", id="h2")]
        >>> s = RunningSummary(content="x", text="x", covered_ids=frozenset({"h1", "a1"}))
        >>> [[m.id for m in r.messages] for r in pending_rounds(history, s)]
        [['h2']]
    """
    covered = summary.covered_ids if summary is not None else frozenset()
    return _pending(locate_tail(messages, summary).tail, covered)


def _to_datetime(value: object) -> datetime | None:
    parsed: datetime | None = None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) / 1000 if value > 1e11 else float(value)
        try:
            parsed = datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if ":" not in text:  # no number is written with a colon: ISO times skip the attempt
            try:
                return _to_datetime(float(text))
            except ValueError:
                pass
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def message_timestamp(message: BaseMessage) -> datetime | None:
    """When a message was sent, from ``additional_kwargs`` or ``response_metadata``.

    Looks for the keys ``"timestamp"`` then ``"created_at"``; accepts a ``datetime``, epoch
    seconds (or milliseconds) and ISO 8601 strings. Naive times are taken as UTC.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> message_timestamp(
        ...     HumanMessage("hi", additional_kwargs={"timestamp": "2024-05-01T10:00:00Z"}))
        datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.timezone.utc)
    """
    for source in (message.additional_kwargs, message.response_metadata):
        for key in _TIMESTAMP_KEYS:
            if key in source:
                found = _to_datetime(source[key])
                if found is not None:
                    return found
    return None


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CompressionChunk:
    """Messages folded into the summary by one summarizer call."""

    messages: tuple[BaseMessage, ...]
    """The exact messages sent to the summarizer (they become covered)."""
    rounds: int
    """Whole rounds among them (0 for a partial fold of an oversized round)."""
    partial_round: bool = False
    """The messages are older tool groups of the latest round, which stays in progress."""


@dataclass(frozen=True)
class CompressionPlan:
    """What `RoundCompressor.compress` would do, computed without any model call."""

    chunks: tuple[CompressionChunk, ...]
    """One entry per summarizer call, oldest messages first."""
    pending_rounds: int
    """Uncompressed rounds before compression (the latest round included)."""
    deferred_rounds: int
    """Rounds that are due but left verbatim because ``max_calls_per_compress`` was reached."""
    reasons: tuple[TriggerReason, ...]
    """Triggers that fired, in check order."""
    previous_text: str | None = None
    """Text of summary messages found in the history when no summary record was given; passed
    to the first call as the previous summary."""
    reason: str = ""
    """Why it folds or does not, in one line (the budget and pricing in force included)."""
    view_tokens: int = 0
    """Tokens of the view before the fold."""


@dataclass(frozen=True)
class CompressionResult:
    """The outcome of `RoundCompressor.compress`."""

    messages: list[BaseMessage]
    """The model view: preamble untouched, one summary, uncompressed rounds verbatim."""
    summary: RunningSummary | None
    """The new summary (the one passed in when nothing was compressed)."""
    compressed: bool
    """Whether at least one summarizer call updated the summary."""
    calls: int
    """Summary updates made (one per chunk)."""
    attempts: int = 0
    """Model invocations, retries included."""
    deferred_rounds: int = 0
    """Due rounds left verbatim because ``max_calls_per_compress`` was reached."""
    updates: tuple[RunningSummary, ...] = field(default_factory=tuple)
    """Every summary version produced, oldest first (the last one is ``summary``)."""
    reason: str = ""
    """Why it folded or did not (`CompressionPlan.reason`)."""


# --------------------------------------------------------------------------- compressor


def _check_optional_int(name: str, value: object, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        msg = f"{name} must be None or an integer >= {minimum}, got {value!r}"
        raise ConfigurationError(msg)


def _check_int(name: str, value: object, minimum: int) -> None:
    if value is None:
        msg = f"{name} must be an integer >= {minimum}, got None"
        raise ConfigurationError(msg)
    _check_optional_int(name, value, minimum)


def _cost_note(decision: FoldDecision, pricing: str) -> str:
    if decision.rounds:
        why = "the cache has gone cold" if decision.reason == "cold" else "rent reached cost"
        return (
            f"cost ({pricing}): {why}; re-sending them has cost {decision.rent:,.0f} "
            f"input tokens' worth, folding costs {decision.cost:,.0f}"
        )
    if decision.cost:
        return (
            f"cost ({pricing}): no fold pays yet (folding would cost {decision.cost:,.0f} "
            f"input tokens' worth; re-sending has cost {decision.rent:,.0f})"
        )
    return f"cost ({pricing}): no fold pays yet"


def _clause_reason(trigger: CompressionTrigger) -> TriggerReason:
    clauses = trigger.clauses
    if len(clauses) == 1 and len(clauses[0]) == 1:
        return next(iter(clauses[0]))
    return "threshold"


_REASON_WORDS = {
    "rounds": "the rounds threshold",
    "tokens": "the tokens threshold",
    "messages": "the messages threshold",
    "fraction": "the window-fraction threshold",
    "threshold": "a trigger threshold",
    "idle_gap": "the user came back after a pause",
    "budget": "the view is over its budget",
}


def _explain(
    choice: FoldChoice,
    chunks: Sequence[CompressionChunk],
    reasons: Sequence[TriggerReason],
    pending: int,
    target: _Target,
    cost_note: str,
) -> str:
    budget = target.budget
    size = f"{choice.view_tokens:,} of {budget.tokens:,} tokens ({budget.source})"
    if not chunks:
        why = cost_note or "the trigger did not fire"
        return f"no fold: {pending} round{'s' if pending != 1 else ''} pending, {size}; {why}"
    rounds = sum(c.rounds for c in chunks)
    what = (
        f"fold {rounds} round{'s' if rounds > 1 else ''}"
        if rounds
        else "fold older tool steps of the latest round"
    )
    if rounds and any(c.partial_round for c in chunks):
        what += " and older tool steps of the latest round"
    words = [cost_note if r == "cost" else _REASON_WORDS[r] for r in reasons]
    deferred = f"; {choice.deferred} more rounds next turn" if choice.deferred else ""
    calls = "1 call" if len(chunks) == 1 else f"{len(chunks)} calls"
    return f"{what} in {calls} ({'; '.join(words)}), {size}{deferred}"


@dataclass(frozen=True)
class _Target:
    """The answering model as planning sees it: its budget and, for ``"cost"``, its pricing."""

    budget: ContextBudget
    """The view's budget."""
    schedule: FoldSchedule | None
    """The cost schedule (``None`` when the trigger does not fold by cost)."""
    pricing: str
    """Which pricing the schedule uses and where it comes from (for reasons and logs)."""
    provider: str | None = None
    """The answering model's provider (``ls_provider``), whose ``usage_metadata`` a
    ``use_usage_metadata`` trigger trusts (the summarizer's when the model is unknown)."""


class RoundCompressor:
    """Rolling round compression of a chat history into a running summary.

    Args:
        model: The summarizer chat model (may be cheaper than the answering model), or a
            ``"provider:model"`` string for `models.chat_model_from_spec`.
        trigger: When to fold (see `triggers`): ``"cost"`` (default: when folding pays
            under the answering model's pricing), a threshold such as ``("rounds", 5)``,
            ``("tokens", 3000)``, ``("messages", 50)`` or ``("fraction", 0.8)``,
            ``("idle", seconds)``, a dict (AND) or list (OR) of those, a
            `CompressionTrigger`, or ``None`` (only the budget folds).
        keep: What stays verbatim after a fold the trigger makes: ``("rounds", 3)``
            (default), ``("messages", n)``, ``("tokens", n)`` or ``("fraction", f)`` of the
            window; whole rounds, the latest always, except that ``("rounds", 0)`` also folds
            the latest round once it is answered (for compressing after the reply).
        context_window: The answering model: its input window in tokens, or the chat model
            itself (its profile's ``max_input_tokens``; its provider and name also choose the
            pricing ``"cost"`` folds under). ``None``: `budget.DEFAULT_CONTEXT_WINDOW` and
            the default pricing. The view never exceeds 85% of the window: over that, older
            rounds are folded whatever the trigger, then a message too large on its own is
            shortened in the view (the original stays in state and storage).
        profile: ``"conversation"``, ``"code"``, ``"text"`` or a pydantic model class.
        structured_output: Call ``model.with_structured_output(schema)`` instead of plain
            invoke + robust parsing.
        placement: ``"system_message"`` or ``"append_to_system"`` (see `view`).
        timestamp_getter: Reads a message's time (default `message_timestamp`), for the idle
            trigger and the cache pauses the cost schedule prices.
        max_calls_per_compress: Summarizer calls per ``compress`` for a fold the budget does
            not force; a larger backlog stays verbatim and the next call continues.
        max_summary_tokens: Cap on the summary's tokens; longer answers are retried.
        token_counter: Token counter, model name or ``None`` (see `tokens.resolve_counter`).
        max_retries: Retries after the first attempt (transient errors, unusable answers).
        timeout: Seconds per summarizer call (``None``: no limit).
        retry_backoff: First wait before retrying a transient error (doubles per retry).
        max_backoff: Upper bound on one wait (a longer ``Retry-After`` ends the retries).
        max_output_tokens: Output cap of each summarizer call (see `Summarizer`; ``None``
            for none, e.g. for reasoning models whose hidden reasoning counts against it).
        instructions: Extra guidance for the summarizer's system prompt.
        on_invalid_history: What to do with a history a provider would reject (see the
            accepted-history rule in `~langchain_histcompress.core.rounds`): ``"repair"``
            (default) compresses it and repairs the view (logged, see
            `rounds.repair_history`); ``"raise"`` raises `InvalidHistoryError` before any
            model call. Histories providers accept (reused call ids across steps, answered
            invalid tool calls, system messages inside the conversation) are never errors.
        sleep: Sync sleep used between retries (injectable for tests).
        async_sleep: Async sleep used between retries.
        clock: Returns the current time for summaries' ``created_at``.

    Raises:
        ConfigurationError: A parameter is invalid (named in the message).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> model = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "Rounds 0-1 happened."}')]))
        >>> history = []
        >>> for n in range(5):
        ...     history += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
        >>> print(RoundCompressor(model, token_counter="approximate").plan(history).reason)
        no fold: 5 rounds pending, 55 of 108,800 tokens (default window (128,000 tokens)); \
cost (openai-50, the default pricing): no fold pays yet
        >>> compressor = RoundCompressor(model, token_counter="approximate",
        ...                              trigger=("rounds", 5))
        >>> result = compressor.compress(history)
        >>> result.calls, [m.id for m in result.messages[1:]]
        (1, ['h2', 'a2', 'h3', 'a3', 'h4', 'a4'])
        >>> compressor.compress(history, result.summary).compressed  # 3 pending: nothing due
        False
    """

    def __init__(
        self,
        model: Runnable[Any, Any] | str,
        *,
        trigger: TriggerSpec = "cost",
        keep: ContextSize = ("rounds", 3),
        context_window: int | object | None = None,
        profile: SummaryProfile = "conversation",
        structured_output: bool = False,
        placement: Placement = "system_message",
        timestamp_getter: Callable[[BaseMessage], datetime | None] | None = None,
        max_calls_per_compress: int = 8,
        max_summary_tokens: int = 2048,
        token_counter: TokenCounter | str | None = None,
        max_retries: int = 2,
        timeout: float | None = 60.0,
        retry_backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_output_tokens: int | Literal["auto"] | None = "auto",
        instructions: str | None = None,
        on_invalid_history: OnInvalidHistory = "repair",
        sleep: Callable[[float], None] | None = None,
        async_sleep: Callable[[float], Awaitable[None]] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Validate the configuration (see the class docstring)."""
        self.trigger = CompressionTrigger.of(trigger)
        self.keep: ContextSize = check_size(keep, "keep")
        _check_int("max_calls_per_compress", max_calls_per_compress, 1)
        check_placement(placement)
        if on_invalid_history not in _ON_INVALID:
            msg = (
                f"on_invalid_history must be one of {list(_ON_INVALID)}, got {on_invalid_history!r}"
            )
            raise ConfigurationError(msg)
        if timestamp_getter is not None and not callable(timestamp_getter):
            msg = f"timestamp_getter must be callable, got {timestamp_getter!r}"
            raise ConfigurationError(msg)
        if not isinstance(structured_output, bool):
            msg = f"structured_output must be a bool, got {structured_output!r}"
            raise ConfigurationError(msg)
        if isinstance(model, str):
            from langchain_histcompress.edge.models import chat_model_from_spec

            model = chat_model_from_spec(model)
        self.summarizer = Summarizer(
            model,
            profile=profile,
            structured_output=structured_output,
            max_summary_tokens=max_summary_tokens,
            token_counter=token_counter,
            max_retries=max_retries,
            timeout=timeout,
            retry_backoff=retry_backoff,
            max_backoff=max_backoff,
            max_output_tokens=max_output_tokens,
            instructions=instructions,
            sleep=sleep,
            async_sleep=async_sleep,
            clock=clock,
        )
        self.placement: Placement = placement
        self.timestamp_getter = timestamp_getter or message_timestamp
        self.max_calls_per_compress = max_calls_per_compress
        self.on_invalid_history: OnInvalidHistory = on_invalid_history
        self.context_window = context_window
        self._instruction_tokens = self.token_counter(
            build_summary_prompt([], config=self.summarizer.config)
        )
        self._targets: dict[int, tuple[object, _Target]] = {}
        self._target_lock = threading.Lock()
        self.target = self._make_target(context_window)
        """The budget and pricing for the ``context_window`` given here."""
        self._timing_made: TailTiming | None = None

    @property
    def token_counter(self) -> TokenCounter:
        """The token counter used by the triggers, the budget and the summary cap."""
        return self.summarizer.token_counter

    @property
    def max_summary_tokens(self) -> int:
        """Cap on the summary's tokens."""
        return self.summarizer.config.max_summary_tokens

    def __repr__(self) -> str:
        """Show the main settings (never message content)."""
        return (
            f"{type(self).__name__}(model={self.summarizer.model_name!r}, "
            f"trigger={self.trigger!r}, keep={self.keep!r}, "
            f"budget={self.target.budget.tokens} ({self.target.budget.source}), "
            f"profile={self.summarizer.config.profile!r})"
        )

    # ----------------------------------------------------------------- the answering model

    def _make_target(self, answering: int | object | None) -> _Target:
        budget = context_budget(answering)
        provider = model_provider_of(answering) or model_provider_of(self.summarizer.model)
        if not self.trigger.cost:
            return _Target(budget, None, "none", provider)
        if self.trigger.pricing is not None:
            pricing, source = self.trigger.pricing, self.trigger.pricing.name
        else:
            preset = preset_for_model(answering) if not isinstance(answering, int) else None
            if preset is None:
                pricing = PRICING_MODELS[DEFAULT_PRICING]
                source = f"{DEFAULT_PRICING}, the default pricing"
            else:
                name = type(answering).__name__ if not isinstance(answering, str) else answering
                pricing, source = PRICING_MODELS[preset], f"{preset}, from {name}"
        schedule = FoldSchedule(
            pricing=pricing,
            summary_tokens=self.max_summary_tokens,
            instruction_tokens=self._instruction_tokens,
            retain_rounds=max(int(self.keep[1]), 1) if self.keep[0] == "rounds" else 1,
        )
        logger.info(
            "round compression: budget %s tokens (%s); folds by cost under %s",
            f"{budget.tokens:,}",
            budget.source,
            source,
        )
        return _Target(budget, schedule, source, provider)

    def target_for(self, answering: int | object | None) -> _Target:
        """The budget and pricing for an answering model given per call (cached per model)."""
        if answering is None or answering is self.context_window:
            return self.target
        if (
            self.context_window is not None
            and not isinstance(answering, int)
            and context_window_of(answering) is None
        ):
            return self.target  # the window given here beats a model that does not know its own
        key = id(answering)
        with self._target_lock:
            found = self._targets.get(key)
            if found is not None and found[0] is answering:
                return found[1]
        made = self._make_target(answering)
        with self._target_lock:
            if len(self._targets) >= 16:
                self._targets.pop(next(iter(self._targets)))
            self._targets[key] = (answering, made)
        return made

    def _call_tokens(self) -> int:
        """Conversation tokens one summarizer call may read (its own window's budget)."""
        window = context_budget(self.summarizer.model).tokens
        out = self.summarizer.max_output_tokens or self.max_summary_tokens
        room = window - self._instruction_tokens - self.max_summary_tokens - out
        # rendered as a transcript the messages take about a fifth more than as chat
        return max(room * 5 // 6, 1)

    # ----------------------------------------------------------------- planning (pure)

    def _check_input(
        self, messages: Sequence[BaseMessage], summary: object, timing: TailTiming
    ) -> tuple[TailParts, TailState | None, bool]:
        """Check types, ids and shape; return the history split for planning.

        Only the preamble and the uncovered tail are read and checked (covered messages are
        never shown again; once a summary's tail is known they are not even read), plus a
        check that no tail message reuses the id of a covered prefix message. Duplicate
        message ids are always an error (coverage is recorded by id); other violations only
        with ``on_invalid_history="raise"`` (else the view repairs them). When the tail seen
        on the previous call only grew, just the new messages are read (`_tail_state`): the
        state comes back with the parts. The flag says whether the lead and tail broke no
        rule at all.
        """
        if summary is not None and not isinstance(summary, RunningSummary):
            msg = f"summary must be a RunningSummary or None, got {type(summary).__name__}"
            raise ConfigurationError(msg)
        if summary is not None:
            grown = grow(
                self, messages, summary, preamble_end(messages), self.token_counter, timing
            )
            if grown is not None:
                return grown[0], grown[1], True
        parts = locate_tail(messages, summary)
        offset = parts.tail_start
        tail = list(messages[offset:])
        for index, message in enumerate(tail, start=offset):
            if not message.id and not is_summary_message(message):
                msg = (
                    f"messages[{index}] ({message.type}) has no id ({message.id!r}); compression "
                    "records covered messages by id (give every message an id, e.g. with "
                    "rounds.ensure_ids)"
                )
                raise ConfigurationError(msg)
        strict = self.on_invalid_history == "raise"
        in_prefix = covered_prefix_ids(parts, summary)
        lead = parts.lead
        found = validate_history([*lead, *tail])
        violations = [
            replace(v, index=v.index - len(lead) + offset) if v.index >= len(lead) else v
            for v in found
            if (strict and v.kind not in ACCEPTED_KINDS) or v.kind == "duplicate_message_id"
        ]
        violations += [
            HistoryViolation("duplicate_message_id", index, m.id, f"message id {m.id!r} repeats")
            for index, m in enumerate(tail, start=offset)
            if m.id and in_prefix(m.id)
        ]
        if violations:
            raise InvalidHistoryError(sorted(violations, key=lambda v: v.index))
        return parts, None, not found

    def _costs(self, rounds: Sequence[Round]) -> list[int]:
        # One count of every pending message (a counter matches it with last turn's list, so
        # only the new messages are looked up), then summed per round.
        sizes = [len(r.messages) for r in rounds]
        costs = message_costs(self.token_counter, [m for r in rounds for m in r.messages])
        ends = list(itertools.accumulate(sizes))
        return [sum(costs[end - size : end]) for end, size in zip(ends, sizes, strict=True)]

    @staticmethod
    def _summary_messages(summary: RunningSummary | None) -> list[BaseMessage]:
        return [] if summary is None else [summary.to_message()]

    def _idle(self, parts: TailParts, gap: timedelta) -> bool:
        tail = parts.tail
        latest = next(
            (i for i in range(len(tail) - 1, -1, -1) if isinstance(tail[i], HumanMessage)), None
        )
        if latest is None:
            return False
        resumed = _to_datetime(self.timestamp_getter(tail[latest]))
        if resumed is None:
            return False
        messages = parts.messages
        earlier = itertools.chain(
            reversed(tail[:latest]),
            (
                messages[i]
                for i in range(parts.tail_start - 1, parts.lead_end - 1, -1)
                if not is_summary_message(messages[i])
            ),
        )
        for message in earlier:
            before = _to_datetime(self.timestamp_getter(message))
            if before is not None:
                return resumed - before > gap
        return False

    def _fixed_tokens(self, parts: TailParts) -> int:
        return sum(message_costs(self.token_counter, parts.preamble))

    def _summary_tokens(self, summary: RunningSummary) -> int:
        """Tokens of ``summary``'s message as the view shows it, counted once per summary."""
        counter = self.token_counter
        cache = memo(summary)
        known = cache.get(_SUMMARY_TOKENS_KEY)
        if known is not None and known[0] is counter:
            return int(known[1])
        tokens = sum(message_costs(counter, self._summary_messages(summary)))
        cache[_SUMMARY_TOKENS_KEY] = (counter, tokens)
        return tokens

    @staticmethod
    def _shown_pinned(pinned: Sequence[BaseMessage], folded: Sequence[Round]) -> set[int]:
        """Identities of the pinned messages that stay shown after a fold of ``folded``.

        Only the newest pinned message stays verbatim (the latest instruction of its kind);
        older ones are folded into the summary, so a reminder repeated every turn never
        accumulates.
        """
        newest = [m for r in folded for m in r.messages if is_pinned(m)] or list(pinned)
        return {id(newest[-1])} if newest else set()

    def _oversized_fold(self, latest: Round, limit: int) -> CompressionChunk | None:
        """Older tool groups of the latest round to fold so the rest fits in ``limit``."""
        units = split_units(latest.messages)
        costs = [sum(message_costs(self.token_counter, unit)) for unit in units]
        remaining = sum(costs)
        if remaining <= limit:
            return None
        start = 1 if isinstance(units[0][0], HumanMessage) else 0
        folded: list[BaseMessage] = []
        for unit, cost in zip(units[start:-1], costs[start:-1], strict=True):
            if remaining <= limit:
                break
            if is_pinned(unit[0]):  # stays in the view; its tokens remain
                continue
            folded.extend(unit)
            remaining -= cost
        if not folded:
            return None
        return CompressionChunk(tuple(folded), rounds=0, partial_round=True)

    def plan(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None = None,
        *,
        context_window: int | object | None = None,
        after_reply: bool = False,
        overhead_tokens: int = 0,
    ) -> CompressionPlan:
        """Decide what `compress` would fold, and say why, without calling the model.

        Args:
            messages: The full original history (every non-system message with an id).
            summary: The current summary (``None`` before the first compression).
            context_window: The answering model for this call (tokens or a chat model),
                when it is not the one given to the constructor.
            after_reply: The latest round is answered and no model call needs it any more:
                with ``keep=("rounds", 0)`` it is folded too (thread summarization).
            overhead_tokens: Tokens the request carries besides ``messages`` (a system
                prompt or tool schemas sent separately); they count against the budget.

        Raises:
            InvalidHistoryError: Two messages share an id, or ``on_invalid_history="raise"``
                and the history breaks the provider rules.
            ConfigurationError: A message has no id, or ``summary`` has the wrong type.

        Example:
            >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
            >>> from langchain_core.messages import HumanMessage
            >>> compressor = RoundCompressor(GenericFakeChatModel(messages=iter([])),
            ...                              token_counter="approximate", trigger=("rounds", 5))
            >>> plan = compressor.plan([HumanMessage(str(n), id=f"h{n}") for n in range(5)])
            >>> [[m.id for m in c.messages] for c in plan.chunks], plan.reasons
            ([['h0', 'h1']], ('rounds',))
        """
        target = self.target_for(context_window)
        return self._plan(messages, summary, target, after_reply, overhead_tokens)[0]

    def _timing(self, target: _Target) -> TailTiming:
        schedule = target.schedule
        lifetime = schedule.pricing.cache_lifetime if schedule is not None else None
        getter = self.timestamp_getter
        settings = (self.token_counter, getter, lifetime, True)
        made = self._timing_made
        if made is None or made.settings != settings:
            made = self._timing_made = TailTiming(
                lambda m: _to_datetime(getter(m)), lifetime, costs=True, settings=settings
            )
        return made

    def _plan(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None,
        target: _Target,
        after_reply: bool = False,
        overhead_tokens: int = 0,
    ) -> tuple[CompressionPlan, TailParts]:
        timing = self._timing(target)
        parts, state, clean = self._check_input(messages, summary, timing)
        pending: Sequence[Round]
        costs: Sequence[int] | None
        fixed: int | None = None
        if state is not None:  # read only: the state's own tuples, not copies
            pending, costs, fixed = state.rounds, state.costs, state.fixed_tokens
        else:
            covered = summary.covered_ids if summary is not None else frozenset()
            pending = _pending(parts.tail, covered)
            costs = self._costs(pending)
            fixed = self._fixed_tokens(parts)
            if clean and summary is not None:
                record(self, summary, parts, pending, costs, timing, fixed)
        assert costs is not None
        if fixed is None:
            fixed = self._fixed_tokens(parts)
        fixed += overhead_tokens
        summary_tokens = self._summary_tokens(summary) if summary is not None else 0
        pinned = parts.pinned
        pinned_tokens = sum(message_costs(self.token_counter, pinned)) if pinned else 0
        budget = target.budget
        keep = kept_rounds(
            self.keep, costs, [len(r.messages) for r in pending], window=budget.window
        )
        answered = after_reply and _answered(pending)
        eligible = max(len(pending) - (0 if keep == 0 and answered else max(keep, 1)), 0)
        chosen = 0
        reasons: list[TriggerReason] = []
        cost_note = ""
        trigger = self.trigger
        if target.schedule is not None and eligible:
            if state is not None and state.loads is not None:
                loads: Sequence[RoundLoad] = state.loads
            else:
                loads = round_loads(
                    [r.messages for r in pending],
                    costs,
                    timestamp=timing.timestamp,
                    lifetime=target.schedule.pricing.cache_lifetime,
                )
            decision = target.schedule.decide(
                fixed_tokens=fixed,
                summary_tokens=summary_tokens,
                rounds=loads,
                rounds_so_far=len(loads) + (summary.rounds_covered if summary else 0),
            )
            cost_note = _cost_note(decision, target.pricing)
            if decision.rounds:
                chosen = decision.rounds
                reasons.append("cost")
        elif target.schedule is not None:
            cost_note = f"cost ({target.pricing}): nothing old enough to fold"
        if trigger.clauses and eligible:
            shown = len(parts.preamble) + (1 if summary is not None else 0) + len(pinned)
            size = ConversationSize(
                fixed + summary_tokens + pinned_tokens + sum(costs),
                shown + sum(len(r.messages) for r in pending),
                len(pending),
            )
            if trigger.use_usage_metadata:
                lead = parts.lead if summary is None else parts.preamble
                view_now = [*lead, *self._summary_messages(summary), *pinned, *parts.tail]
                size = trigger.measure(
                    view_now, counter=self.token_counter, pending=pending, provider=target.provider
                )
            if trigger.fires(size, window=budget.window):
                chosen = max(chosen, eligible)
                reasons.append(_clause_reason(trigger))
        if trigger.idle is not None and len(pending) >= 2 and self._idle(parts, trigger.idle):
            chosen = len(pending) - 1  # everything before the resumed round, whatever `keep`
            reasons.append("idle_gap")
        choice = decide_fold(
            costs=costs,
            fixed_tokens=fixed,
            summary_tokens=summary_tokens,
            pinned_tokens=pinned_tokens,
            budget_tokens=budget.tokens,
            keep_rounds=keep,
            summary_cap=self.max_summary_tokens,
            call_tokens=self._call_tokens(),
            max_calls=self.max_calls_per_compress,
            chosen=chosen,
            answered=answered,
        )
        if choice.forced:
            reasons.append("budget")
        folded = sum(choice.calls)
        shown_pinned = self._shown_pinned(pinned, pending[:folded])
        starts = list(itertools.accumulate(choice.calls, initial=0))
        chunks = [
            CompressionChunk(
                tuple(
                    m
                    for r in pending[start : start + size]
                    for m in r.messages
                    if not is_pinned(m) or id(m) not in shown_pinned
                ),
                rounds=size,
            )
            for start, size in zip(starts, choice.calls, strict=False)
        ]
        if chunks and pinned:  # older pinned messages go with the first call
            older = tuple(m for m in pinned if id(m) not in shown_pinned)
            if older:
                chunks[0] = replace(chunks[0], messages=older + chunks[0].messages)
        latest_is_last = bool(pending) and pending[-1].messages[-1] is parts.tail[-1]
        if latest_is_last and folded < len(pending):
            kept_tokens = sum(costs[folded:-1])
            # a fold of older tool steps makes (or grows) the summary too
            new_summary = max(summary_tokens, self.max_summary_tokens)
            room = budget.tokens - fixed - pinned_tokens - new_summary - kept_tokens
            if costs[-1] > room:
                fold = self._oversized_fold(pending[-1], max(room, 0))
                if fold is not None:
                    chunks.append(fold)
                    if "budget" not in reasons:
                        reasons.append("budget")
        previous_text = None
        if summary is None and chunks:
            stale = [m for m in messages if is_summary_message(m)]
            previous_text = "\n\n".join(message_text(m) for m in stale) or None
        plan = CompressionPlan(
            chunks=tuple(chunks),
            pending_rounds=len(pending),
            deferred_rounds=choice.deferred,
            reasons=tuple(reasons),
            previous_text=previous_text,
            reason=_explain(choice, chunks, reasons, len(pending), target, cost_note),
            view_tokens=choice.view_tokens,
        )
        return plan, parts

    # ----------------------------------------------------------------- compress

    def view(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None = None,
        *,
        context_window: int | object | None = None,
        overhead_tokens: int = 0,
    ) -> list[BaseMessage]:
        """The model view for ``summary``, within the budget, without any model call.

        Placement is this compressor's; a message of the latest round too large for the
        budget on its own is shortened (see `budget.fit_messages`).

        Raises:
            BudgetError: The view does not fit the budget even so (rounds are waiting to be
                folded, or the preamble or latest question alone is too large).
        """
        shown = view(messages, summary, placement=self.placement)
        return self._fitted(shown, self.target_for(context_window), None, overhead_tokens)

    def _fitted(
        self,
        shown: list[BaseMessage],
        target: _Target,
        expected: int | None,
        overhead_tokens: int = 0,
    ) -> list[BaseMessage]:
        """``shown`` within the target's budget, less what the request carries besides it.

        ``expected`` is its tokens with that overhead, when known (else they are counted).
        """
        limit = target.budget.tokens - overhead_tokens
        if expected is not None and expected - overhead_tokens <= limit:
            return shown
        if expected is None and count_request(self.token_counter, shown) <= limit:
            return shown
        latest = max((i for i, m in enumerate(shown) if isinstance(m, HumanMessage)), default=0)

        def protected(index: int, message: BaseMessage) -> bool:
            return index <= latest or isinstance(message, SystemMessage)

        try:
            fitted = fit_messages(shown, limit, self.token_counter, protected=protected)
        except BudgetError as error:
            msg = f"{error} ({target.budget.source})"
            raise BudgetError(msg) from None
        logger.warning(
            "a message of the latest round is too large for the budget (%d tokens, %s): "
            "shortened in the view, kept whole in the history",
            limit,
            target.budget.source,
        )
        return fitted

    def _finish(
        self,
        parts: TailParts,
        plan: CompressionPlan,
        updates: list[SummaryUpdate],
        summary: RunningSummary | None,
        target: _Target,
        overhead_tokens: int = 0,
    ) -> CompressionResult:
        if plan.chunks:
            attempts = sum(u.attempts for u in updates)
            logger.info("round compression: %s (attempts: %d)", plan.reason, attempts)
        final = updates[-1].summary if updates else summary
        expected = plan.view_tokens
        if updates:
            folded = [m for c in plan.chunks for m in c.messages]
            expected += self._summary_tokens(final) if final is not None else 0
            expected -= self._summary_tokens(summary) if summary is not None else 0
            expected -= sum(message_costs(self.token_counter, folded))
        if final is None:
            messages = repair_history(parts.messages).messages
        elif final is summary and parts.grown:
            # the grown tail is valid, holds no covered id and no system message, and the
            # summary and pinned messages before it close every tool step: nothing to repair
            head = with_summary(parts.preamble, final, self.placement)
            messages = [*head, *parts.pinned, *parts.tail]
        else:
            carried = False
            if final is not summary:  # coverage only grew: the new tail starts no earlier
                before = parts
                parts = locate_tail(
                    parts.messages,
                    final,
                    known_start=parts.tail_start,
                    known_systems=parts.system_at,
                    grown_from=parts.cursor,
                )
                whole = not any(c.partial_round for c in plan.chunks)
                carried = whole and carry(
                    self,
                    summary,
                    before,
                    final,
                    parts,
                    sum(c.rounds for c in plan.chunks),
                    sum(len(c.messages) for c in plan.chunks),
                )
            if carried:  # the rest of a valid tail, from a round's start: nothing to repair
                head = with_summary(parts.preamble, final, self.placement)
                messages = [*head, *parts.pinned, *parts.tail]
            else:
                messages = tail_view(parts, final, self.placement)
        return CompressionResult(
            messages=self._fitted(messages, target, expected, overhead_tokens),
            summary=final,
            compressed=bool(updates),
            calls=len(updates),
            attempts=sum(u.attempts for u in updates),
            deferred_rounds=plan.deferred_rounds,
            updates=tuple(u.summary for u in updates),
            reason=plan.reason,
        )

    def compress(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None = None,
        *,
        config: RunnableConfig | None = None,
        context_window: int | object | None = None,
        after_reply: bool = False,
        overhead_tokens: int = 0,
    ) -> CompressionResult:
        """Fold due rounds into the summary and return the new view and summary.

        Args:
            messages: The full original history, every non-system message with an id
                (messages already in ``summary.covered_ids`` are skipped).
            summary: The current summary (``None`` before the first compression).
            config: Caller's runnable config (callbacks...); summarizer calls add their own
                internal tags to a copy.
            context_window: The answering model for this call (tokens or a chat model),
                when it is not the one given to the constructor.
            after_reply: The latest round is answered and no model call needs it any more
                (see `plan`).
            overhead_tokens: Tokens the request carries besides ``messages`` (see `plan`).

        Returns:
            The view, the (possibly new) summary and call counts. Nothing is changed in place.

        Raises:
            SummarizationError: A summarizer call failed after bounded retries (no result;
                the caller keeps its previous summary).
            InvalidHistoryError: Two messages share an id, or ``on_invalid_history="raise"``
                and the history breaks the provider rules.
            BudgetError: The view cannot fit the budget (the message names what).
            ConfigurationError: A message has no id.
        """
        target = self.target_for(context_window)
        plan, parts = self._plan(messages, summary, target, after_reply, overhead_tokens)
        updates: list[SummaryUpdate] = []
        current = summary
        for chunk in plan.chunks:
            update = self.summarizer.summarize(
                chunk.messages,
                current,
                rounds=chunk.rounds,
                partial_round=chunk.partial_round,
                previous_text=plan.previous_text if current is None else None,
                config=config,
            )
            updates.append(update)
            current = update.summary
        return self._finish(parts, plan, updates, summary, target, overhead_tokens)

    async def acompress(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None = None,
        *,
        config: RunnableConfig | None = None,
        context_window: int | object | None = None,
        after_reply: bool = False,
        overhead_tokens: int = 0,
    ) -> CompressionResult:
        """Async `compress` (same arguments and guarantees; cancellation propagates)."""
        target = self.target_for(context_window)
        plan, parts = self._plan(messages, summary, target, after_reply, overhead_tokens)
        updates: list[SummaryUpdate] = []
        current = summary
        for chunk in plan.chunks:
            update = await self.summarizer.asummarize(
                chunk.messages,
                current,
                rounds=chunk.rounds,
                partial_round=chunk.partial_round,
                previous_text=plan.previous_text if current is None else None,
                config=config,
            )
            updates.append(update)
            current = update.summary
        return self._finish(parts, plan, updates, summary, target, overhead_tokens)
