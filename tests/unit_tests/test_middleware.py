"""RoundCompressionMiddleware inside ``langchain.agents.create_agent``."""

from __future__ import annotations

import logging
import random
import re
import uuid
import warnings
from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.managed import RemainingSteps
from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import ConfigurationError, SummarizationError
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.faces.middleware import (
    RoundCompressionMiddleware,
    RoundCompressionState,
)
from langchain_histcompress.faces.nodes import RoundCompressionNode, summary_from_state
from tests.fakes import CountingSummarizer, ScriptedChatModel, model_request, through_middleware
from tests.unit_tests.test_nodes import make_compressor

SYSTEM_PROMPT = "You are a careful agent."
_PLAN = re.compile(r"plan=([0-9,]*)")


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"result for {query}"


class ToolScriptModel(ScriptedChatModel):
    """Agent model fake: the latest user message says ``plan=2,1`` (two parallel calls, then
    one call, then a final answer). Progress is tracked per user message id, so the script
    does not depend on which older steps the view still shows."""

    progress: dict[str, int] = Field(default_factory=dict)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolScriptModel:  # type: ignore[override]
        return self

    def respond(self, prompt: list[BaseMessage]) -> AIMessage:
        human = next(m for m in reversed(prompt) if isinstance(m, HumanMessage))
        found = _PLAN.search(str(human.content))
        plan = [int(x) for x in found.group(1).split(",") if x] if found else []
        step = self.progress.get(str(human.id), 0)
        self.progress[str(human.id)] = step + 1
        if step >= len(plan):
            return AIMessage(f"done after {step} steps")
        calls = [
            {
                "name": "lookup",
                "args": {"query": f"step {step} call {j}"},
                "id": f"call_{uuid.uuid4().hex[:16]}",
                "type": "tool_call",
            }
            for j in range(plan[step])
        ]
        return AIMessage("", tool_calls=calls)


def make_agent(
    middleware: RoundCompressionMiddleware, model: ToolScriptModel | None = None
) -> tuple[Any, ToolScriptModel]:
    model = model or ToolScriptModel()
    agent = create_agent(
        model,
        [lookup],
        system_prompt=SYSTEM_PROMPT,
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    return agent, model


def turn_text(turn: int, plan: Sequence[int] = ()) -> str:
    return f"turn {turn} please help plan={','.join(map(str, plan))}"


def check_request(request: Sequence[BaseMessage], text: str) -> None:
    assert validate_history(request, allow_in_flight=False) == []
    assert isinstance(request[0], SystemMessage)
    assert str(request[0].content).startswith(SYSTEM_PROMPT)
    humans = [m for m in request if isinstance(m, HumanMessage)]
    assert humans and humans[-1].content == text


# --------------------------------------------------------------------------- basics


def test_state_keeps_everything_and_model_sees_the_view() -> None:
    summarizer = CountingSummarizer()
    agent, model = make_agent(RoundCompressionMiddleware(make_compressor(summarizer)))
    config = {"configurable": {"thread_id": "basic"}}
    for turn in range(8):
        state = agent.invoke({"messages": [HumanMessage(turn_text(turn))]}, config)
        check_request(model.prompts[-1], turn_text(turn))
    assert len(state["messages"]) == 16  # non-destructive: every message kept
    summary = summary_from_state(state)
    assert summary is not None and summary.version == summarizer.calls == 2
    last = model.prompts[-1]
    assert last[0].content == SYSTEM_PROMPT and is_summary_message(last[1])
    assert [m.content for m in last if isinstance(m, HumanMessage)] == [
        turn_text(t) for t in (4, 5, 6, 7)
    ]


async def test_async_agent_uses_async_hooks() -> None:
    summarizer = CountingSummarizer()
    agent, model = make_agent(RoundCompressionMiddleware(make_compressor(summarizer)))
    config = {"configurable": {"thread_id": "async"}}
    for turn in range(7):
        text = turn_text(turn, [2])
        state = await agent.ainvoke({"messages": [HumanMessage(text)]}, config)
        check_request(model.prompts[-1], text)
    assert len(state["messages"]) == 7 * 5
    assert summary_from_state(state).version == summarizer.calls == 2  # type: ignore[union-attr]


def test_destructive_mode_removes_covered_ids_only() -> None:
    summarizer = CountingSummarizer()
    middleware = RoundCompressionMiddleware(
        make_compressor(summarizer, trigger=("rounds", 2), keep=("rounds", 1)), destructive=True
    )
    messages: list[BaseMessage] = [
        HumanMessage("a", id="h0"),
        AIMessage("b", id="a0"),
        HumanMessage("c", id="h1"),
        AIMessage("d", id="a1"),
        HumanMessage("e", id="h2"),
    ]
    state = {"messages": messages}
    sent, update = through_middleware(middleware, model_request(summarizer, messages, state))
    assert [m.id for m in sent.messages if not is_summary_message(m)] == ["h2"]
    removals = update["messages"]
    assert all(isinstance(r, RemoveMessage) for r in removals)
    assert sorted(r.id for r in removals) == ["a0", "a1", "h0", "h1"]
    assert REMOVE_ALL_MESSAGES not in {r.id for r in removals}


def test_destructive_agent_never_loses_a_message() -> None:
    summarizer = CountingSummarizer()
    agent, model = make_agent(
        RoundCompressionMiddleware(
            make_compressor(summarizer, trigger=("rounds", 2), keep=("rounds", 1)),
            destructive=True,
        )
    )
    config = {"configurable": {"thread_id": "destructive"}}
    seen: set[str] = set()
    for turn in range(6):
        text = turn_text(turn, [1, 2])
        state = agent.invoke({"messages": [HumanMessage(text)]}, config)
        check_request(model.prompts[-1], text)
        seen |= {str(m.id) for m in state["messages"]}
        summary = summary_from_state(state)
        covered = summary.covered_ids if summary else frozenset()
        kept = {str(m.id) for m in state["messages"]}
        assert seen <= kept | covered and kept.isdisjoint(covered)
    assert len(state["messages"]) < 6 * 6


def test_summarizer_failure_raises_and_changes_nothing() -> None:
    summarizer = CountingSummarizer()
    agent, model = make_agent(
        RoundCompressionMiddleware(
            make_compressor(summarizer, trigger=("rounds", 2), keep=("rounds", 1)),
            on_error="raise",
        )
    )
    config = {"configurable": {"thread_id": "fail"}}
    for turn in range(5):
        agent.invoke({"messages": [HumanMessage(turn_text(turn))]}, config)
    before = agent.get_state(config).values
    requests = len(model.prompts)
    summarizer.fail_with = ValueError("boom")
    for turn in (5, 6):
        calls = summarizer.calls
        with pytest.raises(SummarizationError):
            agent.invoke({"messages": [HumanMessage(turn_text(turn))]}, config)
        assert summarizer.calls == calls + 1
        after = agent.get_state(config).values
        assert after["running_summary"] == before["running_summary"]
    assert len(model.prompts) == requests  # the model was never called with a bad view


@pytest.mark.parametrize("options", [{"on_error": "skip"}, {}], ids=["skip", "default"])
def test_summarizer_failure_skip_answers_with_stored_summary(
    caplog: pytest.LogCaptureFixture, options: dict[str, Any]
) -> None:
    summarizer = CountingSummarizer()
    agent, model = make_agent(
        RoundCompressionMiddleware(
            make_compressor(summarizer, trigger=("rounds", 2), keep=("rounds", 1)), **options
        )
    )
    config = {"configurable": {"thread_id": "skip"}}
    for turn in range(5):
        agent.invoke({"messages": [HumanMessage(turn_text(turn))]}, config)
    before = agent.get_state(config).values["running_summary"]
    calls = summarizer.calls
    summarizer.fail_with = ValueError("private words")
    with caplog.at_level(logging.WARNING, logger="langchain_histcompress.faces.middleware"):
        state = agent.invoke({"messages": [HumanMessage(turn_text(6))]}, config)
    assert summarizer.calls == calls + 1  # it was due, and it failed
    assert state["running_summary"] == before
    assert state["messages"][-1].content == "done after 0 steps"
    check_request(model.prompts[-1], turn_text(6))
    assert "round compression failed" in caplog.text and "private words" not in caplog.text


def test_summary_tokens_are_not_streamed() -> None:
    summarizer = CountingSummarizer()
    answer = GenericFakeChatModel(messages=iter([AIMessage("streamed answer")] * 6))
    agent = create_agent(
        answer,
        middleware=[RoundCompressionMiddleware(make_compressor(summarizer))],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "stream"}}
    history: list[BaseMessage] = []
    for turn in range(5):
        history += [HumanMessage(f"q{turn}"), AIMessage(f"a{turn}")]
    chunks = list(
        agent.stream(
            {"messages": [*history, HumanMessage("latest")]}, config, stream_mode="messages"
        )
    )
    assert summarizer.calls == 1
    streamed = "".join(str(chunk.content) for chunk, _ in chunks)
    assert "streamed answer" in streamed
    assert "ConversationSummary" not in streamed and "summary of" not in streamed


def test_append_to_system_placement_copies_the_system_prompt() -> None:
    summarizer = CountingSummarizer()
    agent, model = make_agent(
        RoundCompressionMiddleware(make_compressor(summarizer, placement="append_to_system"))
    )
    config = {"configurable": {"thread_id": "append"}}
    for turn in range(5):
        agent.invoke({"messages": [HumanMessage(turn_text(turn))]}, config)
    last = model.prompts[-1]
    assert str(last[0].content).startswith(SYSTEM_PROMPT + "\n\n")
    assert "conversation_summary" in str(last[0].content)
    assert isinstance(last[1], HumanMessage)
    check_request(last, turn_text(4))


def test_context_builder_keeps_requests_under_budget() -> None:
    budget = 160
    builder = ContextBuilder(max_context_tokens=budget, token_counter=count_tokens_approximately)
    agent, model = make_agent(
        RoundCompressionMiddleware(make_compressor(CountingSummarizer()), context_builder=builder)
    )
    config = {"configurable": {"thread_id": "budget"}}
    for turn in range(10):
        text = turn_text(turn, [1])
        agent.invoke({"messages": [HumanMessage(text)]}, config)
        check_request(model.prompts[-1], text)
    assert all(count_tokens_approximately(r) <= budget for r in model.prompts)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"destructive": 1}, "destructive"),
        ({"on_error": "ignore"}, "on_error"),
        ({"context_builder": object()}, "ContextBuilder"),
    ],
)
def test_middleware_config_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RoundCompressionMiddleware(make_compressor(CountingSummarizer()), **kwargs)
    with pytest.raises(ConfigurationError, match="RoundCompressor"):
        RoundCompressionMiddleware(object())  # type: ignore[arg-type]


def test_state_schema_declares_the_summary_key() -> None:
    middleware = RoundCompressionMiddleware(make_compressor(CountingSummarizer()))
    assert middleware.state_schema is RoundCompressionState
    assert "running_summary" in RoundCompressionState.__annotations__
    assert repr(middleware).startswith("RoundCompressionMiddleware(RoundCompressor(")


EXPECTED_AGENT_MERMAID = """---
config:
  flowchart:
    curve: linear
---
graph TD;
\t__start__([<p>__start__</p>]):::first
\tmodel(model)
\ttools(tools<hr/><small><em>__tools = lookup</em></small>)
\t__end__([<p>__end__</p>]):::last
\t__start__ --> model;
\tmodel -.-> __end__;
\tmodel -.-> tools;
\ttools -.-> model;
\tmodel -.-> model;
\tclassDef default fill:#f2f0ff,line-height:1.2
\tclassDef first fill-opacity:0
\tclassDef last fill:#bfb6fc
"""


def test_agent_topology_snapshot() -> None:
    """The middleware adds no node: it works around the model call."""
    agent, _ = make_agent(RoundCompressionMiddleware(make_compressor(CountingSummarizer())))
    assert agent.get_graph().draw_mermaid() == EXPECTED_AGENT_MERMAID


# --------------------------------------------------------------------------- generated conversations

CONFIGS: list[dict[str, Any]] = [
    {"compressor": {}, "destructive": False},
    {"compressor": {"trigger": ("rounds", 2), "keep": ("rounds", 1)}, "destructive": True},
    {  # a small window (the agent model's): rounds and older tool steps fold for the budget
        "compressor": {"trigger": ("rounds", 1), "keep": ("rounds", 0)},
        "window": 400,
        "destructive": False,
    },
    {
        "compressor": {"trigger": ("rounds", 3), "keep": ("rounds", 1)},
        "window": 600,
        "destructive": True,
    },
]


def random_plan(rng: random.Random) -> list[int]:
    steps = rng.choice([0, 0, 1, 1, 2, 3, 5])
    return [rng.choice([1, 1, 2, 3, 4]) for _ in range(steps)]


async def test_generated_conversations_never_send_an_orphan() -> None:
    rng = random.Random(20240517)
    agents = []
    for options in CONFIGS:
        summarizer = CountingSummarizer()
        middleware = RoundCompressionMiddleware(
            make_compressor(summarizer, **options["compressor"]),
            destructive=options["destructive"],
        )
        window = options.get("window")
        profile = {"max_input_tokens": window} if window else None
        agent, model = make_agent(middleware, ToolScriptModel(profile=profile))
        agents.append((agent, model, summarizer, options["destructive"], window))
    checked = 0
    # 60 conversations (15 per configuration, 1-7 turns, 0-5 tool steps each, sync and async)
    # reach every configuration's summarizer many times; more only repeat the same paths.
    for conversation in range(60):
        agent, model, summarizer, destructive, window = agents[conversation % len(agents)]
        config = {"configurable": {"thread_id": f"conv-{conversation}"}}
        seen: set[str] = set()
        for turn in range(rng.randint(1, 7)):
            plan = random_plan(rng)
            text = turn_text(turn, plan)
            start = len(model.prompts)
            payload = {"messages": [HumanMessage(text)]}
            if rng.random() < 0.3:
                state = await agent.ainvoke(payload, config)
            else:
                state = agent.invoke(payload, config)
            requests = model.prompts[start:]
            assert len(requests) == len(plan) + 1
            for request in requests:
                check_request(request, text)
                if window is not None:  # the view within the budget (tool schemas aside)
                    assert count_tokens_approximately(request) <= int(0.85 * window)
                checked += 1
            assert state["messages"][-1].content == f"done after {len(plan)} steps"
            summary = summary_from_state(state)
            covered = summary.covered_ids if summary else frozenset()
            kept = {str(m.id) for m in state["messages"]}
            seen |= kept
            assert seen <= kept | covered  # nothing lost
            if destructive:
                assert kept.isdisjoint(covered)
            assert validate_history(state["messages"], allow_in_flight=False) == []
    assert checked > 500
    assert all(s.calls >= 5 for _, _, s, _, _ in agents)  # every configuration compressed
    # summarizer prompts never contain a summary rendered as a conversation message
    for _, _, summarizer, _, _ in agents:
        for prompt in summarizer.prompts:
            assert "histcompress-summary" not in str(prompt[-1].content)


# --------------------------------------------------------------------------- prebuilt pre_model_hook


class ReactState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    remaining_steps: NotRequired[RemainingSteps]
    running_summary: NotRequired[dict[str, Any] | None]


def test_create_react_agent_pre_model_hook() -> None:
    from langgraph.prebuilt import create_react_agent

    summarizer = CountingSummarizer()
    hook = RoundCompressionNode(make_compressor(summarizer)).as_pre_model_hook()
    model = ToolScriptModel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(
            model,
            [lookup],
            prompt=SYSTEM_PROMPT,
            pre_model_hook=hook,
            state_schema=ReactState,
            checkpointer=InMemorySaver(),
        )
    config = {"configurable": {"thread_id": "react"}}
    for turn in range(8):
        text = turn_text(turn, [2] if turn % 2 else [])
        start = len(model.prompts)
        state = agent.invoke({"messages": [HumanMessage(text)]}, config)
        for request in model.prompts[start:]:
            check_request(request, text)
    assert len(state["messages"]) == 8 * 2 + 4 * 3  # nothing removed from state
    summary = summary_from_state(state)
    assert summary is not None and summary.version == summarizer.calls == 2
    last = model.prompts[-1]
    assert is_summary_message(last[1])
    assert "pre_model_hook" in agent.get_graph().nodes
