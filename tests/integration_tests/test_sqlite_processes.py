"""Cross-process behaviour of the SQL store: concurrent writers, SIGKILL mid-commit, read-back.

Worker processes are fresh interpreters (``sys.executable`` running this file, the
equivalent of the ``spawn`` start method), so nothing is inherited from the test process.
The worker takes any connection URL; the PostgreSQL tests reuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve()
SESSION = "proc-session"


# --------------------------------------------------------------------------- worker side


def _worker_model() -> Any:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class DigestModel(BaseChatModel):
        """Deterministic summarizer: the summary names a digest of its prompt."""

        @property
        def _llm_type(self) -> str:
            return "digest"

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            digest = hashlib.sha256(str(messages[-1].content).encode()).hexdigest()[:12]
            text = json.dumps({"ConversationSummary": f"summary {digest}"})
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    return DigestModel()


def _worker_compressor() -> Any:
    from langchain_histcompress.edge.compressor import RoundCompressor

    return RoundCompressor(
        _worker_model(),
        trigger=("rounds", 3),
        keep=("rounds", 1),
        token_counter="approximate",
        max_retries=0,
        timeout=None,
    )


class WrappedCursor:
    """A DB-API cursor wrapper that forwards everything it does not override."""

    def __init__(self, conn: Any, cursor: Any) -> None:
        self._conn = conn
        self._cursor = cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def wrapped_store(url: str, cursor_type: Callable[[Any, Any], Any]) -> Any:
    """A SQLHistoryStore whose connections hand out ``cursor_type(connection, cursor)``."""
    from langchain_histcompress.storage import SQLHistoryStore

    class Connection:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def cursor(self) -> Any:
            return cursor_type(self._conn, self._conn.cursor())

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    class WrappedStore(SQLHistoryStore):
        def _connect_sqlite(self) -> Any:
            return Connection(super()._connect_sqlite())

        def _connect_postgres(self) -> Any:
            return Connection(super()._connect_postgres())

    return WrappedStore(url)


def _killing_store(url: str, point: str, statement: str) -> Any:
    """A store whose write transaction touching ``statement`` dies by SIGKILL at ``point``."""
    state = {"armed": False}

    class Cursor(WrappedCursor):
        _hit = False

        def execute(self, sql: str, params: Any = ()) -> Any:
            if sql.startswith(statement):
                self._hit = True
            if sql == "COMMIT" and self._hit and state["armed"]:
                if point == "before-commit":
                    os.kill(os.getpid(), signal.SIGKILL)
                result = self._cursor.execute(sql, params)
                os.kill(os.getpid(), signal.SIGKILL)
                return result
            return self._cursor.execute(sql, params)

        def executemany(self, sql: str, rows: Any) -> Any:
            if sql.startswith(statement):
                self._hit = True
            return self._cursor.executemany(sql, rows)

    store = wrapped_store(url, Cursor)
    store.arm = lambda: state.__setitem__("armed", True)
    return store


def _turn(writer: str, i: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [
        HumanMessage(f"{writer} question {i}", id=f"{writer}-q{i}"),
        AIMessage(f"{writer} answer {i}", id=f"{writer}-a{i}"),
    ]


def _dump_view(history: Any) -> str:
    from langchain_core.messages import message_to_dict

    summary = history.summary
    return json.dumps(
        {
            "view": [message_to_dict(m) for m in history.messages],
            "summary": None if summary is None else summary.model_dump(mode="json"),
        },
        sort_keys=True,
    )


def worker_main(argv: Sequence[str]) -> int:
    from langchain_histcompress.faces.history import CompressingChatMessageHistory
    from langchain_histcompress.storage import SQLHistoryStore

    command, url, session, *rest = argv
    if command == "append":  # append TURNS turns as WRITER, compressing after each write
        writer, turns = rest[0], int(rest[1])
        history = CompressingChatMessageHistory(
            session, connection=SQLHistoryStore(url), compressor=_worker_compressor()
        )
        for i in range(turns):
            history.add_messages(_turn(writer, i))
        return 0
    if command in ("compress-kill", "append-kill"):
        point = rest[0]
        statement = (
            "INSERT INTO histcompress_summaries"
            if command == "compress-kill"
            else "INSERT INTO histcompress_messages"
        )
        store = _killing_store(url, point, statement)
        plain = CompressingChatMessageHistory(session, connection=store)
        for i in range(3):
            plain.add_messages(_turn("k", i))
        store.arm()
        if command == "append-kill":
            plain.add_messages(_turn("k", 3))
        else:
            history = CompressingChatMessageHistory(
                session,
                connection=store,
                compressor=_worker_compressor(),
                raise_on_compression_error=True,
            )
            history.compress()
        return 3  # not reached: the process was killed
    if command == "write":  # write TURNS turns with compression, print the view
        turns = int(rest[0])
        history = CompressingChatMessageHistory(
            session, connection=SQLHistoryStore(url), compressor=_worker_compressor()
        )
        for i in range(turns):
            history.add_messages(_turn("w", i))
        sys.stdout.write(_dump_view(history))
        return 0
    if command == "read":
        history = CompressingChatMessageHistory(
            session, connection=SQLHistoryStore(url), compressor=_worker_compressor()
        )
        sys.stdout.write(_dump_view(history))
        return 0
    sys.stderr.write(f"unknown command {command!r}\n")
    return 2


# --------------------------------------------------------------------------- test side


def run_worker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"worker {args[0]} failed ({result.returncode}): {result.stderr[-3000:]}"
        )
    return result


def start_worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check_session_consistency(url: str, session: str) -> tuple[Any, list[str], list[str]]:
    """Every original is uncovered xor covered by the current summary; returns the state."""
    from langchain_histcompress.faces.history import CompressingChatMessageHistory
    from langchain_histcompress.storage import SQLHistoryStore

    store = SQLHistoryStore(url)
    try:
        snap = store.snapshot(session)
        full = [str(m.id) for m in store.load_messages(session)]
        uncovered = [str(m.id) for m in snap.uncovered]
        covered = snap.summary.covered_ids if snap.summary else frozenset()
        assert uncovered == [i for i in full if i not in covered]
        assert covered <= set(full)
        assert len(full) == len(set(full))
        view = CompressingChatMessageHistory(session, connection=store).messages
        shown = {m.id for m in view}
        assert all((i in shown) != (i in covered) for i in full)
        return snap.summary, full, uncovered
    finally:
        store.close()


def sqlite_rows(path: Path, session: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(
                f"SELECT * FROM histcompress_{table} WHERE session_id = ? ORDER BY 1, 2",
                (session,),
            ).fetchall()
            for table in ("sessions", "messages", "summaries")
        }
    finally:
        conn.close()


def check_two_writers(url: str, session: str, turns: int = 8) -> None:
    procs = [start_worker("append", url, session, w, str(turns)) for w in ("alpha", "beta")]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    summary, full, _ = check_session_consistency(url, session)
    assert len(full) == 4 * turns
    for w in ("alpha", "beta"):
        assert [i for i in full if i.startswith(f"{w}-")] == [
            f"{w}-{k}{i}" for i in range(turns) for k in "qa"
        ]
    assert summary is not None


def check_kill_during_compression(url: str, session: str, point: str) -> None:
    result = run_worker("compress-kill", url, session, point, check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    summary, full, uncovered = check_session_consistency(url, session)
    assert full == [f"k-{k}{i}" for i in range(3) for k in "qa"]
    if point == "before-commit":
        assert summary is None and uncovered == full
    else:
        assert summary is not None and summary.version == 1
        assert summary.covered_ids == {"k-q0", "k-a0", "k-q1", "k-a1"}
        assert uncovered == ["k-q2", "k-a2"]


def check_kill_during_append(url: str, session: str, point: str) -> None:
    result = run_worker("append-kill", url, session, point, check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    _, full, _ = check_session_consistency(url, session)
    expected_turns = 3 if point == "before-commit" else 4
    assert full == [f"k-{k}{i}" for i in range(expected_turns) for k in "qa"]


def check_cross_process_read_back(url: str, session: str) -> None:
    from langchain_core.messages import messages_from_dict

    from langchain_histcompress.core.running_summary import RunningSummary
    from langchain_histcompress.faces.history import CompressingChatMessageHistory
    from langchain_histcompress.storage import SQLHistoryStore

    written = json.loads(run_worker("write", url, session, "7").stdout)
    store = SQLHistoryStore(url)
    history = CompressingChatMessageHistory(
        session, connection=store, compressor=_worker_compressor()
    )
    summary = history.summary
    assert summary is not None and summary.version == 3
    assert summary == RunningSummary.model_validate(written["summary"])
    assert history.messages == messages_from_dict(written["view"])
    # and the other way round: this process writes, a fresh process reads the same
    history.add_messages(_turn("parent", 0))
    history.add_messages(_turn("parent", 1))
    read = json.loads(run_worker("read", url, session).stdout)
    assert RunningSummary.model_validate(read["summary"]) == history.summary
    assert messages_from_dict(read["view"]) == history.messages
    store.close()


def test_two_processes_write_one_sqlite_session(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    check_two_writers(str(path), SESSION)
    rows = sqlite_rows(path, SESSION)
    seqs = [r[1] for r in rows["messages"]]
    assert seqs == list(range(1, len(seqs) + 1))
    # at most one summary per coverage set: each version covers new, disjoint ids
    deltas = [set(json.loads(r[4])) for r in rows["summaries"]]
    assert all(deltas) and sum(len(d) for d in deltas) == len(set().union(*deltas))
    flags = {r[2]: r[4] for r in rows["messages"] if r[4] is not None}
    for version_row, delta in zip(rows["summaries"], deltas, strict=True):
        assert {i for i, v in flags.items() if v == version_row[1]} == delta


def test_sigkill_before_and_after_the_compression_commit(tmp_path: Path) -> None:
    for point in ("before-commit", "after-commit"):
        path = tmp_path / f"{point}.sqlite"
        check_kill_during_compression(str(path), SESSION, point)
        rows = sqlite_rows(path, SESSION)
        covered = [r for r in rows["messages"] if r[4] is not None]
        assert len(rows["summaries"]) == (0 if point == "before-commit" else 1)
        assert len(covered) == (0 if point == "before-commit" else 4)
        assert rows["sessions"][0][1] == len(rows["summaries"])


def test_sigkill_before_and_after_the_append_commit(tmp_path: Path) -> None:
    for point in ("before-commit", "after-commit"):
        path = tmp_path / f"{point}.sqlite"
        check_kill_during_append(str(path), SESSION, point)
        rows = sqlite_rows(path, SESSION)
        assert rows["sessions"][0][2] == len(rows["messages"]) + 1  # next_seq matches


def test_history_written_by_one_process_reads_back_in_another(tmp_path: Path) -> None:
    check_cross_process_read_back(str(tmp_path / "h.sqlite"), SESSION)


if __name__ == "__main__":
    raise SystemExit(worker_main(sys.argv[1:]))
