"""An in-memory `HistoryStore`: same semantics as the SQL store, gone when the process ends.

Useful in tests, notebooks and single-process services that do not need persistence.
Messages are kept serialized, so the store accepts exactly what the SQL store accepts
and reads always return fresh copies.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import CompressionConflictError, ConfigurationError
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.storage.base import (
    HistoryCheck,
    HistoryStore,
    MessagesUpdate,
    SessionSnapshot,
    assign_ids,
    check_messages,
    check_session_id,
    decode_message,
    encode_message,
    encode_summary,
    plan_update,
    refuse_removals,
    update_errors,
)

__all__ = ["InMemoryHistoryStore"]


@dataclass
class _Stored:
    message_id: str
    text: str


@dataclass
class _Session:
    next_seq: int = 1
    summary: RunningSummary | None = None
    summaries: list[RunningSummary] = field(default_factory=list)
    uncovered: dict[int, _Stored] = field(default_factory=dict)
    covered: dict[int, _Stored] = field(default_factory=dict)
    seq_by_id: dict[str, int] = field(default_factory=dict)


class InMemoryHistoryStore(HistoryStore):
    """A thread-safe, process-local `HistoryStore` (and `SummaryStore`).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> store = InMemoryHistoryStore()
        >>> stored = store.append("s1", [HumanMessage("hi")])
        >>> [m.content for m in store.load_messages("s1")], store.snapshot("s1").version
        (['hi'], 0)
    """

    def __init__(self) -> None:
        """Create an empty store."""
        self._lock = threading.RLock()
        self._sessions: dict[str, _Session] = {}

    def __repr__(self) -> str:
        """Describe the store without its content."""
        return f"InMemoryHistoryStore(sessions={len(self._sessions)})"

    # -- SummaryStore -------------------------------------------------------------

    def load_summary(self, key: str) -> RunningSummary | None:
        """Return the current summary for ``key`` (``None`` when there is none)."""
        check_session_id(key, what="key")
        with self._lock:
            session = self._sessions.get(key)
            return None if session is None else session.summary

    def put_summary(
        self, key: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Store ``summary`` as the successor of ``previous`` (see `SummaryStore`)."""
        check_session_id(key, what="key")
        encode_summary(summary, previous)
        with self._lock:
            session = self._sessions.setdefault(key, _Session())
            if session.uncovered or session.covered:
                msg = f"key {key!r} holds history messages; use a separate key for summaries"
                raise ConfigurationError(msg)
            self._check_version(key, session, previous)
            session.summaries.append(summary)
            session.summary = summary

    def clear(self, key: str) -> None:
        """Delete the session's messages and summaries (and nothing else)."""
        check_session_id(key, what="key")
        with self._lock:
            self._sessions.pop(key, None)

    async def aload_summary(self, key: str) -> RunningSummary | None:
        """Async twin of `load_summary` (no thread needed)."""
        return self.load_summary(key)

    async def aput_summary(
        self, key: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Async twin of `put_summary` (no thread needed)."""
        self.put_summary(key, summary, previous=previous)

    async def aclear(self, key: str) -> None:
        """Async twin of `clear` (no thread needed)."""
        self.clear(key)

    # -- HistoryStore -------------------------------------------------------------

    def append(self, session_id: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Append ``messages`` to the session (see `HistoryStore.append`)."""
        check_session_id(session_id)
        batch = check_messages(messages)
        refuse_removals(batch)
        return self._apply(session_id, plan_update(batch), None)

    def update(
        self,
        session_id: str,
        messages: Sequence[BaseMessage],
        *,
        check: HistoryCheck | None = None,
    ) -> list[BaseMessage]:
        """Apply appends and removals atomically (see `HistoryStore.update`)."""
        check_session_id(session_id)
        return self._apply(session_id, plan_update(check_messages(messages)), check)

    def _apply(
        self, session_id: str, update: MessagesUpdate, check: HistoryCheck | None
    ) -> list[BaseMessage]:
        with self._lock:
            current = self._sessions.get(session_id) or _Session()
            session = _Session(next_seq=current.next_seq) if update.clear else current
            stored = assign_ids(session_id, session.next_seq, update.appends)
            wanted = [*(str(m.id) for m in stored), *update.removed_ids]
            covered = session.summary.covered_ids if session.summary is not None else frozenset()
            held = [i for i in wanted if i in session.seq_by_id]
            error = update_errors(update, stored, held, covered)
            if error is not None:
                raise error
            texts = [encode_message(m) for m in stored]
            removed = {session.seq_by_id[i] for i in update.removed_ids}
            if check is not None:
                kept = [s.text for q, s in session.uncovered.items() if q not in removed]
                check([*(decode_message(t) for t in kept), *stored])
            # nothing can fail from here on: the session changes all at once
            for seq in removed:
                gone = session.uncovered.pop(seq, None) or session.covered.pop(seq)
                del session.seq_by_id[gone.message_id]
            self._sessions[session_id] = session
            for message, text in zip(stored, texts, strict=True):
                message_id = str(message.id)
                session.uncovered[session.next_seq] = _Stored(message_id, text)
                session.seq_by_id[message_id] = session.next_seq
                session.next_seq += 1
            return stored

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """Read the current summary and the uncovered messages, consistently."""
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return SessionSnapshot(None, ())
            texts = [s.text for s in session.uncovered.values()]
            summary = session.summary
        return SessionSnapshot(summary, tuple(decode_message(t) for t in texts))

    def load_messages(self, session_id: str) -> list[BaseMessage]:
        """Every stored original message of the session, in order."""
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return []
            rows = sorted([*session.uncovered.items(), *session.covered.items()])
        return [decode_message(stored.text) for _, stored in rows]

    def commit_compression(
        self, session_id: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Commit ``summary`` and its coverage marks atomically (see `HistoryStore`)."""
        check_session_id(session_id)
        _, delta = encode_summary(summary, previous)
        with self._lock:
            session = self._sessions.get(session_id) or _Session()
            self._check_version(session_id, session, previous)
            seqs = [session.seq_by_id.get(i) for i in delta]
            missing = sum(1 for s in seqs if s is None or s not in session.uncovered)
            if not delta or missing:
                msg = (
                    f"session {session_id!r}: {missing} of {len(delta)} messages the summary "
                    "newly covers are not stored uncovered (cleared or compressed concurrently)"
                )
                raise CompressionConflictError(msg)
            for seq in seqs:
                assert seq is not None
                session.covered[seq] = session.uncovered.pop(seq)
            session.summaries.append(summary)
            session.summary = summary

    def prune_covered(self, session_id: str) -> int:
        """Delete the session's covered originals; return how many were deleted."""
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return 0
            count = len(session.covered)
            for stored in session.covered.values():
                del session.seq_by_id[stored.message_id]
            session.covered.clear()
            return count

    async def aappend(self, session_id: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Async twin of `append` (no thread needed)."""
        return self.append(session_id, messages)

    async def aupdate(
        self,
        session_id: str,
        messages: Sequence[BaseMessage],
        *,
        check: HistoryCheck | None = None,
    ) -> list[BaseMessage]:
        """Async twin of `update` (no thread needed)."""
        return self.update(session_id, messages, check=check)

    async def asnapshot(self, session_id: str) -> SessionSnapshot:
        """Async twin of `snapshot` (no thread needed)."""
        return self.snapshot(session_id)

    async def aload_messages(self, session_id: str) -> list[BaseMessage]:
        """Async twin of `load_messages` (no thread needed)."""
        return self.load_messages(session_id)

    async def acommit_compression(
        self, session_id: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Async twin of `commit_compression` (no thread needed)."""
        self.commit_compression(session_id, summary, previous=previous)

    async def aprune_covered(self, session_id: str) -> int:
        """Async twin of `prune_covered` (no thread needed)."""
        return self.prune_covered(session_id)

    @staticmethod
    def _check_version(key: str, session: _Session, previous: RunningSummary | None) -> None:
        current = session.summary
        same = (current is None and previous is None) or (
            current is not None
            and previous is not None
            and current.version == previous.version
            and current.sha256 == previous.sha256
        )
        if not same:
            have = 0 if current is None else current.version
            want = 0 if previous is None else previous.version
            msg = (
                f"session {key!r}: summary version {have} is stored, the update was built "
                f"from version {want}; another writer committed first"
            )
            raise CompressionConflictError(msg)
