"""How many rounds to fold now, and why: the trigger decides when, the budget decides that.

`decide_fold` is the pure decision behind `RoundCompressor.plan`: from the pending rounds'
sizes, what the trigger found and the answering model's `budget.ContextBudget`, it returns how
many of the oldest pending rounds to fold, how to split them into summarizer calls, and a
one-line reason a person can read.

Rules: the trigger folds down to the kept rounds; a view over the budget is always folded,
down to the newest rounds that fit in half the budget; each summarizer call reads at most
``call_tokens`` of conversation (a larger fold is split); ``max_calls`` bounds the calls of a
fold the budget does not force, and the rest waits for the next turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["FoldChoice", "call_sizes", "decide_fold"]


@dataclass(frozen=True)
class FoldChoice:
    """What `decide_fold` chose."""

    rounds: int
    """Oldest pending rounds to fold now (0: none)."""
    calls: list[int] = field(default_factory=list)
    """Rounds per summarizer call, oldest first (their sum is ``rounds`` minus the deferred)."""
    deferred: int = 0
    """Due rounds left for a later turn because ``max_calls`` was reached."""
    forced: bool = False
    """The budget forced (part of) the fold."""
    view_tokens: int = 0
    """The view's tokens before the fold."""


def call_sizes(costs: Sequence[int], call_tokens: int) -> list[int]:
    """Rounds per summarizer call for folding rounds of these costs, each call within the cap.

    Example:
        >>> call_sizes([60, 30, 20, 150, 10], call_tokens=100)
        [2, 1, 1, 1]
    """
    out: list[int] = []
    count = total = 0
    for cost in costs:
        if count and total + cost > call_tokens:
            out.append(count)
            count = total = 0
        count += 1
        total += cost
    if count:
        out.append(count)
    return out


def _forced(costs: Sequence[int], room: int, keep_rounds: int) -> int:
    """Oldest rounds to fold so the newest ones left fit in ``room`` (at least one left)."""
    kept = total = 0
    for cost in reversed(costs):
        if kept >= max(keep_rounds, 1) or (kept and total + cost > room):
            break
        total += cost
        kept += 1
    return len(costs) - kept


def decide_fold(
    *,
    costs: Sequence[int],
    fixed_tokens: int,
    summary_tokens: int,
    pinned_tokens: int,
    budget_tokens: int,
    keep_rounds: int,
    summary_cap: int,
    call_tokens: int,
    max_calls: int,
    chosen: int = 0,
    answered: bool = False,
) -> FoldChoice:
    """Choose the rounds to fold and the calls to fold them in (see the module docstring).

    Args:
        costs: Tokens of each pending round, oldest first (the latest last).
        fixed_tokens: Tokens of the system preamble.
        summary_tokens: Tokens of the current summary message (0 without one).
        pinned_tokens: Tokens of the pinned system messages shown after the summary.
        budget_tokens: Tokens the view may hold.
        keep_rounds: Newest rounds the trigger keeps (``keep``).
        summary_cap: Largest summary the summarizer writes, in tokens.
        call_tokens: Conversation tokens one summarizer call may read.
        max_calls: Calls per fold unless the budget forces more.
        chosen: Oldest rounds the trigger chose to fold (cost and thresholds down to
            ``keep``; the idle gap everything before the latest round).
        answered: The latest round is answered (``keep_rounds=0`` may fold it).

    Example:
        >>> choice = decide_fold(
        ...     costs=[50_000, 50_000, 9_000, 1_000], fixed_tokens=500, summary_tokens=0,
        ...     pinned_tokens=0, budget_tokens=100_000, keep_rounds=3, summary_cap=2_000,
        ...     call_tokens=80_000, max_calls=8)
        >>> choice.rounds, choice.calls, choice.forced
        (2, [1, 1], True)
    """
    pending = len(costs)
    view_tokens = fixed_tokens + summary_tokens + pinned_tokens + sum(costs)
    # the trigger's choice already keeps what it means to keep; the latest round stays unless
    # it is answered and nothing is to be kept
    latest = 0 if keep_rounds == 0 and answered else 1
    due = min(chosen, max(pending - latest, 0))
    forced = 0
    if view_tokens > budget_tokens and pending > 1:
        room = budget_tokens // 2 - fixed_tokens - pinned_tokens - summary_cap
        forced = _forced(costs, room, keep_rounds)
    due = max(due, forced)
    if not due:
        return FoldChoice(0, view_tokens=view_tokens)
    calls = call_sizes(costs[:due], call_tokens)
    allowed = len(calls)
    if allowed > max_calls:
        needed = len(call_sizes(costs[:forced], call_tokens)) if forced else 0
        allowed = max(max_calls, needed)
    taken = calls[:allowed]
    return FoldChoice(
        rounds=due,
        calls=taken,
        deferred=due - sum(taken),
        forced=forced > 0,
        view_tokens=view_tokens,
    )
