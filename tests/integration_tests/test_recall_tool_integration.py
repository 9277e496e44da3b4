"""The recall tool end to end: the real ``ChatOpenAI`` over the loopback server, a LangGraph
graph with ``ToolNode`` and a SQLite checkpointer, and SQLite / PostgreSQL storage."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI

from langchain_histcompress import (
    CompressingChatMessageHistory,
    HistCompressState,
    HistoryRecall,
    RoundCompressionMiddleware,
    RoundCompressionNode,
    RoundCompressor,
)
from langchain_histcompress.storage import SQLHistoryStore
from tests.fakes import CountingSummarizer
from tests.openai_server import OpenAIServer, Reply

SECRET_TURN = "My passport number is X123-{who}."


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(server: OpenAIServer) -> None:
    server.reset()


def chat(server: OpenAIServer, lane: str) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini",
        base_url=server.url(lane),
        api_key="sk-test",
        http_async_client=httpx.AsyncClient(),
    )


def compressor(summarizer: Any) -> RoundCompressor:
    return RoundCompressor(
        summarizer,
        trigger=("rounds", 2),
        keep=("rounds", 1),
        token_counter="approximate",
        retry_backoff=0.0,
        timeout=5.0,
    )


QUESTIONS = [
    "Plan a trip to Lisbon in May.",
    "Book a hotel near the river.",
    "Find a fado bar for Friday.",
    "What about a day trip to Sintra?",
]


def recall_call(query: str) -> Reply:
    return Reply(None, tool_calls=(("recall_history", {"query": query}),))


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


# --------------------------------------------------------------------------- create_agent


def test_create_agent_with_the_real_client_calls_recall_and_keeps_the_prefix(
    server: OpenAIServer,
) -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    middleware = RoundCompressionMiddleware(compressor(chat(server, "summarizer")), recall=True)
    agent = create_agent(
        chat(server, "agent"),
        tools=[],
        system_prompt="You are a travel agent.",
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    server.always(Reply("Sure."), lane="agent")
    for question in [SECRET_TURN.format(who="A"), *QUESTIONS]:
        agent.invoke({"messages": [HumanMessage(question)]}, config)
    assert server.count("summarizer") >= 1
    server.always(None, lane="agent")
    server.script(recall_call("passport number"), Reply("It is X123-A."), lane="agent")
    state = agent.invoke({"messages": [HumanMessage("What was my passport number?")]}, config)

    asked, answered = [r.body for r in server.requests if r.lane == "agent"][-2:]
    assert [t["function"]["name"] for t in asked["tools"]] == ["recall_history"]
    summary = next(m for m in asked["messages"] if "conversation_summary" in str(m["content"]))
    assert middleware.recall is not None and middleware.recall.hint() in str(summary["content"])
    # the request with the result extends the request that called the tool
    assert answered["messages"][: len(asked["messages"])] == asked["messages"]
    assert answered["messages"][-1]["role"] == "tool"
    assert "My passport number is X123-A." in answered["messages"][-1]["content"]
    assert state["messages"][-1].content == "It is X123-A."
    recalled = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert recalled.artifact["message_ids"] and recalled.status == "success"


def test_a_bad_call_from_the_real_client_gets_an_error_and_the_agent_answers(
    server: OpenAIServer,
) -> None:
    from langchain.agents import create_agent

    agent = create_agent(
        chat(server, "agent"),
        middleware=[RoundCompressionMiddleware(compressor(CountingSummarizer()), recall=True)],
    )
    server.script(
        Reply(None, tool_calls=(("recall_history", {"query": "", "k": 100_000}),)),
        Reply("Sorry, I could not look that up."),
        lane="agent",
    )
    state = agent.invoke({"messages": [HumanMessage("What did I say last week?")]})
    error = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert error.status == "error" and "query must say what to look for" in str(error.content)
    assert state["messages"][-1].content == "Sorry, I could not look that up."
    answered = [r.body for r in server.requests if r.lane == "agent"][-1]
    assert "query must say what to look for" in tool_messages(answered)[-1]["content"]


# --------------------------------------------------------------------------- ToolNode graph


def test_tool_node_graph_with_a_sqlite_checkpointer(server: OpenAIServer, tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode

    recall = HistoryRecall()
    tool = recall.as_tool()
    model = chat(server, "agent").bind_tools([tool])
    compress = RoundCompressionNode(compressor(chat(server, "summarizer")))

    def answer(state: HistCompressState) -> dict[str, Any]:
        return {"messages": [model.invoke(recall.add_hint(compress.model_input(state)))]}

    def route(state: HistCompressState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(HistCompressState)
    graph.add_node("compress", compress)
    graph.add_node("model", answer)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "compress")
    graph.add_edge("compress", "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "compress")

    connection = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    try:
        app = graph.compile(checkpointer=SqliteSaver(connection))
        threads = {"alice": "X123-ALICE", "bob": "X123-BOB"}
        server.always(Reply("Sure."), lane="agent")
        for who in threads:
            config = {"configurable": {"thread_id": who}}
            app.invoke({"messages": [SystemMessage("You are a travel agent.", id="sys")]}, config)
            for question in [f"My passport number is {threads[who]}.", *QUESTIONS]:
                app.invoke({"messages": [HumanMessage(question)]}, config)
        server.always(None, lane="agent")
        for who, secret in threads.items():
            server.script(recall_call("passport number"), Reply("Found it."), lane="agent")
            config = {"configurable": {"thread_id": who}}
            state = app.invoke({"messages": [HumanMessage("My passport number?")]}, config)
            result = next(m for m in reversed(state["messages"]) if isinstance(m, ToolMessage))
            other = next(s for w, s in threads.items() if w != who)
            assert secret in str(result.content) and other not in str(result.content)
            # the checkpoint keeps the real ids of what was recalled
            stored = app.get_state(config).values["messages"]
            ids = {str(m.id) for m in stored}
            assert set(result.artifact["message_ids"]) <= ids
    finally:
        connection.close()


# --------------------------------------------------------------------------- storage


def fill(store: SQLHistoryStore, session: str, secret: str) -> None:
    history = CompressingChatMessageHistory(
        session, connection=store, compressor=compressor(CountingSummarizer())
    )
    history.add_messages([SystemMessage("You are a travel agent.")])
    for question in [f"My passport number is {secret}.", *QUESTIONS]:
        history.add_messages([HumanMessage(question), AIMessage("Noted.")])
    assert history.summary is not None and len(history.messages) < len(history.full_messages)


def check_store_tool(store: SQLHistoryStore, server: OpenAIServer) -> None:
    """Two sessions whose names share a prefix; the agent (real client) recalls only its own."""
    from langchain.agents import create_agent

    fill(store, "acme", "X123-ACME")
    fill(store, "acme-corp", "X123-CORP")
    tool = HistoryRecall().store_tool(store, session_key="thread_id")
    agent = create_agent(chat(server, "agent"), tools=[tool])
    for session, mine, theirs in (("acme", "ACME", "CORP"), ("acme-corp", "CORP", "ACME")):
        server.script(recall_call("passport number"), Reply("Found it."), lane="agent")
        state = agent.invoke(
            {"messages": [HumanMessage("My passport number?")]},
            {"configurable": {"thread_id": session}},
        )
        result = next(m for m in state["messages"] if isinstance(m, ToolMessage))
        assert f"X123-{mine}" in str(result.content) and theirs not in str(result.content)
        body = [r.body for r in server.requests if r.lane == "agent"][-1]
        assert f"X123-{mine}" in tool_messages(body)[-1]["content"]
    # a session that does not exist: an error tool message, and the agent answers
    server.script(recall_call("passport number"), Reply("No record."), lane="agent")
    state = agent.invoke(
        {"messages": [HumanMessage("My passport number?")]},
        {"configurable": {"thread_id": "acme%"}},
    )
    error = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert error.status == "error" and "unknown conversation" in str(error.content)
    assert state["messages"][-1].content == "No record."


def test_sqlite_storage(server: OpenAIServer, tmp_path: Path) -> None:
    store = SQLHistoryStore(str(tmp_path / "chat.sqlite"))
    try:
        check_store_tool(store, server)
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_storage(server: OpenAIServer, postgres_url: str) -> None:
    store = SQLHistoryStore(postgres_url)
    try:
        check_store_tool(store, server)
    finally:
        store.close()


@pytest.mark.postgres
async def test_postgres_storage_async(postgres_url: str) -> None:
    store = SQLHistoryStore(postgres_url)
    session = f"s-{uuid.uuid4().hex[:8]}"
    try:
        fill(store, session, "X123-ASYNC")
        tool = HistoryRecall().store_tool(store)
        call = {
            "name": "recall_history",
            "args": {"query": "passport"},
            "id": "c1",
            "type": "tool_call",
        }
        result = await tool.ainvoke(call, {"configurable": {"session_id": session}})
        assert "X123-ASYNC" in str(result.content)
        assert json.dumps(result.artifact)  # plain JSON: any checkpointer stores it
    finally:
        await store.aclose()
