"""Every face with its defaults: agent runs with huge tool results stay inside the window.

The middleware in ``create_agent`` reads the window from the request model's profile; the
node in a graph with a checkpointer reads it from the compressor's ``context_window``. A
summarizer that fails on every call never fails an answer whose view fits, and the default
node stores no second copy of the conversation in its checkpoints.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import Field

from langchain_histcompress import (
    HistCompressState,
    RoundCompressionMiddleware,
    RoundCompressionNode,
    RoundCompressor,
)
from langchain_histcompress.core.errors import BudgetError
from tests.fakes import CountingSummarizer, ScriptedChatModel

TOKENS = count_tokens_approximately
REPORT_TOKENS = 22_000


@tool
def fetch(n: int) -> str:
    """Fetch report ``n``."""
    return f"report {n} line " * (REPORT_TOKENS * 4 // 16)


class AgentModel(ScriptedChatModel):
    """Calls ``fetch`` once per user question, then answers; records every request's size."""

    sizes: list[int] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> AgentModel:  # type: ignore[override]
        return self

    def respond(self, prompt: list[BaseMessage]) -> AIMessage:
        self.sizes.append(TOKENS(prompt))
        last = prompt[-1]
        if isinstance(last, HumanMessage):
            n = int(str(last.content).rsplit(" ", 1)[-1])
            return AIMessage("", tool_calls=[{"name": "fetch", "args": {"n": n}, "id": f"c{n}"}])
        return AIMessage("read it")


@pytest.mark.parametrize("window", [128_000, 32_000])
def test_create_agent_with_a_profile_keeps_every_request_in_the_window(window: int) -> None:
    model = AgentModel(profile={"max_input_tokens": window})
    middleware = RoundCompressionMiddleware(
        RoundCompressor(CountingSummarizer(), token_counter=TOKENS)
    )
    agent = create_agent(model, tools=[fetch], middleware=[middleware])
    state: dict[str, Any] = {"messages": []}
    for n in range(14):
        state = agent.invoke({"messages": [*state["messages"], HumanMessage(f"fetch report {n}")]})
    assert model.sizes and max(model.sizes) <= int(window * 0.85)
    assert len(state["messages"]) == 14 * 4  # state keeps every message
    assert state["running_summary"] is not None


def _graph(node: RoundCompressionNode, model: AgentModel, saver: Any) -> Any:
    def call_model(state: HistCompressState) -> dict[str, Any]:
        return {"messages": [model.invoke(node.model_input(state))]}

    graph = StateGraph(HistCompressState)
    graph.add_node("compress", node)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([fetch]))
    graph.add_edge(START, "compress")
    graph.add_edge("compress", "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "compress")
    return graph.compile(checkpointer=saver)


@pytest.mark.parametrize("window", [128_000, 32_000])
def test_the_node_in_a_graph_keeps_every_request_in_the_window(window: int) -> None:
    model = AgentModel()
    node = RoundCompressionNode(
        RoundCompressor(CountingSummarizer(), context_window=window, token_counter=TOKENS)
    )
    app = _graph(node, model, InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    state: dict[str, Any] = {}
    for n in range(14):
        new = [HumanMessage(f"fetch report {n}")]
        if n == 0:
            new.insert(0, SystemMessage("You are an analyst."))
        state = app.invoke({"messages": new}, config)
    assert max(model.sizes) <= int(window * 0.85)
    assert len(state["messages"]) == 1 + 14 * 4


def test_a_summarizer_that_always_fails_never_fails_an_answer_that_fits() -> None:
    summarizer = CountingSummarizer(fail_with=RuntimeError("summarizer down"))
    model = AgentModel(profile={"max_input_tokens": 128_000})
    middleware = RoundCompressionMiddleware(
        RoundCompressor(
            summarizer,
            trigger=("rounds", 2),
            keep=("rounds", 1),
            token_counter=TOKENS,
            max_retries=0,
        )
    )
    agent = create_agent(model, tools=[fetch], middleware=[middleware])
    state: dict[str, Any] = {"messages": []}
    for n in range(3):  # 3 x 22k tokens fit in 108,800
        state = agent.invoke({"messages": [*state["messages"], HumanMessage(f"fetch report {n}")]})
    assert summarizer.calls > 0 and state["messages"][-1].content == "read it"
    assert state.get("running_summary") is None


def test_a_failing_summarizer_raises_only_when_the_view_cannot_fit() -> None:
    summarizer = CountingSummarizer(fail_with=RuntimeError("summarizer down"))
    model = AgentModel(profile={"max_input_tokens": 60_000})
    middleware = RoundCompressionMiddleware(
        RoundCompressor(summarizer, token_counter=TOKENS, max_retries=0)
    )
    agent = create_agent(model, tools=[fetch], middleware=[middleware])
    state: dict[str, Any] = {"messages": []}
    with pytest.raises(BudgetError, match="folding failed"):
        for n in range(6):
            state = agent.invoke(
                {"messages": [*state["messages"], HumanMessage(f"fetch report {n}")]}
            )
    assert model.sizes and max(model.sizes) <= int(60_000 * 0.85)


def _checkpoint_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT checkpoint, metadata FROM checkpoints").fetchall()
        writes = conn.execute("SELECT value FROM writes").fetchall()
    return sum(len(c or b"") + len(m or b"") for c, m in rows) + sum(
        len(v or b"") for (v,) in writes
    )


def _chat_app(tmp_path: Path, name: str, **node_options: Any) -> int:
    model = ScriptedChatModel(default=lambda prompt: AIMessage("sure, " + "detail " * 60))
    node = RoundCompressionNode(
        RoundCompressor(CountingSummarizer(), token_counter=TOKENS), **node_options
    )

    def call_model(state: HistCompressState) -> dict[str, Any]:
        return {"messages": [model.invoke(node.model_input(state))]}

    graph = StateGraph(HistCompressState)
    graph.add_node("compress", node)
    graph.add_node("model", call_model)
    graph.add_edge(START, "compress")
    graph.add_edge("compress", "model")
    graph.add_edge("model", END)
    path = tmp_path / f"{name}.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        app = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        for n in range(45):
            app.invoke({"messages": [HumanMessage(f"question {n}: " + "words " * 40)]}, config)
    return _checkpoint_bytes(path)


def test_default_node_checkpoints_hold_no_second_copy_of_the_view(tmp_path: Path) -> None:
    default = _chat_app(tmp_path, "default")
    with_view = _chat_app(tmp_path, "view", output_key="model_input")
    assert default < 0.75 * with_view


def test_the_chat_history_folds_a_huge_old_message_and_keeps_it_whole_in_sqlite(
    tmp_path: Path,
) -> None:
    from langchain_histcompress import CompressingChatMessageHistory

    summarizer = CountingSummarizer(profile={"max_input_tokens": 200_000})
    compressor = RoundCompressor(summarizer, token_counter=TOKENS)
    history = CompressingChatMessageHistory(
        "s", connection=str(tmp_path / "h.sqlite"), compressor=compressor
    )
    dump = "dump line " * 400_000  # about a million approximate tokens
    history.add_messages([HumanMessage("here is the dump", id="h0"), AIMessage(dump, id="a0")])
    for n in range(1, 4):
        history.add_messages([HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")])
    history.add_messages([HumanMessage("and now?", id="h9")])
    view = history.messages
    assert TOKENS(view) <= int(128_000 * 0.85)
    assert summarizer.prompts
    assert all(TOKENS(p) <= compressor.summarizer.max_input_tokens for p in summarizer.prompts)
    stored = {m.id: m for m in history.full_messages}
    assert stored["a0"].content == dump
    summary = history.summary
    assert summary is not None and "a0" in summary.covered_ids
