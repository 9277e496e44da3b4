"""The facts -> compress -> model graph on real checkpointers: SQLite files and PostgreSQL.

Threads resume after a restart (a new graph and saver on the same database, or a separate
process) without a single extra summarizer or extractor call.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.faces.nodes import summary_from_state
from tests.unit_tests.test_nodes import (
    EXPECTED_FACTS,
    Harness,
    check_model_inputs,
    fact_contents,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def strict_serde() -> JsonPlusSerializer:
    """Only the built-in safe types may be revived (as with LANGGRAPH_STRICT_MSGPACK=true)."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "threads.sqlite"


@pytest.fixture
def serde_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="langgraph"):
        yield caplog
    problems = [r for r in caplog.records if r.name.startswith("langgraph.checkpoint")]
    assert problems == [], [r.getMessage() for r in problems]


def per_turn_calls(harness: Harness, turns: range, config: dict[str, Any]) -> list[tuple[int, int]]:
    calls = []
    for turn in turns:
        before = (harness.summarizer.calls, harness.extractor.calls)
        harness.app.invoke(harness.turn_input(turn), config)
        calls.append((harness.summarizer.calls - before[0], harness.extractor.calls - before[1]))
    return calls


def reference_calls() -> list[tuple[int, int]]:
    """Calls per turn of an uninterrupted 40-turn run (in memory)."""
    from langgraph.checkpoint.memory import InMemorySaver

    harness = Harness(InMemorySaver())
    return per_turn_calls(harness, range(40), {"configurable": {"thread_id": "reference"}})


def test_forty_turns_on_sqlite_strict_serde(
    sqlite_path: Path, serde_warnings: pytest.LogCaptureFixture
) -> None:
    with sqlite3.connect(sqlite_path, check_same_thread=False) as conn:
        harness = Harness(SqliteSaver(conn, serde=strict_serde()))
        config = {"configurable": {"thread_id": "sqlite-40"}}
        state = harness.run(range(40), config)
        check_model_inputs(harness.model_inputs)
        assert fact_contents(state) == EXPECTED_FACTS
        stored = harness.app.get_state(config).values
    assert isinstance(stored["running_summary"], dict)
    summary = RunningSummary.model_validate(stored["running_summary"])
    assert summary.version == harness.summarizer.calls == 18
    assert summary == summary_from_state(state)


def test_resume_after_restart_makes_no_extra_calls(sqlite_path: Path) -> None:
    reference = reference_calls()
    config = {"configurable": {"thread_id": "restart"}}
    with sqlite3.connect(sqlite_path, check_same_thread=False) as conn:
        first = Harness(SqliteSaver(conn))
        assert per_turn_calls(first, range(20), config) == reference[:20]
    # "restart": new fakes, new graph, new saver, new connection on the same file
    with sqlite3.connect(sqlite_path, check_same_thread=False) as conn:
        second = Harness(SqliteSaver(conn))
        resumed = second.app.get_state(config).values
        assert len(resumed["messages"]) == 1 + 2 * 20
        assert (second.summarizer.calls, second.extractor.calls) == (0, 0)
        assert per_turn_calls(second, range(20, 40), config) == reference[20:]
        state = second.app.get_state(config).values
    check_model_inputs(second.model_inputs)
    assert fact_contents(state) == EXPECTED_FACTS
    assert summary_from_state(state).version == 18  # type: ignore[union-attr]
    assert first.summarizer.calls + second.summarizer.calls == 18
    assert first.extractor.calls + second.extractor.calls == 39


_FIRST_HALF = textwrap.dedent(
    """
    import json, sqlite3, sys
    from langgraph.checkpoint.sqlite import SqliteSaver
    from tests.unit_tests.test_nodes import Harness

    with sqlite3.connect(sys.argv[1], check_same_thread=False) as conn:
        harness = Harness(SqliteSaver(conn))
        harness.run(range(int(sys.argv[2])), {"configurable": {"thread_id": "process"}})
    print(json.dumps([harness.summarizer.calls, harness.extractor.calls]))
    """
)


def test_resume_in_a_new_process(sqlite_path: Path) -> None:
    reference = reference_calls()
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_HALF, str(sqlite_path), "23"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first_calls = json.loads(done.stdout.strip().splitlines()[-1])
    assert first_calls == [sum(c[0] for c in reference[:23]), sum(c[1] for c in reference[:23])]
    config = {"configurable": {"thread_id": "process"}}
    with sqlite3.connect(sqlite_path, check_same_thread=False) as conn:
        harness = Harness(SqliteSaver(conn))
        assert per_turn_calls(harness, range(23, 40), config) == reference[23:]
        state = harness.app.get_state(config).values
    assert fact_contents(state) == EXPECTED_FACTS
    assert summary_from_state(state).version == 18  # type: ignore[union-attr]


async def test_async_sqlite_forty_turns(sqlite_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(sqlite_path)) as saver:
        harness = Harness(saver)
        config = {"configurable": {"thread_id": "async-sqlite"}}
        await harness.arun(range(20), config)
    async with AsyncSqliteSaver.from_conn_string(str(sqlite_path)) as saver:
        resumed = Harness(saver)
        state = await resumed.arun(range(20, 40), config)
    check_model_inputs(harness.model_inputs + resumed.model_inputs)
    assert fact_contents(state) == EXPECTED_FACTS
    assert harness.summarizer.calls + resumed.summarizer.calls == 18
    assert harness.extractor.calls + resumed.extractor.calls == 39


def test_destructive_thread_on_sqlite_keeps_coverage(sqlite_path: Path) -> None:
    with sqlite3.connect(sqlite_path, check_same_thread=False) as conn:
        harness = Harness(SqliteSaver(conn), destructive=True)
        config = {"configurable": {"thread_id": "destructive"}}
        state = harness.run(range(30), config)
    summary = summary_from_state(state)
    assert summary is not None
    kept = {m.id for m in state["messages"]}
    assert kept.isdisjoint(summary.covered_ids)
    assert len(kept) + len(summary.covered_ids) == 1 + 2 * 30
    check_model_inputs(harness.model_inputs)


@pytest.mark.postgres
def test_forty_turns_on_postgres_with_restart(postgres_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    reference = reference_calls()
    config = {"configurable": {"thread_id": "postgres-40"}}
    with PostgresSaver.from_conn_string(postgres_url) as saver:
        saver.setup()
        first = Harness(saver)
        assert per_turn_calls(first, range(20), config) == reference[:20]
    with PostgresSaver.from_conn_string(postgres_url) as saver:
        second = Harness(saver)
        assert (second.summarizer.calls, second.extractor.calls) == (0, 0)
        assert per_turn_calls(second, range(20, 40), config) == reference[20:]
        state = second.app.get_state(config).values
    check_model_inputs(first.model_inputs + second.model_inputs)
    assert fact_contents(state) == EXPECTED_FACTS
    summary = summary_from_state(state)
    assert summary is not None and summary.version == 18
    assert isinstance(state["running_summary"], dict)


@pytest.mark.postgres
async def test_async_postgres_thread(postgres_url: str) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    config = {"configurable": {"thread_id": "postgres-async"}}
    async with AsyncPostgresSaver.from_conn_string(postgres_url) as saver:
        await saver.setup()
        harness = Harness(saver)
        state = await harness.arun(range(12), config)
    check_model_inputs(harness.model_inputs)
    summary = summary_from_state(state)
    assert summary is not None and summary.version == harness.summarizer.calls == 4
