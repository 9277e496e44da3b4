"""Every face that folds a conversation decides by cost through its `RoundCompressor`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph

from langchain_histcompress.compressor import RoundCompressor
from langchain_histcompress.history import CompressingChatMessageHistory
from langchain_histcompress.nodes import HistCompressState, RoundCompressionNode
from langchain_histcompress.schedule import FoldDecision, FoldSchedule, RoundLoad
from langchain_histcompress.storage import InMemoryHistoryStore
from tests.fakes import ScriptedSummarizer, summary_json


@dataclass(frozen=True)
class RecordingSchedule(FoldSchedule):
    """A schedule that remembers the pricing model of every decision it made."""

    seen: list[str] = field(default_factory=list, compare=False)

    def decide(self, **kwargs: Any) -> FoldDecision:
        self.seen.append(self.pricing.name)
        return super().decide(**kwargs)


def _compressor(model: ScriptedSummarizer, pricing: str | None) -> RoundCompressor:
    compressor = RoundCompressor(model, pricing=pricing, token_counter="approximate")
    assert compressor.schedule is not None
    schedule = compressor.schedule
    compressor.schedule = RecordingSchedule(
        pricing=schedule.pricing,
        summary_tokens=schedule.summary_tokens,
        retain_rounds=schedule.retain_rounds,
    )
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

    from langchain_histcompress.middleware import RoundCompressionMiddleware

    agent = create_agent(
        GenericFakeChatModel(messages=iter([AIMessage("ok")])),
        middleware=[RoundCompressionMiddleware(compressor)],
    )
    agent.invoke({"messages": history})


FACES = {"node": _via_node, "history": _via_history, "middleware": _via_middleware}


@pytest.mark.parametrize("face", list(FACES))
def test_a_short_conversation_costs_no_summarizer_call_through_any_face(face: str) -> None:
    model = ScriptedSummarizer(default=lambda prompt: summary_json("Earlier."))
    compressor = _compressor(model, None)
    FACES[face](compressor, [*_rounds(6, 20), HumanMessage("and now?")])
    assert isinstance(compressor.schedule, RecordingSchedule)
    assert compressor.schedule.seen  # the face went through the cost schedule
    assert set(compressor.schedule.seen) == {"openai-50"}  # the documented default preset
    assert model.calls == 0


@pytest.mark.parametrize("face", list(FACES))
def test_the_pricing_model_reaches_the_schedule_through_every_face(face: str) -> None:
    model = ScriptedSummarizer(default=lambda prompt: summary_json("Earlier."))
    compressor = _compressor(model, "none")
    FACES[face](compressor, [*_rounds(60, 120), HumanMessage("and now?")])
    assert isinstance(compressor.schedule, RecordingSchedule)
    assert set(compressor.schedule.seen) == {"none"}
    assert model.calls >= 1  # a long conversation without caching repays its folds


def test_round_loads_feed_the_decision_the_rounds_it_would_fold() -> None:
    schedule = FoldSchedule(summary_tokens=64, retain_rounds=3)
    assert schedule.decide(fixed_tokens=10, summary_tokens=0, rounds=[RoundLoad(50)] * 3) == (
        FoldDecision(0, "none", 0.0)
    )
