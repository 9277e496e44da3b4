"""Rounds, tool groups and provider-shape validation: the units every cut respects.

A *round* is one ``HumanMessage`` and every AI / tool message until the next
``HumanMessage``. Leading ``SystemMessage`` objects form the *preamble*, which is never
compressed. Inside a round, an ``AIMessage`` with ``tool_calls`` and the ``ToolMessage``
objects answering it form a *tool group*, the smallest unit a cut may not split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

__all__ = [
    "HistoryViolation",
    "Round",
    "SplitHistory",
    "ViolationKind",
    "ensure_ids",
    "is_summary_message",
    "split_rounds",
    "split_units",
    "validate_history",
]

SUMMARY_SOURCE = "langchain_histcompress.summary"
"""Value of ``additional_kwargs["lc_source"]`` on every summary message this package renders."""

ViolationKind = Literal[
    "orphan_tool_result",
    "unanswered_tool_calls",
    "duplicate_tool_result",
    "duplicate_tool_call_id",
    "missing_tool_call_id",
    "system_after_preamble",
    "duplicate_message_id",
]


@dataclass(frozen=True)
class HistoryViolation:
    """One provider-shape problem found by `validate_history`."""

    kind: ViolationKind
    """What is wrong, as a stable machine-readable tag."""
    index: int
    """Position of the offending message in the validated list."""
    message_id: str | None
    """The offending message's id, when it has one."""
    detail: str
    """A human-readable explanation naming the tool call ids involved."""

    def __str__(self) -> str:
        """Render as ``kind at index N: detail``."""
        return f"{self.kind} at index {self.index}: {self.detail}"


@dataclass(frozen=True)
class Round:
    """One conversational round: a human message and everything that answers it."""

    messages: tuple[BaseMessage, ...]
    """The round's messages in order. The first is a ``HumanMessage``, except for a
    *head* round holding non-system messages that precede the first human message."""

    @property
    def human(self) -> HumanMessage | None:
        """The round's opening human message (``None`` for a head round)."""
        first = self.messages[0]
        return first if isinstance(first, HumanMessage) else None

    @property
    def units(self) -> list[tuple[BaseMessage, ...]]:
        """The round split into indivisible units (see `split_units`)."""
        return split_units(self.messages)


@dataclass(frozen=True)
class SplitHistory:
    """A message list split into the system preamble and rounds."""

    preamble: tuple[BaseMessage, ...]
    """Leading system messages, never compressed."""
    rounds: tuple[Round, ...] = field(default_factory=tuple)
    """Rounds in order; only the first may be a head round without a human message."""

    @property
    def body(self) -> list[BaseMessage]:
        """Every non-preamble message, in order."""
        return [m for r in self.rounds for m in r.messages]


def is_summary_message(message: BaseMessage) -> bool:
    """Whether ``message`` is a summary rendered by this package (tagged by ``lc_source``).

    Example:
        >>> from langchain_core.messages import SystemMessage
        >>> is_summary_message(SystemMessage("hi"))
        False
    """
    return message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE


def split_rounds(messages: Sequence[BaseMessage]) -> SplitHistory:
    """Split ``messages`` into the leading system preamble and rounds.

    Args:
        messages: A chat history in order.

    Returns:
        The preamble (leading ``SystemMessage`` objects) and the rounds.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> split = split_rounds([SystemMessage("be brief"), HumanMessage("hi"),
        ...                       AIMessage("hello"), HumanMessage("bye")])
        >>> len(split.preamble), [len(r.messages) for r in split.rounds]
        (1, [2, 1])
    """
    start = 0
    while start < len(messages) and isinstance(messages[start], SystemMessage):
        start += 1
    rounds: list[Round] = []
    current: list[BaseMessage] = []
    for message in messages[start:]:
        if isinstance(message, HumanMessage) and current:
            rounds.append(Round(tuple(current)))
            current = []
        current.append(message)
    if current:
        rounds.append(Round(tuple(current)))
    return SplitHistory(preamble=tuple(messages[:start]), rounds=tuple(rounds))


def _call_ids(message: BaseMessage) -> list[str]:
    if isinstance(message, AIMessage):
        return [str(c.get("id")) for c in message.tool_calls if c.get("id")]
    return []


def split_units(messages: Sequence[BaseMessage]) -> list[tuple[BaseMessage, ...]]:
    """Split ``messages`` into units that no cut may divide.

    A unit is either a tool group (an ``AIMessage`` with ``tool_calls`` followed by the
    ``ToolMessage`` objects that answer it, in any order) or a single other message.
    A ``ToolMessage`` that answers nothing before it is its own unit (an orphan).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> units = split_units([HumanMessage("q"), call, ToolMessage("r", tool_call_id="c1"),
        ...                      AIMessage("done")])
        >>> [len(u) for u in units]
        [1, 2, 1]
    """
    units: list[tuple[BaseMessage, ...]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        pending = set(_call_ids(message))
        group = [message]
        i += 1
        while pending and i < len(messages):
            nxt = messages[i]
            if not isinstance(nxt, ToolMessage) or nxt.tool_call_id not in pending:
                break
            pending.discard(nxt.tool_call_id)
            group.append(nxt)
            i += 1
        units.append(tuple(group))
    return units


def validate_history(
    messages: Sequence[BaseMessage], *, allow_in_flight: bool = True
) -> list[HistoryViolation]:
    """List every provider-shape violation in ``messages`` (empty when valid).

    Checks: tool results that answer no preceding call (orphans), tool calls left
    unanswered before another message arrives, duplicate tool results or call ids, tool
    calls without ids, system messages after the preamble, and duplicate message ids.
    Package summary messages directly after the preamble count as preamble.

    Args:
        messages: The history to check.
        allow_in_flight: Accept unanswered tool calls in the final tool group (an agent
            waiting for its tools).

    Returns:
        The violations in message order.

    Example:
        >>> from langchain_core.messages import HumanMessage, ToolMessage
        >>> bad = [HumanMessage("hi"), ToolMessage("x", tool_call_id="c9")]
        >>> [v.kind for v in validate_history(bad)]
        ['orphan_tool_result']
    """
    found: list[HistoryViolation] = []

    def add(kind: ViolationKind, index: int, detail: str) -> None:
        found.append(HistoryViolation(kind, index, messages[index].id, detail))

    seen_ids: set[str] = set()
    seen_calls: set[str] = set()
    answered: set[str] = set()
    pending: dict[str, int] = {}  # call id -> index of the AI message that made it
    in_preamble = True
    for index, message in enumerate(messages):
        if message.id is not None:
            if message.id in seen_ids:
                add("duplicate_message_id", index, f"message id {message.id!r} repeats")
            seen_ids.add(message.id)
        if isinstance(message, SystemMessage):
            if not in_preamble:
                add("system_after_preamble", index, "system message after the conversation began")
            continue
        in_preamble = False
        if isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if call_id in pending:
                answered.add(call_id)
                del pending[call_id]
            elif call_id in answered:
                add("duplicate_tool_result", index, f"second result for tool call {call_id!r}")
            else:
                add("orphan_tool_result", index, f"no open tool call {call_id!r} precedes it")
            continue
        if pending:
            _report_unanswered(add, pending)
            pending.clear()
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                new_id = call.get("id")
                if not new_id:
                    add("missing_tool_call_id", index, f"tool call {call.get('name')!r} has no id")
                    continue
                call_id = new_id
                if call_id in seen_calls:
                    add("duplicate_tool_call_id", index, f"tool call id {call_id!r} reused")
                    continue
                seen_calls.add(call_id)
                pending[call_id] = index
    if pending and not allow_in_flight:
        _report_unanswered(add, pending)
    return found


def _report_unanswered(
    add: Callable[[ViolationKind, int, str], None], pending: dict[str, int]
) -> None:
    by_message: dict[int, list[str]] = {}
    for call_id, index in pending.items():
        by_message.setdefault(index, []).append(call_id)
    for index, ids in by_message.items():
        add("unanswered_tool_calls", index, f"tool calls {sorted(ids)} have no result")


def ensure_ids(messages: Sequence[BaseMessage], *, namespace: str = "") -> list[BaseMessage]:
    """Return ``messages`` with an id on every message, without mutating the originals.

    Messages that already have an id are returned as the same objects. The others are
    copied with a deterministic id derived from ``namespace``, their position and their
    content, so the same history always gets the same ids.

    Args:
        messages: The history.
        namespace: Mixed into generated ids (e.g. a session id) so two sessions with
            identical text do not share ids.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> original = HumanMessage("hi")
        >>> first = ensure_ids([original])[0]
        >>> original.id is None, first.id == ensure_ids([original])[0].id
        (True, True)
    """
    return [_identified(message, index, namespace) for index, message in enumerate(messages)]


def _identified(message: BaseMessage, index: int, namespace: str = "") -> BaseMessage:
    """``message`` itself when it has an id, else a copy with the id `ensure_ids` gives it."""
    if message.id is not None:
        return message
    digest = hashlib.sha256(
        f"{namespace}\x00{index}\x00{message.type}\x00{message.content!r}\x00"
        f"{getattr(message, 'tool_call_id', '')}".encode()
    ).hexdigest()[:24]
    return message.model_copy(update={"id": f"hc-{digest}"})


class _MessageView(Sequence[BaseMessage]):
    """A read-only message sequence that makes each message when it is first read."""

    def __len__(self) -> int:
        raise NotImplementedError

    def _at(self, index: int) -> BaseMessage:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> BaseMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[BaseMessage]: ...

    def __getitem__(self, index: int | slice) -> BaseMessage | list[BaseMessage]:
        size = len(self)
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(size))]
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            msg = "message index out of range"
            raise IndexError(msg)
        return self._at(position)


class _IdentifiedMessages(_MessageView):
    """``ensure_ids(messages)`` with the preamble kept as given, computed where it is read.

    Reading the last few messages of a long history gives ids to those only, so a face that
    reads the uncovered tail does work proportional to the tail. Each message is identified
    once per view (reads return the same copy).
    """

    def __init__(self, messages: Sequence[BaseMessage], lead_end: int) -> None:
        self._messages = messages
        self._lead_end = lead_end
        self._copies: dict[int, BaseMessage] = {}

    def __len__(self) -> int:
        return len(self._messages)

    def _at(self, index: int) -> BaseMessage:
        found = self._copies.get(index)
        if found is None:
            message = self._messages[index]
            if index < self._lead_end or not isinstance(message, BaseMessage):
                return message  # the preamble as given; a non-message is reported by its reader
            found = self._copies[index] = _identified(message, index)
        return found
