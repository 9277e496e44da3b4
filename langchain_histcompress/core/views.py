"""The model view of a history under a running summary (no model call).

`view` shows the caller's preamble, the summary as data (its own system message, or appended
to the preamble's last system message), the pinned system messages of the covered part and
the uncovered messages verbatim, repaired when they break the provider rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Literal

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import repair_history, split_units
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tail import TailParts, locate_tail

__all__ = ["SUMMARY_METADATA_KEY", "Placement", "view"]

Placement = Literal["system_message", "append_to_system"]
"""Where the summary goes in the view: its own ``SystemMessage`` right after the preamble, or
appended to a copy of the preamble's last system message."""

_PLACEMENTS = ("system_message", "append_to_system")
SUMMARY_METADATA_KEY = "histcompress_summary"
"""``additional_kwargs`` key holding the summary's provenance on a system message the summary
was appended to (``placement="append_to_system"``)."""


def visible_messages(
    messages: Sequence[BaseMessage], covered: AbstractSet[str]
) -> list[BaseMessage]:
    """``messages`` minus whole units whose every message is covered.

    A unit only partly covered (a summary record that does not match this history) is shown
    whole, so nothing is ever lost and no tool group is split.
    """
    if not covered:
        return list(messages)
    return [
        message
        for unit in split_units(messages)
        if not all(m.id is not None and m.id in covered for m in unit)
        for message in unit
    ]


def check_placement(placement: object) -> None:
    if placement not in _PLACEMENTS:
        msg = f"placement must be one of {list(_PLACEMENTS)}, got {placement!r}"
        raise ConfigurationError(msg)


def with_summary(
    preamble: list[BaseMessage], summary: RunningSummary, placement: Placement
) -> list[BaseMessage]:
    if placement == "system_message" or not preamble:
        return [*preamble, summary.to_message()]
    *head, last = preamble
    rendered = summary.render()
    content: str | list[str | dict[Any, Any]]
    if isinstance(last.content, str):
        content = f"{last.content}\n\n{rendered}" if last.content else rendered
    else:
        content = [*last.content, {"type": "text", "text": rendered}]
    extra = {**last.additional_kwargs, SUMMARY_METADATA_KEY: summary.provenance()}
    return [*head, last.model_copy(update={"content": content, "additional_kwargs": extra})]


def view(
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None = None,
    *,
    placement: Placement = "system_message",
) -> list[BaseMessage]:
    """Build the model view of a history: preamble, one summary, uncompressed messages.

    No model call. The preamble messages are the caller's own objects (byte-identical); with
    ``placement="append_to_system"`` the last one is replaced by a *copy* with the summary
    appended (its provenance under ``additional_kwargs["histcompress_summary"]``). Earlier
    summary messages found in ``messages`` are replaced by ``summary``. System messages
    inside the conversation are pinned: those before the uncovered part follow the summary,
    in order. Without a summary the history is returned as it is (as a new list).

    The view is what a model receives, so it always obeys the provider rules: a history
    that breaks them is repaired as `rounds.repair_history` describes (logged; the caller's
    list is never changed).

    Args:
        messages: The full original history.
        summary: The current summary.
        placement: ``"system_message"`` (default) or ``"append_to_system"``.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> history = [SystemMessage("Be brief."), HumanMessage("a", id="h1"),
        ...            AIMessage("b", id="a1"), HumanMessage("c", id="h2")]
        >>> s = RunningSummary(content="x", text="x", covered_ids=frozenset({"h1", "a1"}))
        >>> [m.type for m in view(history, s)]
        ['system', 'system', 'human']
        >>> [m.type for m in view(history, s, placement="append_to_system")]
        ['system', 'human']
    """
    check_placement(placement)
    if summary is None:
        return repair_history(messages).messages
    return tail_view(locate_tail(messages, summary), summary, placement)


def tail_view(
    parts: TailParts,
    summary: RunningSummary,
    placement: Placement,
    system: Sequence[BaseMessage] = (),
) -> list[BaseMessage]:
    """The view of located ``parts``; ``system`` messages go before the history's own lead.

    Pinned messages of the skipped prefix follow the summary; the result is repaired when it
    breaks the provider rules (see `rounds.repair_history`).
    """
    preamble = [*system, *parts.preamble]
    shown = [
        *with_summary(preamble, summary, placement),
        *parts.pinned,
        *visible_messages(parts.tail, summary.covered_ids),
    ]
    return repair_history(shown).messages
