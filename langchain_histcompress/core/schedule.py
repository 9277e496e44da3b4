"""Folding as a cost decision: fold only when it is expected to save more than it costs.

`FoldSchedule.decide` answers two questions in units of one uncached input token, under the
answering model's pricing and cache rules: **when** (fold the oldest rounds once the rent
already paid for re-sending them reaches the fold's overhead) and **whether** (the tokens a
fold removes must repay its whole cost, with 90% confidence, on the requests still to come).
A verbatim floor keeps the view cacheable. The model, its formulas and the reasoning behind
them are in ``docs/design/core.md``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.pricing import DEFAULT_PRICING, PRICING_MODELS, PricingModel

__all__ = [
    "FoldDecision",
    "FoldReason",
    "FoldSchedule",
    "RoundLoad",
    "round_loads",
    "starts_cold",
]

logger = logging.getLogger(__name__)

FoldReason = Literal["cold", "rent", "none"]
"""Why a fold was chosen: the cache is cold for the coming request (the fold costs no cache
miss), the rent paid for the folded rounds reached the fold's overhead, or no fold pays."""


@dataclass(frozen=True)
class RoundLoad:
    """A round not yet folded, as the schedule sees it.

    Example:
        >>> RoundLoad(tokens=120, requests=3, cold=True).requests
        3
    """

    tokens: int
    """Its tokens."""
    requests: int = 1
    """Model calls that sent it while it was the latest round (one per AI message; the
    latest round's count includes the coming request)."""
    cold: bool = False
    """Its first request found the cache cold (it came after a pause longer than the
    cache's lifetime)."""


@dataclass(frozen=True)
class FoldDecision:
    """What `FoldSchedule.decide` chose."""

    rounds: int
    """Oldest pending rounds to fold now, in one summarizer call (0: none)."""
    reason: FoldReason
    """Why."""
    net_saving: float
    """Saving minus cost over the median horizon (as many rounds as so far), in uncached
    input tokens (0.0 when not folding)."""
    cost: float = 0.0
    """Expected cost of the fold (call and cache miss), in uncached input tokens."""
    rent: float = 0.0
    """Rent already paid for carrying the folded rounds (coming request included)."""
    overhead: float = 0.0
    """The part of ``cost`` that folding now rather than later adds: all of it but the
    summarizer's read of the folded rounds (the rent reached it)."""


@dataclass(frozen=True)
class FoldSchedule:
    """Cost model of folding under one provider's prices and cache rules (see the module).

    Example:
        >>> FoldSchedule().floor, FoldSchedule(verbatim_floor=0).floor
        (1024, 0)
        >>> from langchain_histcompress.core.pricing import PRICING_MODELS
        >>> schedule = FoldSchedule(pricing=PRICING_MODELS["none"], summary_tokens=100)
        >>> short = [RoundLoad(tokens=80)] * 4
        >>> schedule.decide(fixed_tokens=50, summary_tokens=0, rounds=short).rounds
        0
        >>> long = [RoundLoad(tokens=400)] * 30
        >>> decision = schedule.decide(fixed_tokens=50, summary_tokens=0, rounds=long)
        >>> decision.rounds, decision.reason
        (29, 'rent')
    """

    pricing: PricingModel = PRICING_MODELS[DEFAULT_PRICING]
    """Prices and cache rules of the answering model's provider (default: ``openai-50``,
    the gpt-4o family); the summarizer is assumed to be billed the same way."""
    summary_tokens: int = 2048
    """Largest summary the summarizer writes (its cap): the expected size of a new summary."""
    instruction_tokens: int = 400
    """Tokens of the summarizer's instructions and framing, paid on every call."""
    retain_rounds: int = 1
    """Newest rounds never folded (the latest round always stays)."""
    payback_factor: float = 9.0
    """A fold must repay its cost within the coming request and ``1 / payback_factor`` of
    the rounds so far: with 9, a stretch the conversation outlasts with probability 9/10
    (see the module)."""
    verbatim_floor: int | None = None
    """Smallest preamble + kept rounds (in tokens) a fold may leave; ``None``
    for the provider's ``min_cached_tokens`` when it caches, else 0."""
    append_ratio: float | None = None
    """``None``: the call rewrites the summary (it reads the current one and writes the new
    one). A ratio: the call appends to a memory instead (fact extraction): it reads only the
    folded rounds after ``instruction_tokens``, writes ``append_ratio`` tokens per folded
    token, and the memory in the view grows by as much, up to ``summary_tokens``."""
    memory_ratio: float | None = None
    """With ``append_ratio``: tokens the memory in the view grows by per folded token, when
    it is shown in a terser form than the call writes (``None``: ``append_ratio``)."""

    def __post_init__(self) -> None:
        """Validate the settings."""
        if not isinstance(self.pricing, PricingModel):
            msg = f"pricing must be a PricingModel, got {type(self.pricing).__name__}"
            raise ConfigurationError(msg)
        for name, minimum in (("summary_tokens", 1), ("instruction_tokens", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                msg = f"{name} must be an integer >= {minimum}, got {value!r}"
                raise ConfigurationError(msg)
        if (
            isinstance(self.retain_rounds, bool)
            or not isinstance(self.retain_rounds, int)
            or self.retain_rounds < 1
        ):
            msg = f"retain_rounds must be an integer >= 1, got {self.retain_rounds!r}"
            raise ConfigurationError(msg)
        factor = self.payback_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor >= 1:
            msg = f"payback_factor must be a number >= 1, got {factor!r}"
            raise ConfigurationError(msg)
        for name in ("append_ratio", "memory_ratio"):
            ratio = getattr(self, name)
            if ratio is not None and (
                isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio >= 0
            ):
                msg = f"{name} must be None or a number >= 0, got {ratio!r}"
                raise ConfigurationError(msg)
        floor = self.verbatim_floor
        if floor is not None and (
            isinstance(floor, bool) or not isinstance(floor, int) or floor < 0
        ):
            msg = f"verbatim_floor must be None or an integer >= 0, got {floor!r}"
            raise ConfigurationError(msg)

    @property
    def floor(self) -> int:
        """The verbatim floor in effect."""
        if self.verbatim_floor is not None:
            return self.verbatim_floor
        return self.pricing.min_cached_tokens if self.pricing.caches else 0

    def _floor_for(self, head_tokens: int, rounds: Sequence[RoundLoad]) -> int:
        """The floor, when keeping the view cacheable is worth it.

        A cached view of ``floor`` tokens costs about ``r * floor`` per request, plus its new
        tokens (about a round) at the price new tokens are billed: written at the cache-write
        price where writes are charged (Anthropic), else in full, with on average half a
        ``cache_step`` more in full where the cache only holds whole steps (OpenAI). The view
        without a floor (``head_tokens``: preamble and the summary after the fold; the
        retained rounds) costs its size. The floor is kept only when it is the cheaper of the
        two (at 50% off, a short view sent in full costs less).
        """
        floor = self.floor
        if not floor or self.verbatim_floor is not None or not self.pricing.caches:
            return floor
        pricing = self.pricing
        read = pricing.cache_read_ratio
        if pricing.family == "anthropic":
            new_price, unheld = max(1.0, pricing.cache_write_ratio), 0.0
        else:
            new_price, unheld = 1.0, pricing.cache_step / 2
        retained = [r.tokens for r in rounds[-self.retain_rounds :]]
        mean_round = sum(r.tokens for r in rounds) / len(rounds)
        cached_view = read * floor + (new_price - read) * (mean_round + unheld)
        return floor if cached_view < head_tokens + sum(retained) else 0

    def _ratios(self) -> tuple[float, float, float]:
        """Output, cache-read and cold (cache-write) prices per input-token price."""
        pricing = self.pricing
        out = pricing.output_price / pricing.input_price if pricing.input_price else 1.0
        if not pricing.caches:
            return out, 1.0, 1.0
        return out, pricing.cache_read_ratio, max(1.0, pricing.cache_write_ratio)

    def _call(self, summary_tokens: int, folded: float, out: float) -> tuple[float, float]:
        """The summary after folding ``folded`` tokens, and the call's price."""
        if self.append_ratio is None:  # the call reads the summary and rewrites it
            new_summary = min(summary_tokens + folded, self.summary_tokens)
            return (
                new_summary,
                self.instruction_tokens + summary_tokens + folded + out * new_summary,
            )
        written = self.append_ratio * folded
        grown = written if self.memory_ratio is None else self.memory_ratio * folded
        new_summary = min(summary_tokens + grown, max(summary_tokens, self.summary_tokens))
        return new_summary, self.instruction_tokens + folded + out * written

    def decide(
        self,
        *,
        fixed_tokens: int,
        summary_tokens: int,
        rounds: Sequence[RoundLoad],
        rounds_so_far: int = 0,
        added_tokens: int = 0,
    ) -> FoldDecision:
        """Choose how many of the oldest pending rounds to fold now.

        Args:
            fixed_tokens: Tokens ahead of the summary that never change (system preamble,
                tools).
            summary_tokens: Tokens of the current summary (0 without one).
            rounds: Each pending round, oldest first, the latest last (its ``requests``
                counting the coming one).
            rounds_so_far: Rounds of the whole conversation, the latest and the folded ones
                included (at least ``len(rounds)`` are counted).
            added_tokens: Tokens the fold adds to every later request at the full input price
                (e.g. question-dependent data that only stands in for folded rounds).

        Example:
            >>> from langchain_histcompress.core.pricing import PRICING_MODELS
            >>> schedule = FoldSchedule(pricing=PRICING_MODELS["openai-90"], summary_tokens=128)
            >>> warm = [RoundLoad(tokens=300)] * 12
            >>> cold = [*warm[:-1], RoundLoad(tokens=300, cold=True)]
            >>> state = dict(fixed_tokens=60, summary_tokens=128, rounds_so_far=200)
            >>> schedule.decide(rounds=warm, **state).rounds
            0
            >>> decision = schedule.decide(rounds=cold, **state)
            >>> decision.rounds, decision.reason
            (9, 'cold')
        """
        out, read, write = self._ratios()
        pricing = self.pricing
        retain = self.retain_rounds
        eligible = len(rounds) - retain
        if eligible <= 0:
            return FoldDecision(0, "none", 0.0)
        out_summary = self._call(summary_tokens, sum(r.tokens for r in rounds[:eligible]), out)[0]
        floor = self._floor_for(fixed_tokens + max(summary_tokens, round(out_summary)), rounds)
        latest = rounds[-1]
        cold_now = latest.cold and latest.requests <= 1
        prices, prompt, total_requests, colds = self._paid(
            rounds, fixed_tokens + summary_tokens, read, write
        )
        caches, min_cached = pricing.caches, pricing.min_cached_tokens
        # rent of round i: the requests that sent it while it could have been folded (at least
        # `retain` rounds and the floor's tokens after it)
        paid_after = [*reversed([*itertools.accumulate(reversed(prices))]), 0.0]  # suffix sums
        tokens_after = [*reversed([*itertools.accumulate(r.tokens for r in reversed(rounds))]), 0]
        horizon = max(rounds_so_far, len(rounds))  # rounds to come; one request each is sure
        cold_share = colds / total_requests
        now_price = _carry(pricing, read, write, prompt, cold=cold_now)
        likely = max(1.0, horizon / self.payback_factor)
        future_price = cold_share * write + (1 - cold_share) * _carry(
            pricing, read, write, prompt, cold=False
        )
        total = sum(r.tokens for r in rounds)
        best = FoldDecision(0, "none", 0.0)
        folded = rent = 0.0
        # per-fold constants, hoisted out of the loop (the same values, computed once)
        count = len(rounds)
        missed = caches and not cold_now and prompt >= min_cached
        miss_ratio = max(0.0, write - read)
        fixed_after = fixed_tokens if fixed_tokens < floor else 0
        head = fixed_tokens + summary_tokens  # stays in the view: counts towards the floor
        likely_price = now_price + future_price * (likely - 1)
        likely_added = added_tokens * likely
        horizon_price = now_price + future_price * (horizon - 1)
        horizon_added = added_tokens * horizon
        for k in range(1, eligible + 1):
            tokens = rounds[k - 1].tokens
            folded += tokens
            first = k - 1 + retain  # the first round after which round k-1 was foldable
            while first < count and head + tokens_after[k] - tokens_after[first + 1] < floor:
                first += 1
            rent += tokens * paid_after[first]
            kept = total - folded
            if head + kept < floor:
                break  # folding more would only shrink the view further below the floor
            new_summary, call = self._call(summary_tokens, folded, out)
            miss = 0.0
            if missed:
                miss = (new_summary + kept + fixed_after) * miss_ratio
            cost = call + miss
            overhead = cost - folded  # the folded rounds' read is paid whenever they fold
            removed = folded - (new_summary - summary_tokens)
            # the coming request is certain, the others as likely as the horizon says
            confident = removed * likely_price - likely_added
            net = removed * horizon_price - horizon_added - cost
            if rent >= overhead and confident >= cost and net > best.net_saving:
                reason: FoldReason = "cold" if cold_now and caches else "rent"
                best = FoldDecision(k, reason, net, cost, rent, overhead)
        return best

    def _paid(
        self, rounds: Sequence[RoundLoad], prompt: int, read: float, write: float
    ) -> tuple[list[float], int, int, int]:
        """What re-sending each round has cost so far.

        Returns the price each round's requests paid per re-sent token, the view's size
        after the last round (``prompt`` is the size before the first), and the requests
        and cold starts counted.
        """
        prices: list[float] = []
        total_requests = colds = 0
        caches, min_cached = self.pricing.caches, self.pricing.min_cached_tokens
        for load in rounds:  # `_carry` inlined: this runs on every turn
            prompt += load.tokens
            requests = max(1, load.requests)
            if caches and prompt >= min_cached:
                first, warm = (write if load.cold else read), read
            else:
                first = warm = 1.0
            prices.append(first + (requests - 1) * warm)
            total_requests += requests
            colds += load.cold
        return prices, prompt, total_requests, colds


def _carry(
    pricing: PricingModel, read: float, write: float, prompt_tokens: int, *, cold: bool
) -> float:
    """Price of one re-sent token of a request of ``prompt_tokens`` tokens.

    ``read`` and ``write`` are the cache-read and cache-write price ratios.
    """
    if not pricing.caches or prompt_tokens < pricing.min_cached_tokens:
        return 1.0
    return write if cold else read


def starts_cold(
    first: BaseMessage,
    previous: BaseMessage | None,
    timestamp: Callable[[BaseMessage], datetime | None],
    lifetime: float,
) -> bool:
    """Whether a round opened by ``first`` found the cache cold (``previous`` before it).

    It did when ``first`` came more than ``lifetime`` seconds after ``previous``; unknown
    times (or no previous message) never count as a pause.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> starts_cold(HumanMessage("hi"), None, timestamp=lambda m: None, lifetime=300)
        False
    """
    if previous is None:
        return False
    start, end = timestamp(first), timestamp(previous)
    return start is not None and end is not None and (start - end).total_seconds() > lifetime


def round_loads(
    rounds: Sequence[Sequence[BaseMessage]],
    tokens: Sequence[int],
    *,
    timestamp: Callable[[BaseMessage], datetime | None],
    lifetime: float,
    before: BaseMessage | None = None,
    upcoming: bool = True,
) -> list[RoundLoad]:
    """The `RoundLoad` of each pending round from its messages.

    A round's requests are its AI messages (one model call each), plus the coming request
    for the latest round when ``upcoming``; it starts cold when its first message came more
    than ``lifetime`` seconds after the message before it (``before`` for the first round;
    unknown times never count as a pause).

    Example:
        >>> from datetime import datetime, timedelta
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> t0 = datetime(2024, 5, 1)
        >>> def at(s):
        ...     return {"timestamp": (t0 + timedelta(seconds=s)).isoformat()}
        >>> first = [HumanMessage("a", additional_kwargs=at(0)),
        ...          AIMessage("b", additional_kwargs=at(5))]
        >>> second = [HumanMessage("c", additional_kwargs=at(9000))]
        >>> read = lambda m: datetime.fromisoformat(m.additional_kwargs["timestamp"])
        >>> [(r.requests, r.cold) for r in round_loads([first, second], [10, 5],
        ...                                             timestamp=read, lifetime=300)]
        [(1, False), (1, True)]
    """
    loads: list[RoundLoad] = []
    previous = before
    for index, (messages, size) in enumerate(zip(rounds, tokens, strict=True)):
        requests = sum(1 for m in messages if isinstance(m, AIMessage))
        if upcoming and index == len(rounds) - 1:
            requests += 1
        cold = bool(messages) and starts_cold(messages[0], previous, timestamp, lifetime)
        loads.append(RoundLoad(tokens=size, requests=max(1, requests), cold=cold))
        if messages:
            previous = messages[-1]
    return loads
