"""Rolling round compression: fold the oldest rounds into a running summary, keep the newest.

`RoundCompressor` folds the oldest uncompressed rounds into a running summary (one summarizer
call builds the new summary from the previous summary and those rounds); the newest
``rounds_to_retain`` rounds stay verbatim. By default a fold is a cost decision
(`schedule.FoldSchedule` under the ``pricing`` model): the backlog is folded in one call once
re-sending it has cost as much as folding it would and the fold is likely to repay itself, so a
short conversation never calls the summarizer and a long one folds every few rounds (without
prompt caching) or when the provider's cache has gone cold (with it). With
``compress_on_rounds=True`` it follows the round-compression design instead: once
``rounds_to_compress`` + ``rounds_to_retain`` uncompressed rounds exist (the latest round
counts), the oldest ``rounds_to_compress`` are folded; replaying a conversation one round at a
time with 2 + 3, the first call happens at round 5, then one call every second round: 100
rounds cost 48 calls.

Rules every setting keeps:

* Cuts fall between rounds; inside one oversized round only between whole tool groups, so an
  ``AIMessage`` with ``tool_calls`` is never separated from its ``ToolMessage`` objects.
* The last round (the one holding the latest human message) is never folded as a whole: with
  ``rounds_to_retain=0`` the latest round still counts as retained.
* Nothing is lost: every original message is either in the view verbatim or in the summary's
  ``covered_ids`` (the exact ids sent to the summarizer), never both.
* Compression is pure: ``compress`` returns a new view and summary and never changes its inputs;
  on a model failure it raises `SummarizationError` and the caller's state is untouched.
* Every history providers accept is valid input (the rule is in `~langchain_histcompress.rounds`):
  tool call ids reused across steps, invalid tool calls answered by tool messages, system
  messages inside the conversation. Those system messages are pinned: never folded, shown
  verbatim (after the summary once the rest of their round is folded).
* The view always obeys the provider rules: a broken history (a stray tool result, a call left
  unanswered) is compressed as it is and its view repaired, logged (`rounds.repair_history`);
  ``on_invalid_history="raise"`` raises `InvalidHistoryError` instead.

Other triggers cut at the same round boundaries: ``compression_threshold_tokens`` (the
uncompressed part is too large), ``idle_gap`` (the user came back after a pause: everything before
the resumed round is folded) and ``max_round_tokens`` (the latest round alone is too large: its
older tool groups are folded, the human message and the newest steps stay). A backlog (compression
enabled late, imported history) is folded in chunks of ``rounds_to_compress`` rounds, one call
per chunk, at most ``max_calls_per_compress`` calls per ``compress``; the rest stays verbatim in
the view and the next ``compress`` continues.

Work per call follows the uncovered tail, not the history: once a summary has been used with a
history, it privately remembers (by object identity, never in its data) where that history's
uncovered tail starts, and later calls on the grown history check that spot (the ids around
it, then one pointer comparison of the covered prefix against the message objects seen
before, in place: it neither copies nor reads a message) instead of scanning the covered
prefix; a fold records the newly covered messages by appending them to that record, shared by
the summaries of one lineage, instead of copying the prefix (see `_tail`). When the check
fails (messages removed, inserted or replaced, another history) the prefix is scanned again.
Covered prefix messages are not read at all, so they are not type-checked either. The tail
itself is not re-read either while it only grows: its rounds, token costs and validity are
kept from the previous call and extended by the new messages (see `_tail_state`).

Example:
    >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    >>> model = GenericFakeChatModel(messages=iter(
    ...     [AIMessage('{"ConversationSummary": "The user counted to two."}')]))
    >>> compressor = RoundCompressor(model, rounds_to_compress=2, rounds_to_retain=1,
    ...                              token_counter="approximate", compress_on_rounds=True)
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
import math
from collections.abc import Awaitable, Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from langchain_histcompress._memos import memo
from langchain_histcompress._tail import _lead_end, _Parts, _prefix_ids
from langchain_histcompress._tail import _locate as _locate
from langchain_histcompress._tail import _summary_detached as _summary_detached
from langchain_histcompress._tail import _with_ids as _with_ids
from langchain_histcompress._tail_state import _TailState, _Timing, carry, grow, record
from langchain_histcompress._views import SUMMARY_METADATA_KEY as SUMMARY_METADATA_KEY
from langchain_histcompress._views import Placement as Placement
from langchain_histcompress._views import _check_placement, _visible, _with_summary
from langchain_histcompress._views import _view as _view
from langchain_histcompress._views import view as view
from langchain_histcompress.errors import ConfigurationError, InvalidHistoryError
from langchain_histcompress.pricing import DEFAULT_PRICING, PRICING_MODELS, PricingModel
from langchain_histcompress.render import message_text
from langchain_histcompress.rounds import (
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
from langchain_histcompress.schedule import FoldSchedule, RoundLoad, round_loads
from langchain_histcompress.summary import (
    _TEXT_TOKENS_KEY,
    RunningSummary,
    Summarizer,
    SummaryProfile,
    SummaryUpdate,
    build_summary_prompt,
)
from langchain_histcompress.tokens import TiktokenCounter, TokenCounter, message_costs
from langchain_histcompress.triggers import CompressionTrigger

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

TriggerReason = Literal["rounds", "tokens", "idle_gap", "oversized_round", "trigger", "cost"]
"""Why a compression was planned."""

OnInvalidHistory = Literal["repair", "raise"]
"""What `RoundCompressor` does with a history a provider would reject (see
`~langchain_histcompress.rounds`): compress it and send a repaired view, or raise."""

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
        kept = _visible(round_.messages, covered)
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
    return _pending(_locate(messages, summary).tail, covered)


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


class RoundCompressor:
    """Rolling round compression of a chat history into a running summary.

    Args:
        model: The summarizer chat model (may be cheaper than the answering model), or a
            ``"provider:model"`` string for `models.chat_model_from_spec`.
        rounds_to_compress: Rounds folded per summarizer call.
        rounds_to_retain: Newest rounds always kept verbatim (the latest round is always
            kept, so 0 behaves like 1 for the trigger).
        profile: ``"conversation"``, ``"code"``, ``"text"`` or a pydantic model class.
        structured_output: Call ``model.with_structured_output(schema)`` instead of plain
            invoke + robust parsing.
        placement: ``"system_message"`` or ``"append_to_system"`` (see `view`).
        enabled: ``False`` turns compression off: ``compress`` only builds the view.
        compress_on_rounds: ``True`` folds by round count instead of by cost (TaskWeaver:
            ``rounds_to_compress`` rounds once ``rounds_to_compress + rounds_to_retain`` are
            pending, whatever it costs); ``False`` leaves only the token / idle triggers.
            Default (``None``): fold by cost (see ``pricing``), unless ``trigger`` is given.
        trigger: A `CompressionTrigger` (``SummarizationMiddleware``-style trigger and keep:
            fractions of the context window, tokens, messages, AND / OR, usage metadata, a cap
            on each summarizer call's input).
        fold_answered_round: With ``rounds_to_retain=0``, also fold the latest round once it
            is answered (it ends with an AI message without tool calls): for compressing after
            the reply (`compress_in_background` does it by default). Never set it on a
            compressor that runs before a model call: that call needs the latest question.
        compression_threshold_tokens: Also compress when the uncompressed part exceeds this
            many tokens (oldest rounds first, ``rounds_to_retain`` kept).
        idle_gap: Also compress everything before the latest round when its human message
            came more than this long after the previous message.
        timestamp_getter: Reads a message's time (default `message_timestamp`).
        max_round_tokens: Fold the older tool groups of the latest round when that round alone
            exceeds this many tokens.
        pricing: The answering model's prices and prompt-cache rules: a
            `pricing.PricingModel` or a preset name of ``pricing.PRICING_MODELS``. Rounds are
            folded by cost (`schedule.FoldSchedule`): the backlog in one call once re-sending
            it has cost as much as folding it and folding is expected to repay itself
            (never on a short conversation; ``rounds_to_retain`` newest rounds and, under
            caching, a cacheable floor always kept). ``None`` (default) means the
            ``pricing.DEFAULT_PRICING`` preset (``"openai-50"``, the gpt-4o family) unless
            ``compress_on_rounds=True`` or a ``trigger`` is given.
        max_calls_per_compress: Upper bound on summarizer calls per ``compress``; a larger
            backlog stays verbatim and the next call continues.
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
            accepted-history rule in `~langchain_histcompress.rounds`): ``"repair"``
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
        >>> RoundCompressor(model, token_counter="approximate").plan(history).chunks  # by cost
        ()
        >>> compressor = RoundCompressor(model, token_counter="approximate",
        ...                              compress_on_rounds=True)
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
        rounds_to_compress: int = 2,
        rounds_to_retain: int = 3,
        profile: SummaryProfile = "conversation",
        structured_output: bool = False,
        placement: Placement = "system_message",
        enabled: bool = True,
        compress_on_rounds: bool | None = None,
        trigger: CompressionTrigger | None = None,
        fold_answered_round: bool = False,
        compression_threshold_tokens: int | None = None,
        idle_gap: timedelta | None = None,
        timestamp_getter: Callable[[BaseMessage], datetime | None] | None = None,
        max_round_tokens: int | None = None,
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
        pricing: PricingModel | str | None = None,
    ) -> None:
        """Validate the configuration (see the class docstring)."""
        if isinstance(pricing, str) and pricing not in PRICING_MODELS:
            msg = f"unknown pricing {pricing!r}; presets: {', '.join(PRICING_MODELS)}"
            raise ConfigurationError(msg)
        _check_int("rounds_to_compress", rounds_to_compress, 1)
        _check_int("rounds_to_retain", rounds_to_retain, 0)
        _check_int("max_calls_per_compress", max_calls_per_compress, 1)
        _check_optional_int("compression_threshold_tokens", compression_threshold_tokens, 1)
        _check_optional_int("max_round_tokens", max_round_tokens, 1)
        _check_placement(placement)
        if on_invalid_history not in _ON_INVALID:
            msg = (
                f"on_invalid_history must be one of {list(_ON_INVALID)}, got {on_invalid_history!r}"
            )
            raise ConfigurationError(msg)
        if idle_gap is not None and (
            not isinstance(idle_gap, timedelta) or idle_gap <= timedelta(0)
        ):
            msg = f"idle_gap must be None or a positive timedelta, got {idle_gap!r}"
            raise ConfigurationError(msg)
        if timestamp_getter is not None and not callable(timestamp_getter):
            msg = f"timestamp_getter must be callable, got {timestamp_getter!r}"
            raise ConfigurationError(msg)
        if trigger is not None and not isinstance(trigger, CompressionTrigger):
            msg = f"trigger must be a CompressionTrigger or None, got {type(trigger).__name__}"
            raise ConfigurationError(msg)
        if compress_on_rounds is True and pricing is not None:
            msg = "pass either pricing (fold by cost) or compress_on_rounds=True (by round count)"
            raise ConfigurationError(msg)
        # by default rounds are folded by cost, unless another trigger was chosen
        by_cost = pricing is not None or (compress_on_rounds is None and trigger is None)
        if compress_on_rounds is None:
            compress_on_rounds = False
        if isinstance(model, str):
            from langchain_histcompress.models import chat_model_from_spec

            model = chat_model_from_spec(model)
        for name, flag in (
            ("structured_output", structured_output),
            ("enabled", enabled),
            ("compress_on_rounds", compress_on_rounds),
            ("fold_answered_round", fold_answered_round),
        ):
            if not isinstance(flag, bool):
                msg = f"{name} must be a bool, got {flag!r}"
                raise ConfigurationError(msg)
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
        self.rounds_to_compress = rounds_to_compress
        self.rounds_to_retain = rounds_to_retain
        self.placement: Placement = placement
        self.enabled = enabled
        self.compress_on_rounds = compress_on_rounds
        self.trigger = trigger.bind(model) if trigger is not None else None
        self.fold_answered_round = fold_answered_round
        self.compression_threshold_tokens = compression_threshold_tokens
        self.idle_gap = idle_gap
        self.timestamp_getter = timestamp_getter or message_timestamp
        self.max_round_tokens = max_round_tokens
        self.max_calls_per_compress = max_calls_per_compress
        self.on_invalid_history: OnInvalidHistory = on_invalid_history
        self.schedule: FoldSchedule | None = None
        self._timing_made: _Timing | None = None
        self._framing_made: tuple[TiktokenCounter, int] | None = None
        if by_cost:
            preset = DEFAULT_PRICING if pricing is None else pricing
            framing = build_summary_prompt([], config=self.summarizer.config)
            self.schedule = FoldSchedule(
                pricing=PRICING_MODELS[preset] if isinstance(preset, str) else preset,
                summary_tokens=max_summary_tokens,
                instruction_tokens=self.token_counter(framing),
                retain_rounds=max(rounds_to_retain, 1),
            )

    @property
    def token_counter(self) -> TokenCounter:
        """The token counter used by the token triggers and the summary cap."""
        return self.summarizer.token_counter

    def __repr__(self) -> str:
        """Show the main settings (never message content)."""
        return (
            f"{type(self).__name__}(model={self.summarizer.model_name!r}, "
            f"rounds_to_compress={self.rounds_to_compress}, "
            f"rounds_to_retain={self.rounds_to_retain}, "
            f"profile={self.summarizer.config.profile!r}, enabled={self.enabled})"
        )

    # ----------------------------------------------------------------- planning (pure)

    def _timing(self) -> _Timing:
        lifetime = self.schedule.pricing.cache_lifetime if self.schedule is not None else None
        getter = self.timestamp_getter
        costs = (
            self.schedule is not None
            or self.compression_threshold_tokens is not None
            or self.trigger is not None
        )
        settings = (self.token_counter, getter, lifetime, costs)
        made = self._timing_made
        if made is None or made.settings != settings:
            made = self._timing_made = _Timing(
                lambda m: _to_datetime(getter(m)), lifetime, costs=costs, settings=settings
            )
        return made

    def _check_input(
        self, messages: Sequence[BaseMessage], summary: object, timing: _Timing
    ) -> tuple[_Parts, _TailState | None, bool]:
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
            grown = grow(self, messages, summary, _lead_end(messages), self.token_counter, timing)
            if grown is not None:
                return grown[0], grown[1], True
        parts = _locate(messages, summary)
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
        in_prefix = _prefix_ids(parts, summary)
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

    def _rounds_over_threshold(self, costs: Sequence[int], eligible: int) -> int:
        threshold = self.compression_threshold_tokens
        assert threshold is not None
        remaining = sum(costs)
        if remaining <= threshold:
            return 0
        needed = 0
        while remaining > threshold and needed < eligible:
            remaining -= costs[needed]
            needed += 1
        step = self.rounds_to_compress
        return min(math.ceil(needed / step) * step, eligible)

    def _summary_messages(self, summary: RunningSummary | None) -> list[BaseMessage]:
        return [] if summary is None else view([], summary, placement="system_message")

    def _idle(self, parts: _Parts, gap: timedelta | None = None) -> bool:
        gap = gap or self.idle_gap
        assert gap is not None
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

    def _fixed_tokens(self, parts: _Parts) -> int:
        return sum(message_costs(self.token_counter, parts.preamble))

    def _summary_tokens(self, summary: RunningSummary) -> int:
        """Tokens of ``summary``'s text as a system message, counted once per summary."""
        counter = self.token_counter
        cache = memo(summary)
        known = cache.get(_SUMMARY_TOKENS_KEY)
        if known is not None and known[0] is counter:
            return int(known[1])
        text = cache.get(_TEXT_TOKENS_KEY)
        if type(counter) is TiktokenCounter and text is not None and text[0] is counter:
            # its text was counted when the summary was made: a system message adds a fixed
            # framing to its text's tokens, so the text is not encoded again
            tokens = int(text[1]) + self._system_framing(counter)
        else:
            tokens = counter([SystemMessage(summary.text)])
        cache[_SUMMARY_TOKENS_KEY] = (counter, tokens)
        return tokens

    def _system_framing(self, counter: TiktokenCounter) -> int:
        """Tokens ``counter`` gives a system message beyond those of its text."""
        made = self._framing_made
        if made is None or made[0] is not counter:
            made = self._framing_made = (counter, counter([SystemMessage("")]))
        return made[1]

    def _scheduled(
        self,
        parts: _Parts,
        summary: RunningSummary | None,
        loads: Sequence[RoundLoad],
        fixed_tokens: int | None,
    ) -> int:
        """Rounds the cost schedule folds now (see `schedule.FoldSchedule`)."""
        schedule = self.schedule
        assert schedule is not None
        decision = schedule.decide(
            fixed_tokens=self._fixed_tokens(parts) if fixed_tokens is None else fixed_tokens,
            summary_tokens=self._summary_tokens(summary) if summary else 0,
            rounds=loads,
            rounds_so_far=len(loads) + (summary.rounds_covered if summary else 0),
        )
        return decision.rounds

    def _oversized_fold(self, latest: Round) -> CompressionChunk | None:
        limit = self.max_round_tokens
        assert limit is not None
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
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None = None
    ) -> CompressionPlan:
        """Decide what `compress` would fold, without calling the model.

        Args:
            messages: The full original history (every non-system message with an id).
            summary: The current summary (``None`` before the first compression).

        Raises:
            InvalidHistoryError: Two messages share an id, or ``on_invalid_history="raise"``
                and the history breaks the provider rules.
            ConfigurationError: A message has no id, or ``summary`` has the wrong type.

        Example:
            >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
            >>> from langchain_core.messages import HumanMessage
            >>> compressor = RoundCompressor(GenericFakeChatModel(messages=iter([])),
            ...                              token_counter="approximate", compress_on_rounds=True)
            >>> history = [HumanMessage(str(n), id=f"h{n}") for n in range(5)]
            >>> plan = compressor.plan(history)
            >>> [[m.id for m in c.messages] for c in plan.chunks], plan.reasons
            ([['h0', 'h1']], ('rounds',))
        """
        return self._plan(messages, summary)[0]

    def _plan(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None
    ) -> tuple[CompressionPlan, _Parts]:
        timing = self._timing()
        parts, state, clean = self._check_input(messages, summary, timing)
        costs: Sequence[int] | None = None
        pending: Sequence[Round]
        if state is not None:  # read only: the state's own tuples, not copies
            pending = state.rounds
            costs = state.costs
        else:
            covered = summary.covered_ids if summary is not None else frozenset()
            pending = _pending(parts.tail, covered)
            if clean and summary is not None:
                costs = self._costs(pending) if timing.costs else None
                fixed = self._fixed_tokens(parts) if self.schedule is not None else None
                record(self, summary, parts, pending, costs, timing, fixed)

        def pending_costs() -> Sequence[int]:
            nonlocal costs
            if costs is None:
                costs = self._costs(pending)
            return costs

        step = self.rounds_to_compress
        retain = max(self.rounds_to_retain, 1)
        if self.fold_answered_round and self.rounds_to_retain == 0 and _answered(pending):
            retain = 0
        eligible = max(len(pending) - retain, 0)
        due = 0
        reasons: list[TriggerReason] = []
        if self.schedule is not None:
            if state is not None and state.loads is not None:
                loads: Sequence[RoundLoad] = state.loads
            else:
                loads = round_loads(
                    [r.messages for r in pending],
                    pending_costs(),
                    timestamp=timing.timestamp,
                    lifetime=self.schedule.pricing.cache_lifetime,
                )
            fixed = state.fixed_tokens if state is not None else None
            due = self._scheduled(parts, summary, loads, fixed)
            if due:
                reasons.append("cost")
        elif self.compress_on_rounds and eligible >= step:
            due = eligible // step * step
            reasons.append("rounds")
        if self.compression_threshold_tokens is not None and eligible:
            needed = self._rounds_over_threshold(pending_costs(), eligible)
            if needed:
                due = max(due, needed)
                reasons.append("tokens")
        if self.idle_gap is not None and len(pending) >= 2 and self._idle(parts):
            due = max(due, len(pending) - 1)
            reasons.append("idle_gap")
        if self.trigger is not None:
            lead = parts.lead if summary is None else parts.preamble
            shown = [*lead, *self._summary_messages(summary), *parts.tail]
            needed = self.trigger.due_rounds(
                shown, pending, counter=self.token_counter, retain=self.rounds_to_retain
            )
            if needed:
                due = max(due, needed)
                reasons.append("trigger")
            sizes = self.trigger.chunk_sizes(pending_costs()[:due], due)
        elif self.schedule is not None:
            sizes = [due] if due else []  # the whole backlog in one call
        else:
            sizes = [min(step, due - start) for start in range(0, due, step)]
        starts = list(itertools.accumulate(sizes, initial=0))
        chunks = [
            CompressionChunk(
                tuple(m for r in pending[start : start + size] for m in r.foldable), rounds=size
            )
            for start, size in zip(starts, sizes, strict=False)
        ][: self.max_calls_per_compress]
        deferred = due - sum(c.rounds for c in chunks)
        latest_is_last = bool(pending) and pending[-1].messages[-1] is parts.tail[-1]
        if (
            self.max_round_tokens is not None
            and latest_is_last
            and len(chunks) < self.max_calls_per_compress
        ):
            fold = self._oversized_fold(pending[-1])
            if fold is not None:
                chunks.append(fold)
                reasons.append("oversized_round")
        previous_text = None
        if summary is None and chunks:
            stale = [m for m in messages if is_summary_message(m)]
            previous_text = "\n\n".join(message_text(m) for m in stale) or None
        plan = CompressionPlan(
            chunks=tuple(chunks),
            pending_rounds=len(pending),
            deferred_rounds=deferred,
            reasons=tuple(reasons),
            previous_text=previous_text,
        )
        return plan, parts

    # ----------------------------------------------------------------- compress

    def view(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None = None
    ) -> list[BaseMessage]:
        """The model view for ``summary`` with this compressor's placement (no model call)."""
        return view(messages, summary, placement=self.placement)

    def _unchanged(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None
    ) -> CompressionResult:
        return CompressionResult(self.view(messages, summary), summary, compressed=False, calls=0)

    def _finish(
        self,
        parts: _Parts,
        plan: CompressionPlan,
        updates: list[SummaryUpdate],
        summary: RunningSummary | None,
    ) -> CompressionResult:
        if plan.chunks:
            logger.info(
                "compressed %d chunk(s) (%s) in %d attempt(s); %d round(s) deferred",
                len(plan.chunks),
                ",".join(plan.reasons),
                sum(u.attempts for u in updates),
                plan.deferred_rounds,
            )
        final = updates[-1].summary if updates else summary
        if final is None:
            messages = repair_history(parts.messages).messages
        elif final is summary and parts.grown:
            # the grown tail is valid, holds no covered id and no system message, and the
            # summary and pinned messages before it close every tool step: nothing to repair
            head = _with_summary(parts.preamble, final, self.placement)
            messages = [*head, *parts.pinned, *parts.tail]
        else:
            carried = False
            if final is not summary:  # coverage only grew: the new tail starts no earlier
                before = parts
                parts = _locate(
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
                head = _with_summary(parts.preamble, final, self.placement)
                messages = [*head, *parts.pinned, *parts.tail]
            else:
                messages = _view(parts, final, self.placement)
        return CompressionResult(
            messages=messages,
            summary=final,
            compressed=bool(updates),
            calls=len(updates),
            attempts=sum(u.attempts for u in updates),
            deferred_rounds=plan.deferred_rounds,
            updates=tuple(u.summary for u in updates),
        )

    def compress(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None = None,
        *,
        config: RunnableConfig | None = None,
    ) -> CompressionResult:
        """Fold due rounds into the summary and return the new view and summary.

        Args:
            messages: The full original history, every non-system message with an id
                (messages already in ``summary.covered_ids`` are skipped).
            summary: The current summary (``None`` before the first compression).
            config: Caller's runnable config (callbacks...); summarizer calls add their own
                internal tags to a copy.

        Returns:
            The view, the (possibly new) summary and call counts. Nothing is changed in place.

        Raises:
            SummarizationError: A summarizer call failed after bounded retries (no result;
                the caller keeps its previous summary).
            InvalidHistoryError: Two messages share an id, or ``on_invalid_history="raise"``
                and the history breaks the provider rules.
            ConfigurationError: A message has no id.
        """
        if not self.enabled:
            return self._unchanged(messages, summary)
        plan, parts = self._plan(messages, summary)
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
        return self._finish(parts, plan, updates, summary)

    async def acompress(
        self,
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None = None,
        *,
        config: RunnableConfig | None = None,
    ) -> CompressionResult:
        """Async `compress` (same arguments and guarantees; cancellation propagates)."""
        if not self.enabled:
            return self._unchanged(messages, summary)
        plan, parts = self._plan(messages, summary)
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
        return self._finish(parts, plan, updates, summary)
