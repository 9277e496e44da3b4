"""The recall tool: folded messages read back verbatim, in a graph, an agent and over storage."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import Field

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.aliases import stable_ref
from langchain_histcompress.core.errors import ConfigurationError, RecallError
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.compressor import view
from langchain_histcompress.faces.middleware import RoundCompressionMiddleware
from langchain_histcompress.faces.nodes import (
    HistCompressState,
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
)
from langchain_histcompress.faces.recall_tool import RECALL_HINT_KEY, HistoryRecall
from langchain_histcompress.recall.turn_retriever import BM25TurnRetriever
from langchain_histcompress.storage import InMemoryHistoryStore
from tests.fakes import CountingSummarizer, ScriptedChatModel
from tests.histories import history
from tests.unit_tests.test_nodes import make_compressor

COUNTER = TiktokenCounter()
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def _at(hours: float) -> dict[str, str]:
    return {"timestamp": (T0 + timedelta(hours=hours)).isoformat()}


def trip(prefix: str = "", *, secret: str = "X123") -> list[BaseMessage]:
    """Eight rounds of a trip chat, two days apart from round 4 on; round 1 holds a secret."""
    texts = [
        (f"My passport number is {secret}.", "Noted, I will keep it for the booking."),
        ("I want to visit Lisbon in May.", "Lisbon in May is lovely."),
        ("Book a hotel near the river.", "Booked the Riverside Hotel."),
        ("My sister Ana is vegetarian.", "I will pick vegetarian places."),
        ("Find a fado bar for Friday.", "Clube de Fado, 21:00, two seats."),
        ("What about a day trip?", "Sintra is 40 minutes by train."),
        ("Book the Sintra train.", "Booked the 9:10 train."),
        ("Thanks!", "Enjoy the trip."),
    ]
    out: list[BaseMessage] = [SystemMessage("You are a travel agent.", id="sys")]
    for n, (question, answer) in enumerate(texts):
        hours = n if n < 4 else 48 + n
        out.append(HumanMessage(question, id=f"{prefix}h{n}", additional_kwargs=_at(hours)))
        out.append(AIMessage(answer, id=f"{prefix}a{n}", additional_kwargs=_at(hours + 0.01)))
    return out


def covering(messages: list[BaseMessage], count: int) -> RunningSummary:
    """A summary covering the first ``count`` non-system messages."""
    ids = [str(m.id) for m in messages if not isinstance(m, SystemMessage)][:count]
    return RunningSummary(content="A trip.", text="A trip is planned.", covered_ids=frozenset(ids))


# --------------------------------------------------------------------------- the core


def test_only_folded_messages_come_back_verbatim_in_order_with_dates() -> None:
    messages = trip()
    summary = covering(messages, 12)  # rounds 0-5 folded, 6-7 in view
    found = HistoryRecall(token_counter=COUNTER).recall("passport number", messages, summary)
    assert found.message_ids[0] == "h0"
    assert "\n[user] My passport number is X123.\n" in found.content  # no id: none is needed
    assert set(found.message_ids) <= summary.covered_ids  # never what the view shows
    order = [m.id for m in messages]
    assert list(found.message_ids) == sorted(found.message_ids, key=order.index)
    assert "-- 1 May 2024, 09:00 --" in found.content
    assert found.tokens == COUNTER.count_text(found.content) <= 1500
    assert found.artifact()["message_ids"] == list(found.message_ids)


def test_plain_lines_spend_no_tokens_on_ids() -> None:
    messages = trip()
    long_ids = [m.model_copy(update={"id": str(uuid.uuid4())}) for m in messages]
    summary = covering(long_ids, 12)
    found = HistoryRecall(token_counter=COUNTER).recall("passport number", long_ids, summary)
    assert found.message_ids[0] == long_ids[1].id  # the real ids stay in the artifact
    assert "[user] My passport number is X123." in found.content
    assert "#" not in found.content and not found.short_refs  # no reference is shown


def test_a_small_budget_keeps_the_best_match() -> None:
    messages = trip()
    summary = covering(messages, 12)
    found = HistoryRecall(token_counter=COUNTER, max_tokens=64).recall(
        "Which fado bar on Friday?", messages, summary
    )
    assert found.message_ids and found.message_ids[0] in {"h4", "a4"}
    assert found.tokens <= 64


def test_k_limits_the_matches() -> None:
    messages = trip()
    summary = covering(messages, 12)
    recall = HistoryRecall(token_counter=COUNTER)
    assert len(recall.recall("Lisbon hotel river fado", messages, summary, k=1).message_ids) == 1
    assert len(recall.recall("Lisbon hotel river fado", messages, summary).message_ids) > 3


def test_a_time_range_keeps_the_messages_sent_in_it() -> None:
    messages = trip()
    summary = covering(messages, 12)
    recall = HistoryRecall(token_counter=COUNTER)
    found = recall.recall("booked", messages, summary, since="2024-05-03")
    assert found.message_ids and all(i in {"h4", "a4", "h5", "a5"} for i in found.message_ids)
    found = recall.recall("booked", messages, summary, until="2024-05-01T23:00:00Z")
    assert found.message_ids and all(i[1] in "0123" for i in found.message_ids)
    empty = recall.recall("booked", messages, summary, since="2030-01-01")
    assert empty.message_ids == () and "in that time range" in empty.content


def test_nothing_folded_and_no_match_are_answers_not_errors() -> None:
    messages = trip()
    recall = HistoryRecall(token_counter=COUNTER)
    assert "Nothing has been folded" in recall.recall("passport", messages, None).content
    summary = covering(messages, 4)
    assert "No folded message" in recall.recall("zebra quantum", messages, summary).content


def test_a_match_in_a_tool_step_brings_the_call_and_every_result() -> None:
    call_ids = [f"call_{uuid.uuid4().hex}" for _ in range(2)]
    step = AIMessage(
        "",
        id=str(uuid.uuid4()),
        tool_calls=[
            {"name": "weather", "args": {"city": c}, "id": i, "type": "tool_call"}
            for c, i in zip(["Lisbon", "Porto"], call_ids, strict=True)
        ],
    )
    results = [
        ToolMessage("Lisbon: sunny, 24C", tool_call_id=call_ids[0], id=str(uuid.uuid4())),
        ToolMessage("Porto: drizzle, 17C", tool_call_id=call_ids[1], id=str(uuid.uuid4())),
    ]
    messages: list[BaseMessage] = [
        HumanMessage("Weather in both cities?", id=str(uuid.uuid4())),
        step,
        *results,
        AIMessage("Sunny and drizzle.", id=str(uuid.uuid4())),
        *trip()[1:],
    ]
    summary = RunningSummary(
        content="x", text="x", covered_ids=frozenset(str(m.id) for m in messages[:5])
    )
    found = HistoryRecall(token_counter=COUNTER).recall("Porto drizzle 17C", messages, summary, k=1)
    assert found.message_ids == tuple(str(m.id) for m in [step, *results])
    # long ids are shown as stable short references, mapped back in the artifact
    for real in [*found.message_ids, *call_ids]:
        assert real not in found.content and stable_ref(real) in found.content
        assert found.short_refs[stable_ref(real)] == real


@settings(max_examples=40, deadline=None)
@given(history(), st.integers(0, 40), st.integers(80, 600), st.sampled_from(["q", "tool", "x y"]))
def test_results_stay_within_budget_and_hold_only_whole_folded_units(
    messages: list[BaseMessage], folded: int, budget: int, query: str
) -> None:
    summary = RunningSummary(
        content="x",
        text="x",
        covered_ids=frozenset(str(m.id) for m in messages[:folded] if m.id),
    )
    found = HistoryRecall(token_counter=COUNTER, max_tokens=budget).recall(query, messages, summary)
    assert found.tokens == COUNTER.count_text(found.content)
    if found.message_ids:
        assert found.tokens <= budget or len(found.message_ids) <= 8  # one unit may not fit
    shown = set(found.message_ids)
    from langchain_histcompress.core.rounds import split_units

    for unit in split_units(messages):
        ids = {str(m.id) for m in unit}
        assert not (ids & shown) or ids <= shown  # a tool step comes whole or not at all


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"query": "   "}, "query must say what to look for"),
        ({"query": "x" * 5000}, "query is too long"),
        ({"query": "q", "k": 0}, "k must be an integer from 1 to 100"),
        ({"query": "q", "k": 10_000}, "k must be an integer from 1 to 100"),
        ({"query": "q", "k": True}, "k must be an integer"),
        ({"query": "q", "since": "last week"}, "since must be an ISO 8601 date"),
        ({"query": "q", "since": "2024-06-01", "until": "2024-05-01"}, "is after until"),
    ],
)
def test_bad_arguments_raise_a_recall_error_naming_the_problem(
    arguments: dict[str, Any], problem: str
) -> None:
    messages = trip()
    with pytest.raises(RecallError, match=problem):
        HistoryRecall().recall(arguments.pop("query"), messages, covering(messages, 8), **arguments)


def test_a_time_range_needs_timestamps() -> None:
    messages = [m.model_copy(update={"additional_kwargs": {}}) for m in trip()]
    with pytest.raises(RecallError, match="carry no timestamps"):
        HistoryRecall().recall("passport", messages, covering(messages, 8), since="2024-05-01")


def test_configuration_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="max_tokens"):
        HistoryRecall(max_tokens=10)
    with pytest.raises(ConfigurationError, match="retriever"):
        HistoryRecall(retriever="bm25")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="destructive"):
        RoundCompressionMiddleware(
            make_compressor(CountingSummarizer()), destructive=True, recall=True
        )


def test_any_turn_retriever_ranks() -> None:
    messages = trip()
    found = HistoryRecall(retriever=BM25TurnRetriever(), token_counter=COUNTER).recall(
        "passport", messages, covering(messages, 12), k=1
    )
    assert found.message_ids == ("h0",)


# --------------------------------------------------------------------------- the hint


def test_the_hint_is_one_stable_line_on_the_summary_carrier() -> None:
    messages = trip()
    summary = covering(messages, 12)
    recall = HistoryRecall()
    shown = recall.add_hint(view(messages, summary))
    carrier = shown[1]
    assert str(carrier.content).endswith("\n" + recall.hint())
    assert carrier.additional_kwargs[RECALL_HINT_KEY] is True
    assert recall.add_hint(shown) == shown  # once only
    assert recall.add_hint(view(messages, summary)) == shown  # the same text every turn
    appended = recall.add_hint(view(messages, summary, placement="append_to_system"))
    assert str(appended[0].content).endswith(recall.hint())
    assert recall.add_hint(messages) == messages  # no summary, no hint
    builder = ContextBuilder(max_context_tokens=120, token_counter=COUNTER)
    built = recall.add_hint(builder.build([*messages, HumanMessage("q", id="q")], summary=summary))
    assert any(recall.hint() in str(m.content) for m in built)


# --------------------------------------------------------------------------- tools in graphs


class RecallingModel(ScriptedChatModel):
    """Calls the recall tool for every new question, then answers with the tool's text."""

    queries: list[str] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecallingModel:  # type: ignore[override]
        return self

    def respond(self, prompt: list[BaseMessage]) -> AIMessage:
        last = prompt[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"recalled: {last.content}")
        query = str(last.content)
        self.queries.append(query)
        call = {
            "name": "recall_history",
            "args": {"query": query},
            "id": f"call_{uuid.uuid4().hex}",
        }
        return AIMessage("", tool_calls=[{**call, "type": "tool_call"}])


def recall_graph(model: RecallingModel, recall: HistoryRecall) -> Any:
    tool = recall.as_tool()
    bound = model.bind_tools([tool])
    compress = RoundCompressionNode(make_compressor(CountingSummarizer()))

    def answer(state: HistCompressState) -> dict[str, Any]:
        return {"messages": [bound.invoke(recall.add_hint(compress.model_input(state)))]}

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
    return graph.compile(checkpointer=InMemorySaver())


def _replay(app: Any, thread: str, messages: list[BaseMessage]) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    state: dict[str, Any] = {}
    for message in messages:
        if isinstance(message, HumanMessage):
            state = app.invoke({"messages": [message]}, config)
        elif isinstance(message, SystemMessage):
            app.update_state(config, {"messages": [message]})
    return state


def test_tool_node_with_a_checkpointer_reads_back_this_threads_folded_turns() -> None:
    model = RecallingModel()
    app = recall_graph(model, HistoryRecall(token_counter=COUNTER))
    questions = [m for m in trip() if not isinstance(m, AIMessage)]
    state = _replay(app, "t1", [*questions, HumanMessage("What is my passport number?", id="q")])
    assert summary_from_state(state) is not None
    tool_message = next(m for m in reversed(state["messages"]) if isinstance(m, ToolMessage))
    assert tool_message.status == "success"
    assert "My passport number is X123." in str(tool_message.content)
    assert tool_message.artifact["message_ids"][0] == "h0"
    # the request with the result extends the request that asked for it (cacheable prefix)
    asked, answered = model.prompts[-2], model.prompts[-1]
    assert answered[: len(asked)] == asked
    assert isinstance(answered[-1], ToolMessage) and isinstance(answered[-2], AIMessage)
    assert any(HistoryRecall().hint() in str(m.content) for m in asked)


def test_two_threads_of_one_shared_instance_never_see_each_other() -> None:
    """Both threads use the same message ids; each recalls only its own secret."""
    model = RecallingModel()
    app = recall_graph(model, HistoryRecall(token_counter=COUNTER))
    turns = {
        "alice": [m for m in trip(secret="ALICE-111") if not isinstance(m, AIMessage)],
        "bob": [m for m in trip(secret="BOB-222") if not isinstance(m, AIMessage)],
    }
    for index in range(len(turns["alice"])):  # the two users' turns interleaved
        for thread in random.Random(index).sample(["alice", "bob"], 2):
            _replay(app, thread, [turns[thread][index]])
    for thread, mine, theirs in (
        ("alice", "ALICE-111", "BOB-222"),
        ("bob", "BOB-222", "ALICE-111"),
    ):
        config = {"configurable": {"thread_id": thread}}
        state = app.invoke({"messages": [HumanMessage("passport number", id="q")]}, config)
        recalled = next(m for m in reversed(state["messages"]) if isinstance(m, ToolMessage))
        assert mine in str(recalled.content) and theirs not in str(recalled.content)


def test_bad_arguments_become_error_tool_messages_and_the_run_goes_on() -> None:
    messages = trip()
    state = {"messages": messages, "running_summary": None}
    from langchain_histcompress.faces.nodes import summary_to_state

    state["running_summary"] = summary_to_state(covering(messages, 12))
    tool = HistoryRecall().as_tool()
    graph = StateGraph(HistCompressState)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    cases = [
        ({"query": ""}, "query must say what to look for"),
        ({"query": "q", "k": 5000}, "k must be an integer from 1 to 100"),
        ({"query": "q", "k": "lots"}, "Invalid arguments for recall_history: k"),
        ({"k": 3}, "Invalid arguments for recall_history: query"),
        ({"query": "q", "since": "yesterday"}, "since must be an ISO 8601"),
    ]
    for arguments, problem in cases:
        call = AIMessage("", tool_calls=[{"name": "recall_history", "args": arguments, "id": "c1"}])
        out = app.invoke({**state, "messages": [*messages, call]})
        result = out["messages"][-1]
        assert isinstance(result, ToolMessage) and result.status == "error"
        assert problem in str(result.content)
        assert out["messages"][: len(messages)] == messages  # nothing else changed
    call = AIMessage(
        "", tool_calls=[{"name": "recall_history", "args": {"query": "q"}, "id": "c1"}]
    )
    fresh = app.invoke({"messages": [HumanMessage("hi", id="h"), call]})  # nothing folded yet
    assert fresh["messages"][-1].status == "success"
    assert "Nothing has been folded" in str(fresh["messages"][-1].content)


def test_create_agent_middleware_registers_the_tool_and_hints_the_summary() -> None:
    model = RecallingModel()
    middleware = RoundCompressionMiddleware(make_compressor(CountingSummarizer()), recall=True)
    agent = create_agent(model, tools=[], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "agent-1"}}
    for message in trip():
        if isinstance(message, HumanMessage):
            state = agent.invoke({"messages": [message]}, config)
    state = agent.invoke({"messages": [HumanMessage("my passport number?", id="q")]}, config)
    recalled = next(m for m in reversed(state["messages"]) if isinstance(m, ToolMessage))
    assert "X123" in str(recalled.content) and recalled.status == "success"
    assert state["messages"][-1].content.startswith("recalled:")
    asked = model.prompts[-2]
    assert any(middleware.recall.hint() in str(m.content) for m in asked)  # type: ignore[union-attr]
    assert [t.name for t in middleware.tools] == ["recall_history"]


async def test_async_agent_recalls_too() -> None:
    model = RecallingModel()
    middleware = RoundCompressionMiddleware(make_compressor(CountingSummarizer()), recall=True)
    agent = create_agent(model, tools=[], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "agent-2"}}
    for message in trip():
        if isinstance(message, HumanMessage):
            await agent.ainvoke({"messages": [message]}, config)
    state = await agent.ainvoke({"messages": [HumanMessage("passport?", id="q")]}, config)
    recalled = next(m for m in reversed(state["messages"]) if isinstance(m, ToolMessage))
    assert "X123" in str(recalled.content)


# --------------------------------------------------------------------------- storage


def stored(store: InMemoryHistoryStore, session: str, messages: list[BaseMessage]) -> None:
    store.append(session, messages)
    summary = covering(messages, 12)
    store.commit_compression(session, summary, previous=None)


def test_store_tool_reads_the_session_of_the_runs_configuration() -> None:
    store = InMemoryHistoryStore()
    stored(store, "acme", trip(secret="ACME-1"))
    stored(store, "acme-corp", trip(secret="CORP-2"))
    tool = HistoryRecall(token_counter=COUNTER).store_tool(store)
    call = {
        "name": "recall_history",
        "args": {"query": "passport"},
        "id": "c1",
        "type": "tool_call",
    }
    for session, mine, theirs in (("acme", "ACME-1", "CORP-2"), ("acme-corp", "CORP-2", "ACME-1")):
        result = tool.invoke(call, {"configurable": {"session_id": session}})
        assert mine in str(result.content) and theirs not in str(result.content)
    missing = tool.invoke(call, {"configurable": {}})
    assert missing.status == "error" and "no conversation is bound" in str(missing.content)
    unknown = tool.invoke(call, {"configurable": {"session_id": "acme%"}})
    assert unknown.status == "error" and "unknown conversation" in str(unknown.content)


async def test_store_tool_async() -> None:
    store = InMemoryHistoryStore()
    stored(store, "s1", trip())
    tool = HistoryRecall(token_counter=COUNTER).store_tool(store, session_key="thread_id")
    call = {
        "name": "recall_history",
        "args": {"query": "passport"},
        "id": "c1",
        "type": "tool_call",
    }
    result = await tool.ainvoke(call, {"configurable": {"thread_id": "s1"}})
    assert "X123" in str(result.content) and result.artifact["message_ids"][0] == "h0"


def test_build_model_input_view_carries_the_hint_through_add_hint() -> None:
    messages = trip()
    from langchain_histcompress.faces.nodes import summary_to_state

    state = {"messages": messages, "running_summary": summary_to_state(covering(messages, 12))}
    recall = HistoryRecall()
    shown = recall.add_hint(build_model_input(state))
    assert sum(recall.hint() in str(m.content) for m in shown) == 1
