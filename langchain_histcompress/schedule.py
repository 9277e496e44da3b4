"""Folding as a cost decision: fold only when it is expected to save more than it costs.

Under prompt caching, re-sending old rounds is cheap (a cached token costs 10-50% of the input
price) while folding is not: the summarizer call is paid in full, its output at the output
price, and the rewritten summary invalidates the cached prefix after it, so the next request
pays for everything behind the preamble again. `FoldSchedule.decide` weighs both, in units of
one uncached input token, for every number ``k`` of oldest pending rounds that could be folded
in one call, and picks the ``k`` with the largest positive net saving (none when no ``k`` pays).

With ``F`` the folded tokens, ``S`` / ``S'`` the summary tokens before / after (``S'`` at most
the summarizer's cap), ``D = F - (S' - S)`` the tokens every later request stops sending,
``r`` / ``w`` the cache read / write price ratios and ``o`` the output price ratio:

- cost of the call: ``instruction_tokens + S`` input tokens plus ``o * S'`` output tokens
  (summarizer prompts are too short and too different to be cached), plus the ``F`` folded
  tokens read, weighted by the chance that no later fold would have read them anyway: with
  ``n`` rounds so far, the conversation is taken to outlive the horizon ``h`` with
  probability ``n / (n + h)`` (it is expected to go on about as long as it has lasted);
- cache penalty: when the cache is warm, the part behind the preamble (``S'`` + kept rounds)
  is paid at ``w`` on the next request instead of read at ``r``; nothing when it is cold
  anyway (a pause longer than the cache's lifetime: the request pays in full whatever we do);
- saving: ``D`` tokens on each of the next ``horizon`` requests, the first at ``w`` when cold
  (``r`` when warm), the others at ``r``.

A fold is chosen only when its expected saving is at least ``payback_factor`` (2) times its
cost: the horizon below is a median estimate, so half of all conversations end sooner than it
says, and a fold that barely pays on the median loses on them.

The horizon is how many requests the folded rounds would otherwise ride along before the next
chance to fold: the mean number of rounds between two cold starts seen in the pending rounds
when timestamps tell, else the number of rounds so far (a conversation is expected to go on
about as long as it has lasted). A short conversation therefore never folds: its few rounds
cannot repay a summarizer call.

A verbatim floor keeps the view cacheable: when the provider caches from
``min_cached_tokens`` on, a fold never leaves the preamble + kept rounds under it (below it
nothing at all is cached; the new summary is not counted, its size is not known in advance),
and it always keeps ``retain_rounds`` newest rounds.

Example:
    >>> from langchain_histcompress.pricing import PRICING_MODELS
    >>> schedule = FoldSchedule(pricing=PRICING_MODELS["none"], summary_tokens=100)
    >>> schedule.decide(fixed_tokens=50, summary_tokens=0, round_tokens=[80] * 4,
    ...                 cold=False, horizon=4).rounds
    0
    >>> decision = schedule.decide(fixed_tokens=50, summary_tokens=0,
    ...                            round_tokens=[400] * 30, cold=False, horizon=30)
    >>> decision.rounds, decision.reason
    (29, 'payback')
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.pricing import DEFAULT_PRICING, PRICING_MODELS, PricingModel

__all__ = [
    "FoldDecision",
    "FoldReason",
    "FoldSchedule",
    "cache_horizon",
]

logger = logging.getLogger(__name__)

FoldReason = Literal["cold", "payback", "none"]
"""Why a fold was chosen: the cache was cold anyway, the saving repays a warm rewrite, or
no fold pays."""


@dataclass(frozen=True)
class FoldDecision:
    """What `FoldSchedule.decide` chose."""

    rounds: int
    """Oldest pending rounds to fold now, in one summarizer call (0: none)."""
    reason: FoldReason
    """Why."""
    net_saving: float
    """Expected saving minus cost, in uncached input tokens (0.0 when not folding)."""
    cost: float = 0.0
    """Expected cost of the fold (call and cache penalty), in uncached input tokens."""


@dataclass(frozen=True)
class FoldSchedule:
    """Cost model of folding under one provider's prices and cache rules (see the module).

    Example:
        >>> FoldSchedule().floor, FoldSchedule(verbatim_floor=0).floor
        (1024, 0)
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
    payback_factor: float = 2.0
    """How many times its cost a fold must be expected to save."""
    verbatim_floor: int | None = None
    """Smallest preamble + kept rounds (in tokens) a fold may leave; ``None``
    for the provider's ``min_cached_tokens`` when it caches, else 0."""

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

    def decide(
        self,
        *,
        fixed_tokens: int,
        summary_tokens: int,
        round_tokens: Sequence[int],
        cold: bool,
        horizon: int,
        rounds_so_far: int = 0,
    ) -> FoldDecision:
        """Choose how many of the oldest pending rounds to fold now.

        Args:
            fixed_tokens: Tokens ahead of the summary that never change (system preamble,
                tools).
            summary_tokens: Tokens of the current summary (0 without one).
            round_tokens: Tokens of each pending round, oldest first, the latest last.
            cold: The provider's cache is cold for the coming request (a long pause).
            horizon: Requests over which a fold must pay back (see `cache_horizon`).
            rounds_so_far: Rounds of the whole conversation, folded ones included (0 counts
                the folded tokens' reading in full).

        Example:
            >>> from langchain_histcompress.pricing import PRICING_MODELS
            >>> schedule = FoldSchedule(pricing=PRICING_MODELS["openai-90"], summary_tokens=128)
            >>> rounds = [150] * 20
            >>> state = dict(fixed_tokens=60, summary_tokens=128, round_tokens=rounds,
            ...              horizon=10, rounds_so_far=100)
            >>> warm = schedule.decide(cold=False, **state)
            >>> cold = schedule.decide(cold=True, **state)
            >>> warm.rounds, cold.rounds, cold.reason
            (0, 13, 'cold')
        """
        pricing = self.pricing
        input_price = pricing.input_price or 1.0
        out = pricing.output_price / input_price
        read = pricing.cache_read_ratio if pricing.caches else 1.0
        write = pricing.cache_write_ratio if pricing.caches else 1.0
        horizon = max(1, horizon)
        later = max(0, rounds_so_far) / (max(0, rounds_so_far) + horizon)
        eligible = len(round_tokens) - self.retain_rounds
        total = sum(round_tokens)
        best = FoldDecision(0, "none", 0.0)
        folded = 0
        for k in range(1, eligible + 1):
            folded += round_tokens[k - 1]
            new_summary = min(summary_tokens + folded, self.summary_tokens)
            kept = total - folded
            if fixed_tokens + kept < self.floor:  # the new summary may be short: not counted
                break  # folding more would only shrink the view further below the floor
            reduction = folded - (new_summary - summary_tokens)
            call = self.instruction_tokens + summary_tokens + out * new_summary
            call += folded * (1 - later)
            penalty = 0.0 if cold else (new_summary + kept) * max(0.0, write - read)
            first = write if cold else read
            saving = reduction * (first + read * (horizon - 1))
            cost = call + penalty
            net = saving - cost
            if saving >= self.payback_factor * cost and net > best.net_saving:
                reason: FoldReason = "cold" if cold and pricing.caches else "payback"
                best = FoldDecision(k, reason, net, cost)
        return best


def cache_horizon(
    round_times: Sequence[datetime | None], *, lifetime: float, rounds_so_far: int
) -> int:
    """Requests a fold can expect to pay back over (see the module docstring).

    Args:
        round_times: When each pending round started (``None`` when unknown), oldest first.
        lifetime: The cache's lifetime in seconds: a longer gap is a cold start.
        rounds_so_far: Rounds of the whole conversation (folded ones included).

    Example:
        >>> from datetime import datetime, timedelta
        >>> t0 = datetime(2024, 5, 1)
        >>> times = [t0 + timedelta(seconds=30 * i) for i in range(6)]
        >>> times += [t0 + timedelta(days=1, seconds=30 * i) for i in range(4)]
        >>> cache_horizon(times, lifetime=300, rounds_so_far=40)
        5
        >>> cache_horizon([None, None], lifetime=300, rounds_so_far=40)
        40
    """
    known = [t for t in round_times if t is not None]
    if len(known) < 2:
        return max(1, rounds_so_far)
    stretches = 1 + sum(
        1 for a, b in itertools.pairwise(known) if (b - a).total_seconds() > lifetime
    )
    if stretches == 1:
        return max(1, rounds_so_far)
    return max(1, round(len(known) / stretches))
