"""Rounds, tool steps and the accepted-history rule: the units every cut respects.

A *round* is one ``HumanMessage`` and every AI / tool / system message until the next
``HumanMessage``. Leading ``SystemMessage`` objects form the *preamble*, which is never
compressed. Inside a round, an ``AIMessage`` with tool calls and the ``ToolMessage`` objects
answering it form a *tool group* (one *step* of an agent), the smallest unit a cut may not
split.

Every history the OpenAI and Anthropic chat APIs accept, or that ``add_messages``,
``create_agent`` and ``RunnableWithMessageHistory`` produce, is valid input: tool pairing is
positional within a step, invalid tool calls are calls, and a system message after the
conversation began is pinned to its round (`is_pinned`). `validate_history` reports only what
a provider would reject; `repair_history` gives a model view the smallest provider-valid
change, never dropping user or assistant text and never changing message ids.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_histcompress.core.identified import IdentifiedMessages, MessageView, identified

__all__ = [
    "ACCEPTED_KINDS",
    "REPAIR_SOURCE",
    "HistoryViolation",
    "RepairedHistory",
    "Round",
    "SplitHistory",
    "ViolationKind",
    "ensure_ids",
    "is_pinned",
    "is_summary_message",
    "repair_history",
    "split_rounds",
    "split_units",
    "validate_history",
]

logger = logging.getLogger(__name__)

SUMMARY_SOURCE = "langchain_histcompress.summary"
"""Value of ``additional_kwargs["lc_source"]`` on every summary message this package renders."""

REPAIR_SOURCE = "langchain_histcompress.repair"
"""Value of ``additional_kwargs["lc_source"]`` on placeholder results `repair_history` adds."""

ViolationKind = Literal[
    "orphan_tool_result",
    "unanswered_tool_calls",
    "unanswered_invalid_tool_calls",
    "duplicate_tool_result",
    "duplicate_tool_call_id",
    "missing_tool_call_id",
    "duplicate_message_id",
    "unknown_message_id",
]
"""What `validate_history` reports (see it for each kind), plus
``unknown_message_id``: a history store asked to remove a message it does not hold."""

ACCEPTED_KINDS: frozenset[ViolationKind] = frozenset({"unanswered_invalid_tool_calls"})
"""Kinds `validate_history` reports for histories that are still accepted input (what
``create_agent`` produces): views repair them, strict checks ignore them."""

_PLACEHOLDER = "[no result was recorded for this tool call]"
_INVALID = "[this tool call was not run: its arguments could not be parsed]"


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

    @property
    def foldable(self) -> tuple[BaseMessage, ...]:
        """The messages a summary may fold: every message but the pinned ones (`is_pinned`)."""
        return tuple(m for m in self.messages if not is_pinned(m))


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


@dataclass(frozen=True)
class RepairedHistory:
    """The result of `repair_history`: a provider-valid list and what was repaired."""

    messages: list[BaseMessage]
    """The provider-valid messages (the input's own objects where nothing changed)."""
    violations: tuple[HistoryViolation, ...] = ()
    """The violations found in the input (indexes into the input); empty when it was valid."""
    dropped: tuple[BaseMessage, ...] = ()
    """Stray tool results left out of ``messages`` (they stay in the caller's record)."""

    @property
    def repaired(self) -> bool:
        """Whether anything had to change."""
        return bool(self.violations)


def is_summary_message(message: BaseMessage) -> bool:
    """Whether ``message`` is a summary rendered by this package (tagged by ``lc_source``).

    Example:
        >>> from langchain_core.messages import SystemMessage
        >>> is_summary_message(SystemMessage("hi"))
        False
    """
    return message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE


def is_pinned(message: BaseMessage) -> bool:
    """Whether a message inside a round is pinned: never folded, always shown verbatim.

    Pinned messages are the system messages that sit inside the conversation (after the
    preamble), such as reminders an application injects. Package summary messages are not
    pinned (they are replaced by the current summary).

    Example:
        >>> from langchain_core.messages import HumanMessage, SystemMessage
        >>> is_pinned(SystemMessage("Reminder: be polite.")), is_pinned(HumanMessage("hi"))
        (True, False)
    """
    return isinstance(message, SystemMessage) and not is_summary_message(message)


def split_rounds(messages: Sequence[BaseMessage]) -> SplitHistory:
    """Split ``messages`` into the leading system preamble and rounds.

    A system message after the preamble belongs to the round it sits in (see `is_pinned`).

    Args:
        messages: A chat history in order.

    Returns:
        The preamble (leading ``SystemMessage`` objects) and the rounds.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> split = split_rounds([SystemMessage("be brief"), HumanMessage("hi"),
        ...                       AIMessage("hello"), SystemMessage("reminder"),
        ...                       HumanMessage("bye")])
        >>> len(split.preamble), [len(r.messages) for r in split.rounds]
        (1, [3, 1])
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


def _calls(message: BaseMessage) -> list[dict[str, Any]]:
    """Every call an ``AIMessage`` makes: valid and invalid tool calls alike, in order."""
    if not isinstance(message, AIMessage):
        return []
    if not message.tool_calls and not message.invalid_tool_calls:
        return []
    return [*map(dict, message.tool_calls), *map(dict, message.invalid_tool_calls)]


def _call_ids(message: BaseMessage) -> list[str]:
    """The ids of every call ``message`` makes (calls without an id left out)."""
    return [str(c["id"]) for c in _calls(message) if c.get("id")]


def split_units(messages: Sequence[BaseMessage]) -> list[tuple[BaseMessage, ...]]:
    """Split ``messages`` into units that no cut may divide.

    A unit is either a tool group (an ``AIMessage`` with tool calls, valid or invalid,
    followed by the ``ToolMessage`` objects that answer its calls, in any order) or a single
    other message. Pairing is positional: only the results right after the call count, so
    an id reused by a later step pairs with that step. A ``ToolMessage`` that answers no
    call of its step is its own unit (a stray result).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> units = split_units([HumanMessage("q"), call, ToolMessage("r", tool_call_id="c1"),
        ...                      call, ToolMessage("r", tool_call_id="c1"), AIMessage("done")])
        >>> [len(u) for u in units]
        [1, 2, 2, 1]
    """
    units: list[tuple[BaseMessage, ...]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        group = [message]
        i += 1
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            pending = Counter(_call_ids(message))
            while pending and i < len(messages):
                nxt = messages[i]
                if not isinstance(nxt, ToolMessage) or not pending[nxt.tool_call_id]:
                    break
                pending[nxt.tool_call_id] -= 1
                if not pending[nxt.tool_call_id]:
                    del pending[nxt.tool_call_id]
                group.append(nxt)
                i += 1
        units.append(tuple(group))
    return units


def validate_history(
    messages: Sequence[BaseMessage], *, allow_in_flight: bool = True
) -> list[HistoryViolation]:
    """List every violation of the accepted-history rule in ``messages`` (empty when valid).

    Only what a provider would reject is reported: a tool result that answers no call of its
    step (``orphan_tool_result``), a second result for one call (``duplicate_tool_result``),
    calls left unanswered when another message arrives (``unanswered_tool_calls``; an invalid
    call ``create_agent`` leaves unanswered is ``unanswered_invalid_tool_calls``), a call
    without an id (``missing_tool_call_id``), two calls of one message sharing an id
    (``duplicate_tool_call_id``), two messages sharing a message id
    (``duplicate_message_id``). Reused call ids across steps, invalid tool calls answered by
    tool messages, system messages inside the conversation, empty contents and content-block
    lists are all valid. Messages without an id, or with an empty one, never count as
    duplicates.

    Args:
        messages: The history to check.
        allow_in_flight: Accept unanswered tool calls in the final step (an agent waiting
            for its tools).

    Returns:
        The violations in message order.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> reused = [HumanMessage("hi"), call, ToolMessage("x", tool_call_id="c1"),
        ...           call, ToolMessage("y", tool_call_id="c1")]
        >>> validate_history(reused)
        []
        >>> bad = [HumanMessage("hi"), ToolMessage("x", tool_call_id="c9")]
        >>> [v.kind for v in validate_history(bad)]
        ['orphan_tool_result']
    """
    found: list[HistoryViolation] = []

    def add(kind: ViolationKind, index: int, detail: str) -> None:
        found.append(HistoryViolation(kind, index, messages[index].id, detail))

    seen_ids: set[str] = set()
    step = _Step()
    for index, message in enumerate(messages):
        if message.id:  # an empty-string id counts as no id
            if message.id in seen_ids:
                add("duplicate_message_id", index, f"message id {message.id!r} repeats")
            seen_ids.add(message.id)
        if isinstance(message, ToolMessage):
            kind = step.answer(message.tool_call_id)
            if kind == "duplicate_tool_result":
                add(kind, index, f"second result for tool call {message.tool_call_id!r}")
            elif kind == "orphan_tool_result":
                add(kind, index, f"no open tool call {message.tool_call_id!r} precedes it")
            continue
        step.close(add)
        if isinstance(message, AIMessage):
            step.open(index, message, add)
    if not allow_in_flight:
        step.close(add)
    return found


class _Step:
    """The tool calls of the latest ``AIMessage`` and the results seen for them."""

    def __init__(self) -> None:
        self.index = -1
        self.pending: Counter[str] = Counter()
        self.answered: set[str] = set()
        self.invalid: set[str] = set()

    def open(
        self,
        index: int,
        message: AIMessage,
        add: Callable[[ViolationKind, int, str], None],
    ) -> None:
        calls = _calls(message)
        if not calls:  # no step to open (`close` just left nothing pending or answered)
            self.index = index
            if self.pending or self.answered or self.invalid:
                self.pending, self.answered, self.invalid = Counter(), set(), set()
            return
        self.index, self.pending, self.answered = index, Counter(), set()
        self.invalid = {str(c["id"]) for c in message.invalid_tool_calls if c.get("id")}
        for call in calls:
            call_id = call.get("id")
            if not call_id:
                add("missing_tool_call_id", index, f"tool call {call.get('name')!r} has no id")
            elif call_id in self.pending:
                add("duplicate_tool_call_id", index, f"tool call id {call_id!r} repeats")
            else:
                self.pending[str(call_id)] = 1

    def answer(self, call_id: str) -> ViolationKind | None:
        if self.pending[call_id]:
            del self.pending[call_id]
            self.answered.add(call_id)
            return None
        return "duplicate_tool_result" if call_id in self.answered else "orphan_tool_result"

    def close(self, add: Callable[[ViolationKind, int, str], None]) -> None:
        if self.pending:
            valid = sorted(i for i in self.pending if i not in self.invalid)
            invalid = sorted(i for i in self.pending if i in self.invalid)
            if valid:
                add("unanswered_tool_calls", self.index, f"tool calls {valid} have no result")
            if invalid:
                add(
                    "unanswered_invalid_tool_calls",
                    self.index,
                    f"invalid tool calls {invalid} have no result",
                )
            self.pending = Counter()
        if self.answered:
            self.answered = set()


_REPAIRED_KINDS = frozenset(
    {
        "orphan_tool_result",
        "duplicate_tool_result",
        "unanswered_tool_calls",
        "unanswered_invalid_tool_calls",
        "missing_tool_call_id",
        "duplicate_tool_call_id",
    }
)


def repair_history(
    messages: Sequence[BaseMessage], *, allow_in_flight: bool = True
) -> RepairedHistory:
    """A provider-valid version of ``messages``: the smallest change a provider accepts.

    Valid input comes back as a new list of the same objects. Otherwise stray tool results
    are left out, each unanswered call gets a placeholder result right after its step, and
    calls without an id (or repeating one within their message) are removed from a copy of
    their ``AIMessage``. Nothing is mutated; the repair is logged as a warning (kinds and
    counts only). Duplicate message ids are reported but left as they are.

    Args:
        messages: The messages about to be sent to a model.
        allow_in_flight: Leave unanswered calls of the final step alone (an agent waiting for
            its tools); ``False`` answers them with placeholders too.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> broken = [HumanMessage("hi"), ToolMessage("stray", tool_call_id="c9"), call,
        ...           HumanMessage("never mind")]
        >>> fixed = repair_history(broken)
        >>> [m.type for m in fixed.messages], [v.kind for v in fixed.violations]
        (['human', 'ai', 'tool', 'human'], ['orphan_tool_result', 'unanswered_tool_calls'])
        >>> validate_history(fixed.messages)
        []
    """
    violations = validate_history(messages, allow_in_flight=allow_in_flight)
    if not any(v.kind in _REPAIRED_KINDS for v in violations):
        return RepairedHistory(list(messages), tuple(violations))
    by_index: dict[int, list[HistoryViolation]] = {}
    for violation in violations:
        by_index.setdefault(violation.index, []).append(violation)
    out: list[BaseMessage] = []
    dropped: list[BaseMessage] = []
    owed: list[tuple[BaseMessage, dict[str, Any]]] = []  # unanswered calls of the open step
    step_answered: set[str] = set()

    def settle() -> None:
        for ai, call in owed:
            if str(call["id"]) not in step_answered:
                out.append(_placeholder(ai, call))
        owed.clear()
        step_answered.clear()

    for index, message in enumerate(messages):
        kinds = {v.kind for v in by_index.get(index, ())}
        if isinstance(message, ToolMessage):
            if kinds & {"orphan_tool_result", "duplicate_tool_result"}:
                dropped.append(message)
                continue
            step_answered.add(message.tool_call_id)
            out.append(message)
            continue
        settle()
        if isinstance(message, AIMessage):
            if kinds & {"missing_tool_call_id", "duplicate_tool_call_id"}:
                message = _without_bad_calls(message)
            if kinds & {"unanswered_tool_calls", "unanswered_invalid_tool_calls"}:
                owed.extend((message, c) for c in _calls(message))
        out.append(message)
    if not allow_in_flight:
        settle()
    counts = Counter(v.kind for v in violations)
    expected = all(v.kind in ACCEPTED_KINDS for v in violations)
    logger.log(
        logging.DEBUG if expected else logging.WARNING,
        "repaired a provider-invalid history for the model view: %s",
        ", ".join(f"{kind}={n}" for kind, n in sorted(counts.items())),
    )
    return RepairedHistory(out, tuple(violations), tuple(dropped))


def _placeholder(ai: BaseMessage, call: dict[str, Any]) -> ToolMessage:
    call_id = str(call["id"])
    digest = hashlib.sha256(f"{ai.id}\x00{call_id}".encode()).hexdigest()[:24]
    invalid = "error" in call or isinstance(call.get("args"), str)
    return ToolMessage(
        _INVALID if invalid else _PLACEHOLDER,
        tool_call_id=call_id,
        name=call.get("name") or None,
        id=f"hc-repair-{digest}",
        status="error",
        additional_kwargs={"lc_source": REPAIR_SOURCE},
    )


def _without_bad_calls(message: AIMessage) -> AIMessage:
    """A copy of ``message`` keeping only the calls with an id not seen before in it."""
    seen: set[str] = set()

    def keep(call: Any) -> bool:
        call_id = call.get("id")
        if not call_id or call_id in seen:
            return False
        seen.add(call_id)
        return True

    tool_calls = [c for c in message.tool_calls if keep(c)]
    invalid = [c for c in message.invalid_tool_calls if keep(c)]
    extra = {k: v for k, v in message.additional_kwargs.items() if k != "tool_calls"}
    return message.model_copy(
        update={"tool_calls": tool_calls, "invalid_tool_calls": invalid, "additional_kwargs": extra}
    )


def ensure_ids(messages: Sequence[BaseMessage], *, namespace: str = "") -> list[BaseMessage]:
    """Return ``messages`` with an id on every message, without mutating the originals.

    Messages that already have an id are returned as the same objects. The others (an id of
    ``None`` or ``''``: an empty id counts as none everywhere in the package) are copied
    with a deterministic id derived from ``namespace``, their position and their content,
    so the same history always gets the same ids.

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
    return [identified(message, index, namespace) for index, message in enumerate(messages)]


# Views that make messages where they are read (in `_identified`), under their former names.
_MessageView = MessageView
_IdentifiedMessages = IdentifiedMessages
