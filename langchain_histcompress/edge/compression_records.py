"""What a round compression plans and returns, as frozen records.

`RoundCompressor.plan` returns a `CompressionPlan` (one `CompressionChunk` per summarizer
call) without any model call; `RoundCompressor.compress` carries it out and returns a
`CompressionResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.running_summary import RunningSummary

__all__ = [
    "CompressionChunk",
    "CompressionPlan",
    "CompressionResult",
    "OnInvalidHistory",
    "TriggerReason",
]

TriggerReason = Literal[
    "cost", "rounds", "tokens", "messages", "fraction", "threshold", "idle_gap", "budget"
]
"""Why a fold was planned: the cost schedule, a threshold of the trigger (its unit, or
``"threshold"`` for a clause of several), the idle gap, or the budget."""

OnInvalidHistory = Literal["repair", "raise"]
"""What `RoundCompressor` does with a history a provider would reject (see
`~langchain_histcompress.core.rounds`): compress it and send a repaired view, or raise."""


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
