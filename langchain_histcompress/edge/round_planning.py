"""The pure steps of planning a round compression: pending rounds, their costs, the chunks.

Nothing here calls a model or changes its inputs; `RoundCompressor` composes these steps
(see ``docs/design/edge.md``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from datetime import datetime, timedelta

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_histcompress.core.errors import ConfigurationError, InvalidHistoryError
from langchain_histcompress.core.rounds import (
    ACCEPTED_KINDS,
    HistoryViolation,
    Round,
    is_pinned,
    is_summary_message,
    split_rounds,
    split_units,
    validate_history,
)
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tail import (
    TailParts,
    covered_prefix_ids,
    locate_tail,
)
from langchain_histcompress.core.timestamps import to_datetime
from langchain_histcompress.core.tokens import TokenCounter, message_costs
from langchain_histcompress.core.views import visible_messages
from langchain_histcompress.edge.compression_records import CompressionChunk

__all__ = [
    "answered",
    "checked_tail",
    "fold_chunks",
    "idle_gap_passed",
    "oversized_fold",
    "pending_of",
    "pending_rounds",
    "round_costs",
    "shown_pinned",
]


def answered(pending: Sequence[Round]) -> bool:
    """The latest round ends with a final answer (an AI message without any tool call)."""
    if not pending:
        return False
    last = pending[-1].messages[-1]
    return isinstance(last, AIMessage) and not last.tool_calls and not last.invalid_tool_calls


def pending_of(tail: Sequence[BaseMessage], covered: AbstractSet[str]) -> list[Round]:
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
    return pending_of(locate_tail(messages, summary).tail, covered)


def checked_tail(
    messages: Sequence[BaseMessage], summary: RunningSummary | None, *, strict: bool
) -> tuple[TailParts, bool]:
    """``messages`` split for ``summary``, its lead and uncovered tail checked.

    Returns the parts and whether the lead and tail broke no rule at all.

    Raises:
        ConfigurationError: A tail message has no id.
        InvalidHistoryError: Two messages share an id, or ``strict`` and the lead and tail
            break a provider rule.
    """
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
    return parts, not found


def round_costs(counter: TokenCounter, rounds: Sequence[Round]) -> list[int]:
    """Tokens of each round."""
    # One count of every pending message (a counter matches it with last turn's list, so
    # only the new messages are looked up), then summed per round.
    sizes = [len(r.messages) for r in rounds]
    costs = message_costs(counter, [m for r in rounds for m in r.messages])
    ends = list(itertools.accumulate(sizes))
    return [sum(costs[end - size : end]) for end, size in zip(ends, sizes, strict=True)]


def idle_gap_passed(
    parts: TailParts, gap: timedelta, timestamp: Callable[[BaseMessage], object]
) -> bool:
    """Whether the latest human message came more than ``gap`` after the message before it."""
    tail = parts.tail
    latest = next(
        (i for i in range(len(tail) - 1, -1, -1) if isinstance(tail[i], HumanMessage)), None
    )
    if latest is None:
        return False
    resumed = to_datetime(timestamp(tail[latest]))
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
        before: datetime | None = to_datetime(timestamp(message))
        if before is not None:
            return resumed - before > gap
    return False


def shown_pinned(pinned: Sequence[BaseMessage], folded: Sequence[Round]) -> set[int]:
    """Identities of the pinned messages that stay shown after a fold of ``folded``.

    Only the newest pinned message stays verbatim (the latest instruction of its kind);
    older ones are folded into the summary, so a reminder repeated every turn never
    accumulates.
    """
    newest = [m for r in folded for m in r.messages if is_pinned(m)] or list(pinned)
    return {id(newest[-1])} if newest else set()


def fold_chunks(
    pending: Sequence[Round], calls: Sequence[int], pinned: Sequence[BaseMessage]
) -> list[CompressionChunk]:
    """One chunk per summarizer call, ``calls`` rounds each, oldest first.

    Pinned messages that do not stay shown are folded too: those of the folded rounds with
    their round, the older ones shown before the tail with the first call.
    """
    shown = shown_pinned(pinned, pending[: sum(calls)])
    starts = list(itertools.accumulate(calls, initial=0))
    chunks = [
        CompressionChunk(
            tuple(
                m
                for r in pending[start : start + size]
                for m in r.messages
                if not is_pinned(m) or id(m) not in shown
            ),
            rounds=size,
        )
        for start, size in zip(starts, calls, strict=False)
    ]
    if chunks and pinned:  # older pinned messages go with the first call
        older = tuple(m for m in pinned if id(m) not in shown)
        if older:
            chunks[0] = replace(chunks[0], messages=older + chunks[0].messages)
    return chunks


def oversized_fold(latest: Round, limit: int, counter: TokenCounter) -> CompressionChunk | None:
    """Older tool groups of the latest round to fold so the rest fits in ``limit``."""
    units = split_units(latest.messages)
    costs = [sum(message_costs(counter, unit)) for unit in units]
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
