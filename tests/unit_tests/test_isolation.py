"""One shared instance of every face serves two users whose message ids collide.

Two conversations, "alpha" and "bravo", use the same message ids ("1", "2", ...), as two users of
one server whose ids restart per conversation would. Their turns are interleaved through one
instance of each face, with scripted models that record every prompt. Every prompt sent during
one user's turn (to the answering model, the summarizer, the fact extractor or the rephraser)
must hold none of the other user's text.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.memory import InMemoryStore

from langchain_histcompress import (
    CompressingChatMessageHistory,
    ContextBuilder,
    FactExtractionNode,
    HistCompressState,
    HistoryRephraseNode,
    MaxTokensReducer,
    RoundCompressionNode,
    RoundCompressor,
    SummarizationReducer,
    TruncationReducer,
    create_history_rephraser,
    with_history_reducer,
)
from langchain_histcompress.storage.memory import InMemoryHistoryStore
from tests.fakes import ScriptedChatModel, prompt_ids, prompt_text, summary_json

USERS = ("alpha", "bravo")
TURNS = 7
_TAG = re.compile(r"\b(alpha|bravo)\b")


def _other(tag: str) -> str:
    return USERS[1 - USERS.index(tag)]


def _question(tag: str, n: int) -> HumanMessage:
    return HumanMessage(f"{tag} question {n}: tell me about {tag} topic {n}", id=str(2 * n + 1))


def _reply(tag: str, n: int) -> AIMessage:
    return AIMessage(f"{tag} answer {n}: {tag} topic {n} is fine", id=str(2 * n + 2))


def _tags_in(prompt: Sequence[BaseMessage]) -> str:
    return " and ".join(sorted(set(_TAG.findall(prompt_text(prompt))))) or "nobody"


def _answering() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda p: f"{_tags_in(p)} reply")


def _summarizer() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda p: summary_json(f"{_tags_in(p)} talked"))


def _extractor() -> ScriptedChatModel:
    def facts(prompt: Sequence[BaseMessage]) -> str:
        ids = prompt_ids(prompt)[:1]
        fact = {
            "op": "ADD",
            "type": "preference",
            "content": f"{_tags_in(prompt)} likes tea",
            "confidence": 0.9,
            "source_ids": ids,
        }
        return json.dumps([fact] if ids else [])

    return ScriptedChatModel(default=facts)


def _rephraser() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda p: f"What about the {_tags_in(p)} topic?")


class _Watch:
    """Checks the prompts each model received during one user's turn."""

    def __init__(self, *models: ScriptedChatModel) -> None:
        self.models = models

    def turn(self, tag: str, run: Callable[[], object]) -> None:
        marks = [m.calls for m in self.models]
        run()
        for model, mark in zip(self.models, marks, strict=True):
            for prompt in model.prompts[mark:]:
                text = prompt_text(prompt)
                assert _other(tag) not in text, f"{tag}'s turn sent {_other(tag)}'s text"

    def total_calls(self) -> list[int]:
        return [m.calls for m in self.models]


def _interleave(step: Callable[[str, int], None]) -> None:
    for n in range(TURNS):
        for tag in USERS:
            step(tag, n)


def _run_users(app: Any, watch: _Watch, *, held_by: str) -> None:
    """Each user's turns through the one compiled graph ``app``.

    ``held_by="checkpointer"``: a thread per user; ``"caller"``: no checkpointer, each user's
    whole state goes in and comes back every turn.
    """
    states: dict[str, dict[str, Any]] = {t: {"messages": []} for t in USERS}

    def step(tag: str, n: int) -> None:
        if held_by == "checkpointer":
            config = {"configurable": {"thread_id": tag}}
            watch.turn(tag, lambda: app.invoke({"messages": [_question(tag, n)]}, config))
            return
        state = {**states[tag], "messages": [*states[tag]["messages"], _question(tag, n)]}
        watch.turn(tag, lambda: states.__setitem__(tag, app.invoke(state)))

    _interleave(step)


def _compressor(summarizer: ScriptedChatModel, **kw: Any) -> RoundCompressor:
    options: dict[str, Any] = {
        "trigger": ("rounds", 3),
        "keep": ("rounds", 1),
        "token_counter": "approximate",
        "max_retries": 0,
        **kw,
    }
    return RoundCompressor(summarizer, **options)


# --------------------------------------------------------------------------- reducers


@pytest.mark.parametrize(
    "make",
    [
        lambda s: TruncationReducer(target_count=3),
        lambda s: MaxTokensReducer(max_tokens=120),
        lambda s: SummarizationReducer(s, target_count=3),
    ],
    ids=["truncation", "max_tokens", "summarization"],
)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_reducers_behind_with_history_reducer(make: Callable[[Any], Any], use_async: bool) -> None:
    answer, summarizer = _answering(), _summarizer()
    watch = _Watch(answer, summarizer)
    chat = with_history_reducer(answer, make(summarizer))
    histories: dict[str, list[BaseMessage]] = {t: [SystemMessage("be brief")] for t in USERS}

    def step(tag: str, n: int) -> None:
        history = histories[tag]
        history.append(_question(tag, n))
        call = (
            (lambda: asyncio.run(chat.ainvoke(history)))
            if use_async
            else (lambda: chat.invoke(history))
        )
        watch.turn(tag, call)
        history.append(_reply(tag, n))

    _interleave(step)
    assert answer.calls == 2 * TURNS


# --------------------------------------------------------------------------- round compression


def test_round_compressor() -> None:
    answer, summarizer = _answering(), _summarizer()
    watch = _Watch(answer, summarizer)
    compressor = _compressor(summarizer)
    histories: dict[str, list[BaseMessage]] = {t: [] for t in USERS}
    summaries: dict[str, Any] = dict.fromkeys(USERS)

    def step(tag: str, n: int) -> None:
        history = histories[tag]
        history.append(_question(tag, n))

        def run() -> None:
            result = compressor.compress(history, summaries[tag])
            summaries[tag] = result.summary
            answer.invoke(result.messages)

        watch.turn(tag, run)
        history.append(_reply(tag, n))

    _interleave(step)
    assert summarizer.calls >= 2 * 2


@pytest.mark.parametrize("held_by", ["checkpointer", "caller"])
def test_round_compression_node_in_a_graph(held_by: str) -> None:
    answer, summarizer = _answering(), _summarizer()
    watch = _Watch(answer, summarizer)

    compress = RoundCompressionNode(_compressor(summarizer))

    def model(state: HistCompressState) -> dict[str, Any]:
        n = sum(isinstance(m, HumanMessage) for m in state["messages"]) - 1
        tag = _TAG.findall(str(state["messages"][-1].content))[0]
        answer.invoke(compress.model_input(state))
        return {"messages": [_reply(tag, n)]}

    graph = StateGraph(HistCompressState)
    graph.add_sequence([("compress", compress), model])
    graph.add_edge(START, "compress")
    saver = InMemorySaver() if held_by == "checkpointer" else None
    _run_users(graph.compile(checkpointer=saver), watch, held_by=held_by)
    assert summarizer.calls >= 2 * 2


@pytest.mark.parametrize("held_by", ["checkpointer", "caller"])
def test_round_compression_middleware_in_create_agent(held_by: str) -> None:
    from langchain.agents import create_agent

    from langchain_histcompress import RoundCompressionMiddleware

    answer, summarizer = _answering(), _summarizer()
    watch = _Watch(answer, summarizer)
    agent = create_agent(
        answer,
        middleware=[RoundCompressionMiddleware(_compressor(summarizer))],
        checkpointer=InMemorySaver() if held_by == "checkpointer" else None,
    )
    _run_users(agent, watch, held_by=held_by)
    assert summarizer.calls >= 2 * 2


def test_compressing_chat_message_history() -> None:
    answer, summarizer = _answering(), _summarizer()
    watch = _Watch(answer, summarizer)
    store = InMemoryHistoryStore()
    compressor = _compressor(summarizer)
    histories = {
        t: CompressingChatMessageHistory(t, connection=store, compressor=compressor) for t in USERS
    }

    def step(tag: str, n: int) -> None:
        history = histories[tag]

        def run() -> None:
            history.add_messages([_question(tag, n)])
            answer.invoke(history.messages)
            history.add_messages([_reply(tag, n)])

        watch.turn(tag, run)

    _interleave(step)
    assert summarizer.calls >= 2 * 2


# --------------------------------------------------------------------------- context and memory


def test_context_builder_with_retrieved_turns() -> None:
    answer, summarizer = _answering(), _summarizer()
    watch = _Watch(answer, summarizer)
    compressor = _compressor(summarizer)
    builder = ContextBuilder(
        max_context_tokens=150, token_counter="approximate", raw_turn_retrieval=4
    )
    retrieved: list[str] = []
    histories: dict[str, list[BaseMessage]] = {t: [SystemMessage("be brief")] for t in USERS}
    summaries: dict[str, Any] = dict.fromkeys(USERS)

    def step(tag: str, n: int) -> None:
        history = histories[tag]
        history.append(_question(tag, n))

        def run() -> None:
            summaries[tag] = compressor.compress(history, summaries[tag]).summary
            context = builder.build(history, summary=summaries[tag], query=f"{tag} topic 0")
            retrieved.extend(tag for m in context if "Reference data" in str(m.content))
            answer.invoke(context)

        watch.turn(tag, run)
        history.append(_reply(tag, n))

    _interleave(step)
    assert set(retrieved) == set(USERS)  # older turns were retrieved for both users


def test_fact_extraction_node_with_a_shared_store() -> None:
    extractor = _extractor()
    watch = _Watch(extractor)
    graph = StateGraph(HistCompressState)
    graph.add_node("facts", FactExtractionNode(extractor, batch_rounds=1))
    graph.add_edge(START, "facts")
    graph.add_edge("facts", END)
    app = graph.compile(checkpointer=InMemorySaver(), store=InMemoryStore())

    def step(tag: str, n: int) -> None:
        config = {"configurable": {"thread_id": tag, "user_id": tag}}
        turn = [_question(tag, n), _reply(tag, n), HumanMessage(f"{tag} next", id=f"x{n}")]
        watch.turn(tag, lambda: app.invoke({"messages": turn}, config))

    _interleave(step)
    assert extractor.calls >= 2 * 2
    for tag in USERS:
        state = app.get_state({"configurable": {"thread_id": tag}}).values
        contents = [f["content"] for f in state.get("facts", {}).values()]
        assert contents and all(_other(tag) not in c for c in contents)


def test_history_rephrase_node_and_chain() -> None:
    model = _rephraser()
    watch = _Watch(model)
    node = HistoryRephraseNode(model, history_message_count=4)
    chain = create_history_rephraser(model, history_message_count=4)
    histories: dict[str, list[BaseMessage]] = {t: [] for t in USERS}

    def step(tag: str, n: int) -> None:
        history = histories[tag]
        question = _question(tag, n)

        def run() -> None:
            out = node.invoke({"messages": [*history, question]})
            assert _other(tag) not in str(out)
            chain.invoke({"input": question.content, "chat_history": history})

        watch.turn(tag, run)
        history += [question, _reply(tag, n)]

    _interleave(step)
    assert model.calls >= 2 * 2
