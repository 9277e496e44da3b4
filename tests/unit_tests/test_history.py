from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import langchain_histcompress.faces.history as history_module
from langchain_histcompress.core.errors import (
    ConfigurationError,
    InvalidHistoryError,
    StorageError,
    SummarizationError,
)
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.faces.history_adapter import CompressingHistoryAdapter
from langchain_histcompress.storage import HistoryStore, InMemoryHistoryStore, SQLHistoryStore
from tests.fakes import Control, ScriptedChatModel, controlled_compressor, run_threads
from tests.unit_tests.test_flat_turns import counting_identified

pytestmark = pytest.mark.filterwarnings(
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)

# --------------------------------------------------------------------------- helpers


class HTTPError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status


def turn(n: int) -> list[BaseMessage]:
    return [HumanMessage(f"question {n}"), AIMessage(f"answer {n}")]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryStore]:
    if request.param == "memory":
        yield InMemoryHistoryStore()
        return
    sql = SQLHistoryStore(tmp_path / "h.sqlite")
    yield sql
    sql.close()


def summary_state(store: HistoryStore, session: str) -> Any:
    """Everything a summary commit may change, as comparable data."""
    if isinstance(store, SQLHistoryStore):
        conn = sqlite3.connect(store.spec.target)
        try:
            return (
                conn.execute(
                    "SELECT * FROM histcompress_summaries WHERE session_id = ? ORDER BY version",
                    (session,),
                ).fetchall(),
                conn.execute(
                    "SELECT summary_version FROM histcompress_sessions WHERE session_id = ?",
                    (session,),
                ).fetchall(),
                conn.execute(
                    "SELECT message_id, covered_version FROM histcompress_messages "
                    "WHERE session_id = ? AND covered_version IS NOT NULL ORDER BY seq",
                    (session,),
                ).fetchall(),
            )
        finally:
            conn.close()
    snap = store.snapshot(session)
    uncovered = {m.id for m in snap.uncovered}
    return snap.summary, [m.id for m in store.load_messages(session) if m.id not in uncovered]


# --------------------------------------------------------------------------- basics


def test_docstrings_point_to_the_upstream_deprecation() -> None:
    for doc in (
        history_module.__doc__,
        CompressingChatMessageHistory.__doc__,
        CompressingHistoryAdapter.__doc__,
    ):
        assert doc is not None
        assert "1.6.4" in doc and "2.0" in doc and "graph nodes" in doc


def test_view_full_transcript_and_summary(store: HistoryStore, control: Control) -> None:
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    history.add_messages([SystemMessage("be brief", id="sys")])
    for n in range(6):
        history.add_messages(turn(n))
    full = history.full_messages
    assert [m.content for m in full[1:]] == [
        x for n in range(6) for x in (f"question {n}", f"answer {n}")
    ]
    summary = history.summary
    assert summary is not None and summary.version == 2 and control.calls == 2
    view = history.messages
    assert view[0] == SystemMessage("be brief", id="sys")
    assert is_summary_message(view[1])
    assert [m.content for m in view[2:]] == ["question 4", "answer 4", "question 5", "answer 5"]
    # the tail-based view equals the view computed from the whole transcript
    assert view == controlled_compressor(control).view(full, summary)
    assert validate_history(view) == []
    # nothing lost: every original is in the view or covered by the summary
    shown = {m.id for m in view}
    assert all(m.id in shown or m.id in summary.covered_ids for m in full)
    assert not (shown & summary.covered_ids)


def test_two_reads_without_a_write_are_equal(store: HistoryStore, control: Control) -> None:
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    for n in range(5):
        history.add_messages(turn(n))
    first, second = history.messages, history.messages
    assert first == second
    other = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    assert other.messages == first


def test_caller_messages_are_not_mutated(store: HistoryStore) -> None:
    history = CompressingChatMessageHistory("s", connection=store)
    batch = turn(0)
    history.add_messages(batch)
    history.add_message(HumanMessage("again"))
    assert all(m.id is None for m in batch)
    stored = history.full_messages
    assert all(m.id for m in stored) and len({m.id for m in stored}) == 3


def test_no_compressor_stores_everything_verbatim(store: HistoryStore) -> None:
    history = CompressingChatMessageHistory("s", connection=store)
    for n in range(8):
        history.add_messages(turn(n))
    assert history.messages == history.full_messages and len(history.messages) == 16
    assert history.summary is None


def test_existing_summary_is_shown_without_a_compressor(
    store: HistoryStore, control: Control
) -> None:
    CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    ).add_messages([m for n in range(4) for m in turn(n)])  # folded down to the kept round
    plain = CompressingChatMessageHistory("s", connection=store)
    assert plain.summary is not None
    assert is_summary_message(plain.messages[0]) and len(plain.messages) == 3


def test_duplicate_ids_raise_and_nothing_is_appended(store: HistoryStore) -> None:
    history = CompressingChatMessageHistory("s", connection=store)
    history.add_messages([HumanMessage("a", id="x")])
    with pytest.raises(InvalidHistoryError):
        history.add_messages([AIMessage("b", id="y"), HumanMessage("c", id="x")])
    assert [m.id for m in history.full_messages] == ["x"]


def test_prune_covered_keeps_the_view(store: HistoryStore, control: Control) -> None:
    pruned = CompressingChatMessageHistory(
        "p", connection=store, compressor=controlled_compressor(control), prune_covered=True
    )
    kept = CompressingChatMessageHistory(
        "k", connection=store, compressor=controlled_compressor(control)
    )
    for n in range(5):
        pruned.add_messages(turn(n))
        kept.add_messages(turn(n))
    assert len(kept.full_messages) == 10
    assert [m.content for m in pruned.full_messages] == ["question 4", "answer 4"]
    summary = pruned.summary
    assert summary is not None
    assert all(m.id not in summary.covered_ids for m in pruned.full_messages)
    assert [m.content for m in pruned.messages[1:]] == [m.content for m in kept.messages[1:]]
    assert kept.prune() == 8 and len(kept.full_messages) == 2


def test_clear_touches_only_its_session(store: HistoryStore, control: Control) -> None:
    ids = ["acme", "acme-corp", "acme%", "acme_"]
    histories = {
        sid: CompressingChatMessageHistory(
            sid, connection=store, compressor=controlled_compressor(control)
        )
        for sid in ids
    }
    for h in histories.values():
        for n in range(5):
            h.add_messages(turn(n))
    histories["acme"].clear()
    assert histories["acme"].full_messages == [] and histories["acme"].summary is None
    for sid in ids[1:]:
        assert len(histories[sid].full_messages) == 10
        assert histories[sid].summary is not None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"compress_on": "later"}, "compress_on"),
        ({"compressor": object()}, "compressor must provide"),
        ({"prune_covered": "yes"}, "prune_covered"),
        ({"raise_on_compression_error": 1}, "raise_on_compression_error"),
        ({"connection": "mysql://u:pw@h/db"}, "'mysql'"),
    ],
)
def test_configuration_errors(
    kwargs: dict[str, Any], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=needle):
        CompressingChatMessageHistory("s", **kwargs)
    with pytest.raises(ConfigurationError, match="session_id"):
        CompressingChatMessageHistory("")
    assert list(tmp_path.iterdir()) == []


def test_default_connection_is_a_local_sqlite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    history = CompressingChatMessageHistory("s")
    history.add_messages(turn(0))
    assert (tmp_path / "histcompress.sqlite").is_file()
    assert len(CompressingChatMessageHistory("s").full_messages) == 2
    assert "histcompress.sqlite" in repr(history)


# --------------------------------------------------------------------------- fault matrix

FAULTS: dict[str, Any] = {
    "rate_limit_429": lambda: HTTPError(429),
    "server_503": lambda: HTTPError(503),
    "auth_401": lambda: HTTPError(401),
    "connection": lambda: ConnectionError("connection reset by peer"),
    "hang": "hang",
    "empty": "",
    "whitespace": "   \n ",
    "refusal": "I'm sorry, but I can't help with that.",
    "truncated_json": '```json\n{"ConversationSummary": "The user asked ab',
    "not_json": "<html>Bad gateway</html>",
    "over_long": json.dumps({"ConversationSummary": "blah " * 3000}),
    "block_list": AIMessage([{"type": "image_url", "image_url": {"url": "http://x"}}]),
}


def _fill(history: CompressingChatMessageHistory, rounds: range) -> None:
    for n in rounds:
        history.add_messages(turn(n))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_model_failure_leaves_summaries_byte_identical_sync(
    fault: str, store: HistoryStore, control: Control, caplog: pytest.LogCaptureFixture
) -> None:
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    _fill(history, range(4))  # one good compression (rounds 0-1)
    before = summary_state(store, "s")
    view_before = history.messages
    control.fault = FAULTS[fault]
    with caplog.at_level(logging.WARNING, logger="langchain_histcompress.faces.history"):
        history.add_messages(turn(4))  # compression due -> fails
    assert summary_state(store, "s") == before
    assert isinstance(history.last_compression_error, SummarizationError)
    assert any("compression of session 's' failed" in r.getMessage() for r in caplog.records)
    assert all("question" not in r.getMessage() for r in caplog.records)  # no content logged
    assert history.messages == [*view_before, *history.full_messages[-2:]]  # appended, uncompressed
    control.fault = None
    history.add_messages(turn(5))  # next turn retries and compresses
    summary = history.summary
    assert summary is not None and summary.version == 2
    assert history.last_compression_error is None
    assert len(history.full_messages) == 12


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_model_failure_leaves_summaries_byte_identical_async(
    fault: str, store: HistoryStore, control: Control
) -> None:
    history = CompressingChatMessageHistory(
        "s",
        connection=store,
        compressor=controlled_compressor(control),
        raise_on_compression_error=True,
    )
    for n in range(4):
        await history.aadd_messages(turn(n))
    before = summary_state(store, "s")
    control.fault = FAULTS[fault]
    with pytest.raises(SummarizationError):
        await history.aadd_messages(turn(4))
    assert summary_state(store, "s") == before
    assert len(await history.aget_full_messages()) == 10  # the turn itself was stored
    control.fault = None
    await history.aadd_messages(turn(5))
    summary = await history.aget_summary()
    assert summary is not None and summary.version == 2
    view = await history.aget_messages()
    # the backlog the failure left (rounds 2-4) is folded with round 5's turn, down to keep
    assert [m.content for m in view[1:]] == ["question 5", "answer 5"]


@pytest.mark.parametrize("fault", ["rate_limit_429", "auth_401", "hang", "refusal"])
def test_raise_on_compression_error_sync(fault: str, store: HistoryStore, control: Control) -> None:
    history = CompressingChatMessageHistory(
        "s",
        connection=store,
        compressor=controlled_compressor(control),
        raise_on_compression_error=True,
    )
    _fill(history, range(4))
    before = summary_state(store, "s")
    control.fault = FAULTS[fault]
    with pytest.raises(SummarizationError):
        history.add_messages(turn(4))
    assert summary_state(store, "s") == before
    assert len(history.full_messages) == 10


async def test_cancellation_propagates_and_changes_nothing(
    store: HistoryStore, control: Control
) -> None:
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control, timeout=None)
    )
    for n in range(4):
        await history.aadd_messages(turn(n))
    before = summary_state(store, "s")
    control.fault = "hang"
    control.started.clear()
    task = asyncio.create_task(history.aadd_messages(turn(4)))
    while not control.started.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert summary_state(store, "s") == before
    assert len(await history.aget_full_messages()) == 10
    control.fault = None
    await history.aadd_messages(turn(5))
    assert (await history.aget_summary()).version == 2  # type: ignore[union-attr]


def test_storage_failure_during_commit_is_logged_and_retried(
    tmp_path: Path, control: Control
) -> None:
    fail = {"armed": False}

    class FlakyStore(SQLHistoryStore):
        def commit_compression(self, *args: Any, **kwargs: Any) -> None:
            if fail["armed"]:
                fail["armed"] = False
                msg = "connection dropped (simulated)"
                raise StorageError(msg)
            super().commit_compression(*args, **kwargs)

    store = FlakyStore(tmp_path / "h.sqlite")
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    _fill(history, range(4))
    before = summary_state(store, "s")
    fail["armed"] = True
    history.add_messages(turn(4))
    assert isinstance(history.last_compression_error, StorageError)
    assert summary_state(store, "s") == before
    history.add_messages(turn(5))
    assert history.summary is not None and history.summary.version == 2


# --------------------------------------------------------------------------- concurrency


def test_concurrent_compactions_exactly_one_commits(store: HistoryStore, control: Control) -> None:
    writer = CompressingChatMessageHistory("s", connection=store)
    _fill(writer, range(4))  # one chunk (rounds 0-1) is due
    control.barrier = threading.Barrier(2)
    a = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    b = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control)
    )
    assert run_threads(CompressingChatMessageHistory.compress, (a, b)) == []
    assert control.calls == 2  # both summarized...
    summary = a.summary
    assert summary is not None and summary.version == 1  # ...exactly one committed
    assert a.last_compression_error is None and b.last_compression_error is None
    if isinstance(store, SQLHistoryStore):
        rows = summary_state(store, "s")[0]
        assert len(rows) == 1


def test_threaded_writers_lose_nothing(store: HistoryStore, control: Control) -> None:
    def writer(w: int) -> None:
        history = CompressingChatMessageHistory(
            "s", connection=store, compressor=controlled_compressor(control)
        )
        for i in range(8):
            history.add_messages(
                [
                    HumanMessage(f"w{w} q{i}", id=f"w{w}-q{i}"),
                    AIMessage(f"w{w} a{i}", id=f"w{w}-a{i}"),
                ]
            )

    assert run_threads(writer, range(4)) == []
    history = CompressingChatMessageHistory("s", connection=store)
    full = [m.id for m in history.full_messages]
    assert len(full) == len(set(full)) == 64
    for w in range(4):
        mine = [i for i in full if i is not None and i.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{k}{i}" for i in range(8) for k in "qa"]
    summary = history.summary
    assert summary is not None
    shown = {m.id for m in history.messages}
    assert all(i in shown or i in summary.covered_ids for i in full)
    assert not (shown & summary.covered_ids)


async def test_async_writers_lose_nothing(store: HistoryStore, control: Control) -> None:
    async def writer(w: int) -> None:
        history = CompressingChatMessageHistory(
            "s", connection=store, compressor=controlled_compressor(control)
        )
        for i in range(6):
            await history.aadd_messages(
                [HumanMessage(f"q{i}", id=f"w{w}-q{i}"), AIMessage(f"a{i}", id=f"w{w}-a{i}")]
            )

    await asyncio.gather(*(writer(w) for w in range(4)))
    history = CompressingChatMessageHistory("s", connection=store)
    full = [m.id for m in await history.aget_full_messages()]
    assert len(full) == len(set(full)) == 48
    for w in range(4):
        assert [i for i in full if i is not None and i.startswith(f"w{w}-")] == [
            f"w{w}-{k}{i}" for i in range(6) for k in "qa"
        ]
    summary = await history.aget_summary()
    assert summary is not None
    shown = {m.id for m in await history.aget_messages()}
    assert all(i in shown or i in summary.covered_ids for i in full)


# --------------------------------------------------------------------------- background


def test_background_compression(store: HistoryStore, control: Control) -> None:
    history = CompressingChatMessageHistory(
        "s",
        connection=store,
        compressor=controlled_compressor(control, timeout=None),
        compress_on="background",
    )
    _fill(history, range(2))
    control.fault = "block"
    history.add_messages(turn(2))  # returns although the model is blocked
    assert control.started.wait(10)
    assert history.store.snapshot("s").summary is None  # not committed yet
    reader_result: list[list[BaseMessage]] = []
    reader = threading.Thread(target=lambda: reader_result.append(history.messages))
    reader.start()
    control.release.set()
    assert history.wait_for_compression(timeout=30)
    reader.join(30)
    summary = history.summary
    assert summary is not None and summary.version == 1
    assert reader_result == [history.messages]  # the read waited for the compression
    # a new history object for the same session sees the same state
    assert CompressingChatMessageHistory("s", connection=store).messages == history.messages


def test_background_failure_is_logged_not_raised(store: HistoryStore, control: Control) -> None:
    history = CompressingChatMessageHistory(
        "s",
        connection=store,
        compressor=controlled_compressor(control),
        compress_on="background",
        raise_on_compression_error=True,
    )
    control.fault = FAULTS["auth_401"]
    _fill(history, range(3))
    assert history.wait_for_compression(timeout=30)
    assert isinstance(history.last_compression_error, SummarizationError)
    assert history.summary is None and len(history.full_messages) == 6


async def test_background_compression_async(store: HistoryStore, control: Control) -> None:
    history = CompressingChatMessageHistory(
        "s", connection=store, compressor=controlled_compressor(control), compress_on="background"
    )
    for n in range(5):
        await history.aadd_messages(turn(n))
    assert await history.await_for_compression(timeout=30)
    summary = await history.aget_summary()
    assert summary is not None and summary.version == 2
    view = await history.aget_messages()
    assert [m.content for m in view[1:]] == ["question 4", "answer 4"]


# --------------------------------------------------------------------------- RunnableWithMessageHistory


def _with_history(
    factory: Callable[[str], BaseChatMessageHistory], model: ScriptedChatModel
) -> Any:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RunnableWithMessageHistory(model, factory)


@pytest.mark.parametrize("compress_on", ["write", "background"])
def test_runnable_with_message_history(
    store: HistoryStore, control: Control, compress_on: str
) -> None:
    model = ScriptedChatModel(default=lambda prompt: f"got {len(prompt)}")
    chain = _with_history(
        lambda sid: CompressingChatMessageHistory(
            sid,
            connection=store,
            compressor=controlled_compressor(control),
            compress_on=compress_on,  # type: ignore[arg-type]
        ),
        model,
    )
    config = {"configurable": {"session_id": "u1"}}
    for n in range(8):
        chain.invoke([HumanMessage(f"question {n}")], config)
    history = CompressingChatMessageHistory("u1", connection=store)
    history.wait_for_compression(timeout=30)
    full = history.full_messages
    assert [m.content for m in full if isinstance(m, HumanMessage)] == [
        f"question {n}" for n in range(8)
    ]
    assert len(full) == 16  # no duplicates, nothing lost
    last_input = model.prompts[-1]
    assert is_summary_message(last_input[0])
    assert last_input[-1].content == "question 7"
    assert len(last_input) < 16


async def test_runnable_with_message_history_async(store: HistoryStore, control: Control) -> None:
    model = ScriptedChatModel(default=lambda prompt: f"got {len(prompt)}")
    chain = _with_history(
        lambda sid: CompressingChatMessageHistory(
            sid, connection=store, compressor=controlled_compressor(control)
        ),
        model,
    )
    config = {"configurable": {"session_id": "u1"}}
    for n in range(6):
        await chain.ainvoke([HumanMessage(f"question {n}")], config)
    history = CompressingChatMessageHistory("u1", connection=store)
    full = await history.aget_full_messages()
    assert len(full) == 12
    assert is_summary_message(model.prompts[-1][0])


# --------------------------------------------------------------------------- adapter


class KeyedHistory(InMemoryChatMessageHistory):
    session_id: str = "inner-session"


def test_adapter_keeps_originals_in_the_inner_history(control: Control) -> None:
    inner = InMemoryChatMessageHistory()
    side = InMemoryHistoryStore()
    adapter = CompressingHistoryAdapter(
        inner, compressor=controlled_compressor(control), summary_store=side, key="k"
    )
    batch: list[BaseMessage] = []
    for n in range(5):
        t = turn(n)
        batch += t
        adapter.add_messages(t)
    assert all(m.id is None for m in batch)  # caller objects untouched
    assert [m.content for m in inner.messages] == [m.content for m in batch]
    assert adapter.full_messages == inner.messages
    summary = side.load_summary("k")
    assert summary is not None and summary == adapter.summary and summary.version == 2
    view = adapter.messages
    assert is_summary_message(view[0]) and [m.content for m in view[1:]] == [
        "question 4",
        "answer 4",
    ]
    assert view == adapter.messages
    adapter.clear()
    assert inner.messages == [] and side.load_summary("k") is None


def test_adapter_with_sql_side_store_and_default_key(tmp_path: Path, control: Control) -> None:
    inner = KeyedHistory()
    url = str(tmp_path / "side.sqlite")
    adapter = CompressingHistoryAdapter(
        inner, compressor=controlled_compressor(control), summary_store=url
    )
    assert adapter.key == "inner-session"
    for n in range(4):
        adapter.add_messages(turn(n))
    again = CompressingHistoryAdapter(
        inner, compressor=controlled_compressor(control), summary_store=SQLHistoryStore(url)
    )
    assert again.summary is not None and again.messages == adapter.messages


def test_adapter_handles_inner_histories_that_drop_ids(control: Control) -> None:
    class NoIds(InMemoryChatMessageHistory):
        def add_messages(self, messages: Sequence[BaseMessage]) -> None:
            super().add_messages([m.model_copy(update={"id": None}) for m in messages])

    inner = NoIds()
    adapter = CompressingHistoryAdapter(
        inner,
        compressor=controlled_compressor(control),
        summary_store=InMemoryHistoryStore(),
        key="k",
    )
    for n in range(5):
        adapter.add_messages(turn(n))
    view = adapter.messages
    assert [m.content for m in view[1:]] == ["question 4", "answer 4"]
    assert view == adapter.messages  # positional ids are stable


@pytest.mark.parametrize("fault", ["server_503", "hang", "truncated_json"])
async def test_adapter_failures_change_nothing(fault: str, control: Control) -> None:
    inner = InMemoryChatMessageHistory()
    side = InMemoryHistoryStore()
    adapter = CompressingHistoryAdapter(
        inner, compressor=controlled_compressor(control), summary_store=side, key="k"
    )
    for n in range(4):
        await adapter.aadd_messages(turn(n))
    before = side.load_summary("k")
    control.fault = FAULTS[fault]
    await adapter.aadd_messages(turn(4))
    assert side.load_summary("k") == before
    assert isinstance(adapter.last_compression_error, SummarizationError)
    assert len(inner.messages) == 10
    control.fault = None
    await adapter.aadd_messages(turn(5))
    assert (await adapter.aget_summary()).version == 2  # type: ignore[union-attr]
    # the backlog the failure left is folded down to the kept round: summary + round 5
    assert len(await adapter.aget_messages()) == 3


def test_adapter_configuration_errors(control: Control) -> None:
    with pytest.raises(ConfigurationError, match="inner"):
        CompressingHistoryAdapter(
            [],
            compressor=controlled_compressor(control),
            summary_store=InMemoryHistoryStore(),
            key="k",
        )  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="key is required"):
        CompressingHistoryAdapter(
            InMemoryChatMessageHistory(),
            compressor=controlled_compressor(control),
            summary_store=InMemoryHistoryStore(),
        )
    with pytest.raises(ConfigurationError, match="compressor is required"):
        CompressingHistoryAdapter(
            InMemoryChatMessageHistory(),
            compressor=None,
            summary_store=InMemoryHistoryStore(),
            key="k",
        )  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'redis'"):
        CompressingHistoryAdapter(
            InMemoryChatMessageHistory(),
            compressor=controlled_compressor(control),
            summary_store="redis://x",
            key="k",
        )


def test_adapter_derives_ids_only_for_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages written to the wrapped history without ids get ids only once they are new."""
    from langchain_core.messages.utils import count_tokens_approximately

    from langchain_histcompress.core.rounds import ensure_ids
    from langchain_histcompress.core.running_summary import RunningSummary
    from langchain_histcompress.edge.compressor import RoundCompressor
    from tests.fakes import ScriptedSummarizer

    inner = InMemoryChatMessageHistory()
    inner.add_messages([SystemMessage("Be brief.", id="sys")])
    for n in range(40):
        inner.add_messages([HumanMessage(f"q{n}"), AIMessage(f"a{n}")])
    store = InMemoryHistoryStore()
    covered = [str(m.id) for m in ensure_ids(inner.messages, namespace="k")[1:61]]
    store.put_summary(
        "k", RunningSummary(content="x", text="x", covered_ids=covered), previous=None
    )
    adapter = CompressingHistoryAdapter(
        inner,
        key="k",
        summary_store=store,
        compressor=RoundCompressor(
            ScriptedSummarizer(),
            token_counter=count_tokens_approximately,
            timeout=None,
            trigger=("rounds", 53),
        ),
    )
    adapter._compress_now()  # warm: the tail gets its ids
    made = counting_identified(monkeypatch)
    for n in range(40, 46):
        inner.add_messages([HumanMessage(f"q{n}"), AIMessage(f"a{n}")])
        made.clear()
        adapter._compress_now()
        shown = adapter.messages
        size = len(inner.messages)
        assert made == [size - 2, size - 1]  # the two messages added since the last turn
        expected = ensure_ids(inner.messages, namespace="k")
        assert [m.id for m in shown] == [
            expected[0].id,
            shown[1].id,
            *(m.id for m in expected[61:]),
        ]
