"""RoundCompressionNode, HistCompressState and the model-input helpers in LangGraph graphs."""

from __future__ import annotations

import html
import json
import logging
import re
import threading
from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import ConfigurationError, SummarizationError
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.edge.compressor import RoundCompressor, view
from langchain_histcompress.faces import nodes as nodes_module
from langchain_histcompress.faces.memory import FactExtractionNode
from langchain_histcompress.faces.nodes import (
    HistCompressState,
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
    summary_to_state,
)
from tests.fakes import (
    CountingSummarizer,
    ScriptedChatModel,
    conversation,
    numbered,
    prompt_ids,
    prompt_message_texts,
)

# --------------------------------------------------------------------------- fakes

_FACT_LINE = re.compile(r"^(\S+) \S+ \S+ \| (.*)$", re.MULTILINE)  # <id> <type> <conf> | <fact>
_HUMAN = re.compile(r'<message id="[^"]*" role="user">(.*?)</message>')


def fact_ops(prompt: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Scripted extraction: ``remember: X`` adds, ``update: X -> Y`` updates, ``forget: X``
    deletes (matching current facts by content)."""
    body = html.unescape(str(prompt[-1].content))
    current = {}
    for fact_id, content in _FACT_LINE.findall(body):
        current[content] = fact_id
    ops: list[dict[str, Any]] = []
    for text in _HUMAN.findall(body):
        for command in text.split(";"):
            verb, _, rest = command.strip().partition(": ")
            if verb == "remember":
                ops.append({"op": "ADD", "type": "confirmed_detail", "content": rest})
            elif verb == "update":
                old, _, new = rest.partition(" -> ")
                ops.append({"op": "UPDATE", "id": current[old], "content": new})
            elif verb == "forget":
                ops.append({"op": "DELETE", "id": current[rest]})
    return ops


def make_compressor(summarizer: BaseChatModel, **kwargs: Any) -> RoundCompressor:
    """Folds once 5 rounds are pending and keeps the newest 3, unless told otherwise."""
    options: dict[str, Any] = {
        "trigger": ("rounds", 5),
        "keep": ("rounds", 3),
        "token_counter": count_tokens_approximately,
        "sleep": lambda _: None,
        "max_retries": 0,
        **kwargs,
    }
    return RoundCompressor(summarizer, **options)


# --------------------------------------------------------------------------- the 40-turn graph

SYSTEM = SystemMessage("You are a helpful assistant.", id="system")
MAX_CONTEXT_TOKENS = 700

# turn -> user text; other turns are small talk.
SCRIPT: dict[int, str] = {
    2: "remember: User lives in Oslo",
    5: "remember: User likes green tea",
    9: "remember: User works as a nurse",
    12: "update: User lives in Oslo -> User lives in Bergen",
    20: "forget: User likes green tea",
    26: "remember: User has a dog named Rex",
    31: "update: User works as a nurse -> User works as a doctor",
}
EXPECTED_FACTS = {
    "User lives in Bergen",
    "User works as a doctor",
    "User has a dog named Rex",
}


def user_text(turn: int) -> str:
    return SCRIPT.get(turn, f"small talk number {turn} about the weather and the news")


class Harness:
    """The graph START -> facts -> compress -> model -> END with fakes and call counters."""

    def __init__(
        self,
        checkpointer: BaseCheckpointSaver[Any] | None,
        *,
        destructive: bool = False,
        on_error: Any = "raise",
    ) -> None:
        self.summarizer = CountingSummarizer()
        self.extractor = ScriptedChatModel(default=lambda prompt: json.dumps(fact_ops(prompt)))
        self.chat = ScriptedChatModel(default=numbered(lambda n: f"answer {n}"))
        self.builder = ContextBuilder(
            max_context_tokens=MAX_CONTEXT_TOKENS, token_counter=count_tokens_approximately
        )
        self.model_inputs: list[list[BaseMessage]] = []
        self.compress = RoundCompressionNode(
            make_compressor(self.summarizer), destructive=destructive, on_error=on_error
        )
        facts = FactExtractionNode(self.extractor, batch_rounds=1, retry_backoff=0)

        def model(state: HistCompressState) -> dict[str, Any]:
            model_input = build_model_input(state, context_builder=self.builder)
            self.model_inputs.append(model_input)
            return {"messages": [self.chat.invoke(model_input)]}

        async def amodel(state: HistCompressState) -> dict[str, Any]:
            model_input = build_model_input(state, context_builder=self.builder)
            self.model_inputs.append(model_input)
            return {"messages": [await self.chat.ainvoke(model_input)]}

        graph = StateGraph(HistCompressState)
        graph.add_node("facts", facts)
        graph.add_node("compress", self.compress)
        graph.add_node("model", RunnableLambda(model, afunc=amodel))
        graph.add_edge(START, "facts")
        graph.add_edge("facts", "compress")
        graph.add_edge("compress", "model")
        graph.add_edge("model", END)
        self.app: CompiledStateGraph[Any, Any, Any, Any] = graph.compile(checkpointer=checkpointer)

    def turn_input(self, turn: int) -> dict[str, Any]:
        messages: list[BaseMessage] = [HumanMessage(user_text(turn))]
        if turn == 0:
            messages.insert(0, SYSTEM)
        return {"messages": messages}

    def run(self, turns: range, config: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for turn in turns:
            state = self.app.invoke(self.turn_input(turn), config)
        return state

    async def arun(self, turns: range, config: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for turn in turns:
            state = await self.app.ainvoke(self.turn_input(turn), config)
        return state


def check_model_inputs(inputs: Sequence[Sequence[BaseMessage]]) -> None:
    assert inputs
    for model_input in inputs:
        assert validate_history(model_input, allow_in_flight=False) == []
        assert count_tokens_approximately(model_input) <= MAX_CONTEXT_TOKENS
        assert model_input[0] is SYSTEM or model_input[0] == SYSTEM
        assert isinstance(model_input[-1], HumanMessage)


def fact_contents(state: dict[str, Any]) -> set[str]:
    return {fact["content"] for fact in state["facts"].values()}


def check_nothing_lost(state: dict[str, Any], all_ids: set[str]) -> None:
    summary = summary_from_state(state)
    kept = {m.id for m in state["messages"]}
    covered = summary.covered_ids if summary else frozenset()
    assert all_ids <= kept | covered


def test_forty_turns_in_memory_sync() -> None:
    harness = Harness(InMemorySaver())
    config = {"configurable": {"thread_id": "t-sync"}}
    state = harness.run(range(40), config)
    assert len(state["messages"]) == 81  # nothing removed: system + 40 x (human, answer)
    check_model_inputs(harness.model_inputs)
    assert len(harness.model_inputs) == 40
    assert fact_contents(state) == EXPECTED_FACTS
    summary = summary_from_state(state)
    assert summary is not None
    # 2 + 3 rounds: first fold at turn 5 (index 4), then every second turn.
    assert harness.summarizer.calls == summary.version == 18
    assert summary.rounds_covered == 36
    # the budget binds: older rounds are left out, the summary stands in for them as data
    assert len(harness.model_inputs[-1]) < len(state["messages"]) - 20
    assert any("conversation_summary" in str(m.content) for m in harness.model_inputs[-1])
    # one extraction call per completed round, each round once
    assert harness.extractor.calls == 39


async def test_forty_turns_in_memory_async_matches_sync() -> None:
    harness = Harness(InMemorySaver())
    config = {"configurable": {"thread_id": "t-async"}}
    state = await harness.arun(range(40), config)
    check_model_inputs(harness.model_inputs)
    assert fact_contents(state) == EXPECTED_FACTS
    summary = summary_from_state(state)
    assert summary is not None and summary.version == harness.summarizer.calls == 18


def test_no_summary_of_a_summary() -> None:
    harness = Harness(InMemorySaver())
    harness.run(range(16), {"configurable": {"thread_id": "t-sos"}})
    assert harness.summarizer.calls >= 3
    seen: set[str] = set()
    for prompt in harness.summarizer.prompts:
        assert not any(i.startswith("histcompress-summary") for i in prompt_ids(prompt))
        shown = prompt_message_texts(prompt)  # message ids are shown as per-prompt aliases
        assert shown, "every summarizer call sees conversation messages"
        assert seen.isdisjoint(shown), "a message was summarized twice"
        seen.update(shown)
        assert "summary of" not in re.sub(
            r"<previous_summary.*?</previous_summary>", "", str(prompt[-1].content), flags=re.DOTALL
        )


def test_destructive_graph_removes_only_covered_ids() -> None:
    harness = Harness(InMemorySaver(), destructive=True)
    config = {"configurable": {"thread_id": "t-destructive"}}
    all_ids: set[str] = set()
    for turn in range(20):
        state = harness.app.invoke(harness.turn_input(turn), config)
        all_ids |= {m.id for m in state["messages"]}
        check_nothing_lost(state, all_ids)
        summary = summary_from_state(state)
        if summary is not None:
            kept = {m.id for m in state["messages"]}
            assert kept.isdisjoint(summary.covered_ids)
    assert state["messages"][0].id == "system"
    # retained rounds + the latest exchange stay; older ones live in the summary only
    assert len(state["messages"]) < 20
    check_model_inputs(harness.model_inputs)
    assert fact_contents(state) >= {"User lives in Bergen", "User works as a nurse"}


# --------------------------------------------------------------------------- the node alone


def history(rounds: int, *, system: bool = True) -> list[BaseMessage]:
    return conversation(rounds, system=SYSTEM if system else None)


def test_node_writes_the_summary_only_when_compressed_and_the_view_on_request() -> None:
    summarizer = CountingSummarizer()
    default = RoundCompressionNode(make_compressor(summarizer))
    assert default.invoke({"messages": history(3)}) == {}  # nothing derived is stored
    assert default.model_input({"messages": history(3)}) == history(3)
    update = default.invoke({"messages": history(5)})
    assert set(update) == {"running_summary"}
    shown = default.model_input({"messages": history(5), **update})
    assert [m.id for m in shown[2:]] == ["h2", "a2", "h3", "a3", "h4", "a4"]
    node = RoundCompressionNode(make_compressor(summarizer), output_key="model_input")
    quiet = node.invoke({"messages": history(3)})
    assert set(quiet) == {"model_input"}
    assert quiet["model_input"] == history(3)
    update = node.invoke({"messages": history(5)})
    assert set(update) == {"model_input", "running_summary"}
    summary = RunningSummary.model_validate(update["running_summary"])
    assert summary.covered_ids == {"h0", "a0", "h1", "a1"}
    assert [m.id for m in update["model_input"][2:]] == ["h2", "a2", "h3", "a3", "h4", "a4"]
    assert is_summary_message(update["model_input"][1])
    assert [m.id for m in update["model_input"][2:]] == [m.id for m in shown[2:]]
    assert summarizer.calls == 2


async def test_node_async_path_uses_async_summarizer() -> None:
    summarizer = CountingSummarizer()
    node = RoundCompressionNode(make_compressor(summarizer), output_key=None)
    update = await node.ainvoke({"messages": history(5)})
    assert set(update) == {"running_summary"}
    assert summarizer.calls == 1
    # the stored summary is honoured: nothing more is due
    again = await node.ainvoke({"messages": history(6), **update})
    assert again == {}
    assert summarizer.calls == 1


def test_node_does_not_mutate_state_and_handles_missing_ids() -> None:
    messages = [SystemMessage("sys")]
    for n in range(5):
        messages += [HumanMessage(f"q{n}"), AIMessage(f"a{n}")]
    before = [m.model_copy(deep=True) for m in messages]
    summarizer = CountingSummarizer()
    node = RoundCompressionNode(make_compressor(summarizer))
    update = node.invoke({"messages": messages})
    assert messages == before and all(m.id is None for m in messages)
    summary = RunningSummary.model_validate(update["running_summary"])
    assert len(summary.covered_ids) == 4
    # deterministic ids: the next run recognises the covered messages
    again = node.invoke({"messages": messages, **update})
    assert "running_summary" not in again and summarizer.calls == 1
    shown = node.model_input({"messages": messages, **update})
    assert [m.content for m in shown[2:]] == ["q2", "a2", "q3", "a3", "q4", "a4"]


def test_destructive_node_returns_remove_message_per_covered_id() -> None:
    node = RoundCompressionNode(make_compressor(CountingSummarizer()), destructive=True)
    update = node.invoke({"messages": history(5)})
    removals = update["messages"]
    assert all(isinstance(r, RemoveMessage) for r in removals)
    assert sorted(r.id for r in removals) == ["a0", "a1", "h0", "h1"]
    # already-covered ids still present (e.g. switched from non-destructive) are removed too
    stale = node.invoke({"messages": history(5), "running_summary": update["running_summary"]})
    assert sorted(r.id for r in stale["messages"]) == ["a0", "a1", "h0", "h1"]
    assert "running_summary" not in stale


class MyState(TypedDict, total=False):
    chat: Annotated[list[BaseMessage], add_messages]
    memo: dict[str, Any] | None
    to_model: list[BaseMessage]


def test_node_works_on_plain_messages_state_with_custom_keys() -> None:
    summarizer = CountingSummarizer()
    node = RoundCompressionNode(
        make_compressor(summarizer),
        messages_key="chat",
        summary_key="memo",
        output_key="to_model",
        name="shrink",
    )
    graph = StateGraph(MyState)
    graph.add_node(node)  # named by the node
    graph.add_edge(START, "shrink")
    graph.add_edge("shrink", END)
    state = graph.compile().invoke({"chat": history(5)})
    assert state["memo"]["version"] == 1
    assert len(state["to_model"]) == 1 + 1 + 6


def test_node_on_messages_state_without_summary_key_is_harmless() -> None:
    # MessagesState has no summary channel: LangGraph drops the key, the view is computed
    node = RoundCompressionNode(make_compressor(CountingSummarizer()), output_key=None)
    graph = StateGraph(MessagesState)
    graph.add_node("compress", node)
    graph.add_edge(START, "compress")
    graph.add_edge("compress", END)
    state = graph.compile().invoke({"messages": history(5)})
    assert len(state["messages"]) == 11


def test_summarization_error_reraises_and_leaves_checkpoint_untouched() -> None:
    harness = Harness(InMemorySaver())
    config = {"configurable": {"thread_id": "t-fail"}}
    harness.run(range(6), config)
    before = harness.app.get_state(config).values
    assert summary_from_state(before) is not None
    harness.summarizer.fail_with = ValueError("boom")  # non-transient: no retry
    with pytest.raises(SummarizationError):
        harness.app.invoke(harness.turn_input(6), config)
    after = harness.app.get_state(config)
    assert after.values["running_summary"] == before["running_summary"]
    assert after.next == ("compress",)  # the failed node is pending, its writes discarded
    # the same turn resumes once the summarizer works again
    harness.summarizer.fail_with = None
    calls = harness.summarizer.calls
    state = harness.app.invoke(None, config)
    assert isinstance(state["messages"][-1], AIMessage)
    assert summary_from_state(state).version == summary_from_state(before).version + 1
    assert harness.summarizer.calls == calls + 1
    check_model_inputs(harness.model_inputs)


async def test_summarization_error_async_reraises() -> None:
    harness = Harness(InMemorySaver())
    config = {"configurable": {"thread_id": "t-afail"}}
    await harness.arun(range(4), config)
    harness.summarizer.fail_with = ValueError("boom")
    with pytest.raises(SummarizationError):
        await harness.app.ainvoke(harness.turn_input(4), config)
    assert "running_summary" not in harness.app.get_state(config).values


class CustomEvents(BaseCallbackHandler):
    """Records the custom events dispatched during a run."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))


@pytest.mark.parametrize("on_error", ["skip", None])  # None: the default
def test_on_error_skip_keeps_summary_and_answers(
    caplog: pytest.LogCaptureFixture, on_error: str | None
) -> None:
    harness = Harness(InMemorySaver(), **({"on_error": on_error} if on_error else {}))
    if on_error is None:  # the node's own default, not the harness's
        harness.compress.on_error = RoundCompressionNode(harness.compress.compressor).on_error
    config: dict[str, Any] = {"configurable": {"thread_id": "t-skip"}}
    harness.run(range(6), config)
    before = harness.app.get_state(config).values["running_summary"]
    harness.summarizer.fail_with = ValueError("secret user text")
    events = CustomEvents()
    with caplog.at_level(logging.WARNING, logger="langchain_histcompress.faces.nodes"):
        state = harness.app.invoke(harness.turn_input(6), {**config, "callbacks": [events]})
    assert state["running_summary"] == before
    assert isinstance(state["messages"][-1], AIMessage)
    assert "round compression failed" in caplog.text
    assert "secret user text" not in caplog.text
    assert [name for name, _ in events.events] == ["histcompress_fold_failed"]
    assert events.events[0][1]["error"] == "SummarizationError"
    summary = RunningSummary.model_validate(before)
    assert harness.compress.model_input(state) == view(state["messages"], summary)


def test_invalid_stored_summary_is_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    node = RoundCompressionNode(make_compressor(CountingSummarizer()), on_error="raise")
    good = summary_to_state(RunningSummary(content="x", text="x"))
    tampered = {**good, "text": "changed"}
    with pytest.raises(ConfigurationError, match="running_summary"):
        node.invoke({"messages": history(2), "running_summary": tampered})
    with pytest.raises(ConfigurationError, match="running summary dict"):
        node.invoke({"messages": history(2), "running_summary": "text"})
    with pytest.raises(ConfigurationError, match="list of messages"):
        node.invoke({"messages": "hello"})
    # by default the turn goes on without the unreadable summary, and says so
    lenient = RoundCompressionNode(make_compressor(CountingSummarizer()))
    state = {"messages": history(2), "running_summary": tampered}
    with caplog.at_level(logging.WARNING, logger="langchain_histcompress.faces.nodes"):
        assert lenient.invoke(state) == {}
    assert "round compression failed (ConfigurationError)" in caplog.text
    assert lenient.model_input(state) == history(2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"messages_key": ""}, "messages_key"),
        ({"summary_key": "messages"}, "distinct"),
        ({"output_key": "running_summary"}, "distinct"),
        ({"destructive": "yes"}, "destructive"),
        ({"on_error": "ignore"}, "on_error"),
        ({"name": ""}, "name"),
    ],
)
def test_node_config_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RoundCompressionNode(make_compressor(CountingSummarizer()), **kwargs)


def test_node_rejects_non_compressor() -> None:
    with pytest.raises(ConfigurationError, match="RoundCompressor"):
        RoundCompressionNode(CountingSummarizer())  # type: ignore[arg-type]


def test_build_model_input_view_and_context_builder() -> None:
    summary = RunningSummary(content="x", text="x", covered_ids=frozenset({"h0", "a0"}))
    state = {
        "messages": history(3),
        "running_summary": summary_to_state(summary),
        "facts": {},
    }
    plain = build_model_input(state)
    assert [m.id for m in plain if not is_summary_message(m)] == ["system", "h1", "a1", "h2", "a2"]
    appended = build_model_input(state, placement="append_to_system")
    assert len(appended) == 5 and "conversation_summary" in str(appended[0].content)
    builder = ContextBuilder(max_context_tokens=60, token_counter=count_tokens_approximately)
    tight = build_model_input(state, context_builder=builder)
    assert count_tokens_approximately(tight) <= 60
    assert validate_history(tight) == []
    assert build_model_input({"messages": history(1)}) == history(1)


def test_pre_model_hook_copy() -> None:
    node = RoundCompressionNode(make_compressor(CountingSummarizer()), destructive=True)
    hook = node.as_pre_model_hook()
    assert hook.output_key == "llm_input_messages" and hook.destructive
    update = hook.invoke({"messages": history(5)})
    assert "llm_input_messages" in update and "model_input" not in update
    assert repr(hook).startswith("RoundCompressionNode(RoundCompressor(")


def tool_history() -> list[BaseMessage]:
    out: list[BaseMessage] = [SYSTEM]
    for n in range(5):
        call = AIMessage(
            "",
            id=f"c{n}",
            tool_calls=[
                {"name": "f", "args": {}, "id": f"call{n}a"},
                {"name": "g", "args": {}, "id": f"call{n}b"},
            ],
        )
        out += [
            HumanMessage(f"q{n}", id=f"h{n}"),
            call,
            ToolMessage("rb", tool_call_id=f"call{n}b", id=f"t{n}b"),
            ToolMessage("ra", tool_call_id=f"call{n}a", id=f"t{n}a"),
            AIMessage(f"a{n}", id=f"a{n}"),
        ]
    return out


def test_node_keeps_parallel_tool_groups_whole() -> None:
    node = RoundCompressionNode(make_compressor(CountingSummarizer()), destructive=True)
    update = node.invoke({"messages": tool_history()})
    removed = {r.id for r in update["messages"]}
    assert removed == {
        f"{p}{n}{s}"
        for n in (0, 1)
        for p, s in [("h", ""), ("c", ""), ("t", "a"), ("t", "b"), ("a", "")]
    }
    kept = [m for m in tool_history() if m.id not in removed]
    shown = node.model_input({"messages": kept, "running_summary": update["running_summary"]})
    assert validate_history(shown, allow_in_flight=False) == []
    assert [m.id for m in shown[2:]] == [m.id for m in kept[1:]]


def test_build_model_input_with_builder_sends_a_fitting_history_whole() -> None:
    summary = RunningSummary(content="x", text="x", covered_ids=frozenset({"h0", "a0"}))
    state = {"messages": history(3), "running_summary": summary_to_state(summary), "facts": {}}
    raw = count_tokens_approximately(state["messages"])
    roomy = ContextBuilder(max_context_tokens=raw, token_counter=count_tokens_approximately)
    assert build_model_input(state, context_builder=roomy) == state["messages"]


def test_unused_view_hint_is_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodes_module, "_view_hint", threading.Event())
    builder = ContextBuilder(max_context_tokens=500, token_counter=count_tokens_approximately)
    secret = [SystemMessage("system"), HumanMessage("secret user text", id="h")]
    with caplog.at_level(logging.DEBUG, logger="langchain_histcompress.faces.nodes"):
        build_model_input({"messages": secret}, context_builder=builder)
        build_model_input({"messages": secret, "model_input": []}, context_builder=builder)
        build_model_input({"messages": secret, "model_input": secret})  # the view is used
        assert not caplog.records
        for _ in range(3):
            build_model_input({"messages": secret, "model_input": secret}, context_builder=builder)
    hints = [r for r in caplog.records if "output_key=None" in r.getMessage()]
    assert len(hints) == 1 and hints[0].levelno == logging.DEBUG
    assert "secret user text" not in caplog.text


def test_node_without_output_key_writes_only_the_summary() -> None:
    node = RoundCompressionNode(make_compressor(CountingSummarizer()), output_key=None)
    assert node.invoke({"messages": history(3)}) == {}
    update = node.invoke({"messages": history(5)})
    assert set(update) == {"running_summary"}
