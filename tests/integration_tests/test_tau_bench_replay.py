"""Real agent traffic through every face: the 100 tau-bench airline trajectories.

Every trajectory was accepted by the OpenAI API as sent (24 reuse a tool call id in a later
step). Each face replays each trajectory with a setting that folds as soon as three rounds
exist (two rounds folded per call, the latest kept), and every request the answering model would receive is held against the
chat-completions rules of `tests.provider_rules`. Message ids are UUIDs, as LangGraph assigns.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.rounds import split_rounds
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.faces.nodes import HistCompressState, RoundCompressionNode
from langchain_histcompress.faces.reducers import (
    MaxTokensReducer,
    SummarizationReducer,
    TruncationReducer,
)
from langchain_histcompress.storage import InMemoryHistoryStore
from tests.fakes import ScriptedChatModel, ScriptedSummarizer
from tests.provider_rules import request_violations

_FILE = "airline-gpt-4o-dev.json"


def _find_data() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    candidates = [
        os.environ.get("HISTCOMPRESS_TAU_BENCH", ""),
        root.parent / "shared" / "data" / "tau-bench",
        root.parent.parent / "shared" / "data" / "tau-bench",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / _FILE).is_file():
            return Path(candidate) / _FILE
    return None


DATA = _find_data()
pytestmark = pytest.mark.skipif(
    DATA is None,
    reason="tau-bench data not found (../shared/data/tau-bench/airline-gpt-4o-dev.json; "
    "or set HISTCOMPRESS_TAU_BENCH)",
)


@cache
def _raw() -> dict[str, Any]:
    assert DATA is not None
    loaded: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return loaded


@cache
def trajectories() -> list[list[BaseMessage]]:
    """Every trajectory as LangChain messages with UUID ids (fixed seed: same ids each run)."""
    rng = random.Random(10)
    out = []
    for entry in _raw()["trajectories"]:
        messages = convert_to_messages(entry["traj"])
        out.append(
            [
                m.model_copy(update={"id": str(uuid.UUID(int=rng.getrandbits(128), version=4))})
                for m in messages
            ]
        )
    return out


def call_points(history: Sequence[BaseMessage]) -> list[int]:
    """Where the model was called: before each assistant message."""
    return [k for k, m in enumerate(history) if isinstance(m, AIMessage)]


def rounds_of(history: Sequence[BaseMessage]) -> int:
    return len(split_rounds(history).rounds)


@dataclass
class Tally:
    """What one face did over the whole corpus."""

    handled: int = 0
    """Trajectories replayed without an exception and without a rule violation."""
    requests: int = 0
    """Requests checked."""
    violations: list[str] = field(default_factory=list)
    """Every rule broken, prefixed by the trajectory index."""
    errors: list[str] = field(default_factory=list)
    """Every exception, prefixed by the trajectory index."""
    folded: int = 0
    """Trajectories with 3+ rounds where the summarizer ran at least once."""
    eligible: int = 0
    """Trajectories with 3+ rounds."""
    summarizer_calls: int = 0
    """Summarizer calls over the corpus."""


def compressor(model: ScriptedSummarizer) -> RoundCompressor:
    return RoundCompressor(
        model,
        trigger=("rounds", 3),
        keep=("rounds", 1),
        token_counter=count_tokens_approximately,
        timeout=None,
    )


class Checker:
    """Collects the requests one trajectory sends and checks them."""

    def __init__(self, history: Sequence[BaseMessage]) -> None:
        self.history = history
        self.problems: list[str] = []
        self.requests = 0

    def check(self, request: Sequence[BaseMessage], upto: int) -> None:
        humans = [m for m in self.history[:upto] if isinstance(m, HumanMessage)]
        self.requests += 1
        self.problems += request_violations(
            request,
            system=[self.history[0]],
            latest_user=humans[-1] if humans else None,
        )


Face = Callable[[list[BaseMessage], Checker, ScriptedSummarizer], None]


def replay(face: Face) -> Tally:
    tally = Tally()
    for index, history in enumerate(trajectories()):
        summarizer = ScriptedSummarizer()
        checker = Checker(history)
        try:
            face(history, checker, summarizer)
        except Exception as exc:
            tally.errors.append(f"#{index}: {type(exc).__name__}: {exc}"[:300])
            continue
        tally.requests += checker.requests
        tally.violations += [f"#{index}: {p}" for p in checker.problems]
        tally.summarizer_calls += summarizer.calls
        if rounds_of(history) >= 3:
            tally.eligible += 1
            tally.folded += summarizer.calls > 0
        tally.handled += not checker.problems
    return tally


# --------------------------------------------------------------------------- faces


def via_compressor(history: list[BaseMessage], checker: Checker, model: ScriptedSummarizer) -> None:
    c = compressor(model)
    summary = None
    for k in call_points(history):
        result = c.compress(history[:k], summary)
        summary = result.summary
        checker.check(result.messages, k)


def via_context_builder(
    history: list[BaseMessage], checker: Checker, model: ScriptedSummarizer
) -> None:
    c = compressor(model)
    builder = ContextBuilder(max_context_tokens=3000, token_counter=count_tokens_approximately)
    summary = None
    for k in call_points(history):
        summary = c.compress(history[:k], summary).summary
        checker.check(builder.build(history[:k], summary=summary), k)


def via_history(history: list[BaseMessage], checker: Checker, model: ScriptedSummarizer) -> None:
    chat = CompressingChatMessageHistory(
        "t",
        connection=InMemoryHistoryStore(),
        compressor=compressor(model),
        raise_on_compression_error=True,
    )
    for k, message in enumerate(history):
        if isinstance(message, AIMessage):
            checker.check(chat.messages, k)
        chat.add_messages([message])


def _reducer_face(make: Callable[[ScriptedSummarizer], Any]) -> Face:
    def face(history: list[BaseMessage], checker: Checker, model: ScriptedSummarizer) -> None:
        reducer = make(model)
        for k in call_points(history):
            reduced = reducer.reduce(history[:k])
            checker.check(history[:k] if reduced is None else reduced, k)

    return face


class _Turns:
    """The current trajectory, replayed by the graph's model and tools nodes."""

    history: Sequence[BaseMessage] = ()
    position = 0
    seen: list[tuple[list[BaseMessage], int]] = []
    node: RoundCompressionNode | None = None


@cache
def _graph() -> Any:
    """An agent-shaped graph (compress -> model -> tools -> compress ...), compiled once."""
    from langgraph.graph import END, START, StateGraph

    def compress(state: HistCompressState, config: RunnableConfig) -> Any:
        assert _Turns.node is not None
        return _Turns.node.invoke(state, config)

    def model(state: HistCompressState) -> dict[str, Any]:
        assert _Turns.node is not None
        _Turns.seen.append((_Turns.node.model_input(state), _Turns.position))
        answer = _Turns.history[_Turns.position]
        _Turns.position += 1
        return {"messages": [answer]}

    def tools(state: HistCompressState) -> dict[str, Any]:
        results = []
        while (
            _Turns.position < len(_Turns.history) and _Turns.history[_Turns.position].type == "tool"
        ):
            results.append(_Turns.history[_Turns.position])
            _Turns.position += 1
        return {"messages": results}

    def after_model(state: HistCompressState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    def after_tools(state: HistCompressState) -> str:
        following = _Turns.history[_Turns.position : _Turns.position + 1]
        return "compress" if following and isinstance(following[0], AIMessage) else END

    graph = StateGraph(HistCompressState)
    graph.add_node("compress", compress)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "compress")
    graph.add_edge("compress", "model")
    graph.add_conditional_edges("model", after_model, ["tools", END])
    graph.add_conditional_edges("tools", after_tools, ["compress", END])
    return graph.compile()


def via_node(history: list[BaseMessage], checker: Checker, model: ScriptedSummarizer) -> None:
    app = _graph()
    _Turns.node = RoundCompressionNode(compressor(model))
    _Turns.history, _Turns.seen = history, []
    state: dict[str, Any] = {"messages": [history[0]]}
    k = 1
    while k < len(history):
        # the user's turn: its messages up to the next model call, then the agent loop
        start = k
        while k < len(history) and not isinstance(history[k], AIMessage):
            k += 1
        if k == len(history):
            break
        _Turns.position = k
        state = app.invoke({**state, "messages": [*state["messages"], *history[start:k]]})
        k = _Turns.position
    for request, upto in _Turns.seen:
        checker.check(request, upto)


class _ReplayModel(ScriptedChatModel):
    """Answers with the trajectory's assistant messages, in order; tools are bound as is."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class _Recorded:
    """Tool outputs of the current trajectory, by tool name and arguments, in order."""

    outputs: dict[str, list[str]] = {}

    @classmethod
    def load(cls, history: Sequence[BaseMessage]) -> None:
        cls.outputs = {}
        for k, message in enumerate(history):
            if not isinstance(message, AIMessage):
                continue
            results = {
                m.tool_call_id: str(m.content)  # type: ignore[attr-defined]
                for m in history[k + 1 : k + 1 + len(message.tool_calls)]
                if m.type == "tool"
            }
            for call in message.tool_calls:
                key = _key(call["name"], call["args"])
                cls.outputs.setdefault(key, []).append(results.get(str(call["id"]), ""))

    @classmethod
    def take(cls, name: str, args: dict[str, Any]) -> str:
        queue = cls.outputs.get(_key(name, args), [])
        return queue.pop(0) if queue else ""


def _key(name: str, args: dict[str, Any]) -> str:
    return f"{name}\x00{json.dumps(args, sort_keys=True)}"


@cache
def _tools() -> tuple[BaseTool, ...]:
    made = []
    for spec in _raw()["tools"]:
        function = spec["function"]
        name = function["name"]

        def run(_name: str = name, **kwargs: Any) -> str:
            return _Recorded.take(_name, kwargs)

        made.append(
            StructuredTool.from_function(
                run,
                name=name,
                description=function.get("description", name),
                args_schema=function.get("parameters", {"type": "object", "properties": {}}),
            )
        )
    return tuple(made)


@cache
def _agent() -> tuple[Any, _ReplayModel, Any]:
    """One agent for the corpus (all trajectories share the system prompt and tools)."""
    from langchain.agents import create_agent

    from langchain_histcompress.faces.middleware import RoundCompressionMiddleware

    answering = _ReplayModel(default=lambda _prompt: AIMessage("Done."))
    middleware = RoundCompressionMiddleware(compressor(ScriptedSummarizer()))
    agent = create_agent(
        answering,
        tools=list(_tools()),
        system_prompt=str(trajectories()[0][0].content),
        middleware=[middleware],
    )
    return agent, answering, middleware


def via_middleware(history: list[BaseMessage], checker: Checker, model: ScriptedSummarizer) -> None:
    agent, answering, middleware = _agent()
    assert answering.script == [] and history[0].content == trajectories()[0][0].content
    answering.script = [
        AIMessage(m.content, tool_calls=m.tool_calls) for m in history if isinstance(m, AIMessage)
    ]
    middleware.compressor = compressor(model)
    _Recorded.load(history)
    messages: list[BaseMessage] = []
    summary = None
    try:
        for message in history[1:]:
            if not isinstance(message, HumanMessage):
                continue
            before = answering.calls
            turn = {"messages": [*messages, HumanMessage(message.content)]}
            state = agent.invoke({**turn, "running_summary": summary})
            messages, summary = state["messages"], state.get("running_summary")
            checker.history = [history[0], *messages]
            for prompt in answering.prompts[before:]:
                checker.check(prompt, len(checker.history))
    finally:
        answering.script = []
        answering.prompts.clear()


FACES: dict[str, Face] = {
    "compressor": via_compressor,
    "node": via_node,
    "middleware": via_middleware,
    "truncation_reducer": _reducer_face(lambda _m: TruncationReducer(target_count=8)),
    "max_tokens_reducer": _reducer_face(
        lambda _m: MaxTokensReducer(max_tokens=3000, token_counter=count_tokens_approximately)
    ),
    "summarization_reducer": _reducer_face(
        lambda m: SummarizationReducer(m, target_count=8, token_counter=count_tokens_approximately)
    ),
    "chat_history": via_history,
    "context_builder": via_context_builder,
}


def _items() -> Iterator[tuple[str, Face]]:
    yield from FACES.items()


@pytest.mark.parametrize(("name", "face"), list(_items()), ids=list(FACES))
def test_every_trajectory_through_every_face(name: str, face: Face) -> None:
    tally = replay(face)
    assert tally.errors == [], tally.errors[:3]
    assert tally.violations == [], tally.violations[:5]
    assert tally.handled == len(trajectories())
    if name in ("compressor", "node", "middleware", "chat_history", "context_builder"):
        assert tally.folded == tally.eligible > 0, (tally.folded, tally.eligible)


def test_the_corpus_reuses_tool_call_ids_across_steps() -> None:
    """The data holds what the replay is about (else the test above proves less)."""
    reused = 0
    for history in trajectories():
        ids = [c["id"] for m in history if isinstance(m, AIMessage) for c in m.tool_calls]
        reused += len(ids) != len(set(ids))
    assert reused == 24
    assert all(isinstance(h[0], SystemMessage) for h in trajectories())
