"""Rolling round compression: fold the oldest rounds into a running summary, keep the newest.

`RoundCompressor` folds the oldest uncompressed rounds into a running summary (one summarizer
call per chunk) and keeps the newest verbatim. *When* it folds is the ``trigger``; *that* it
folds is the answering model's budget (a view over 85% of its window is always folded).
``plan`` says what a call would do and why, without any model call; the pure planning steps
are in `round_planning`, the records in `compression_records`. Cuts fall between rounds (or
whole tool groups), the latest round stays, nothing is lost, and a failure leaves the
caller's state untouched: the rules and their reasons are in ``docs/design/edge.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from langchain_histcompress.core.answering_target import AnsweringTarget, answering_target
from langchain_histcompress.core.budget import context_budget, context_window_of, fit_messages
from langchain_histcompress.core.errors import BudgetError, ConfigurationError
from langchain_histcompress.core.fold_plan import decide_fold
from langchain_histcompress.core.memos import memo
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.rounds import Round, is_summary_message, repair_history
from langchain_histcompress.core.running_summary import RunningSummary, SummaryUpdate
from langchain_histcompress.core.schedule import RoundLoad, round_loads
from langchain_histcompress.core.tail import TailParts, preamble_end
from langchain_histcompress.core.tail import locate_tail as locate_tail
from langchain_histcompress.core.tail import summary_detached as summary_detached
from langchain_histcompress.core.tail import with_ids as with_ids
from langchain_histcompress.core.tail_state import TailState, TailTiming, carry, grow, record
from langchain_histcompress.core.timestamps import message_timestamp, to_datetime
from langchain_histcompress.core.tokens import TokenCounter, count_request, message_costs
from langchain_histcompress.core.triggers import (
    CompressionTrigger,
    ContextSize,
    ConversationSize,
    TriggerSpec,
    check_size,
    kept_rounds,
)
from langchain_histcompress.core.views import SUMMARY_METADATA_KEY as SUMMARY_METADATA_KEY
from langchain_histcompress.core.views import Placement as Placement
from langchain_histcompress.core.views import check_placement, with_summary
from langchain_histcompress.core.views import tail_view as tail_view
from langchain_histcompress.core.views import view as view
from langchain_histcompress.edge.compression_records import (
    CompressionChunk,
    CompressionPlan,
    CompressionResult,
    OnInvalidHistory,
    TriggerReason,
)
from langchain_histcompress.edge.fold_reasons import clause_reason, cost_note, explain_plan
from langchain_histcompress.edge.round_planning import (
    answered,
    checked_tail,
    fold_chunks,
    idle_gap_passed,
    oversized_fold,
    pending_of,
    round_costs,
)
from langchain_histcompress.edge.summarizer import Summarizer
from langchain_histcompress.edge.summary_prompt import SummaryProfile, build_summary_prompt

_SUMMARY_TOKENS_KEY = "schedule_summary_tokens"

__all__ = [
    "SUMMARY_METADATA_KEY",
    "Placement",
    "RoundCompressor",
    "view",
]

logger = logging.getLogger(__name__)

_ON_INVALID = ("repair", "raise")


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
        self._targets: dict[int, tuple[object, AnsweringTarget]] = {}
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

    def _make_target(self, answering: int | object | None) -> AnsweringTarget:
        made = answering_target(
            answering,
            trigger=self.trigger,
            keep=self.keep,
            summary_tokens=self.max_summary_tokens,
            instruction_tokens=self._instruction_tokens,
            summarizer_model=self.summarizer.model,
        )
        if made.schedule is not None:
            logger.info(
                "round compression: budget %s tokens (%s); folds by cost under %s",
                f"{made.budget.tokens:,}",
                made.budget.source,
                made.pricing,
            )
        return made

    def target_for(self, answering: int | object | None) -> AnsweringTarget:
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
        parts, clean = checked_tail(messages, summary, strict=self.on_invalid_history == "raise")
        return parts, None, clean

    @staticmethod
    def _summary_messages(summary: RunningSummary | None) -> list[BaseMessage]:
        return [] if summary is None else [summary.to_message()]

    def _fixed_tokens(self, parts: TailParts) -> int:
        return sum(message_costs(self.token_counter, parts.preamble))

    def _shown_summary_tokens(self, parts: TailParts, summary: RunningSummary | None) -> int:
        """Tokens the view spends on a summary.

        ``summary``'s message, else the summary messages the history carries in its lead
        (shown until a fold replaces them).
        """
        if summary is not None:
            return self._summary_tokens(summary)
        stale = [m for m in parts.lead if is_summary_message(m)]
        return sum(message_costs(self.token_counter, stale)) if stale else 0

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

    def _timing(self, target: AnsweringTarget) -> TailTiming:
        schedule = target.schedule
        lifetime = schedule.pricing.cache_lifetime if schedule is not None else None
        getter = self.timestamp_getter
        settings = (self.token_counter, getter, lifetime, True)
        made = self._timing_made
        if made is None or made.settings != settings:
            made = self._timing_made = TailTiming(
                lambda m: to_datetime(getter(m)), lifetime, costs=True, settings=settings
            )
        return made

    def _plan(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None,
        target: AnsweringTarget,
        after_reply: bool = False,
        overhead_tokens: int = 0,
    ) -> tuple[CompressionPlan, TailParts]:
        timing = self._timing(target)
        parts, state, clean = self._check_input(messages, summary, timing)
        pending, costs, fixed = self._measure(parts, state, clean, summary, timing)
        fixed += overhead_tokens
        summary_tokens = self._shown_summary_tokens(parts, summary)
        pinned = parts.pinned
        pinned_tokens = sum(message_costs(self.token_counter, pinned)) if pinned else 0
        budget = target.budget
        keep = kept_rounds(
            self.keep, costs, [len(r.messages) for r in pending], window=budget.window
        )
        done = after_reply and answered(pending)
        eligible = max(len(pending) - (0 if keep == 0 and done else max(keep, 1)), 0)
        reasons: list[TriggerReason] = []
        chosen, note = self._cost_choice(
            target, state, summary, pending, costs, timing, fixed, summary_tokens, eligible
        )
        if chosen:
            reasons.append("cost")
        trigger = self.trigger
        if trigger.clauses and eligible:
            view_tokens = fixed + summary_tokens + pinned_tokens + sum(costs)
            if self._trigger_fires(target, parts, summary, pending, view_tokens):
                chosen = max(chosen, eligible)
                reasons.append(clause_reason(trigger))
        if (
            trigger.idle is not None
            and len(pending) >= 2
            and idle_gap_passed(parts, trigger.idle, self.timestamp_getter)
        ):
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
            answered=done,
        )
        if choice.forced:
            reasons.append("budget")
        chunks = fold_chunks(pending, choice.calls, pinned)
        room = budget.tokens - fixed - pinned_tokens
        fold = self._latest_fold(parts, pending, costs, sum(choice.calls), room, summary_tokens)
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
            reason=explain_plan(choice, chunks, reasons, len(pending), budget, note),
            view_tokens=choice.view_tokens,
        )
        return plan, parts

    def _measure(
        self,
        parts: TailParts,
        state: TailState | None,
        clean: bool,
        summary: RunningSummary | None,
        timing: TailTiming,
    ) -> tuple[Sequence[Round], Sequence[int], int]:
        """The pending rounds, their tokens and the preamble's, from ``state`` when known.

        On the full path the tail read is recorded for the next call when it broke no rule.
        """
        pending: Sequence[Round]
        costs: Sequence[int] | None
        fixed: int | None = None
        if state is not None:  # read only: the state's own tuples, not copies
            pending, costs, fixed = state.rounds, state.costs, state.fixed_tokens
        else:
            covered = summary.covered_ids if summary is not None else frozenset()
            pending = pending_of(parts.tail, covered)
            costs = round_costs(self.token_counter, pending)
            fixed = self._fixed_tokens(parts)
            if clean and summary is not None:
                record(self, summary, parts, pending, costs, timing, fixed)
        assert costs is not None
        if fixed is None:
            fixed = self._fixed_tokens(parts)
        return pending, costs, fixed

    def _cost_choice(
        self,
        target: AnsweringTarget,
        state: TailState | None,
        summary: RunningSummary | None,
        pending: Sequence[Round],
        costs: Sequence[int],
        timing: TailTiming,
        fixed: int,
        summary_tokens: int,
        eligible: int,
    ) -> tuple[int, str]:
        """Rounds the cost schedule folds (0: none) and its note for the plan's reason."""
        schedule = target.schedule
        if schedule is None:
            return 0, ""
        if not eligible:
            return 0, f"cost ({target.pricing}): nothing old enough to fold"
        if state is not None and state.loads is not None:
            loads: Sequence[RoundLoad] = state.loads
        else:
            loads = round_loads(
                [r.messages for r in pending],
                costs,
                timestamp=timing.timestamp,
                lifetime=schedule.pricing.cache_lifetime,
            )
        decision = schedule.decide(
            fixed_tokens=fixed,
            summary_tokens=summary_tokens,
            rounds=loads,
            rounds_so_far=len(loads) + (summary.rounds_covered if summary else 0),
        )
        return decision.rounds, cost_note(decision, target.pricing)

    def _trigger_fires(
        self,
        target: AnsweringTarget,
        parts: TailParts,
        summary: RunningSummary | None,
        pending: Sequence[Round],
        view_tokens: int,
    ) -> bool:
        """Whether a threshold of the trigger is reached by the view (``view_tokens`` long)."""
        trigger = self.trigger
        shown = len(parts.preamble) + (1 if summary is not None else 0) + len(parts.pinned)
        size = ConversationSize(
            view_tokens, shown + sum(len(r.messages) for r in pending), len(pending)
        )
        if trigger.use_usage_metadata:
            lead = parts.lead if summary is None else parts.preamble
            view_now = [*lead, *self._summary_messages(summary), *parts.pinned, *parts.tail]
            size = trigger.measure(
                view_now, counter=self.token_counter, pending=pending, provider=target.provider
            )
        return trigger.fires(size, window=target.budget.window)

    def _latest_fold(
        self,
        parts: TailParts,
        pending: Sequence[Round],
        costs: Sequence[int],
        folded: int,
        room: int,
        summary_tokens: int,
    ) -> CompressionChunk | None:
        """Older tool steps of the latest round to fold when it does not fit on its own.

        ``room`` is the budget less the preamble and pinned messages; the rounds after the
        ``folded`` oldest and the summary (grown to its cap) take their share of it too.
        """
        latest_is_last = bool(pending) and pending[-1].messages[-1] is parts.tail[-1]
        if not latest_is_last or folded >= len(pending):
            return None
        kept_tokens = sum(costs[folded:-1])
        if not folded and summary_tokens + kept_tokens + costs[-1] <= room:
            return None  # the view fits as it is: a fold would only add a summary to it
        # a fold of older tool steps makes (or grows) the summary too
        new_summary = max(summary_tokens, self.max_summary_tokens)
        room = room - new_summary - kept_tokens
        if costs[-1] <= room:
            return None
        return oversized_fold(pending[-1], max(room, 0), self.token_counter)

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
        target: AnsweringTarget,
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
        target: AnsweringTarget,
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
            expected -= self._shown_summary_tokens(parts, summary)
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
        target = self.target_for(context_window)
        plan, parts = self._plan(messages, summary, target, after_reply, overhead_tokens)
        updates: list[SummaryUpdate] = []
        current = summary
        for chunk in plan.chunks:
            update = self.summarizer.summarize(**_call(chunk, current, plan, config))
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
            update = await self.summarizer.asummarize(**_call(chunk, current, plan, config))
            updates.append(update)
            current = update.summary
        return self._finish(parts, plan, updates, summary, target, overhead_tokens)


def _call(
    chunk: CompressionChunk,
    current: RunningSummary | None,
    plan: CompressionPlan,
    config: RunnableConfig | None,
) -> dict[str, Any]:
    """The summarizer's arguments for folding ``chunk`` into ``current`` (sync and async)."""
    return {
        "messages": chunk.messages,
        "previous": current,
        "rounds": chunk.rounds,
        "partial_round": chunk.partial_round,
        "previous_text": plan.previous_text if current is None else None,
        "config": config,
    }
