"""The SQL `HistoryStore`: one schema on SQLite (stdlib ``sqlite3``) and PostgreSQL (psycopg 3).

The tables (sessions, messages, summaries, meta) are prefixed ``histcompress_`` so they can
share a database with other applications; the schema and every transaction body are query
plans in `storage._sql_plans`, and this module owns the connections that run them. Every
write is one transaction (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``SELECT ... FOR UPDATE`` on
the session row) and every read one snapshot, so a crash leaves either the old or the new
state, never a mix. The store is safe to share between threads (one connection, guarded by a
lock) and processes (database locking); async methods use ``psycopg.AsyncConnection`` on
PostgreSQL and a worker thread on SQLite. A read is retried once after a connection loss; a
write only when its connection was found dead before the transaction began.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import ConfigurationError, HistCompressError, StorageError
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.storage._sql_plans import (
    POSTGRES,
    SCHEMA_VERSION,
    SQLITE,
    Plan,
    RawSnapshot,
    SummaryRow,
    adrive,
    all_messages_plan,
    append_plan,
    clear_plan,
    commit_plan,
    drive,
    load_summary_rows,
    prune_plan,
    schema_plan,
    snapshot_plan,
)
from langchain_histcompress.storage.base import (
    HistoryCheck,
    HistoryStore,
    SessionSnapshot,
    check_messages,
    check_session_id,
    decode_message,
    decode_summary,
    encode_summary,
    plan_update,
    refuse_removals,
)
from langchain_histcompress.storage.urls import ConnectionSpec, parse_connection

if TYPE_CHECKING:
    import psycopg

__all__ = ["SCHEMA_VERSION", "SQLHistoryStore", "open_store"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_SUMMARY_CACHE_SIZE = 256


class _ConnectionLostError(StorageError):
    """The connection was found dead before the transaction began: nothing was sent."""


class _CommitGuard:
    """Lets an awaiting task veto the commit of a transaction running in a worker thread.

    Cancelling ``await asyncio.to_thread(...)`` does not stop the thread; without a veto
    the thread would go on to commit what its caller was told was cancelled. The check and
    the ``COMMIT`` happen under one lock, so a cancellation either lands before the commit
    (the transaction rolls back) or after it (the work was already durable).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True

    def commit(self, cursor: Any) -> None:
        with self._lock:
            if self._cancelled:
                raise asyncio.CancelledError
            cursor.execute("COMMIT")


def _discard(conn: Any) -> None:
    """Release an async connection whose event loop is gone (closes its socket)."""
    if conn is None or conn.closed:
        return
    try:
        conn.pgconn.finish()
    except Exception:  # already unusable; nothing left to release
        logger.debug("discarding an async connection failed")


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        msg = "PostgreSQL storage needs psycopg 3: pip install 'langchain-histcompress[postgres]'"
        raise ConfigurationError(msg) from exc
    return psycopg


def enable_wal(
    conn: sqlite3.Connection,
    *,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Switch ``conn``'s database to WAL, waiting out other processes doing the same.

    Changing the journal mode needs an exclusive lock and SQLite does not call the busy
    handler for it, so two processes opening a fresh file at once can get "database is
    locked" immediately; retry with backoff until ``timeout`` seconds have passed.
    """
    deadline = clock() + timeout
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or clock() >= deadline:
                raise
        sleep(delay)
        delay = min(delay * 2, 0.25)


class SQLHistoryStore(HistoryStore):
    """A `HistoryStore` (and `SummaryStore`) on SQLite or PostgreSQL.

    Args:
        connection: A path, ``sqlite:///path``, ``":memory:"``, ``postgresql://...`` or
            ``postgres://...``; ``None`` means the local SQLite file ``histcompress.sqlite``
            in the working directory (see `storage.urls.parse_connection`).
        busy_timeout: Seconds a SQLite writer waits for another writer's lock (and the
            PostgreSQL ``connect_timeout``).
        create_schema: Create the tables if they are missing (idempotent, safe to race).

    Raises:
        ConfigurationError: The connection string is invalid (raised before connecting).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> store = SQLHistoryStore(":memory:")
        >>> stored = store.append("acme", [HumanMessage("hi", id="h1"), AIMessage("yo", id="a1")])
        >>> [m.id for m in store.snapshot("acme").uncovered], store.load_messages("acme%")
        (['h1', 'a1'], [])
        >>> store.close()
    """

    def __init__(
        self,
        connection: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = 30.0,
        create_schema: bool = True,
    ) -> None:
        """Validate the connection string; connections open lazily on first use."""
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)):
            msg = f"busy_timeout must be a number of seconds, got {busy_timeout!r}"
            raise ConfigurationError(msg)
        if busy_timeout <= 0:
            msg = f"busy_timeout must be > 0, got {busy_timeout!r}"
            raise ConfigurationError(msg)
        self.spec: ConnectionSpec = parse_connection(connection)
        """Where the store lives (``display`` is safe to log)."""
        self.busy_timeout = float(busy_timeout)
        """Seconds to wait for locks (SQLite) or to connect (PostgreSQL)."""
        self.create_schema = create_schema
        """Whether missing tables are created on first use."""
        self._dialect = SQLITE if self.spec.backend == "sqlite" else POSTGRES
        # resolved now, so a later change of working directory cannot move the database
        self._sqlite_target = (
            self.spec.target if self.spec.is_memory else os.path.abspath(self.spec.target)
        )
        if self.spec.backend == "postgres":
            _import_psycopg()
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._conn: Any = None
        self._aconn: Any = None
        self._aconn_loop: asyncio.AbstractEventLoop | None = None
        self._alock: asyncio.Lock | None = None
        self._schema_ready = not create_schema
        self._cache: OrderedDict[tuple[str, str], RunningSummary] = OrderedDict()
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        """Describe the store without secrets."""
        return f"SQLHistoryStore({self.spec.display!r})"

    # ------------------------------------------------------------------ connections

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # a forked child must not reuse the parent's sockets
            self._pid = os.getpid()
            self._lock = threading.RLock()
            self._conn = None
            self._aconn = None
            self._aconn_loop = None
            self._alock = None

    def _connect_sqlite(self) -> sqlite3.Connection:
        """Open and configure a SQLite connection (overridable in tests)."""
        conn = sqlite3.connect(
            self._sqlite_target,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if not self.spec.is_memory:
            enable_wal(conn, timeout=self.busy_timeout)
            conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _connect_postgres(self) -> psycopg.Connection[Any]:
        """Open a PostgreSQL connection in autocommit mode (overridable in tests)."""
        pg = _import_psycopg()
        conn: psycopg.Connection[Any] = pg.connect(
            self.spec.target, autocommit=True, connect_timeout=max(1, int(self.busy_timeout))
        )
        return conn

    async def _aconnect_postgres(self) -> psycopg.AsyncConnection[Any]:
        """Open an async PostgreSQL connection in autocommit mode (overridable in tests)."""
        pg = _import_psycopg()
        conn: psycopg.AsyncConnection[Any] = await pg.AsyncConnection.connect(
            self.spec.target, autocommit=True, connect_timeout=max(1, int(self.busy_timeout))
        )
        return conn

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and self._dialect.name == "postgres" and (conn.closed or conn.broken):
            conn = None
        if conn is None:
            try:
                conn = (
                    self._connect_sqlite()
                    if self._dialect.name == "sqlite"
                    else self._connect_postgres()
                )
            except HistCompressError:
                raise
            except Exception as exc:
                raise self._storage_error("cannot open", exc) from exc
            self._conn = conn
        if not self._schema_ready:
            self._run_sync(conn, lambda: schema_plan(self._dialect), write=True)
            self._schema_ready = True
        return conn

    async def _aconnection(self) -> tuple[Any, asyncio.Lock]:
        loop = asyncio.get_running_loop()
        if self._aconn is None or self._aconn_loop is not loop or self._aconn.broken:
            _discard(self._aconn)
            self._aconn = None
            try:
                conn = await self._aconnect_postgres()
            except HistCompressError:
                raise
            except Exception as exc:
                raise self._storage_error("cannot open", exc) from exc
            self._aconn, self._aconn_loop, self._alock = conn, loop, asyncio.Lock()
        assert self._alock is not None
        return self._aconn, self._alock

    def _storage_error(self, action: str, exc: BaseException) -> StorageError:
        return StorageError(
            f"{action} {self._dialect.name} store {self.spec.display}: {type(exc).__name__}: {exc}"
        )

    # ------------------------------------------------------------------ transactions

    def _run_sync(
        self,
        conn: Any,
        factory: Callable[[], Plan[_T]],
        *,
        write: bool,
        guard: _CommitGuard | None = None,
    ) -> _T:
        d = self._dialect
        cursor = conn.cursor()
        began = False
        try:
            cursor.execute(d.begin_write if write else d.begin_read)
            began = True
            result = drive(cursor, factory())
            if guard is None:
                cursor.execute("COMMIT")
            else:
                guard.commit(cursor)
            return result
        except BaseException as exc:
            self._rollback(conn)
            if isinstance(exc, HistCompressError) or not isinstance(exc, Exception):
                raise
            if not began and self._conn is None:
                lost = self._storage_error("connection lost to", exc)
                raise _ConnectionLostError(str(lost)) from exc
            raise self._storage_error("transaction failed on", exc) from exc
        finally:
            cursor.close()

    def _rollback(self, conn: Any) -> None:
        try:
            if self._dialect.name == "postgres" and (conn.closed or conn.broken):
                self._conn = None
                return
            conn.execute("ROLLBACK")
        except Exception:  # the connection is unusable; reopen on next use
            logger.debug("rollback failed on %s; reconnecting next time", self.spec.display)
            self._conn = None

    def _transact(
        self,
        factory: Callable[[], Plan[_T]],
        *,
        write: bool,
        guard: _CommitGuard | None = None,
    ) -> _T:
        """Run one transaction, retried once on a fresh connection when the old one is gone.

        A read is retried after any connection loss; a write only when the connection was
        found dead before its transaction began (a server that dropped an idle
        connection), since a write that failed later may have committed.
        """
        with self._lock:
            self._check_fork()
            for attempt in (1, 2):
                try:
                    conn = self._connection()
                    return self._run_sync(conn, factory, write=write, guard=guard)
                except StorageError as exc:
                    retry = isinstance(exc, _ConnectionLostError) or not write
                    if attempt == 2 or not retry or self._conn is not None:
                        raise
                    logger.warning("connection to %s lost; retrying once", self.spec.display)
            raise AssertionError("unreachable")  # pragma: no cover

    async def _atransact(self, factory: Callable[[], Plan[_T]], *, write: bool) -> _T:
        if self._dialect.name == "sqlite":
            guard = _CommitGuard()
            try:
                return await asyncio.to_thread(self._transact, factory, write=write, guard=guard)
            except asyncio.CancelledError:
                guard.cancel()  # the thread rolls back instead of committing
                raise
        self._check_fork()
        for attempt in (1, 2):
            conn, lock = await self._aconnection()
            async with lock:
                try:
                    if not self._schema_ready:
                        await self._arun(conn, lambda: schema_plan(self._dialect), write=True)
                        self._schema_ready = True
                    return await self._arun(conn, factory, write=write)
                except StorageError as exc:
                    retry = isinstance(exc, _ConnectionLostError) or not write
                    if attempt == 2 or not retry or self._aconn is not None:
                        raise
                    logger.warning("connection to %s lost; retrying once", self.spec.display)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _arun(self, conn: Any, factory: Callable[[], Plan[_T]], *, write: bool) -> _T:
        d = self._dialect
        began = False
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(d.begin_write if write else d.begin_read)
                began = True
                result = await adrive(cursor, factory())
                await cursor.execute("COMMIT")
                return result
        except BaseException as exc:
            await self._arollback(conn, exc)
            if isinstance(exc, HistCompressError) or not isinstance(exc, Exception):
                raise
            if not began and self._aconn is None:
                lost = self._storage_error("connection lost to", exc)
                raise _ConnectionLostError(str(lost)) from exc
            raise self._storage_error("transaction failed on", exc) from exc

    async def _arollback(self, conn: Any, exc: BaseException) -> None:
        """Roll back after a plan error; drop the connection after anything else.

        Closing a connection aborts its open transaction on the server, so a cancelled or
        failed transaction never commits half-way.
        """
        if isinstance(exc, HistCompressError) and not (conn.broken or conn.closed):
            try:
                await asyncio.shield(conn.execute("ROLLBACK"))
            except Exception:
                logger.debug("async rollback failed on %s", self.spec.display)
            else:
                return
        if self._aconn is conn:
            self._aconn = None
        try:
            await asyncio.shield(conn.close())
        except Exception:
            logger.debug("closing a failed async connection to %s failed", self.spec.display)

    # ------------------------------------------------------------------ summary cache

    def _cached(self, session_id: str, uid: str) -> bool:
        with self._cache_lock:
            return (session_id, uid) in self._cache

    def _cache_get(self, session_id: str, uid: str) -> RunningSummary | None:
        with self._cache_lock:
            summary = self._cache.get((session_id, uid))
            if summary is not None:
                self._cache.move_to_end((session_id, uid))
            return summary

    def _covered_ids(self, session_id: str, uid: str) -> AbstractSet[str] | None:
        summary = self._cache_get(session_id, uid)
        return None if summary is None else summary.covered_ids

    def _cache_put(self, session_id: str, uid: str, summary: RunningSummary) -> None:
        with self._cache_lock:
            self._cache[(session_id, uid)] = summary
            while len(self._cache) > _SUMMARY_CACHE_SIZE:
                self._cache.popitem(last=False)

    def _finish_snapshot(self, session_id: str, raw: RawSnapshot) -> SessionSnapshot:
        summary: RunningSummary | None = None
        if raw.version:
            assert raw.uid is not None
            if raw.summary is not None:
                summary = decode_summary(*raw.summary)
                self._cache_put(session_id, raw.uid, summary)
            else:
                summary = self._cache_get(session_id, raw.uid)
                if summary is None:  # evicted between the check and now: read it again
                    text, ids = self._transact(
                        lambda: load_summary_rows(self._dialect, session_id, raw.version),
                        write=False,
                    )
                    summary = decode_summary(text, ids)
                    self._cache_put(session_id, raw.uid, summary)
        return SessionSnapshot(summary, tuple(decode_message(t) for t in raw.messages))

    # ------------------------------------------------------------------ SummaryStore

    def load_summary(self, key: str) -> RunningSummary | None:
        """Return the current summary for ``key`` (``None`` when there is none)."""
        check_session_id(key, what="key")
        raw = self._transact(lambda: self._snapshot_factory(key, False), write=False)
        return self._finish_snapshot(key, raw).summary

    async def aload_summary(self, key: str) -> RunningSummary | None:
        """Async twin of `load_summary`."""
        check_session_id(key, what="key")
        raw = await self._atransact(lambda: self._snapshot_factory(key, False), write=False)
        return await self._afinish_snapshot(key, raw)

    def put_summary(
        self, key: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Store ``summary`` as the successor of ``previous`` (see `SummaryStore`)."""
        check_session_id(key, what="key")
        row = self._summary_row(summary, previous)
        self._transact(
            lambda: commit_plan(self._dialect, key, summary, previous, row, mark_messages=False),
            write=True,
        )
        self._cache_put(key, row.uid, summary)

    async def aput_summary(
        self, key: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Async twin of `put_summary`."""
        check_session_id(key, what="key")
        row = self._summary_row(summary, previous)
        await self._atransact(
            lambda: commit_plan(self._dialect, key, summary, previous, row, mark_messages=False),
            write=True,
        )
        self._cache_put(key, row.uid, summary)

    def clear(self, key: str) -> None:
        """Delete the session's messages, summaries and session row (nothing else)."""
        check_session_id(key, what="key")
        self._transact(lambda: clear_plan(self._dialect, key), write=True)

    async def aclear(self, key: str) -> None:
        """Async twin of `clear`."""
        check_session_id(key, what="key")
        await self._atransact(lambda: clear_plan(self._dialect, key), write=True)

    def close(self) -> None:
        """Close the connections; a later call reopens them (a ``:memory:`` store is lost)."""
        with self._lock:
            conn, self._conn = self._conn, None
            _discard(self._aconn)
            self._aconn = None
            self._aconn_loop = None
            if self.spec.is_memory:
                self._schema_ready = not self.create_schema
            if conn is not None:
                conn.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        aconn, self._aconn = self._aconn, None
        self._aconn_loop = None
        if aconn is not None:
            await aconn.close()
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------ HistoryStore

    def append(self, session_id: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Append ``messages`` in one transaction (see `HistoryStore.append`)."""
        check_session_id(session_id)
        batch = check_messages(messages)
        refuse_removals(batch)
        return self.update(session_id, batch)

    async def aappend(self, session_id: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Async twin of `append`."""
        check_session_id(session_id)
        batch = check_messages(messages)
        refuse_removals(batch)
        return await self.aupdate(session_id, batch)

    def update(
        self,
        session_id: str,
        messages: Sequence[BaseMessage],
        *,
        check: HistoryCheck | None = None,
    ) -> list[BaseMessage]:
        """Apply appends and removals in one transaction (see `HistoryStore.update`)."""
        check_session_id(session_id)
        batch = check_messages(messages)
        if not batch:
            return []
        update = plan_update(batch)
        return self._transact(
            lambda: append_plan(self._dialect, session_id, update, check, self._covered_ids),
            write=True,
        )

    async def aupdate(
        self,
        session_id: str,
        messages: Sequence[BaseMessage],
        *,
        check: HistoryCheck | None = None,
    ) -> list[BaseMessage]:
        """Async twin of `update`."""
        check_session_id(session_id)
        batch = check_messages(messages)
        if not batch:
            return []
        update = plan_update(batch)
        return await self._atransact(
            lambda: append_plan(self._dialect, session_id, update, check, self._covered_ids),
            write=True,
        )

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """Read the current summary and the uncovered messages in one snapshot."""
        check_session_id(session_id)
        raw = self._transact(lambda: self._snapshot_factory(session_id, True), write=False)
        return self._finish_snapshot(session_id, raw)

    async def asnapshot(self, session_id: str) -> SessionSnapshot:
        """Async twin of `snapshot`."""
        check_session_id(session_id)
        raw = await self._atransact(lambda: self._snapshot_factory(session_id, True), write=False)
        summary = await self._afinish_snapshot(session_id, raw)
        return SessionSnapshot(summary, tuple(decode_message(t) for t in raw.messages))

    def load_messages(self, session_id: str) -> list[BaseMessage]:
        """Every stored original message of the session, in order."""
        check_session_id(session_id)
        texts = self._transact(lambda: all_messages_plan(self._dialect, session_id), write=False)
        return [decode_message(t) for t in texts]

    async def aload_messages(self, session_id: str) -> list[BaseMessage]:
        """Async twin of `load_messages`."""
        check_session_id(session_id)
        texts = await self._atransact(
            lambda: all_messages_plan(self._dialect, session_id), write=False
        )
        return [decode_message(t) for t in texts]

    def commit_compression(
        self, session_id: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Commit ``summary`` and its coverage marks atomically (see `HistoryStore`)."""
        check_session_id(session_id)
        row = self._summary_row(summary, previous)
        self._transact(
            lambda: commit_plan(
                self._dialect, session_id, summary, previous, row, mark_messages=True
            ),
            write=True,
        )
        self._cache_put(session_id, row.uid, summary)

    async def acommit_compression(
        self, session_id: str, summary: RunningSummary, *, previous: RunningSummary | None
    ) -> None:
        """Async twin of `commit_compression`."""
        check_session_id(session_id)
        row = self._summary_row(summary, previous)
        await self._atransact(
            lambda: commit_plan(
                self._dialect, session_id, summary, previous, row, mark_messages=True
            ),
            write=True,
        )
        self._cache_put(session_id, row.uid, summary)

    def prune_covered(self, session_id: str) -> int:
        """Delete the session's covered originals; return how many were deleted."""
        check_session_id(session_id)
        return self._transact(lambda: prune_plan(self._dialect, session_id), write=True)

    async def aprune_covered(self, session_id: str) -> int:
        """Async twin of `prune_covered`."""
        check_session_id(session_id)
        return await self._atransact(lambda: prune_plan(self._dialect, session_id), write=True)

    # ------------------------------------------------------------------ helpers

    def _snapshot_factory(self, session_id: str, with_messages: bool) -> Plan[RawSnapshot]:
        return snapshot_plan(self._dialect, session_id, self._cached, with_messages=with_messages)

    async def _afinish_snapshot(self, session_id: str, raw: RawSnapshot) -> RunningSummary | None:
        if (
            raw.version
            and raw.summary is None
            and raw.uid is not None
            and self._cache_get(session_id, raw.uid) is None
        ):
            text, ids = await self._atransact(
                lambda: load_summary_rows(self._dialect, session_id, raw.version),
                write=False,
            )
            raw = RawSnapshot(raw.version, raw.uid, (text, ids), [])
        return self._finish_snapshot(session_id, raw).summary

    @staticmethod
    def _summary_row(summary: RunningSummary, previous: RunningSummary | None) -> SummaryRow:
        if not isinstance(summary, RunningSummary):
            msg = f"summary must be a RunningSummary, got {type(summary).__name__}"
            raise ConfigurationError(msg)
        text, delta = encode_summary(summary, previous)
        return SummaryRow(uuid.uuid4().hex, text, delta)


_STORES: dict[tuple[int, str, str], SQLHistoryStore] = {}
_STORES_LOCK = threading.Lock()


def open_store(connection: str | os.PathLike[str] | None = None) -> SQLHistoryStore:
    """Return the process-wide shared `SQLHistoryStore` for ``connection``.

    Faces that take a connection string use this, so creating a history object per
    request (as ``RunnableWithMessageHistory`` does) reuses one connection per database
    instead of opening a new one each time. Every ``":memory:"`` string maps to one
    shared in-memory database per process.

    Raises:
        ConfigurationError: The connection string is invalid.

    Example:
        >>> open_store(":memory:") is open_store("sqlite://:memory:")
        True
    """
    spec = parse_connection(connection)
    target = spec.target
    if spec.backend == "sqlite" and not spec.is_memory:
        target = os.path.abspath(target)
    key = (os.getpid(), spec.backend, target)  # one store per database and process
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = SQLHistoryStore(connection)
            _STORES[key] = store
        return store
