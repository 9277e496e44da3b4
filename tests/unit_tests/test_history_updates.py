"""Writes to a chat history: refused ones change nothing, removals keep coverage exact.

* A strict compressor (``on_invalid_history="raise"``) has the history checked before it is
  written: a write that breaks the provider rules is refused and storage stays
  byte-identical, so the session always accepts the next valid message.
* In repair mode, every refused write (duplicate id, unknown removal, unserializable
  message) leaves storage byte-identical too.
* ``RemoveMessage`` removes stored messages as a LangGraph state would, in one transaction:
  an uncovered one leaves the view, a covered one leaves the record while the summary still
  represents it, and ``REMOVE_ALL_MESSAGES`` starts the session over, summary included.

The checks are functions of a store so the PostgreSQL integration tests run them too.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)

from langchain_histcompress.core.errors import (
    CompressionConflictError,
    ConfigurationError,
    InvalidHistoryError,
)
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.faces.history_adapter import CompressingHistoryAdapter
from langchain_histcompress.storage import HistoryStore, InMemoryHistoryStore, SQLHistoryStore
from langchain_histcompress.storage.base import (
    REMOVE_ALL_MESSAGES,
    encode_message,
    encode_summary,
    plan_update,
)
from tests.fakes import ScriptedSummarizer, next_summary

_sessions = itertools.count()


# --------------------------------------------------------------------------- helpers


def storage_dump(store: HistoryStore, session: str) -> Any:
    """Everything ``store`` holds for ``session``, as stored (rows, or serialized records).

    Database rows are read on a connection of their own; a private in-memory SQLite
    database (which no other connection can see) is read through the store.
    """
    if isinstance(store, SQLHistoryStore) and not store.spec.is_memory:
        tables = ("histcompress_sessions", "histcompress_messages", "histcompress_summaries")
        if store.spec.backend == "sqlite":
            conn = sqlite3.connect(store.spec.target)
            try:
                return [
                    conn.execute(
                        f"SELECT * FROM {t} WHERE session_id = ? ORDER BY 1, 2", (session,)
                    ).fetchall()
                    for t in tables
                ]
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(store.spec.target) as pg:
            return [
                pg.execute(
                    f"SELECT * FROM {t} WHERE session_id = %s ORDER BY 1, 2", (session,)
                ).fetchall()
                for t in tables
            ]
    snap = store.snapshot(session)
    summary = None if snap.summary is None else encode_summary(snap.summary, None)
    return (
        [encode_message(m) for m in store.load_messages(session)],
        [m.id for m in snap.uncovered],
        summary,
    )


def compressor(strict: bool) -> RoundCompressor:
    return RoundCompressor(
        ScriptedSummarizer(),
        trigger=("rounds", 2),
        keep=("rounds", 1),
        token_counter="approximate",
        on_invalid_history="raise" if strict else "repair",
    )


def chat(store: HistoryStore, *, strict: bool = False) -> CompressingChatMessageHistory:
    return CompressingChatMessageHistory(
        f"updates-{next(_sessions)}",
        connection=store,
        compressor=compressor(strict),
        raise_on_compression_error=True,
    )


def call(call_id: str, message_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": call_id}], id=message_id)


def refused(
    history: CompressingChatMessageHistory,
    batch: list[BaseMessage],
    error: type[Exception],
    match: str,
) -> None:
    """``batch`` is refused with ``error`` and storage stays byte-identical."""
    before = storage_dump(history.store, history.session_id)
    with pytest.raises(error, match=match):
        history.add_messages(batch)
    assert storage_dump(history.store, history.session_id) == before


def three_rounds(history: CompressingChatMessageHistory) -> None:
    for i in range(3):
        history.add_messages([HumanMessage(f"q{i}", id=f"h{i}"), AIMessage(f"a{i}", id=f"a{i}")])
    assert history.summary is not None and {"h0", "a0"} <= history.summary.covered_ids


# --------------------------------------------------------------------------- checks


def check_strict_refusals(store: HistoryStore) -> None:
    history = chat(store, strict=True)
    three_rounds(history)
    version = history.summary.version if history.summary else 0
    refused(history, [ToolMessage("x", tool_call_id="c9", id="t9")], InvalidHistoryError, "orphan")
    refused(
        history,
        [call("c1", "ai1"), HumanMessage("no answer", id="h9")],
        InvalidHistoryError,
        "unanswered_tool_calls.*nothing was written",
    )
    refused(history, [RemoveMessage(id="gone")], InvalidHistoryError, "unknown_message_id")
    # the session accepts the next valid message, and compression goes on
    history.add_messages([HumanMessage("q3", id="h3"), call("c1", "ai3")])
    history.add_messages([ToolMessage("r", tool_call_id="c1", id="t3"), AIMessage("a3", id="a3")])
    # removing the call would leave its result answering nothing
    refused(history, [RemoveMessage(id="ai3")], InvalidHistoryError, "orphan_tool_result")
    history.add_messages([HumanMessage("q4", id="h4"), AIMessage("a4", id="a4")])
    assert history.summary is not None and history.summary.version > version
    assert history.last_compression_error is None
    assert validate_history(history.messages) == []


def check_strict_recovery_of_a_broken_session(store: HistoryStore) -> None:
    """A session stored broken (before the check, or by a lenient writer) can be mended."""
    history = chat(store, strict=True)
    store.append(
        history.session_id,
        [HumanMessage("q0", id="h0"), ToolMessage("stray", tool_call_id="c0", id="t0")],
    )
    refused(history, [AIMessage("a0", id="a0")], InvalidHistoryError, "RemoveMessage")
    history.add_messages([RemoveMessage(id="t0"), AIMessage("a0", id="a0")])
    for i in range(1, 4):
        history.add_messages([HumanMessage(f"q{i}", id=f"h{i}"), AIMessage(f"a{i}", id=f"a{i}")])
    assert history.summary is not None and "h0" in history.summary.covered_ids
    assert "t0" not in {m.id for m in history.full_messages}


def check_repair_refusals(store: HistoryStore) -> None:
    history = chat(store)
    three_rounds(history)
    refused(history, [HumanMessage("again", id="h2")], InvalidHistoryError, "already stored")
    refused(
        history,
        [HumanMessage("new", id="n1"), RemoveMessage(id="nope")],
        InvalidHistoryError,
        r"unknown_message_id.*'nope'.*no stored message",
    )
    refused(
        history,
        [RemoveMessage(id="h2"), HumanMessage("reuse", id="h2")],
        InvalidHistoryError,
        "duplicate_message_id",
    )
    refused(
        history,
        [RemoveMessage(id="a2"), HumanMessage("x", additional_kwargs={"o": object()})],
        ConfigurationError,
        "JSON",
    )
    history.add_messages([HumanMessage("q3", id="h3"), AIMessage("a3", id="a3")])
    assert [m.id for m in history.messages][-2:] == ["h3", "a3"]


def check_removals(store: HistoryStore) -> None:
    history = chat(store)
    three_rounds(history)
    summary = history.summary
    assert summary is not None
    shown = [m.id for m in history.messages]
    # a covered message: the record loses it, the summary still represents it
    history.add_messages([RemoveMessage(id="h0")])
    assert "h0" not in {m.id for m in history.full_messages}
    assert [m.id for m in history.messages] == shown
    assert history.summary == summary
    # an uncovered message leaves the view
    history.add_messages([RemoveMessage(id="a2")])
    assert "a2" not in {m.id for m in history.messages}
    assert "a2" not in {m.id for m in history.full_messages}
    # added and removed in one update: nothing stored
    history.add_messages([HumanMessage("oops", id="o1"), RemoveMessage(id="o1")])
    assert "o1" not in {m.id for m in history.full_messages}
    # the conversation replaced: the old summary goes with it
    history.add_messages(
        [
            HumanMessage("lost", id="l1"),
            RemoveMessage(id=REMOVE_ALL_MESSAGES),
            HumanMessage("fresh", id="h0"),
            AIMessage("start", id="f1"),
        ]
    )
    assert [m.id for m in history.full_messages] == ["h0", "f1"]
    assert history.summary is None
    assert [m.id for m in history.messages] == ["h0", "f1"]
    for i in range(2):
        history.add_messages([HumanMessage(f"n{i}", id=f"n{i}"), AIMessage("ok", id=f"k{i}")])
    assert history.summary is not None
    assert history.summary.covered_ids == {"h0", "f1", "n0", "k0"}  # a new lineage


def check_covered_ids_are_never_reused(store: HistoryStore) -> None:
    """A new message never takes the id of a summarized one that was removed or pruned."""
    history = chat(store)
    three_rounds(history)
    history.add_messages([RemoveMessage(id="h0")])
    history.prune()
    assert "a0" not in {m.id for m in history.full_messages}
    for reused in ("h0", "a0"):
        refused(
            history,
            [HumanMessage("new text", id=reused)],
            InvalidHistoryError,
            f"'{reused}' is covered by the running summary",
        )
    history.add_messages([HumanMessage("new text", id="h0-new")])
    assert history.messages[-1].id == "h0-new"


def check_removal_beats_a_stale_compression(store: HistoryStore) -> None:
    session = f"stale-{next(_sessions)}"
    store.append(session, [HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")])
    snap = store.snapshot(session)
    folded = next_summary({"h0", "a0"})
    store.update(session, [RemoveMessage(id="a0")])
    before = storage_dump(store, session)
    with pytest.raises(CompressionConflictError):
        store.commit_compression(session, folded, previous=snap.summary)
    assert storage_dump(store, session) == before


def check_async_writes(store: HistoryStore) -> None:
    history = chat(store, strict=True)

    async def run() -> None:
        await history.aadd_messages([HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")])
        before = storage_dump(store, history.session_id)
        with pytest.raises(InvalidHistoryError, match="orphan"):
            await history.aadd_messages([ToolMessage("x", tool_call_id="c", id="t")])
        assert storage_dump(store, history.session_id) == before
        await history.aadd_messages([RemoveMessage(id="a0"), AIMessage("b0", id="b0")])
        await store.aupdate(history.session_id, [RemoveMessage(id=REMOVE_ALL_MESSAGES)])

    asyncio.run(run())
    assert history.full_messages == []


CHECKS: list[Callable[[HistoryStore], None]] = [
    check_strict_refusals,
    check_strict_recovery_of_a_broken_session,
    check_repair_refusals,
    check_removals,
    check_covered_ids_are_never_reused,
    check_removal_beats_a_stale_compression,
    check_async_writes,
]


# --------------------------------------------------------------------------- tests


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryStore]:
    if request.param == "memory":
        yield InMemoryHistoryStore()
        return
    sql = SQLHistoryStore(str(tmp_path / "h.sqlite"))
    yield sql
    sql.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_history_updates(store: HistoryStore, check: Callable[[HistoryStore], None]) -> None:
    check(store)


def test_remove_all_is_langgraphs_sentinel() -> None:
    from langgraph.graph.message import REMOVE_ALL_MESSAGES as LANGGRAPH_REMOVE_ALL

    assert REMOVE_ALL_MESSAGES == LANGGRAPH_REMOVE_ALL


def test_updates_follow_add_messages() -> None:
    """The same update resolved here and by LangGraph's ``add_messages`` keeps the same ids."""
    from langgraph.graph.message import add_messages

    left = [HumanMessage("a", id="a"), AIMessage("b", id="b")]
    for right in (
        [RemoveMessage(id="a"), HumanMessage("c", id="c")],
        [HumanMessage("c", id="c"), RemoveMessage(id="c"), RemoveMessage(id="b")],
        [HumanMessage("c", id="c"), RemoveMessage(id=REMOVE_ALL_MESSAGES), AIMessage("d", id="d")],
    ):
        update = plan_update(right)
        kept = [] if update.clear else [m.id for m in left if m.id not in update.removed_ids]
        expected = [m.id for m in add_messages(list(left), list(right))]  # type: ignore[arg-type]
        assert [*kept, *(m.id for m in update.appends)] == expected


def test_a_remove_message_without_id_is_a_precise_error() -> None:
    history = chat(InMemoryHistoryStore())
    with pytest.raises(ConfigurationError, match=r"messages\[0\] is a RemoveMessage without"):
        history.add_messages([RemoveMessage(id="")])


def test_append_refuses_removals_by_name(store: HistoryStore) -> None:
    store.append("s", [HumanMessage("hi", id="h0")])
    with pytest.raises(ConfigurationError, match=r"RemoveMessage.*HistoryStore\.update"):
        store.append("s", [RemoveMessage(id="h0")])
    assert [m.id for m in store.load_messages("s")] == ["h0"]


class _AppendOnly(InMemoryHistoryStore):
    """A store that keeps `HistoryStore`'s default `update` (appends only)."""

    def update(self, session_id: str, messages: Any, *, check: Any = None) -> Any:
        return HistoryStore.update(self, session_id, messages, check=check)


def test_a_store_without_removal_support_refuses_them_and_still_checks() -> None:
    store = _AppendOnly()
    history = chat(store, strict=True)
    history.add_messages([HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")])
    with pytest.raises(ConfigurationError, match="_AppendOnly cannot remove messages"):
        history.add_messages([RemoveMessage(id="a0")])
    with pytest.raises(InvalidHistoryError, match="orphan"):
        history.add_messages([ToolMessage("x", tool_call_id="c", id="t")])
    assert [m.id for m in history.full_messages] == ["h0", "a0"]


@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
def test_the_adapter_refuses_removals_and_checks_strictly() -> None:
    inner = InMemoryChatMessageHistory()
    adapter = CompressingHistoryAdapter(
        inner, key="k", summary_store=InMemoryHistoryStore(), compressor=compressor(True)
    )
    adapter.add_messages([HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")])
    with pytest.raises(ConfigurationError, match="cannot remove messages"):
        adapter.add_messages([RemoveMessage(id="a0")])
    with pytest.raises(InvalidHistoryError, match="orphan"):
        adapter.add_messages([ToolMessage("x", tool_call_id="c", id="t")])
    assert len(inner.messages) == 2
    adapter.add_messages([HumanMessage("q1", id="h1")])
    assert len(inner.messages) == 3


def test_a_store_with_a_cold_summary_cache_still_refuses_covered_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "h.sqlite")
    writer = SQLHistoryStore(path)
    history = chat(writer)
    three_rounds(history)
    writer.prune_covered(history.session_id)
    fresh = SQLHistoryStore(path)  # knows no summary yet
    with pytest.raises(InvalidHistoryError, match="covered by the running summary"):
        fresh.append(history.session_id, [HumanMessage("again", id="h1")])
    assert fresh.append(history.session_id, [HumanMessage("again")])[0].id
    writer.close()
    fresh.close()
