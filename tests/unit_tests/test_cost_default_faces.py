"""Every face that folds a conversation decides by cost through its `RoundCompressor`."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph

from langchain_histcompress.core.schedule import FoldDecision, FoldSchedule, RoundLoad
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.faces.nodes import HistCompressState, RoundCompressionNode
from langchain_histcompress.storage import InMemoryHistoryStore
from tests.fakes import ScriptedSummarizer, summary_json


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pricing model of every decision any cost schedule makes from now on."""
    seen: list[str] = []
    decide = FoldSchedule.decide

    def recording(self: FoldSchedule, **kwargs: Any) -> FoldDecision:
        seen.append(self.pricing.name)
        return decide(self, **kwargs)

    monkeypatch.setattr(FoldSchedule, "decide", recording)
    return seen


def _compressor(model: ScriptedSummarizer, pricing: str | None) -> RoundCompressor:
    trigger = "cost" if pricing is None else ("cost", pricing)
    compressor = RoundCompressor(model, trigger=trigger, token_counter="approximate")
    assert compressor.target.schedule is not None
    return compressor


def _rounds(n: int, words: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(n):
        out += [HumanMessage(f"q{i} " + "word " * words), AIMessage(f"a{i} " + "word " * words)]
    return out


def _via_node(compressor: RoundCompressor, history: list[BaseMessage]) -> None:
    def model(state: HistCompressState) -> dict[str, Any]:
        return {"messages": [AIMessage("ok")]}

    graph = StateGraph(HistCompressState)
    graph.add_node("compress", RoundCompressionNode(compressor))
    graph.add_node("model", model)
    graph.add_edge(START, "compress")
    graph.add_edge("compress", "model")
    graph.add_edge("model", END)
    graph.compile().invoke({"messages": [SystemMessage("Be brief."), *history]})


def _via_history(compressor: RoundCompressor, history: list[BaseMessage]) -> None:
    chat = CompressingChatMessageHistory(
        "user-1", connection=InMemoryHistoryStore(), compressor=compressor
    )
    chat.add_messages(history)


def _via_middleware(compressor: RoundCompressor, history: list[BaseMessage]) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent

    from langchain_histcompress.faces.middleware import RoundCompressionMiddleware

    agent = create_agent(
        GenericFakeChatModel(messages=iter([AIMessage("ok")])),
        middleware=[RoundCompressionMiddleware(compressor)],
    )
    agent.invoke({"messages": history})


FACES = {"node": _via_node, "history": _via_history, "middleware": _via_middleware}


@pytest.mark.parametrize("face", list(FACES))
def test_a_short_conversation_costs_no_summarizer_call_through_any_face(
    face: str, decisions: list[str]
) -> None:
    model = ScriptedSummarizer(default=lambda prompt: summary_json("Earlier."))
    compressor = _compressor(model, None)
    FACES[face](compressor, [*_rounds(6, 20), HumanMessage("and now?")])
    assert decisions  # the face went through the cost schedule
    assert set(decisions) == {"openai-50"}  # the documented default preset
    assert model.calls == 0


@pytest.mark.parametrize("face", list(FACES))
def test_the_pricing_model_reaches_the_schedule_through_every_face(
    face: str, decisions: list[str]
) -> None:
    model = ScriptedSummarizer(default=lambda prompt: summary_json("Earlier."))
    compressor = _compressor(model, "none")
    FACES[face](compressor, [*_rounds(60, 120), HumanMessage("and now?")])
    assert set(decisions) == {"none"}
    assert model.calls >= 1  # a long conversation without caching repays its folds


def test_the_middleware_prices_by_the_model_of_each_request(decisions: list[str]) -> None:
    pytest.importorskip("langchain.agents")
    openai = pytest.importorskip("langchain_openai")
    from langchain_histcompress.core.rounds import ensure_ids
    from langchain_histcompress.faces.middleware import RoundCompressionMiddleware
    from tests.fakes import model_request, through_middleware

    middleware = RoundCompressionMiddleware(_compressor(ScriptedSummarizer(), None))
    history = ensure_ids([*_rounds(6, 20), HumanMessage("and now?")])
    for name, preset in [("gpt-5-mini", "openai-90"), ("gpt-4.1", "openai-75")]:
        decisions.clear()
        answering = openai.ChatOpenAI(model=name, api_key="sk-not-used")
        sent, _ = through_middleware(
            middleware, model_request(answering, history, {"messages": history})
        )
        assert set(decisions) == {preset}
        assert sent.model is answering


def test_round_loads_feed_the_decision_the_rounds_it_would_fold() -> None:
    schedule = FoldSchedule(summary_tokens=64, retain_rounds=3)
    assert schedule.decide(fixed_tokens=10, summary_tokens=0, rounds=[RoundLoad(50)] * 3) == (
        FoldDecision(0, "none", 0.0)
    )
