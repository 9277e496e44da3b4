"""The SQL store on a real PostgreSQL server (started by the ``postgres_url`` fixture)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_histcompress.core.errors import (
    CompressionConflictError,
    ConfigurationError,
    InvalidHistoryError,
    StorageError,
    SummarizationError,
)
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.storage import SQLHistoryStore
from tests.fakes import Control, controlled_compressor, next_summary, run_threads, short_rounds
from tests.integration_tests.test_sqlite_processes import (
    WrappedCursor,
    check_cross_process_read_back,
    check_kill_during_append,
    check_kill_during_compression,
    check_two_writers,
    wrapped_store,
)
from tests.unit_tests.test_history import FAULTS, turn
from tests.unit_tests.test_storage_properties import message

pytestmark = pytest.mark.postgres


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(postgres_url: str) -> Iterator[SQLHistoryStore]:
    pg = SQLHistoryStore(postgres_url)
    yield pg
    pg.close()


def pg_state(url: str, session: str) -> Any:
    import psycopg

    with psycopg.connect(url) as conn:
        return (
            conn.execute(
                "SELECT * FROM histcompress_summaries WHERE session_id = %s ORDER BY version",
                (session,),
            ).fetchall(),
            conn.execute(
                "SELECT summary_version FROM histcompress_sessions WHERE session_id = %s",
                (session,),
            ).fetchall(),
            conn.execute(
                "SELECT message_id, covered_version FROM histcompress_messages "
                "WHERE session_id = %s AND covered_version IS NOT NULL ORDER BY seq",
                (session,),
            ).fetchall(),
        )


# --------------------------------------------------------------------------- round trip


def test_rich_messages_round_trip_exactly(store: SQLHistoryStore) -> None:
    s = sid()
    msgs: list[BaseMessage] = [
        SystemMessage(
            [{"type": "text", "text": "be brief", "cache_control": {"type": "x"}}], id="s"
        ),
        HumanMessage("nul \x00 and surrogate \ud800 and é", id="h", name="ann"),
        AIMessage(
            "",
            id="a",
            tool_calls=[{"name": "f", "args": {"x": [1, {"y": None}]}, "id": "c1"}],
            additional_kwargs={"raw": {"n": 1.5}},
            response_metadata={"model_name": "m"},
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        ),
        ToolMessage([{"type": "text", "text": "r"}], tool_call_id="c1", id="t", artifact=[1, 2]),
    ]
    store.append(s, msgs)
    assert store.load_messages(s) == msgs
    assert [type(m) for m in store.load_messages(s)] == [type(m) for m in msgs]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(message(), min_size=1, max_size=5))
def test_hypothesis_messages_round_trip_exactly(
    store: SQLHistoryStore, batch: list[BaseMessage]
) -> None:
    s = sid()
    unique = [m.model_copy(update={"id": None}) for m in batch]
    stored = store.append(s, unique)
    loaded = store.load_messages(s)
    assert loaded == stored
    for before, after in zip(unique, loaded, strict=True):
        assert type(after) is type(before)
        assert after.model_dump(exclude={"id"}) == before.model_dump(exclude={"id"})


# --------------------------------------------------------------------------- contract


def test_commit_conflict_prune_and_isolation(store: SQLHistoryStore, postgres_url: str) -> None:
    s = sid()
    store.append(s, [SystemMessage("sys", id="sys"), *short_rounds(4)])
    first = next_summary({"mh0", "ma0", "mh1", "ma1"})
    store.commit_compression(s, first, previous=None)
    assert [m.id for m in store.snapshot(s).uncovered] == ["sys", "mh2", "ma2", "mh3", "ma3"]
    with pytest.raises(CompressionConflictError):
        store.commit_compression(s, next_summary({"mh2"}), previous=None)
    with pytest.raises(CompressionConflictError, match="1 of 2"):
        store.commit_compression(s, next_summary({"mh2", "ghost"}, first), previous=first)
    second = next_summary({"mh2", "ma2"}, first)
    store.commit_compression(s, second, previous=first)
    fresh = SQLHistoryStore(postgres_url)
    assert fresh.load_summary(s) == second
    assert fresh.snapshot(s).summary == second
    fresh.close()
    deltas = [json.loads(r[4]) for r in pg_state(postgres_url, s)[0]]
    assert deltas == [["ma0", "ma1", "mh0", "mh1"], ["ma2", "mh2"]]
    assert store.prune_covered(s) == 6
    assert [m.id for m in store.load_messages(s)] == ["sys", "mh3", "ma3"]
    with pytest.raises(InvalidHistoryError):
        store.append(s, [HumanMessage("x", id="mh3")])


def test_like_prone_session_ids_are_isolated(store: SQLHistoryStore) -> None:
    base = sid()
    sessions = [base, f"{base}%", f"{base}_", f"{base}-corp", "%", "_", f"{base[:-1]}_"]
    for s in sessions:
        store.append(s, [HumanMessage(s, id="same")])
        store.commit_compression(s, next_summary({"same"}, text=s), previous=None)
    store.clear(base)
    store.clear("%")
    for s in sessions:
        if s in (base, "%"):
            assert store.load_messages(s) == [] and store.load_summary(s) is None
            continue
        assert [m.content for m in store.load_messages(s)] == [s]
        summary = store.load_summary(s)
        assert summary is not None and summary.text == s
    for s in sessions:
        store.clear(s)


def test_side_store_summaries(store: SQLHistoryStore) -> None:
    key = sid()
    first = next_summary({"x"})
    store.put_summary(key, first, previous=None)
    with pytest.raises(CompressionConflictError):
        store.put_summary(key, next_summary({"y"}), previous=None)
    second = next_summary({"y"}, first)
    store.put_summary(key, second, previous=first)
    assert store.load_summary(key) == second
    assert SQLHistoryStore(store.spec.target).load_summary(key) == second
    s = sid()
    store.append(s, [HumanMessage("x", id="x")])
    with pytest.raises(ConfigurationError, match="separate key"):
        store.put_summary(s, next_summary({"x"}), previous=None)


async def test_async_methods_use_async_connections(store: SQLHistoryStore) -> None:
    s = sid()
    msgs = short_rounds(3)
    await store.aappend(s, msgs)
    assert await store.aload_messages(s) == msgs
    first = next_summary({"mh0", "ma0"})
    await store.acommit_compression(s, first, previous=None)
    snap = await store.asnapshot(s)
    assert snap.summary == first and [m.id for m in snap.uncovered] == ["mh1", "ma1", "mh2", "ma2"]
    with pytest.raises(CompressionConflictError):
        await store.acommit_compression(s, next_summary({"mh1"}), previous=None)
    assert await store.aload_summary(s) == first
    assert await store.aprune_covered(s) == 2
    await store.aclear(s)
    assert await store.aload_messages(s) == []
    assert store._aconn is not None  # the async path really ran on an AsyncConnection
    await store.aclose()


def test_unreachable_server_error_hides_the_password() -> None:
    unreachable = SQLHistoryStore("postgresql://app:s3cret@127.0.0.1:1/x", busy_timeout=1)
    with pytest.raises(StorageError) as info:
        unreachable.load_messages("s")
    assert "s3cret" not in str(info.value) and "***" in str(info.value)


# --------------------------------------------------------------------------- concurrency


def test_threads_with_own_connections_lose_nothing(postgres_url: str) -> None:
    s = sid()

    def writer(w: int) -> None:
        own = SQLHistoryStore(postgres_url)
        try:
            for i in range(15):
                own.append(s, [HumanMessage(f"{w}:{i}", id=f"w{w}-{i}")])
        finally:
            own.close()

    assert run_threads(writer, range(6)) == []
    ids = [m.id for m in SQLHistoryStore(postgres_url).load_messages(s)]
    assert len(ids) == len(set(ids)) == 90
    for w in range(6):
        assert [x for x in ids if x is not None and x.startswith(f"w{w}-")] == [
            f"w{w}-{i}" for i in range(15)
        ]


async def test_asyncio_tasks_lose_nothing(postgres_url: str) -> None:
    s = sid()
    stores = [SQLHistoryStore(postgres_url) for _ in range(4)]

    async def writer(w: int) -> None:
        for i in range(10):
            await stores[w].aappend(s, [HumanMessage(f"{w}:{i}", id=f"w{w}-{i}")])

    await asyncio.gather(*(writer(w) for w in range(4)))
    ids = [m.id for m in await stores[0].aload_messages(s)]
    assert len(ids) == len(set(ids)) == 40
    for w in range(4):
        assert [x for x in ids if x is not None and x.startswith(f"w{w}-")] == [
            f"w{w}-{i}" for i in range(10)
        ]
    for pg in stores:
        await pg.aclose()


def test_two_concurrent_compactions_exactly_one_commits(postgres_url: str) -> None:
    s = sid()
    stores = [SQLHistoryStore(postgres_url) for _ in range(2)]
    stores[0].append(s, short_rounds(4))
    snap = stores[0].snapshot(s)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def commit(i: int) -> None:
        summary = next_summary({"mh0", "ma0", "mh1", "ma1"}, text=f"writer {i}")
        barrier.wait()
        try:
            stores[i].commit_compression(s, summary, previous=snap.summary)
            outcomes.append(f"writer {i}")
        except CompressionConflictError:
            outcomes.append("conflict")

    assert run_threads(commit, range(2)) == []
    assert sorted(outcomes)[0] == "conflict" and sorted(outcomes)[1].startswith("writer")
    assert len(pg_state(postgres_url, s)[0]) == 1
    for pg in stores:
        pg.close()


def test_concurrent_schema_creation_is_safe(postgres_url: str) -> None:
    def open_one(_: int) -> None:
        pg = SQLHistoryStore(postgres_url)
        pg.load_messages("warm")
        pg.close()

    assert run_threads(open_one, range(6)) == []


def test_history_writers_in_threads(postgres_url: str, control: Control) -> None:
    s = sid()

    def writer(w: int) -> None:
        history = CompressingChatMessageHistory(
            s, connection=SQLHistoryStore(postgres_url), compressor=controlled_compressor(control)
        )
        for i in range(6):
            history.add_messages(
                [HumanMessage(f"q{i}", id=f"w{w}-q{i}"), AIMessage(f"a{i}", id=f"w{w}-a{i}")]
            )

    assert run_threads(writer, range(3)) == []
    history = CompressingChatMessageHistory(s, connection=SQLHistoryStore(postgres_url))
    full = [m.id for m in history.full_messages]
    assert len(full) == len(set(full)) == 36
    summary = history.summary
    assert summary is not None
    shown = {m.id for m in history.messages}
    assert all((i in shown) != (i in summary.covered_ids) for i in full)


def test_two_processes_write_one_postgres_session(postgres_url: str) -> None:
    check_two_writers(postgres_url, sid())


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_sigkill_during_compression_commit(postgres_url: str, point: str) -> None:
    s = sid()
    check_kill_during_compression(postgres_url, s, point)
    summaries, version, covered = pg_state(postgres_url, s)
    assert len(summaries) == version[0][0] == (0 if point == "before-commit" else 1)
    assert len(covered) == (0 if point == "before-commit" else 4)


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_sigkill_during_append_commit(postgres_url: str, point: str) -> None:
    check_kill_during_append(postgres_url, sid(), point)


def test_cross_process_read_back(postgres_url: str) -> None:
    check_cross_process_read_back(postgres_url, sid())


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize(
    "fault",
    ["rate_limit_429", "server_503", "auth_401", "connection", "hang", "refusal", "over_long"],
)
def test_model_failures_leave_summaries_untouched(
    postgres_url: str, control: Control, fault: str
) -> None:
    s = sid()
    history = CompressingChatMessageHistory(
        s, connection=SQLHistoryStore(postgres_url), compressor=controlled_compressor(control)
    )
    for n in range(4):
        history.add_messages(turn(n))
    before = pg_state(postgres_url, s)
    control.fault = FAULTS[fault]
    history.add_messages(turn(4))
    assert pg_state(postgres_url, s) == before
    assert isinstance(history.last_compression_error, SummarizationError)
    control.fault = None
    history.add_messages(turn(5))
    assert history.summary is not None and history.summary.version == 2


@pytest.mark.parametrize("fault", ["server_503", "hang", "truncated_json"])
async def test_model_failures_async(postgres_url: str, control: Control, fault: str) -> None:
    s = sid()
    store = SQLHistoryStore(postgres_url)
    history = CompressingChatMessageHistory(
        s,
        connection=store,
        compressor=controlled_compressor(control),
        raise_on_compression_error=True,
    )
    for n in range(4):
        await history.aadd_messages(turn(n))
    before = pg_state(postgres_url, s)
    control.fault = FAULTS[fault]
    with pytest.raises(SummarizationError):
        await history.aadd_messages(turn(4))
    assert pg_state(postgres_url, s) == before
    assert len(await history.aget_full_messages()) == 10
    control.fault = None
    await history.aadd_messages(turn(5))
    assert (await history.aget_summary()).version == 2  # type: ignore[union-attr]
    await store.aclose()


def test_connection_dropped_mid_commit(postgres_url: str) -> None:
    import psycopg

    armed = {"on": False}

    class Cursor(WrappedCursor):
        def execute(self, sql: str, params: Any = ()) -> Any:
            if sql == "COMMIT" and armed["on"]:
                armed["on"] = False
                with psycopg.connect(postgres_url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (self._conn.info.backend_pid,))
            return self._cursor.execute(sql, params)

    s = sid()
    store = wrapped_store(postgres_url, Cursor)
    store.append(s, short_rounds(3))
    before = pg_state(postgres_url, s)
    armed["on"] = True
    with pytest.raises(StorageError):
        store.commit_compression(s, next_summary({"mh0", "ma0"}), previous=None)
    assert pg_state(postgres_url, s) == before
    armed["on"] = True
    with pytest.raises(StorageError):
        store.append(s, [HumanMessage("lost", id="lost")])
    assert [m.id for m in store.load_messages(s)] == [m.id for m in short_rounds(3)]  # reconnected
    store.commit_compression(s, next_summary({"mh0", "ma0"}), previous=None)
    assert store.snapshot(s).version == 1
    store.close()


# --------------------------------------------------------------------------- dropped connections


def _drop_idle_connections(url: str) -> int:
    """Terminate every idle backend of this database but our own, as a server restart would."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'"
        ).fetchall()
    return len(rows)


def test_a_write_after_the_server_dropped_the_idle_connection_is_retried_once(
    postgres_url: str, store: SQLHistoryStore
) -> None:
    session = sid()
    store.append(session, short_rounds(1, "x"))
    assert _drop_idle_connections(postgres_url) >= 1
    store.append(session, short_rounds(2, "y")[2:])  # a write: retried on a fresh connection
    assert [m.id for m in store.load_messages(session)] == ["xh0", "xa0", "yh1", "ya1"]
    first = next_summary({"xh0", "xa0"})
    assert _drop_idle_connections(postgres_url) >= 1
    store.commit_compression(session, first, previous=None)
    assert store.load_summary(session) == first


async def test_an_async_write_after_the_server_dropped_the_idle_connection_is_retried_once(
    postgres_url: str, store: SQLHistoryStore
) -> None:
    session = sid()
    await store.aappend(session, short_rounds(1, "x"))
    assert _drop_idle_connections(postgres_url) >= 1
    await store.aappend(session, short_rounds(2, "y")[2:])
    assert [m.id for m in await store.aload_messages(session)] == ["xh0", "xa0", "yh1", "ya1"]
