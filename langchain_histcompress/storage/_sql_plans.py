"""The SQL store's schema and transactions as query plans, free of any connection.

A plan is a generator: it yields `Query` objects, receives each one's result and returns the
transaction's value, so one body serves SQLite and PostgreSQL, sync (`drive`) and async
(`adrive`) alike; `Dialect` holds what differs between the two engines. Which connection a
plan runs on, and how it is retried, is `storage.sql`'s business.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import (
    CompressionConflictError,
    ConfigurationError,
    StorageError,
)
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.storage.base import (
    HistoryCheck,
    MessagesUpdate,
    assign_ids,
    decode_message,
    encode_message,
    update_errors,
)

SCHEMA_VERSION = 1
"""Version of the table layout this module creates and reads."""

_T = TypeVar("_T")
_Fetch = Literal["none", "one", "all", "rowcount", "many"]
_CHUNK = 500  # ids per IN (...) list on SQLite
_PG_SCHEMA_LOCK = 0x68697374  # advisory lock key serializing concurrent schema creation


@dataclass(frozen=True)
class Query:
    sql: str
    params: Sequence[Any] = ()
    fetch: _Fetch = "none"
    rows: Sequence[Sequence[Any]] = ()


Plan = Generator[Query, Any, _T]
"""A transaction body: yields queries, receives their results, returns a value."""


@dataclass(frozen=True)
class Dialect:
    name: Literal["sqlite", "postgres"]
    begin_read: str
    begin_write: str
    lock_suffix: str
    now: str
    ddl: tuple[str, ...]

    def q(self, sql: str) -> str:
        return sql if self.name == "sqlite" else sql.replace("?", "%s")

    def in_ids(self, column: str, ids: Sequence[str]) -> list[tuple[str, list[str]]]:
        """``column IN (...)`` fragments and their parameters, chunked for SQLite."""
        if self.name == "postgres":
            return [(f"{column} = ANY(%s)", list(ids))]
        out = []
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            out.append((f"{column} IN ({','.join('?' * len(chunk))})", chunk))
        return out

    def id_params(self, chunk: list[str]) -> list[Any]:
        return [chunk] if self.name == "postgres" else list(chunk)


def _ddl(integer: str, timestamp: str, now: str) -> tuple[str, ...]:
    return (
        "CREATE TABLE IF NOT EXISTS histcompress_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS histcompress_sessions ("
        "session_id TEXT PRIMARY KEY, "
        f"summary_version {integer} NOT NULL DEFAULT 0, "
        f"next_seq {integer} NOT NULL DEFAULT 1, "
        f"created_at {timestamp} NOT NULL DEFAULT ({now}), "
        f"updated_at {timestamp} NOT NULL DEFAULT ({now}))",
        "CREATE TABLE IF NOT EXISTS histcompress_messages ("
        "session_id TEXT NOT NULL, "
        f"seq {integer} NOT NULL, "
        "message_id TEXT NOT NULL, "
        "message TEXT NOT NULL, "
        f"covered_version {integer}, "
        f"created_at {timestamp} NOT NULL DEFAULT ({now}), "
        "PRIMARY KEY (session_id, seq), "
        "UNIQUE (session_id, message_id))",
        "CREATE INDEX IF NOT EXISTS histcompress_messages_uncovered "
        "ON histcompress_messages (session_id, seq) WHERE covered_version IS NULL",
        "CREATE TABLE IF NOT EXISTS histcompress_summaries ("
        "session_id TEXT NOT NULL, "
        f"version {integer} NOT NULL, "
        "uid TEXT NOT NULL, "
        "summary TEXT NOT NULL, "
        "covered_ids TEXT NOT NULL, "
        f"covered_count {integer} NOT NULL, "
        "sha256 TEXT NOT NULL, "
        f"created_at {timestamp} NOT NULL DEFAULT ({now}), "
        "PRIMARY KEY (session_id, version))",
    )


_SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
SQLITE = Dialect(
    name="sqlite",
    begin_read="BEGIN",
    begin_write="BEGIN IMMEDIATE",
    lock_suffix="",
    now=_SQLITE_NOW,
    ddl=_ddl("INTEGER", "TEXT", _SQLITE_NOW),
)
POSTGRES = Dialect(
    name="postgres",
    begin_read="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    begin_write="BEGIN",
    lock_suffix=" FOR UPDATE",
    now="now()",
    ddl=_ddl("BIGINT", "TIMESTAMPTZ", "now()"),
)


# --------------------------------------------------------------------------- plans


def schema_plan(d: Dialect) -> Plan[None]:
    if d.name == "postgres":
        yield Query("SELECT pg_advisory_xact_lock(%s)", (_PG_SCHEMA_LOCK,))
    for statement in d.ddl:
        yield Query(statement)
    yield Query(
        d.q(
            "INSERT INTO histcompress_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"
        ),
        ("schema_version", str(SCHEMA_VERSION)),
    )
    row = yield Query(
        d.q("SELECT value FROM histcompress_meta WHERE key = ?"), ("schema_version",), "one"
    )
    if row is None or str(row[0]) != str(SCHEMA_VERSION):
        found = None if row is None else row[0]
        msg = (
            f"the database holds histcompress schema version {found}, this package reads "
            f"version {SCHEMA_VERSION}"
        )
        raise ConfigurationError(msg)


def _lock_session(d: Dialect, session_id: str) -> Plan[tuple[int, int]]:
    """Create the session row if needed, lock it; return (summary_version, next_seq)."""
    for _ in range(5):
        yield Query(
            d.q(
                "INSERT INTO histcompress_sessions (session_id) VALUES (?) "
                "ON CONFLICT (session_id) DO NOTHING"
            ),
            (session_id,),
        )
        row = yield Query(
            d.q(
                "SELECT summary_version, next_seq FROM histcompress_sessions "
                f"WHERE session_id = ?{d.lock_suffix}"
            ),
            (session_id,),
            "one",
        )
        if row is not None:
            return int(row[0]), int(row[1])
    msg = "session row vanished repeatedly while being locked (concurrent clears)"
    raise StorageError(msg)


def append_plan(
    d: Dialect,
    session_id: str,
    update: MessagesUpdate,
    check: HistoryCheck | None = None,
    covered_ids: Callable[[str, str], AbstractSet[str] | None] = lambda _s, _u: None,
) -> Plan[list[BaseMessage]]:
    """Apply ``update`` (appends, removals, remove-all), checked, in one transaction.

    ``covered_ids(session_id, uid)`` gives the covered ids of a cached summary version
    (``None``: read them), needed only when an append brings its own id.
    """
    version, next_seq = yield from _lock_session(d, session_id)
    covered: AbstractSet[str] = frozenset()
    if version and not update.clear and any(m.id for m in update.appends):
        _, uid = yield from _current_version(d, session_id)
        known = covered_ids(session_id, uid) if uid is not None else None
        if known is None:
            _, ids = yield from load_summary_rows(d, session_id, version)
            known = frozenset(ids)
        covered = known
    if update.clear:
        for table in ("histcompress_messages", "histcompress_summaries"):
            yield Query(d.q(f"DELETE FROM {table} WHERE session_id = ?"), (session_id,))
        yield Query(
            d.q("UPDATE histcompress_sessions SET summary_version = 0 WHERE session_id = ?"),
            (session_id,),
        )
    stored = assign_ids(session_id, next_seq, update.appends)
    ids = [str(m.id) for m in stored]
    removed = sorted(update.removed_ids)
    existing: list[str] = []
    for fragment, chunk in d.in_ids("message_id", [*ids, *removed]):
        rows = yield Query(
            f"SELECT message_id FROM histcompress_messages WHERE session_id = {_p(d)} "
            f"AND {fragment}",
            [session_id, *d.id_params(chunk)],
            "all",
        )
        existing.extend(str(r[0]) for r in rows)
    error = update_errors(update, stored, existing, covered)
    if error is not None:
        raise error
    rows_to_insert = [
        (session_id, next_seq + i, ids[i], encode_message(m)) for i, m in enumerate(stored)
    ]
    if check is not None:
        rows = yield Query(
            d.q(
                "SELECT message_id, message FROM histcompress_messages WHERE session_id = ? "
                "AND covered_version IS NULL ORDER BY seq"
            ),
            (session_id,),
            "all",
        )
        gone = update.removed_ids
        check([*(decode_message(str(r[1])) for r in rows if str(r[0]) not in gone), *stored])
    for fragment, chunk in d.in_ids("message_id", removed):
        yield Query(
            f"DELETE FROM histcompress_messages WHERE session_id = {_p(d)} AND {fragment}",
            [session_id, *d.id_params(chunk)],
        )
    if rows_to_insert:
        yield Query(
            d.q(
                "INSERT INTO histcompress_messages (session_id, seq, message_id, message) "
                "VALUES (?, ?, ?, ?)"
            ),
            fetch="many",
            rows=rows_to_insert,
        )
    yield Query(
        d.q(
            f"UPDATE histcompress_sessions SET next_seq = ?, updated_at = {d.now} "
            "WHERE session_id = ?"
        ),
        (next_seq + len(stored), session_id),
    )
    return stored


def _p(d: Dialect) -> str:
    return "?" if d.name == "sqlite" else "%s"


@dataclass(frozen=True)
class RawSnapshot:
    version: int
    uid: str | None
    summary: tuple[str, list[str]] | None
    messages: list[str]


def load_summary_rows(d: Dialect, session_id: str, version: int) -> Plan[tuple[str, list[str]]]:
    row = yield Query(
        d.q("SELECT summary FROM histcompress_summaries WHERE session_id = ? AND version = ?"),
        (session_id, version),
        "one",
    )
    if row is None:
        msg = f"session {session_id!r}: summary version {version} is missing"
        raise StorageError(msg)
    deltas = yield Query(
        d.q(
            "SELECT covered_ids FROM histcompress_summaries "
            "WHERE session_id = ? AND version <= ? ORDER BY version"
        ),
        (session_id, version),
        "all",
    )
    ids: list[str] = []
    for (delta,) in deltas:
        ids.extend(json.loads(delta))
    return str(row[0]), ids


def _current_version(d: Dialect, session_id: str) -> Plan[tuple[int, str | None]]:
    row = yield Query(
        d.q(
            "SELECT s.summary_version, m.uid FROM histcompress_sessions s "
            "LEFT JOIN histcompress_summaries m "
            "ON m.session_id = s.session_id AND m.version = s.summary_version "
            "WHERE s.session_id = ?"
        ),
        (session_id,),
        "one",
    )
    if row is None or not row[0]:
        return 0, None
    return int(row[0]), None if row[1] is None else str(row[1])


def snapshot_plan(
    d: Dialect, session_id: str, cached: Callable[[str, str], bool], *, with_messages: bool
) -> Plan[RawSnapshot]:
    version, uid = yield from _current_version(d, session_id)
    summary = None
    if version:
        if uid is None:
            msg = f"session {session_id!r}: summary version {version} is missing"
            raise StorageError(msg)
        if not cached(session_id, uid):
            summary = yield from load_summary_rows(d, session_id, version)
    messages: list[str] = []
    if with_messages:
        rows = yield Query(
            d.q(
                "SELECT message FROM histcompress_messages WHERE session_id = ? "
                "AND covered_version IS NULL ORDER BY seq"
            ),
            (session_id,),
            "all",
        )
        messages = [str(r[0]) for r in rows]
    return RawSnapshot(version, uid, summary, messages)


def all_messages_plan(d: Dialect, session_id: str) -> Plan[list[str]]:
    rows = yield Query(
        d.q("SELECT message FROM histcompress_messages WHERE session_id = ? ORDER BY seq"),
        (session_id,),
        "all",
    )
    return [str(r[0]) for r in rows]


@dataclass(frozen=True)
class SummaryRow:
    uid: str
    text: str
    delta: list[str]


def commit_plan(
    d: Dialect,
    session_id: str,
    summary: RunningSummary,
    previous: RunningSummary | None,
    row: SummaryRow,
    *,
    mark_messages: bool,
) -> Plan[None]:
    current, _ = yield from _lock_session(d, session_id)
    expected = 0 if previous is None else previous.version
    conflict = (
        f"session {session_id!r}: summary version {current} is stored, the update was built "
        f"from version {expected}; another writer committed first"
    )
    if current != expected:
        raise CompressionConflictError(conflict)
    if previous is not None:
        stored = yield Query(
            d.q("SELECT sha256 FROM histcompress_summaries WHERE session_id = ? AND version = ?"),
            (session_id, expected),
            "one",
        )
        if stored is None or stored[0] != previous.sha256:
            raise CompressionConflictError(conflict)
    if mark_messages:
        updated = 0
        for fragment, chunk in d.in_ids("message_id", row.delta):
            count = yield Query(
                f"UPDATE histcompress_messages SET covered_version = {_p(d)} "
                f"WHERE session_id = {_p(d)} AND covered_version IS NULL AND {fragment}",
                [summary.version, session_id, *d.id_params(chunk)],
                "rowcount",
            )
            updated += int(count)
        if not row.delta or updated != len(row.delta):
            missing = len(row.delta) - updated
            msg = (
                f"session {session_id!r}: {missing} of {len(row.delta)} messages the summary "
                "newly covers are not stored uncovered (cleared or compressed concurrently)"
            )
            raise CompressionConflictError(msg)
    else:
        held = yield Query(
            d.q("SELECT 1 FROM histcompress_messages WHERE session_id = ? LIMIT 1"),
            (session_id,),
            "one",
        )
        if held is not None:
            msg = f"key {session_id!r} holds history messages; use a separate key for summaries"
            raise ConfigurationError(msg)
    yield Query(
        d.q(
            "INSERT INTO histcompress_summaries (session_id, version, uid, summary, covered_ids, "
            "covered_count, sha256) VALUES (?, ?, ?, ?, ?, ?, ?)"
        ),
        (
            session_id,
            summary.version,
            row.uid,
            row.text,
            json.dumps(row.delta, ensure_ascii=True, separators=(",", ":")),
            len(summary.covered_ids),
            summary.sha256,
        ),
    )
    yield Query(
        d.q(
            f"UPDATE histcompress_sessions SET summary_version = ?, updated_at = {d.now} "
            "WHERE session_id = ?"
        ),
        (summary.version, session_id),
    )


def prune_plan(d: Dialect, session_id: str) -> Plan[int]:
    yield from _lock_session(d, session_id)
    count = yield Query(
        d.q(
            "DELETE FROM histcompress_messages WHERE session_id = ? AND covered_version IS NOT NULL"
        ),
        (session_id,),
        "rowcount",
    )
    return int(count)


def clear_plan(d: Dialect, session_id: str) -> Plan[None]:
    yield Query(
        d.q(f"SELECT 1 FROM histcompress_sessions WHERE session_id = ?{d.lock_suffix}"),
        (session_id,),
        "one",
    )
    for table in ("histcompress_messages", "histcompress_summaries", "histcompress_sessions"):
        yield Query(d.q(f"DELETE FROM {table} WHERE session_id = ?"), (session_id,))


# --------------------------------------------------------------------------- drivers


def drive(cursor: Any, plan: Plan[_T]) -> _T:
    try:
        query = next(plan)
        while True:
            query = plan.send(_execute(cursor, query))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


def _execute(cursor: Any, query: Query) -> Any:
    if query.fetch == "many":
        cursor.executemany(query.sql, query.rows)
        return None
    cursor.execute(query.sql, query.params)
    if query.fetch == "one":
        return cursor.fetchone()
    if query.fetch == "all":
        return cursor.fetchall()
    if query.fetch == "rowcount":
        return cursor.rowcount
    return None


async def adrive(cursor: Any, plan: Plan[_T]) -> _T:
    try:
        query = next(plan)
        while True:
            query = plan.send(await _aexecute(cursor, query))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


async def _aexecute(cursor: Any, query: Query) -> Any:
    if query.fetch == "many":
        await cursor.executemany(query.sql, query.rows)
        return None
    await cursor.execute(query.sql, query.params)
    if query.fetch == "one":
        return await cursor.fetchone()
    if query.fetch == "all":
        return await cursor.fetchall()
    if query.fetch == "rowcount":
        return cursor.rowcount
    return None
