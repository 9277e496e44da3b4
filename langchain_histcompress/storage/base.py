"""The storage interface: append-only messages plus versioned running summaries.

`SummaryStore` keeps one versioned `RunningSummary` per key (the side store of
`CompressingHistoryAdapter`). `HistoryStore` adds a session's append-only message log, commits
a compression atomically (summary, coverage marks and session version together, after a
version check) and applies LangGraph-style updates in one transaction (`HistoryStore.update`).

Every implementation keeps these guarantees: messages are append-only and ordered; removing a
message keeps coverage exact; a message is covered exactly when its id is in the current
summary's ``covered_ids``; a summary commits only over the one it was built from (else
`CompressionConflictError`, nothing changed); session ids are only compared for equality.
Messages are stored losslessly as JSON (`encode_message` / `decode_message`).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Container, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    RemoveMessage,
    message_to_dict,
    messages_from_dict,
)

from langchain_histcompress.core.errors import (
    ConfigurationError,
    InvalidHistoryError,
    StorageError,
)
from langchain_histcompress.core.rounds import HistoryViolation, ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary, ids_added_since

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "HistoryCheck",
    "HistoryStore",
    "MessagesUpdate",
    "SessionSnapshot",
    "SummaryStore",
    "assign_ids",
    "check_messages",
    "check_session_id",
    "decode_message",
    "decode_summary",
    "duplicate_ids",
    "encode_message",
    "encode_summary",
    "plan_update",
    "refuse_removals",
    "update_errors",
]

REMOVE_ALL_MESSAGES = "__remove_all__"
"""The id of a ``RemoveMessage`` that removes every message (LangGraph's sentinel, same value)."""

HistoryCheck = Callable[[Sequence[BaseMessage]], None]
"""Called by `HistoryStore.update` with the session's uncovered messages as the update
would leave them (preamble and tail, new messages last); raising refuses the update."""


@dataclass(frozen=True)
class SessionSnapshot:
    """A consistent read of one session: its current summary and uncovered messages."""

    summary: RunningSummary | None
    """The current running summary, or ``None`` when nothing has been compressed."""
    uncovered: tuple[BaseMessage, ...]
    """Every stored message not covered by ``summary``, in order (preamble + tail)."""

    @property
    def version(self) -> int:
        """The current summary's version (``0`` when there is none)."""
        return 0 if self.summary is None else self.summary.version


def check_session_id(session_id: object, *, what: str = "session_id") -> str:
    """Validate a session id (or summary key) and return it.

    Args:
        session_id: The candidate id.
        what: The parameter name used in the error message.

    Raises:
        ConfigurationError: It is not a non-empty string, or it contains a NUL character.

    Example:
        >>> check_session_id("acme:42")
        'acme:42'
    """
    if not isinstance(session_id, str) or not session_id:
        msg = f"{what} must be a non-empty string, got {session_id!r}"
        raise ConfigurationError(msg)
    if "\x00" in session_id:
        msg = f"{what} must not contain NUL characters"
        raise ConfigurationError(msg)
    return session_id


def encode_message(message: BaseMessage) -> str:
    """Serialize a message to JSON text, losslessly.

    Non-ASCII characters are escaped, so any string (lone surrogates, NUL) survives
    every database's text type.

    Raises:
        ConfigurationError: The message holds a value JSON cannot represent, or it is a
            ``RemoveMessage`` (a graph instruction, not a chat message).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> decode_message(encode_message(HumanMessage("hé", id="m1"))) == HumanMessage(
        ...     "hé", id="m1")
        True
    """
    if isinstance(message, RemoveMessage):
        msg = "RemoveMessage is a state-update instruction and cannot be stored in a history"
        raise ConfigurationError(msg)
    try:
        return json.dumps(message_to_dict(message), ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        msg = (
            f"message {message.id!r} ({message.type}) holds a value that cannot be stored "
            f"as JSON: {exc}"
        )
        raise ConfigurationError(msg) from exc


def decode_message(text: str) -> BaseMessage:
    """Rebuild a message stored by `encode_message`.

    Raises:
        StorageError: The stored text is not a serialized message.
    """
    try:
        return messages_from_dict([json.loads(text)])[0]
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"a stored message cannot be decoded: {type(exc).__name__}"
        raise StorageError(msg) from exc


def encode_summary(
    summary: RunningSummary, previous: RunningSummary | None
) -> tuple[str, list[str]]:
    """Serialize ``summary`` for storage as (JSON without covered ids, newly covered ids).

    Args:
        summary: The summary to store.
        previous: The summary it replaces (``None`` for the first one).

    Returns:
        The summary JSON (``covered_ids`` left out) and the sorted ids in
        ``summary.covered_ids`` that ``previous`` did not cover.

    Raises:
        StorageError: ``summary`` does not follow ``previous``: its version is not above
            ``previous.version``, or it drops ids ``previous`` covered.
    """
    stored = 0 if previous is None else previous.version
    if summary.version <= stored:
        msg = f"summary version {summary.version} does not follow the stored version {stored}"
        raise StorageError(msg)
    data = summary.model_dump(mode="json", exclude={"covered_ids"})
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    # A summary built from `previous` knows its own delta: no O(history) set difference.
    known = None if previous is None else ids_added_since(summary, previous)
    if known is not None:
        return text, known
    before: AbstractSet[str] = frozenset() if previous is None else previous.covered_ids
    delta = summary.covered_ids - before
    dropped = len(before) - (len(summary.covered_ids) - len(delta))  # |before - covered|
    if dropped:
        msg = (
            f"summary version {summary.version} drops {dropped} message ids the previous "
            "summary covered; refusing to lose them"
        )
        raise StorageError(msg)
    return text, sorted(delta)


def decode_summary(text: str, covered_ids: Iterable[str]) -> RunningSummary:
    """Rebuild a summary from its stored JSON and the union of its covered-id deltas.

    Raises:
        StorageError: The stored JSON is not a valid summary.
    """
    try:
        data: dict[str, Any] = json.loads(text)
        data["covered_ids"] = frozenset(covered_ids)
        return RunningSummary.model_validate(data)
    except ValueError as exc:
        msg = f"a stored summary cannot be decoded: {type(exc).__name__}"
        raise StorageError(msg) from exc


def assign_ids(
    session_id: str, start_seq: int, messages: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """Give id-less messages a deterministic id unique within the session (no mutation).

    Ids derive from the session id and the sequence number the batch starts at, so two
    equal messages appended in different turns never share an id.
    """
    return ensure_ids(messages, namespace=f"{session_id}\x00{start_seq}")


def duplicate_ids(
    messages: Sequence[BaseMessage], existing: Iterable[str]
) -> InvalidHistoryError | None:
    """The error to raise when a batch repeats an id (in itself or in ``existing``)."""
    stored = set(existing)
    seen: set[str] = set()
    violations: list[HistoryViolation] = []
    for index, message in enumerate(messages):
        message_id = str(message.id)
        if message_id in stored:
            detail = f"message id {message_id!r} is already stored in this session"
            violations.append(HistoryViolation("duplicate_message_id", index, message_id, detail))
        elif message_id in seen:
            detail = f"message id {message_id!r} repeats within the batch"
            violations.append(HistoryViolation("duplicate_message_id", index, message_id, detail))
        seen.add(message_id)
    return InvalidHistoryError(violations) if violations else None


@dataclass(frozen=True)
class MessagesUpdate:
    """A LangGraph-style messages update, resolved within itself (no store read yet).

    Built by `plan_update` with ``add_messages`` semantics: a ``RemoveMessage`` removes the
    message with its id, a ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` removes everything
    before it (stored messages and earlier messages of the update alike).
    """

    clear: bool
    """Whether every stored message and summary of the session goes first."""
    appends: tuple[BaseMessage, ...]
    """The messages to append, in order (none removed later in the update)."""
    append_at: tuple[int, ...]
    """The position of each of ``appends`` in the update."""
    removals: tuple[tuple[int, str], ...]
    """``(position in the update, id)`` of each stored message to remove."""

    @property
    def removed_ids(self) -> frozenset[str]:
        """The ids of the stored messages to remove."""
        return frozenset(message_id for _, message_id in self.removals)


def plan_update(messages: Sequence[BaseMessage]) -> MessagesUpdate:
    """Resolve an update's ``RemoveMessage`` entries against the update itself.

    Raises:
        ConfigurationError: A ``RemoveMessage`` has no id.

    Example:
        >>> from langchain_core.messages import HumanMessage, RemoveMessage
        >>> update = plan_update([RemoveMessage(id="old"), HumanMessage("hi", id="h1"),
        ...                       HumanMessage("oops", id="h2"), RemoveMessage(id="h2")])
        >>> update.clear, [m.id for m in update.appends], update.removals
        (False, ['h1'], ((0, 'old'),))
    """
    start = 0
    clear = False
    for index, message in enumerate(messages):
        if isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES:
            start, clear = index + 1, True
    appends: list[tuple[int, BaseMessage]] = []
    removals: list[tuple[int, str]] = []
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, RemoveMessage):
            appends.append((index, message))
            continue
        if not message.id:
            msg = f"messages[{index}] is a RemoveMessage without an id: name the message to remove"
            raise ConfigurationError(msg)
        kept = [(i, m) for i, m in appends if m.id != message.id]
        if len(kept) == len(appends):
            removals.append((index, message.id))
        appends = kept
    return MessagesUpdate(
        clear,
        tuple(m for _, m in appends),
        tuple(i for i, _ in appends),
        tuple(removals),
    )


def update_errors(
    update: MessagesUpdate,
    stored: Sequence[BaseMessage],
    existing: Collection[str],
    covered: Container[str] = frozenset(),
) -> InvalidHistoryError | None:
    """The error to raise for an update, or ``None`` when it may be applied.

    Args:
        update: The resolved update.
        stored: Its appends with their final ids (`assign_ids`).
        existing: Which of the appended and removed ids the session holds now (after
            ``update.clear``, none).
        covered: The ids the session's current summary covers (at least those of the
            appends).

    The appends must not repeat an id: in the update, in the session, or among the ids the
    summary covers (the message with it was removed or pruned: a new message taking its id
    would be taken for summarized and never shown). Every removal must name a message the
    session holds.
    """
    removed = update.removed_ids
    duplicates = duplicate_ids(stored, [*existing, *removed])
    violations = (
        []
        if duplicates is None
        else [replace(v, index=update.append_at[v.index]) for v in duplicates.violations]
    )
    flagged = {v.index for v in violations}
    for position, message in zip(update.append_at, stored, strict=True):
        message_id = str(message.id)
        if position not in flagged and message_id not in existing and message_id in covered:
            detail = (
                f"message id {message_id!r} is covered by the running summary (its message "
                "was removed or pruned); a new message needs a new id"
            )
            violations.append(
                HistoryViolation("duplicate_message_id", position, message_id, detail)
            )
    violations.sort(key=lambda v: v.index)
    held = set(existing)
    for index, message_id in update.removals:
        if message_id not in held:
            detail = (
                f"RemoveMessage names message id {message_id!r}, which no stored message of "
                "this session has (removed, pruned or never added)"
            )
            violations.append(HistoryViolation("unknown_message_id", index, message_id, detail))
    if not violations:
        return None
    return InvalidHistoryError(violations, hint="nothing was written")


def refuse_removals(messages: Sequence[BaseMessage]) -> None:
    """Raise `ConfigurationError` when ``messages`` holds a ``RemoveMessage`` (for `append`)."""
    for index, message in enumerate(messages):
        if isinstance(message, RemoveMessage):
            msg = (
                f"messages[{index}] is a RemoveMessage: append only stores messages; apply "
                "removals with HistoryStore.update (CompressingChatMessageHistory.add_messages "
                "does)"
            )
            raise ConfigurationError(msg)


def check_messages(messages: object) -> list[BaseMessage]:
    """Validate that ``messages`` is a sequence of messages; return it as a list."""
    if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
        msg = f"messages must be a sequence of BaseMessage, got {type(messages).__name__}"
        raise ConfigurationError(msg)
    out: list[BaseMessage] = []
    for index, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            msg = f"messages[{index}] is a {type(message).__name__}, not a BaseMessage"
            raise ConfigurationError(msg)
        out.append(message)
    return out


class SummaryStore(ABC):
    """One versioned running summary per key, updated only through a version check.

    The async methods default to running the sync ones in a worker thread.
    """

    @abstractmethod
    def load_summary(self, key: str) -> RunningSummary | None:
        """Return the current summary for ``key`` (``None`` when there is none)."""

    @abstractmethod
    def put_summary(
        self, key: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Store ``summary`` as the successor of ``previous``, atomically.

        Args:
            key: The summary key (for a side store: the wrapped history's session key).
            summary: The new summary; its version must be above ``previous.version`` (one
                compression may fold several chunks, one version each) and its
                ``covered_ids`` a superset of ``previous.covered_ids``.
            previous: The summary ``summary`` was built from, as loaded.

        Raises:
            CompressionConflictError: The stored summary is no longer ``previous``.
            ConfigurationError: ``key`` holds the messages of a `HistoryStore` session.
            StorageError: The backend failed; nothing was written.
        """

    @abstractmethod
    def clear(self, key: str) -> None:
        """Delete everything stored under ``key`` (and nothing else)."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections. The default does nothing."""

    async def aload_summary(self, key: str) -> RunningSummary | None:
        """Async twin of `load_summary`."""
        return await asyncio.to_thread(self.load_summary, key)

    async def aput_summary(
        self, key: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Async twin of `put_summary`."""
        await asyncio.to_thread(self.put_summary, key, summary, previous=previous)

    async def aclear(self, key: str) -> None:
        """Async twin of `clear`."""
        await asyncio.to_thread(self.clear, key)

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await asyncio.to_thread(self.close)


class HistoryStore(SummaryStore):
    """Append-only message logs per session, with atomic compression commits.

    A key used as a `HistoryStore` session must not also be used as a side-store key
    with `put_summary`; `put_summary` refuses keys that hold messages.
    """

    @abstractmethod
    def append(self, session_id: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Append ``messages`` to the session in one transaction.

        Messages without an id are stored as copies with a generated id; the caller's
        objects are never mutated.

        Returns:
            The stored messages (with ids), in order.

        Raises:
            InvalidHistoryError: A message id repeats within the batch or is already
                stored in the session; nothing was written.
            ConfigurationError: A message cannot be serialized; nothing was written.
            StorageError: The backend failed; nothing was written.
        """

    @abstractmethod
    def snapshot(self, session_id: str) -> SessionSnapshot:
        """Read the current summary and the uncovered messages, consistently.

        Costs O(uncovered messages), not O(history).
        """

    @abstractmethod
    def load_messages(self, session_id: str) -> list[BaseMessage]:
        """Every stored original message of the session, in order."""

    @abstractmethod
    def commit_compression(
        self, session_id: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Commit ``summary`` and mark the messages it newly covers, atomically.

        Args:
            session_id: The session.
            summary: The new summary, built from ``previous`` plus uncovered messages.
            previous: The summary of the snapshot the compression started from.

        Raises:
            CompressionConflictError: Another writer committed first, or the newly
                covered messages are no longer stored and uncovered; nothing changed.
            StorageError: The backend failed or ``summary`` does not extend
                ``previous``; nothing changed.
        """

    @abstractmethod
    def prune_covered(self, session_id: str) -> int:
        """Delete the session's covered originals; return how many were deleted."""

    def update(
        self,
        session_id: str,
        messages: Sequence[BaseMessage],
        *,
        check: HistoryCheck | None = None,
    ) -> list[BaseMessage]:
        """Apply a LangGraph-style update in one transaction (see `plan_update`).

        Messages are appended as by `append`; a ``RemoveMessage`` deletes the stored message
        with its id (covered or not: a covered one stays represented by the summary, as
        after `prune_covered`); ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` deletes every
        message and summary of the session first. With ``check``, the session's uncovered
        messages as the update would leave them are passed to it before anything is
        written; if it raises, nothing is.

        The default supports appends only (with ``check`` run on a snapshot first); the
        package's stores override it with one transaction for all of it.

        Returns:
            The appended messages (with ids), in order.

        Raises:
            InvalidHistoryError: An appended id repeats (in the update, in the session, or
                as the id of a message the update removes), or a removal names no stored
                message; nothing was written.
            ConfigurationError: A message cannot be serialized, or this store cannot
                remove messages; nothing was written.
            StorageError: The backend failed; nothing was written.
        """
        check_session_id(session_id)
        planned = plan_update(check_messages(messages))
        if planned.clear or planned.removals:
            msg = (
                f"{type(self).__name__} cannot remove messages (RemoveMessage): override "
                "HistoryStore.update to support it"
            )
            raise ConfigurationError(msg)
        if check is not None:
            check([*self.snapshot(session_id).uncovered, *planned.appends])
        return self.append(session_id, planned.appends)

    async def aupdate(
        self,
        session_id: str,
        messages: Sequence[BaseMessage],
        *,
        check: HistoryCheck | None = None,
    ) -> list[BaseMessage]:
        """Async twin of `update`."""
        return await asyncio.to_thread(self.update, session_id, messages, check=check)

    async def aappend(self, session_id: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Async twin of `append`."""
        return await asyncio.to_thread(self.append, session_id, messages)

    async def asnapshot(self, session_id: str) -> SessionSnapshot:
        """Async twin of `snapshot`."""
        return await asyncio.to_thread(self.snapshot, session_id)

    async def aload_messages(self, session_id: str) -> list[BaseMessage]:
        """Async twin of `load_messages`."""
        return await asyncio.to_thread(self.load_messages, session_id)

    async def acommit_compression(
        self, session_id: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Async twin of `commit_compression`."""
        await asyncio.to_thread(self.commit_compression, session_id, summary, previous=previous)

    async def aprune_covered(self, session_id: str) -> int:
        """Async twin of `prune_covered`."""
        return await asyncio.to_thread(self.prune_covered, session_id)
