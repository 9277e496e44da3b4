"""The real ``ChatOpenAI`` over real HTTP against the loopback server of ``tests.openai_server``.

Every face runs end to end with the real client; faults are injected at the server and the
requests are counted there. Timeouts and backoffs are tiny and sleeps are injected, so the
module runs in a few seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import LLMResult
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from langchain_histcompress import (
    CompressingChatMessageHistory,
    RoundCompressionMiddleware,
    RoundCompressionNode,
    RoundCompressor,
    create_history_rephraser,
)
from langchain_histcompress.core.errors import SummarizationError
from langchain_histcompress.edge import _timeouts
from langchain_histcompress.edge.extraction import FactExtractor
from langchain_histcompress.edge.summarizer import Summarizer
from tests.fakes import Sleeps
from tests.openai_server import (
    Fault,
    OpenAIServer,
    Reply,
    Request,
    auto_reply,
    retry_after_forms,
)

LOCOMO_26 = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "26.json"

CONVERSATION = [
    HumanMessage("I want to visit Lisbon in May.", id="h1"),
    AIMessage("Lisbon in May is lovely.", id="a1"),
    HumanMessage("Book a hotel near the river.", id="h2"),
    AIMessage("Booked the Riverside Hotel.", id="a2"),
]
GOOD_SUMMARY = json.dumps({"ConversationSummary": "The user plans a May trip to Lisbon."})


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(server: OpenAIServer) -> None:
    server.reset()


def chat(server: OpenAIServer, lane: str = "", **kwargs: Any) -> ChatOpenAI:
    """The real client on the loopback server, with the SDK's default retries (2).

    Each model gets its own async HTTP client: the default one is shared per base URL and
    would outlive the event loop of the test that opened its connections.
    """
    return ChatOpenAI(
        model="gpt-4o-mini",
        base_url=server.url(lane),
        api_key="sk-test",
        http_async_client=httpx.AsyncClient(),
        **kwargs,
    )


def summarizer(server: OpenAIServer, **kwargs: Any) -> tuple[Summarizer, Sleeps]:
    sleeps = Sleeps()
    options: dict[str, Any] = {
        "token_counter": "approximate",
        "retry_backoff": 0.0,
        "timeout": 5.0,
        "sleep": sleeps,
        "async_sleep": sleeps.asleep,
        **kwargs,
    }
    return Summarizer(chat(server), **options), sleeps


def rephraser(server: OpenAIServer, **kwargs: Any) -> Any:
    return create_history_rephraser(chat(server), return_metadata=True, **kwargs)


REPHRASE_INPUT = {
    "input": "And how much does a room cost?",
    "chat_history": [HumanMessage("Tell me about the Riverside Hotel"), AIMessage("It is nice.")],
}


class Recorder(BaseCallbackHandler):
    """Run names, tags and usage of every chat-model call."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.usage: list[Any] = []
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        with self._lock:
            self.starts.append(kwargs)

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        tags = kwargs.get("tags") or []
        if "langchain_histcompress:internal" not in tags:
            return
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                with self._lock:
                    self.usage.append(getattr(message, "usage_metadata", None))


# --------------------------------------------------------------------------- 4. retry budget


@pytest.mark.parametrize("form", ["seconds", "ms", "http-date"])
def test_persistent_429_costs_exactly_the_configured_budget(
    server: OpenAIServer, form: str
) -> None:
    headers = retry_after_forms(20.0)[form]
    server.always(Fault(status=429, headers=headers))
    summ, sleeps = summarizer(server, max_retries=2, max_backoff=30.0)
    with pytest.raises(SummarizationError, match="after 3 attempts"):
        summ.summarize(CONVERSATION)
    assert server.count() == 3  # 1 + max_retries, whatever the client's own max_retries
    assert {r.headers.get("x-stainless-retry-count") for r in server.requests} == {"0"}
    assert len(sleeps.waits) == 2
    for wait in sleeps.waits:  # the server's hint, in each of its forms, was honoured
        assert 18.0 <= wait <= 20.0

    server.reset()
    server.always(Fault(status=429))
    extractor = FactExtractor(chat(server), max_retries=2, retry_backoff=0.0, timeout=5.0)
    assert extractor.extract(CONVERSATION).status == "failed"
    assert server.count() == 3

    server.reset()
    server.always(Fault(status=429, headers=headers))
    out = rephraser(server).invoke(REPHRASE_INPUT)
    assert (out["rephrased"], out["fallback_reason"]) == (False, "model_error")
    assert server.count() == 1  # the rephraser makes exactly one request


def test_a_retry_after_beyond_the_cap_ends_the_retries(server: OpenAIServer) -> None:
    server.always(Fault(status=429, headers=(("retry-after", "120"),)))
    summ, sleeps = summarizer(server, max_retries=2, max_backoff=30.0)
    with pytest.raises(SummarizationError, match="longer than max_backoff"):
        summ.summarize(CONVERSATION)
    assert (server.count(), sleeps.waits) == (1, [])


@pytest.mark.parametrize(("status", "requests"), [(500, 3), (401, 1)])
async def test_server_errors_are_retried_within_the_budget_auth_errors_never(
    server: OpenAIServer, status: int, requests: int
) -> None:
    server.always(Fault(status=status))
    summ, _ = summarizer(server, max_retries=2)
    with pytest.raises(SummarizationError):
        await summ.asummarize(CONVERSATION)
    assert server.count() == requests
    server.reset()
    server.always(Fault(status=status))
    result = await FactExtractor(chat(server), retry_backoff=0.0, timeout=5.0).aextract(
        CONVERSATION
    )
    assert (result.status, server.count()) == ("failed", requests)


# --------------------------------------------------------------------------- 2-3. timeouts


def _busy_workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "histcompress-model-call")


def test_sync_timeouts_drop_the_connection_and_free_their_threads(server: OpenAIServer) -> None:
    server.always(Fault("hang"))
    summ, _ = summarizer(server, timeout=0.2, max_retries=1)
    extractor = FactExtractor(chat(server), timeout=0.2, max_retries=0)
    for _ in range(3):
        # the timed-out request was dropped by the client, so retrying it is safe
        with pytest.raises(SummarizationError, match=r"after 2 attempts"):
            summ.summarize(CONVERSATION)
        assert extractor.extract(CONVERSATION).report.error_type == "ModelTimeoutError"
    assert server.count() == 9
    # the client closed every hung request: the provider stops generating (and billing)
    assert server.wait_for_disconnects(9) == 9
    deadline = time.monotonic() + 10
    while _busy_workers() > _timeouts._WORKERS.max_idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _busy_workers() <= _timeouts._WORKERS.max_idle  # no thread left in a model call


async def test_async_timeout_cancels_the_request(server: OpenAIServer) -> None:
    server.always(Fault("hang"))
    summ, _ = summarizer(server, timeout=0.2, max_retries=1)
    with pytest.raises(SummarizationError, match="after 2 attempts"):
        await summ.asummarize(CONVERSATION)
    assert server.wait_for_disconnects(2) == 2


def test_the_extractor_and_the_rephraser_time_out_by_default(server: OpenAIServer) -> None:
    from langchain_histcompress.faces.rephrase import DEFAULT_REPHRASE_TIMEOUT

    assert FactExtractor(chat(server)).timeout == 60.0
    assert DEFAULT_REPHRASE_TIMEOUT == 10.0
    server.always(Fault("hang"))
    out = rephraser(server, timeout=0.2).invoke(REPHRASE_INPUT)
    assert out["fallback_reason"] == "timeout"
    assert server.wait_for_disconnects(1) == 1


# --------------------------------------------------------------------------- 5-8. answers


def test_a_cut_off_answer_is_never_used(server: OpenAIServer) -> None:
    server.script(Reply("And how much does a", finish_reason="length"))
    out = rephraser(server).invoke(REPHRASE_INPUT)
    assert out["question"] == REPHRASE_INPUT["input"]
    assert out["fallback_reason"] == "truncated"

    server.script(
        Reply("The user plans a", finish_reason="length"), Reply("The user plans a trip.")
    )
    summ, _ = summarizer(server, profile="text")
    update = summ.summarize(CONVERSATION)
    assert (update.attempts, update.summary.text) == (2, "The user plans a trip.")


@pytest.mark.parametrize("unusable", ["Sure, here it is.", '{"ConversationSummary": '])
def test_structured_output_retries_an_unusable_answer(server: OpenAIServer, unusable: str) -> None:
    server.script(Reply(unusable), Reply(GOOD_SUMMARY))
    summ, _ = summarizer(server, structured_output=True)
    update = summ.summarize(CONVERSATION)
    assert update.attempts == 2
    assert update.summary.text == "The user plans a May trip to Lisbon."
    assert server.requests[0].body["response_format"]["type"] == "json_schema"


def test_internal_calls_carry_an_output_cap(server: OpenAIServer) -> None:
    from langchain_histcompress.edge.extraction import fact_output_cap
    from langchain_histcompress.edge.summarizer import summary_output_cap

    summ, _ = summarizer(server, max_summary_tokens=128)
    summ.summarize(CONVERSATION)
    FactExtractor(chat(server), max_ops=10, max_content_chars=200).extract(CONVERSATION)
    rephraser(server).invoke(REPHRASE_INPUT)
    caps = [r.body.get("max_completion_tokens", r.body.get("max_tokens")) for r in server.requests]
    assert caps == [summary_output_cap(128), fact_output_cap(10, 200), 300]
    # an over-long answer stops at the cap and is retried, not billed in full
    server.script(
        Reply("x " * 50, finish_reason="length", completion_tokens=256), Reply(GOOD_SUMMARY)
    )
    assert summ.summarize(CONVERSATION).attempts == 2


def test_refusals_are_typed_and_retried(server: OpenAIServer) -> None:
    server.script(Reply(None, refusal="I can't help with that."), Reply(GOOD_SUMMARY))
    summ, _ = summarizer(server)
    assert summ.summarize(CONVERSATION).attempts == 2
    server.script(Reply(None, refusal="I can't help with that."))
    out = rephraser(server).invoke(REPHRASE_INPUT)
    assert out["fallback_reason"] == "refusal"
    server.script(Reply(None, refusal="No."), Reply("[]"))
    result = FactExtractor(chat(server), retry_backoff=0.0).extract(CONVERSATION)
    assert (result.status, result.report.attempts) == ("empty", 2)


@pytest.mark.parametrize("fault", [Fault("malformed"), Fault("truncated_stream")])
def test_malformed_and_cut_bodies_are_retried(server: OpenAIServer, fault: Fault) -> None:
    server.script(fault, Reply(GOOD_SUMMARY))
    summ, _ = summarizer(server)
    assert summ.summarize(CONVERSATION).attempts == 2
    assert server.count() == 2


def test_a_streaming_summarizer_never_takes_a_cut_stream_for_a_summary(
    server: OpenAIServer,
) -> None:
    server.script(Fault("truncated_stream"), Reply("The user plans a trip."))
    summ = Summarizer(
        chat(server, streaming=True), profile="text", token_counter="approximate", timeout=5.0
    )
    update = summ.summarize(CONVERSATION)
    assert (update.attempts, update.summary.text) == (2, "The user plans a trip.")
    assert not any(r.streamed for r in server.requests)  # internal calls never stream


def test_empty_content_is_retried(server: OpenAIServer) -> None:
    server.script(Reply(""), Reply(GOOD_SUMMARY))
    summ, _ = summarizer(server)
    assert summ.summarize(CONVERSATION).attempts == 2
    server.script(Reply(""))
    assert rephraser(server).invoke(REPHRASE_INPUT)["fallback_reason"] == "empty"


def test_the_extractor_call_has_a_run_name(server: OpenAIServer) -> None:
    recorder = Recorder()
    FactExtractor(chat(server)).extract(CONVERSATION, config={"callbacks": [recorder]})
    assert [s.get("name") for s in recorder.starts] == ["histcompress_extract_facts"]


# --------------------------------------------------------------------------- faces


def _compressor(server: OpenAIServer, **kwargs: Any) -> RoundCompressor:
    options: dict[str, Any] = {
        "trigger": ("rounds", 2),
        "keep": ("rounds", 1),
        "token_counter": "approximate",
        "retry_backoff": 0.0,
        "timeout": 5.0,
        **kwargs,
    }
    return RoundCompressor(chat(server, "summarizer"), **options)


def test_node_in_a_streamed_graph_reports_internal_usage(server: OpenAIServer) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    from langchain_histcompress import HistCompressState, build_model_input

    answering = chat(server, "answer", stream_usage=True)

    def model(state: HistCompressState) -> dict[str, Any]:
        return {"messages": [answering.invoke(build_model_input(state))]}

    graph = StateGraph(HistCompressState)
    graph.add_node("compress", RoundCompressionNode(_compressor(server)))
    graph.add_node("model", model)
    graph.add_edge(START, "compress")
    graph.add_edge("compress", "model")
    graph.add_edge("model", END)
    app = graph.compile(checkpointer=InMemorySaver())
    recorder = Recorder()
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}, "callbacks": [recorder]}
    streamed: list[str] = []
    for turn in range(4):
        for chunk, _ in app.stream(
            {"messages": [HumanMessage(f"question {turn}")]}, config, stream_mode="messages"
        ):
            streamed.append(str(chunk.content))
    state = app.get_state(config).values
    assert state["running_summary"]["covered_ids"]
    assert server.count("summarizer") >= 1
    assert "ok" in "".join(streamed)
    assert "ConversationSummary" not in "".join(streamed)
    assert recorder.usage, "no internal call was seen"
    for usage in recorder.usage:  # the provider's own figures, cached tokens included
        assert usage is not None
        assert usage["input_tokens"] > 0
        assert "cache_read" in usage.get("input_token_details", {})
    assert not any(r.streamed for r in server.requests if r.lane == "summarizer")
    answers = [r for r in server.requests if r.lane == "answer"]
    assert answers and all(r.streamed for r in answers)  # the answering model did stream
    assert all(r.body["stream_options"] == {"include_usage": True} for r in answers)


def test_middleware_in_create_agent_with_real_tools(server: OpenAIServer) -> None:
    from langchain.agents import create_agent

    looked_up: list[str] = []

    @tool
    def look_up(city: str) -> str:
        """Look a city up."""
        looked_up.append(city)
        return f"{city}: sunny"

    agent = create_agent(
        chat(server, "agent"),
        tools=[look_up],
        middleware=[RoundCompressionMiddleware(_compressor(server), on_error="raise")],
    )
    messages: list[BaseMessage] = []
    for turn in range(4):
        messages = agent.invoke({"messages": [*messages, HumanMessage(f"weather {turn}?")]})[
            "messages"
        ]
    assert looked_up == ["x"] * 4
    assert server.count("summarizer") >= 1
    agent_requests = [r for r in server.requests if r.lane == "agent"]
    assert any("conversation_summary" in json.dumps(r.body["messages"]) for r in agent_requests)

    # a failing summarizer never changes the agent's stored history
    server.always(Fault(status=401), lane="summarizer")
    before = len(messages)
    with pytest.raises(SummarizationError):
        agent.invoke({"messages": [*messages, HumanMessage("one more?")]})
    assert len(messages) == before
    # by default the failure is logged and the agent answers without a new summary
    lenient = create_agent(
        chat(server, "agent"),
        tools=[look_up],
        middleware=[RoundCompressionMiddleware(_compressor(server))],
    )
    state = lenient.invoke({"messages": [*messages, HumanMessage("one more?")]})
    assert isinstance(state["messages"][-1], AIMessage) and not state["messages"][-1].tool_calls
    assert state.get("running_summary") is None


def test_chat_history_compresses_through_the_real_client(
    server: OpenAIServer, tmp_path: Path
) -> None:
    history = CompressingChatMessageHistory(
        "s1", connection=str(tmp_path / "chat.sqlite"), compressor=_compressor(server)
    )
    for turn in range(4):
        history.add_messages([HumanMessage(f"hi {turn}"), AIMessage(f"hello {turn}")])
    assert server.count("summarizer") >= 1
    assert len(history.messages) < len(history.full_messages)
    server.always(Fault("malformed"), lane="summarizer")
    stored = list(history.full_messages)
    history.add_messages([HumanMessage("later"), AIMessage("sure")])
    assert history.full_messages[: len(stored)] == stored


def test_rephrase_chain_over_http(server: OpenAIServer) -> None:
    out = rephraser(server).invoke(REPHRASE_INPUT)
    assert (out["rephrased"], out["question"]) == (True, "What is the capital of France?")
    request = server.requests[-1]
    assert request.body.get("stream") in (None, False)
    assert "Riverside" in json.dumps(request.body["messages"])


def test_system_prompt_reaches_the_server_unchanged(server: OpenAIServer) -> None:
    answering = chat(server)
    answering.invoke([SystemMessage("Be brief."), HumanMessage("hi")])
    assert server.requests[0].system == "Be brief."


# --------------------------------------------------------------------------- the CLI


def _locomo_or_skip() -> Path:
    if not LOCOMO_26.is_file():
        pytest.skip(f"LoCoMo data not found at {LOCOMO_26} (see ../shared/data/locomo/README.md)")
    return LOCOMO_26


@pytest.fixture
def openai_env(server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> OpenAIServer:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return server


def test_bench_counts_internal_failures_and_fails(
    openai_env: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from langchain_histcompress.workbench.cli import main

    data = _locomo_or_skip()

    def extraction_unauthorized(request: Request) -> Reply | Fault:
        if "Reply with the operations" in request.last_user:
            return Fault(status=401)
        return auto_reply(request)

    openai_env.responder = extraction_unauthorized
    out = tmp_path / "bench"
    code = main(
        [
            "bench",
            "--model",
            "openai:gpt-4o-mini",
            "--data",
            str(data),
            "--strategies",
            "facts,round_compression_rounds",
            "--quick",
            "--max-turns",
            "12",
            "--no-plots",
            "--out",
            str(out),
        ]
    )
    assert code == 1  # a strategy whose internal calls failed fails the run
    table = capsys.readouterr().out
    assert "INTERNAL CALL FAILURES in: facts" in table
    assert "Internal call failures in: facts" in (out / "bench.md").read_text()
    report = json.loads((out / "bench.json").read_text())
    assert report["failed_strategies"] == ["facts"]
    facts, rounds = (
        report["internal_calls"]["facts"],
        report["internal_calls"]["round_compression_rounds"],
    )
    assert facts["failures"] >= 1
    assert facts["failed_requests"] == facts["requests"] == facts["failures"]  # 401: no retry
    assert rounds["failures"] == 0
    # the provider's own usage, cached input included, beside the tiktoken estimate
    assert rounds["reported_requests"] == rounds["requests"] > 0
    assert rounds["cached_tokens"] > 0
    assert rounds["estimated_prompt_tokens"] > 0
    assert rounds["prompt_tokens"] != rounds["estimated_prompt_tokens"]
    summarizer_requests = [r for r in openai_env.requests if "ConversationSummary" in r.last_user]
    assert summarizer_requests
    assert all(
        not r.streamed and r.body.get("max_completion_tokens", r.body.get("max_tokens"))
        for r in summarizer_requests
    )


def test_demo_runs_against_the_local_server(
    openai_env: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from langchain_histcompress.workbench.cli import main
    from langchain_histcompress.workbench.demo_script import load_script

    replies = {t.user_text: t.reply_text for t in load_script().turns}

    def as_scripted(request: Request) -> Reply | Fault:
        # the answering call ends with the user's own message: reply as the script does, so
        # the conversation grows as it does offline (the internal calls get auto replies)
        messages = request.body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and last.get("content") in replies:
            return Reply(replies[last["content"]])
        return auto_reply(request)

    openai_env.responder = as_scripted
    assert main(["demo", "--model", "openai:gpt-4o-mini"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "savings" in out
    # the defaults read the window and the pricing from ChatOpenAI and fold by cost, when the
    # user comes back after days (the cache is cold)
    assert "ChatOpenAI profile" in out and "openai-50, from ChatOpenAI" in out
    assert (
        "folding (cost under openai-50, from ChatOpenAI; budget 108,800 tokens): "
        "1 fold in 64 turns (turn 54)"
    ) in out
    assert "cost: the cache has gone cold" in out
    internal = [
        r
        for r in openai_env.requests
        if r.body.get("max_completion_tokens", r.body.get("max_tokens"))
    ]
    assert any("ConversationSummary" in r.last_user for r in internal)
    assert any("Reply with the operations" in r.last_user for r in internal)
    assert {r.headers.get("x-stainless-retry-count") for r in openai_env.requests} == {"0"}
