from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_histcompress.core.errors import (
    CompressionConflictError,
    ConfigurationError,
    InvalidHistoryError,
    StorageError,
)
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.storage import (
    DEFAULT_SQLITE_PATH,
    HistoryStore,
    InMemoryHistoryStore,
    SQLHistoryStore,
    open_store,
    parse_connection,
    redact_url,
)
from tests.fakes import next_summary, run_threads, short_rounds

# --------------------------------------------------------------------------- helpers


def sqlite_dump(path: Path, table: str, session_id: str | None = None) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        if session_id is None:
            return conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        return conn.execute(
            f"SELECT * FROM {table} WHERE session_id = ? ORDER BY 1, 2", (session_id,)
        ).fetchall()
    finally:
        conn.close()


@pytest.fixture(params=["memory", "sqlite-memory", "sqlite-file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryStore]:
    if request.param == "memory":
        yield InMemoryHistoryStore()
        return
    url = ":memory:" if request.param == "sqlite-memory" else str(tmp_path / "h.sqlite")
    sql = SQLHistoryStore(url)
    yield sql
    sql.close()


# --------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "backend", "target"),
    [
        ("chat.db", "sqlite", "chat.db"),
        ("/tmp/x/chat.db", "sqlite", "/tmp/x/chat.db"),
        ("sqlite:///rel/chat.db", "sqlite", "rel/chat.db"),
        ("sqlite:////abs/chat.db", "sqlite", "/abs/chat.db"),
        (":memory:", "sqlite", ":memory:"),
        ("sqlite://", "sqlite", ":memory:"),
        ("sqlite://:memory:", "sqlite", ":memory:"),
        ("sqlite:///:memory:", "sqlite", ":memory:"),
        ("sqlite:relative.db", "sqlite", "relative.db"),
        ("SQLite:rel/chat.db", "sqlite", "rel/chat.db"),
        ("sqlite:/abs/chat.db", "sqlite", "/abs/chat.db"),
        ("sqlite::memory:", "sqlite", ":memory:"),
        ("postgresql://u:pw@h:5432/db", "postgres", "postgresql://u:pw@h:5432/db"),
        ("postgres://h/db", "postgres", "postgres://h/db"),
        ("POSTGRESQL://h/db", "postgres", "POSTGRESQL://h/db"),
    ],
)
def test_parse_connection_accepts(url: str, backend: str, target: str) -> None:
    spec = parse_connection(url)
    assert (spec.backend, spec.target) == (backend, target)


def test_parse_connection_default_and_pathlike(tmp_path: Path) -> None:
    assert parse_connection(None).target == DEFAULT_SQLITE_PATH == "histcompress.sqlite"
    assert parse_connection(tmp_path / "a.db").target == str(tmp_path / "a.db")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("mysql://root:hunter2@db/chat", "'mysql'"),
        ("redis://localhost:6379", "'redis'"),
        ("file:///tmp/x.db", "'file'"),
        ("postgresql+psycopg://u@h/db", "'postgresql+psycopg'"),
        ("", "empty"),
        ("   ", "empty"),
        ("sqlite:///", "no file path"),
        ("sqlite://relative.db", "no file path"),
        ("sqlite:", "path is empty"),
        ("postgresql://", "names no server"),
        ("chat.db?mode=ro", "query parameters"),
    ],
)
def test_parse_connection_rejects(url: str, needle: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(needle)) as info:
        parse_connection(url)
    assert "hunter2" not in str(info.value)


def test_bad_url_raises_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="'mysql'"):
        SQLHistoryStore("mysql://u:secret@localhost/db")
    with pytest.raises(ConfigurationError):
        open_store("oracle://x")
    assert list(tmp_path.iterdir()) == []


def test_redact_url_never_leaks_passwords() -> None:
    for url in (
        "postgresql://app:s3cret@db/x",
        "postgres://app:s3cret@db:5/x?sslmode=require",
        "postgresql://db/x?password=s3cret",
        "postgresql://db/x?sslmode=require&PASSWORD=s3cret",
    ):
        assert "s3cret" not in redact_url(url)
        assert "s3cret" not in parse_connection(url).display
    store = SQLHistoryStore("postgresql://app:s3cret@127.0.0.1:1/x", busy_timeout=1)
    assert "s3cret" not in repr(store)


def test_store_validates_options() -> None:
    with pytest.raises(ConfigurationError, match="busy_timeout"):
        SQLHistoryStore(":memory:", busy_timeout=0)
    with pytest.raises(ConfigurationError, match="busy_timeout"):
        SQLHistoryStore(":memory:", busy_timeout="1")  # type: ignore[arg-type]


def test_open_store_shares_one_store_per_database(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    assert open_store(str(path)) is open_store(f"sqlite:///{path}")
    assert open_store(str(path)) is not open_store(str(tmp_path / "other.sqlite"))


# --------------------------------------------------------------------------- append / read


def test_append_assigns_ids_without_mutating_callers(store: HistoryStore) -> None:
    originals = [HumanMessage("ok"), AIMessage("sure"), HumanMessage("ok"), AIMessage("sure")]
    first = store.append("s", originals[:2])
    second = store.append("s", originals[2:])
    assert all(m.id is None for m in originals)
    ids = [m.id for m in first + second]
    assert None not in ids and len(set(ids)) == 4  # equal text in two turns, distinct ids
    loaded = store.load_messages("s")
    assert [m.id for m in loaded] == ids
    assert [m.content for m in loaded] == ["ok", "sure", "ok", "sure"]


def test_append_keeps_given_ids_and_order(store: HistoryStore) -> None:
    msgs = short_rounds(3)
    stored = store.append("s", msgs)
    assert [m.id for m in stored] == [m.id for m in msgs]
    assert store.load_messages("s") == msgs
    snap = store.snapshot("s")
    assert snap.summary is None and snap.version == 0
    assert list(snap.uncovered) == msgs


def test_reads_return_fresh_copies(store: HistoryStore) -> None:
    store.append("s", [HumanMessage("hi", id="h1")])
    first = store.load_messages("s")[0]
    first.content = "changed"
    assert store.load_messages("s")[0].content == "hi"


@pytest.mark.parametrize("clash", ["stored", "batch"])
def test_duplicate_ids_are_rejected_and_nothing_written(store: HistoryStore, clash: str) -> None:
    store.append("s", [HumanMessage("a", id="x1")])
    batch: list[BaseMessage] = (
        [HumanMessage("b", id="new"), AIMessage("c", id="x1")]
        if clash == "stored"
        else [HumanMessage("b", id="dup"), AIMessage("c", id="dup")]
    )
    with pytest.raises(InvalidHistoryError) as info:
        store.append("s", batch)
    assert info.value.violations[0].kind == "duplicate_message_id"
    assert [m.id for m in store.load_messages("s")] == ["x1"]
    # the same id in another session is fine
    store.append("other", [AIMessage("c", id="x1")])


def test_unserializable_and_remove_messages_are_rejected(store: HistoryStore) -> None:
    with pytest.raises(ConfigurationError, match="cannot be stored as JSON"):
        store.append(
            "s", [HumanMessage("ok", id="a"), HumanMessage("x", additional_kwargs={"o": object()})]
        )
    with pytest.raises(ConfigurationError, match="RemoveMessage"):
        store.append("s", [RemoveMessage(id="a")])
    assert store.load_messages("s") == []


@pytest.mark.parametrize("bad", ["", None, 42, "a\x00b"])
def test_bad_session_ids_are_rejected(store: HistoryStore, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="session_id"):
        store.append(bad, [HumanMessage("x")])


def test_bad_messages_argument(store: HistoryStore) -> None:
    with pytest.raises(ConfigurationError, match="sequence of BaseMessage"):
        store.append("s", "hello")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"messages\[1\]"):
        store.append("s", [HumanMessage("x"), "y"])  # type: ignore[list-item]
    assert store.append("s", []) == []


def test_lossless_round_trip_of_rich_messages(store: HistoryStore) -> None:
    msgs: list[BaseMessage] = [
        SystemMessage(
            [{"type": "text", "text": "be brief", "cache_control": {"type": "x"}}], id="s"
        ),
        HumanMessage(
            [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}],
            id="h",
            name="ann",
            additional_kwargs={"k": [1, 2.5, None, True, {"n": "\u0000\ud800é"}]},
        ),
        AIMessage(
            "",
            id="a",
            tool_calls=[
                {"name": "f", "args": {"x": [1, {"y": "z"}]}, "id": "c1"},
                {"name": "g", "args": {}, "id": "c2"},
            ],
            response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        ),
        ToolMessage("r2", tool_call_id="c2", id="t2", name="g", status="error", artifact={"a": 1}),
        ToolMessage([{"type": "text", "text": "r1"}], tool_call_id="c1", id="t1"),
    ]
    store.append("s", msgs)
    loaded = store.load_messages("s")
    assert loaded == msgs
    assert [type(m) for m in loaded] == [type(m) for m in msgs]
    assert loaded[2].tool_calls == msgs[2].tool_calls  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- compression


def test_commit_marks_coverage_and_snapshot_reads_only_the_tail(store: HistoryStore) -> None:
    msgs = [SystemMessage("sys", id="sys"), *short_rounds(4)]
    store.append("s", msgs)
    first = next_summary({"mh0", "ma0", "mh1", "ma1"})
    store.commit_compression("s", first, previous=None)
    snap = store.snapshot("s")
    assert snap.summary == first and snap.version == 1
    assert [m.id for m in snap.uncovered] == ["sys", "mh2", "ma2", "mh3", "ma3"]
    second = next_summary({"mh2", "ma2"}, previous=first, text="more")
    store.commit_compression("s", second, previous=first)
    snap = store.snapshot("s")
    assert snap.summary == second
    assert snap.summary is not None and snap.summary.covered_ids == second.covered_ids
    assert [m.id for m in snap.uncovered] == ["sys", "mh3", "ma3"]
    assert store.load_messages("s") == msgs  # originals kept
    assert store.load_summary("s") == second


def test_stale_previous_is_a_conflict_and_changes_nothing(store: HistoryStore) -> None:
    store.append("s", short_rounds(4))
    first = next_summary({"mh0", "ma0"})
    store.commit_compression("s", first, previous=None)
    # a writer that started from "no summary" loses
    with pytest.raises(CompressionConflictError):
        store.commit_compression("s", next_summary({"mh0", "ma0", "mh1"}), previous=None)
    # a writer that started from a different summary with the same version loses too
    impostor = next_summary({"mh0", "ma0"}, text="other text")
    with pytest.raises(CompressionConflictError):
        store.commit_compression("s", next_summary({"mh1"}, previous=impostor), previous=impostor)
    assert store.load_summary("s") == first
    assert [m.id for m in store.snapshot("s").uncovered] == [
        "mh1",
        "ma1",
        "mh2",
        "ma2",
        "mh3",
        "ma3",
    ]


def test_two_compactions_from_one_snapshot_exactly_one_commits(store: HistoryStore) -> None:
    store.append("s", short_rounds(5))
    snap = store.snapshot("s")
    a = next_summary({"mh0", "ma0", "mh1", "ma1"}, snap.summary, text="A")
    b = next_summary({"mh0", "ma0", "mh1", "ma1"}, snap.summary, text="B")
    results: list[str] = []
    barrier = threading.Barrier(2)

    def commit(summary: RunningSummary) -> None:
        barrier.wait()
        try:
            store.commit_compression("s", summary, previous=snap.summary)
            results.append(summary.text)
        except CompressionConflictError:
            results.append("conflict")

    assert run_threads(commit, (a, b)) == []
    assert sorted(results) in (["A", "conflict"], ["B", "conflict"])
    winner = store.load_summary("s")
    assert winner is not None and winner.text in ("A", "B") and winner.version == 1


def test_summary_must_extend_previous(store: HistoryStore) -> None:
    store.append("s", short_rounds(3))
    first = next_summary({"mh0", "ma0"})
    store.commit_compression("s", first, previous=None)
    dropping = RunningSummary(
        content="x", text="x", covered_ids=frozenset({"mh0", "mh1"}), version=2
    )
    with pytest.raises(StorageError, match="drops 1"):
        store.commit_compression("s", dropping, previous=first)
    same_version = next_summary({"mh1"}, previous=first).model_copy(update={"version": 1})
    with pytest.raises(StorageError, match="does not follow"):
        store.commit_compression("s", same_version, previous=first)
    assert store.load_summary("s") == first


def test_multi_chunk_summary_may_skip_versions(store: HistoryStore) -> None:
    store.append("s", short_rounds(4))
    jumped = RunningSummary(
        content="x", text="x", covered_ids=frozenset({"mh0", "ma0", "mh1", "ma1"}), version=2
    )
    store.commit_compression("s", jumped, previous=None)
    assert store.snapshot("s").version == 2
    nxt = next_summary({"mh2", "ma2"}, previous=jumped)
    store.commit_compression("s", nxt, previous=jumped)
    assert store.load_summary("s") == nxt


def test_covering_unknown_or_covered_ids_is_a_conflict(store: HistoryStore) -> None:
    store.append("s", short_rounds(3))
    with pytest.raises(CompressionConflictError, match="1 of 3"):
        store.commit_compression("s", next_summary({"mh0", "ma0", "ghost"}), previous=None)
    assert store.load_summary("s") is None
    assert len(store.snapshot("s").uncovered) == 6
    with pytest.raises(CompressionConflictError):
        store.commit_compression("s", next_summary(set()), previous=None)


def test_commit_after_clear_is_a_conflict(store: HistoryStore) -> None:
    store.append("s", short_rounds(3))
    snap = store.snapshot("s")
    store.clear("s")
    with pytest.raises(CompressionConflictError):
        store.commit_compression("s", next_summary({"mh0", "ma0"}), previous=snap.summary)
    assert store.load_summary("s") is None and store.load_messages("s") == []


def test_prune_deletes_only_covered_messages_of_the_session(store: HistoryStore) -> None:
    store.append("s", short_rounds(3))
    store.append("s2", short_rounds(3))
    store.commit_compression("s", next_summary({"mh0", "ma0"}), previous=None)
    store.commit_compression("s2", next_summary({"mh0", "ma0"}), previous=None)
    assert store.prune_covered("s") == 2
    assert [m.id for m in store.load_messages("s")] == ["mh1", "ma1", "mh2", "ma2"]
    assert len(store.load_messages("s2")) == 6
    snap = store.snapshot("s")
    assert snap.summary is not None and snap.summary.covered_ids == {"mh0", "ma0"}
    # appending after pruning continues the sequence (no id or order clash)
    store.append("s", [HumanMessage("later", id="later")])
    assert store.load_messages("s")[-1].id == "later"
    assert store.prune_covered("nobody") == 0


def test_tenant_isolation_with_like_prone_ids(store: HistoryStore) -> None:
    sessions = ["acme", "acme%", "acme_", "acme-corp", "ACME", "acm", "%", "_"]
    for sid in sessions:
        store.append(sid, [HumanMessage(sid, id="same-id")])
        store.commit_compression(sid, next_summary({"same-id"}, text=sid), previous=None)
    store.clear("acme")
    store.clear("%")
    assert store.load_messages("acme") == [] and store.load_summary("acme") is None
    for sid in sessions:
        if sid in ("acme", "%"):
            continue
        assert [m.content for m in store.load_messages(sid)] == [sid]
        summary = store.load_summary(sid)
        assert summary is not None and summary.text == sid
    assert store.prune_covered("acme_") == 1
    assert store.load_messages("acme-corp") != []


def test_put_summary_side_store(store: HistoryStore) -> None:
    first = next_summary({"x1", "x2"})
    store.put_summary("side", first, previous=None)
    assert store.load_summary("side") == first
    with pytest.raises(CompressionConflictError):
        store.put_summary("side", next_summary({"x3"}), previous=None)
    second = next_summary({"x3"}, previous=first)
    store.put_summary("side", second, previous=first)
    assert store.load_summary("side") == second
    store.append("with-messages", [HumanMessage("x", id="x1")])
    with pytest.raises(ConfigurationError, match="separate key"):
        store.put_summary("with-messages", next_summary({"x1"}), previous=None)
    store.clear("side")
    assert store.load_summary("side") is None


def test_unknown_session_reads_empty(store: HistoryStore) -> None:
    assert store.load_messages("nope") == []
    assert store.load_summary("nope") is None
    snap = store.snapshot("nope")
    assert snap.summary is None and snap.uncovered == ()
    store.clear("nope")


async def test_async_twins(store: HistoryStore) -> None:
    msgs = short_rounds(3)
    await store.aappend("s", msgs)
    assert await store.aload_messages("s") == msgs
    first = next_summary({"mh0", "ma0"})
    await store.acommit_compression("s", first, previous=None)
    snap = await store.asnapshot("s")
    assert snap.summary == first and [m.id for m in snap.uncovered] == ["mh1", "ma1", "mh2", "ma2"]
    assert await store.aload_summary("s") == first
    assert await store.aprune_covered("s") == 2
    await store.aput_summary("side", next_summary({"q"}), previous=None)
    await store.aclear("s")
    assert await store.aload_messages("s") == []
    assert await store.aload_summary("side") is not None


async def test_concurrent_async_tasks_keep_every_message(store: HistoryStore) -> None:
    async def writer(w: int) -> None:
        for i in range(10):
            await store.aappend("s", [HumanMessage(f"{w}:{i}", id=f"w{w}-{i}")])

    await asyncio.gather(*(writer(w) for w in range(5)))
    loaded = [m.id for m in store.load_messages("s")]
    assert sorted(loaded) == sorted(f"w{w}-{i}" for w in range(5) for i in range(10))
    for w in range(5):
        mine = [x for x in loaded if x is not None and x.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(10)]


# --------------------------------------------------------------------------- SQL specifics


def test_sql_summary_rows_store_only_the_covered_delta(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    store = SQLHistoryStore(path)
    store.append("s", short_rounds(3))
    first = next_summary({"mh0", "ma0"})
    store.commit_compression("s", first, previous=None)
    second = next_summary({"mh1", "ma1"}, previous=first)
    store.commit_compression("s", second, previous=first)
    rows = sqlite_dump(path, "histcompress_summaries", "s")
    deltas = [json.loads(r[4]) for r in rows]
    assert deltas == [["ma0", "mh0"], ["ma1", "mh1"]]
    assert [r[5] for r in rows] == [2, 4]  # covered_count is cumulative
    assert all("covered_ids" not in json.loads(r[3]) for r in rows)
    covered = sqlite_dump(path, "histcompress_messages", "s")
    assert [(r[2], r[4]) for r in covered] == [
        ("mh0", 1),
        ("ma0", 1),
        ("mh1", 2),
        ("ma1", 2),
        ("mh2", None),
        ("ma2", None),
    ]
    # a fresh store (another process) rebuilds the cumulative covered set
    fresh = SQLHistoryStore(path)
    assert fresh.load_summary("s") == second
    assert fresh.snapshot("s").summary == second
    store.close()
    fresh.close()


def test_sql_tail_query_uses_the_partial_index(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    SQLHistoryStore(path).load_messages("warm-up")
    conn = sqlite3.connect(path)
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT message FROM histcompress_messages WHERE session_id = ? "
        "AND covered_version IS NULL ORDER BY seq",
        ("s",),
    ).fetchall()
    conn.close()
    detail = " ".join(str(r[-1]) for r in plan)
    assert "histcompress_messages_uncovered" in detail
    assert "TEMP B-TREE" not in detail  # no sort: the index already orders by seq


def test_sqlite_uses_wal_and_schema_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    a = SQLHistoryStore(path)
    a.append("s", [HumanMessage("x", id="x")])
    b = SQLHistoryStore(path)
    assert [m.id for m in b.load_messages("s")] == ["x"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT value FROM histcompress_meta").fetchall() == [("1",)]
    conn.close()
    a.close()
    b.close()


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    SQLHistoryStore(path).load_messages("s")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE histcompress_meta SET value = '99'")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigurationError, match="schema version 99"):
        SQLHistoryStore(path).load_messages("s")


def test_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open"):
        SQLHistoryStore(tmp_path / "missing" / "h.sqlite").load_messages("s")


class _FailingCommit:
    """Wraps a sqlite3 connection; COMMIT of a write transaction fails once."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.armed = False

    def cursor(self) -> Any:
        outer = self

        class _Cursor:
            def __init__(self) -> None:
                self._cur = outer._conn.cursor()

            def execute(self, sql: str, params: Any = ()) -> Any:
                if sql == "COMMIT" and outer.armed and outer._conn.in_transaction:
                    outer.armed = False
                    raise sqlite3.OperationalError("disk I/O error (simulated)")
                return self._cur.execute(sql, params)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._cur, name)

        return _Cursor()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_failed_commit_rolls_back_and_the_store_recovers(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    wrapper: list[_FailingCommit] = []

    class Store(SQLHistoryStore):
        def _connect_sqlite(self) -> sqlite3.Connection:
            wrapped = _FailingCommit(super()._connect_sqlite())
            wrapper.append(wrapped)
            return wrapped  # type: ignore[return-value]

    store = Store(path)
    store.append("s", short_rounds(3))
    before = sqlite_dump(path, "histcompress_summaries") + sqlite_dump(
        path, "histcompress_messages"
    )
    wrapper[0].armed = True
    with pytest.raises(StorageError, match="simulated"):
        store.commit_compression("s", next_summary({"mh0", "ma0"}), previous=None)
    after = sqlite_dump(path, "histcompress_summaries") + sqlite_dump(path, "histcompress_messages")
    assert after == before
    wrapper[0].armed = True
    with pytest.raises(StorageError):
        store.append("s", [HumanMessage("lost?", id="z")])
    assert [m.id for m in store.load_messages("s")][-1] == "ma2"
    store.commit_compression("s", next_summary({"mh0", "ma0"}), previous=None)
    assert store.snapshot("s").version == 1


def test_threads_sharing_one_sqlite_store(tmp_path: Path) -> None:
    store = SQLHistoryStore(tmp_path / "h.sqlite")

    def writer(w: int) -> None:
        for i in range(20):
            store.append("s", [HumanMessage(f"{w}:{i}", id=f"w{w}-{i}")])

    assert run_threads(writer, range(6)) == []
    ids = [m.id for m in store.load_messages("s")]
    assert len(ids) == len(set(ids)) == 120
    for w in range(6):
        assert [x for x in ids if x is not None and x.startswith(f"w{w}-")] == [
            f"w{w}-{i}" for i in range(20)
        ]


def test_threads_with_separate_stores_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    SQLHistoryStore(path).load_messages("init")

    def writer(w: int) -> None:
        own = SQLHistoryStore(path)
        for i in range(15):
            own.append("s", [HumanMessage(f"{w}:{i}", id=f"w{w}-{i}")])
        own.close()

    assert run_threads(writer, range(4)) == []
    ids = [m.id for m in SQLHistoryStore(path).load_messages("s")]
    assert len(ids) == len(set(ids)) == 60
    seqs = [r[1] for r in sqlite_dump(path, "histcompress_messages", "s")]
    assert seqs == list(range(1, 61))


class _LockedThenFine:
    """A connection whose journal-mode change is refused while another process holds it."""

    def __init__(self, refusals: int, message: str = "database is locked") -> None:
        self.refusals = refusals
        self.message = message
        self.attempts = 0

    def execute(self, sql: str) -> Any:
        assert sql == "PRAGMA journal_mode = WAL"
        self.attempts += 1
        if self.attempts <= self.refusals:
            raise sqlite3.OperationalError(self.message)
        return self

    def fetchall(self) -> list[tuple[str]]:
        return [("wal",)]


def test_enable_wal_waits_out_a_concurrent_opener() -> None:
    from langchain_histcompress.storage.sql import enable_wal

    conn = _LockedThenFine(refusals=3)
    sleeps: list[float] = []
    enable_wal(conn, timeout=5.0, sleep=sleeps.append, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert conn.attempts == 4
    assert sleeps == [0.005, 0.01, 0.02]


def test_enable_wal_gives_up_after_the_timeout_and_never_retries_other_errors() -> None:
    from langchain_histcompress.storage.sql import enable_wal

    now = iter([0.0, 1.0, 2.5])
    conn = _LockedThenFine(refusals=99)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        enable_wal(conn, timeout=2.0, sleep=lambda _: None, clock=lambda: next(now))  # type: ignore[arg-type]
    assert conn.attempts == 2
    other = _LockedThenFine(refusals=1, message="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk"):
        enable_wal(other, timeout=2.0, sleep=lambda _: None)  # type: ignore[arg-type]
    assert other.attempts == 1


async def test_cancelled_acompress_on_sqlite_commits_nothing(tmp_path: Path) -> None:
    from langchain_histcompress.faces.history import CompressingChatMessageHistory
    from tests.fakes import Control, controlled_compressor

    path = tmp_path / "h.sqlite"
    store = SQLHistoryStore(path, busy_timeout=10)
    store.append("s", short_rounds(5))
    control = Control()
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the commit's worker thread waits for this lock
    task = asyncio.create_task(history.acompress())
    while not control.calls:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the summary is built; its commit waits for the lock
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    blocker.execute("COMMIT")
    blocker.close()
    assert store.load_summary("s") is None  # waits for the worker thread, which rolled back
    assert store.snapshot("s").summary is None
    assert len(store.snapshot("s").uncovered) == 10
    await history.acompress()  # the store is still usable, and the same fold now commits
    assert store.load_summary("s") is not None
    store.close()
