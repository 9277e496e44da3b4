"""Why a round compression folds or does not, in one line (`CompressionPlan.reason`)."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_histcompress.core.budget import ContextBudget
from langchain_histcompress.core.fold_plan import FoldChoice
from langchain_histcompress.core.schedule import FoldDecision
from langchain_histcompress.core.triggers import CompressionTrigger
from langchain_histcompress.edge.compression_records import CompressionChunk, TriggerReason

__all__ = ["clause_reason", "cost_note", "explain_plan"]

_REASON_WORDS = {
    "rounds": "the rounds threshold",
    "tokens": "the tokens threshold",
    "messages": "the messages threshold",
    "fraction": "the window-fraction threshold",
    "threshold": "a trigger threshold",
    "idle_gap": "the user came back after a pause",
    "budget": "the view is over its budget",
}


def cost_note(decision: FoldDecision, pricing: str) -> str:
    """What the cost schedule decided under ``pricing``, with its figures."""
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


def clause_reason(trigger: CompressionTrigger) -> TriggerReason:
    """The reason a threshold of ``trigger`` gives: its unit, or ``"threshold"`` for several."""
    clauses = trigger.clauses
    if len(clauses) == 1 and len(clauses[0]) == 1:
        return next(iter(clauses[0]))
    return "threshold"


def explain_plan(
    choice: FoldChoice,
    chunks: Sequence[CompressionChunk],
    reasons: Sequence[TriggerReason],
    pending: int,
    budget: ContextBudget,
    note: str,
) -> str:
    """The plan's reason: what is folded (or not), why, and the view's size in its budget."""
    size = f"{choice.view_tokens:,} of {budget.tokens:,} tokens ({budget.source})"
    if not chunks:
        why = note or "the trigger did not fire"
        return f"no fold: {pending} round{'s' if pending != 1 else ''} pending, {size}; {why}"
    rounds = sum(c.rounds for c in chunks)
    what = (
        f"fold {rounds} round{'s' if rounds > 1 else ''}"
        if rounds
        else "fold older tool steps of the latest round"
    )
    if rounds and any(c.partial_round for c in chunks):
        what += " and older tool steps of the latest round"
    words = [note if r == "cost" else _REASON_WORDS[r] for r in reasons]
    deferred = f"; {choice.deferred} more rounds next turn" if choice.deferred else ""
    calls = "1 call" if len(chunks) == 1 else f"{len(chunks)} calls"
    return f"{what} in {calls} ({'; '.join(words)}), {size}{deferred}"
