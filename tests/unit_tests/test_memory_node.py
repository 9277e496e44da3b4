from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from langchain_histcompress.core.errors import ConfigurationError, StorageError, SummarizationError
from langchain_histcompress.core.facts import Fact, fact_id_for, merge_facts
from langchain_histcompress.edge.extraction import FactExtractor
from langchain_histcompress.faces.memory import FactExtractionNode, FactsState, facts_namespace
from tests.fakes import ScriptedChatModel, conversation, prompt_ids

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)


class State(MessagesState, FactsState):
    pass


def ops(*items: dict[str, Any]) -> str:
    return json.dumps(list(items))


def answering_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(
        messages=iter(AIMessage(f"answer {i}", id=f"a{i}") for i in itertools.count(1))
    )


def build_graph(
    extraction: BaseChatModel,
    *,
    checkpointer: Any = None,
    store: BaseStore | None = None,
    **node_kwargs: Any,
) -> Any:
    node_kwargs.setdefault("batch_rounds", 1)
    node_kwargs.setdefault("retry_backoff", 0)
    node = FactExtractionNode(extraction, **node_kwargs)
    answer = answering_model()

    def model(state: State) -> dict[str, Any]:
        return {"messages": [answer.invoke(state["messages"])]}

    graph = StateGraph(State)
    graph.add_node("facts", node)
    graph.add_node("model", model)
    graph.add_edge(START, "facts")
    graph.add_edge("facts", "model")
    graph.add_edge("model", END)
    return graph.compile(checkpointer=checkpointer, store=store)


def config(thread: str, user: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread}
    if user is not None:
        configurable["user_id"] = user
    return {"configurable": configurable}


def contents(facts: dict[str, Any]) -> set[str]:
    return {f["content"] for f in facts.values()}


# --------------------------------------------------------------------------- 40-turn script

ANA = "User's name is Ana"
BUDGET = "Travel budget is 10k EUR"
DOG = "Has a dog called Rex"
TRAIN = "Prefers trains over flights"


class FortyTurnScript:
    """Extraction outputs keyed by the round shown; round 35 fails once."""

    def __init__(self) -> None:
        self.failed_35 = False
        self.seen: list[str] = []

    def __call__(self, messages: list[BaseMessage]) -> str:
        ids = re.findall(r'<message id="(h\d+)"', str(messages[1].content))
        assert len(ids) == 1, ids
        n = int(ids[0][1:])
        self.seen.append(ids[0])
        if n == 1:
            return ops({"op": "ADD", "type": "entity", "content": ANA, "source_ids": ["h1"]})
        if n == 5:
            return ops({"op": "ADD", "content": BUDGET, "status": "tbc", "source_ids": ["h5"]})
        if n == 10:
            return ops(
                {
                    "op": "UPDATE",
                    "id": fact_id_for(BUDGET),
                    "content": "Travel budget is 12k EUR",
                    "status": "confirmed",
                    "source_ids": ["h10", "a10"],
                }
            )
        if n == 20:
            return ops({"op": "ADD", "content": DOG, "source_ids": ["h20"]})
        if n == 30:
            return ops({"op": "DELETE", "id": fact_id_for(DOG)})
        if n == 35:
            if not self.failed_35:
                self.failed_35 = True
                return "Sorry, I cannot produce JSON right now."
            return ops({"op": "ADD", "type": "preference", "content": TRAIN, "source_ids": ["h35"]})
        if n == 36:
            return ops({"op": "ADD", "content": ANA.lower()})  # duplicate: merges
        return "[]"


def turn(i: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"message number {i}", id=f"h{i}")]}


def check_forty_turn_state(values: dict[str, Any], script: FortyTurnScript) -> None:
    facts = values["facts"]
    assert contents(facts) == {ANA, "Travel budget is 12k EUR", TRAIN}
    budget = facts[fact_id_for(BUDGET)]
    assert budget["supersedes"] == [BUDGET]
    assert budget["status"] == "confirmed"
    assert budget["source_ids"] == ["h5", "h10", "a10"]
    assert facts[fact_id_for(ANA)]["type"] == "entity"
    assert values["facts_processed_through"] == "a39"
    assert values["facts_extraction"]["status"] in ("ok", "empty")
    # each round extracted once, except round 35 (failed once, then retried)
    assert script.seen.count("h35") == 2
    assert sorted(set(script.seen)) == sorted(f"h{i}" for i in range(1, 40))
    assert len(script.seen) == 40


def test_forty_turn_graph_sync() -> None:
    script = FortyTurnScript()
    extraction = ScriptedChatModel(script=[script], repeat_last=True)
    graph = build_graph(extraction, checkpointer=InMemorySaver(), max_retries=0)
    cfg = config("t1")
    statuses = {}
    for i in range(1, 41):
        result = graph.invoke(turn(i), cfg)
        statuses[i] = result["facts_extraction"]["status"]
        if i == 21:
            assert DOG in contents(result["facts"])
        if i == 31:
            assert DOG not in contents(result["facts"])
    assert statuses[1] == "skipped"
    assert statuses[2] == "ok"
    assert statuses[36] == "failed"
    assert statuses[37] == "ok"
    values = graph.get_state(cfg).values
    check_forty_turn_state(values, script)
    assert extraction.calls == 40
    assert len(values["messages"]) == 80


async def test_forty_turn_graph_async() -> None:
    script = FortyTurnScript()
    extraction = ScriptedChatModel(script=[script], repeat_last=True)
    graph = build_graph(extraction, checkpointer=InMemorySaver(), max_retries=0)
    cfg = config("t-async")
    for i in range(1, 41):
        result = await graph.ainvoke(turn(i), cfg)
        if i == 36:
            assert result["facts_extraction"]["status"] == "failed"
            assert result["facts_extraction"]["error_type"] == "_MalformedOutputError"
    state = await graph.aget_state(cfg)
    check_forty_turn_state(state.values, script)
    assert extraction.calls == 40


def test_resume_from_sqlite_does_not_reextract(tmp_path: Path) -> None:
    path = str(tmp_path / "checkpoints.sqlite")
    cfg = config("resume")
    first = ScriptedChatModel(
        script=[
            lambda m: ops({"op": "ADD", "content": f"fact from {prompt_ids(m)[0]}"}),
        ],
        repeat_last=True,
    )
    with SqliteSaver.from_conn_string(path) as saver:
        graph = build_graph(first, checkpointer=saver)
        for i in range(1, 6):
            graph.invoke(turn(i), cfg)
    assert first.calls == 4  # rounds 1-4; round 5 waits for its answer

    second = ScriptedChatModel(
        script=[ops({"op": "ADD", "content": "after restart"})], repeat_last=True
    )
    with SqliteSaver.from_conn_string(path) as saver:
        graph = build_graph(second, checkpointer=saver)
        before = graph.get_state(cfg).values
        assert len(before["facts"]) == 4
        assert before["facts_processed_through"] == "a4"
        result = graph.invoke(turn(6), cfg)
    assert second.calls == 1
    assert prompt_ids(second.prompts[-1]) == ["h5", "a5"]
    assert contents(result["facts"]) == {*(f"fact from h{i}" for i in range(1, 5)), "after restart"}


def test_checkpoints_hold_only_plain_data(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "plain.sqlite")
    model = ScriptedChatModel(
        script=[ops({"op": "ADD", "content": "x", "expires_at": "2099-01-01"})], repeat_last=True
    )
    with caplog.at_level(logging.WARNING), SqliteSaver.from_conn_string(path) as saver:
        graph = build_graph(model, checkpointer=saver)
        graph.invoke(turn(1), config("plain"))
        graph.invoke(turn(2), config("plain"))
        values = graph.get_state(config("plain")).values
    json.dumps(values["facts"])
    json.dumps(values["facts_extraction"])
    assert not [r for r in caplog.records if "allowlist" in r.getMessage().lower()]
    assert not [r for r in caplog.records if "unregistered" in r.getMessage().lower()]


# --------------------------------------------------------------------------- node unit tests


def node_state(*messages: BaseMessage, **extra: Any) -> dict[str, Any]:
    return {"messages": list(messages), **extra}


def rounds(n: int, *, open_last: bool = True) -> list[BaseMessage]:
    out = conversation(range(1, n + 1), system=SystemMessage("sys", id="sys"), short=True)
    return [*out, HumanMessage("current", id="hq")] if open_last else out


def test_only_completed_unprocessed_rounds_in_batches() -> None:
    model = ScriptedChatModel(script=["[]"], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=2)
    update = node.invoke(node_state(*rounds(5)))
    assert model.calls == 2
    assert prompt_ids(model.prompts[0]) == ["h1", "a1", "h2", "a2"]
    assert prompt_ids(model.prompts[1]) == ["h3", "a3", "h4", "a4"]
    assert update["facts_processed_through"] == "a4"
    assert update["facts_extraction"]["pending_rounds"] == 1
    assert update["facts_extraction"]["status"] == "empty"
    assert "facts" not in update
    again = node.invoke(node_state(*rounds(5), facts_processed_through="a4"))
    assert model.calls == 2
    assert again["facts_extraction"]["status"] == "skipped"


def test_last_round_processed_when_answered_without_tool_calls() -> None:
    model = ScriptedChatModel(script=["[]"], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=1)
    node.invoke(node_state(*rounds(1, open_last=False)))
    assert prompt_ids(model.prompts[-1]) == ["h1", "a1"]
    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}], id="ai-call")
    waiting = [HumanMessage("q", id="h1"), call, ToolMessage("r", tool_call_id="c1", id="t1")]
    update = node.invoke(node_state(*waiting))
    assert model.calls == 1
    assert update["facts_extraction"]["status"] == "skipped"


def test_max_batches_per_run_bounds_calls() -> None:
    model = ScriptedChatModel(script=["[]"], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=1, max_batches_per_run=2)
    update = node.invoke(node_state(*rounds(5)))
    assert model.calls == 2
    assert update["facts_processed_through"] == "a2"
    assert update["facts_extraction"]["pending_rounds"] == 3


def test_lost_cursor_reprocesses_remaining_rounds(caplog: pytest.LogCaptureFixture) -> None:
    model = ScriptedChatModel(script=["[]"], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=1)
    with caplog.at_level(logging.WARNING):
        node.invoke(node_state(*rounds(2), facts_processed_through="gone"))
    assert model.calls == 2
    assert "no longer in the history" in caplog.text


def test_failure_writes_nothing_and_keeps_the_cursor() -> None:
    model = ScriptedChatModel(
        script=[ops({"op": "ADD", "content": "one"}), "garbage"], repeat_last=True
    )
    node = FactExtractionNode(model, batch_rounds=1, max_retries=0)
    update = node.invoke(node_state(*rounds(3)))
    assert model.calls == 2
    assert update["facts_processed_through"] == "a1"  # stopped at the failed batch
    report = update["facts_extraction"]
    assert report["status"] == "failed"
    assert report["error_type"] == "_MalformedOutputError"
    assert report["added"] == [fact_id_for("one")]
    assert contents(merge_facts({}, update["facts"])) == {"one"}


def test_failure_before_anything_writes_no_facts() -> None:
    class UnauthorizedError(Exception):
        status_code = 401

    model = ScriptedChatModel(script=[UnauthorizedError("no")], repeat_last=True)
    node = FactExtractionNode(model, batch_rounds=1)
    update = node.invoke(node_state(*rounds(2)))
    assert "facts" not in update
    assert "facts_processed_through" not in update
    assert update["facts_extraction"]["error_type"] == "UnauthorizedError"


def test_raise_on_error() -> None:
    node = FactExtractionNode(
        ScriptedChatModel(script=["bad"], repeat_last=True), batch_rounds=1, raise_on_error=True
    )
    with pytest.raises(SummarizationError):
        node.invoke(node_state(*rounds(1)))


def test_state_facts_shown_and_updated() -> None:
    existing = Fact(id="f-1", content="Lives in Oslo", created_at=NOW, updated_at=NOW)
    model = ScriptedChatModel(
        script=[ops({"op": "UPDATE", "id": "f-1", "content": "Lives in Bergen"})], repeat_last=True
    )
    node = FactExtractionNode(model, batch_rounds=1)
    update = node.invoke(node_state(*rounds(1), facts={"f-1": existing.to_state()}))
    assert "f1 other 0.7 | Lives in Oslo" in str(model.prompts[0][1].content)
    merged = merge_facts({"f-1": existing.to_state()}, update["facts"])
    assert merged["f-1"]["content"] == "Lives in Bergen"
    assert merged["f-1"]["supersedes"] == ["Lives in Oslo"]
    assert update["facts_extraction"]["updated"] == ["f-1"]


async def test_async_node_matches_sync() -> None:
    output = ops({"op": "ADD", "content": "x", "source_ids": ["h1"]})
    sync = FactExtractionNode(
        ScriptedChatModel(script=[output], repeat_last=True), batch_rounds=1, now=lambda: NOW
    )
    sync_update = sync.invoke(node_state(*rounds(1)))
    node = FactExtractionNode(
        ScriptedChatModel(script=[output], repeat_last=True), batch_rounds=1, now=lambda: NOW
    )
    async_update = await node.ainvoke(node_state(*rounds(1)))
    assert async_update == sync_update
    assert node(node_state(*rounds(1))) == sync_update  # __call__


def test_expired_state_facts_are_dropped() -> None:
    old = Fact(id="f-1", content="temp", expires_at=NOW - timedelta(days=1))
    node = FactExtractionNode(
        ScriptedChatModel(script=["[]"], repeat_last=True), batch_rounds=1, now=lambda: NOW
    )
    update = node.invoke(node_state(*rounds(1), facts={"f-1": old.to_state()}))
    assert update["facts"] == [{"op": "DELETE", "id": "f-1"}]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_rounds": 0},
        {"batch_rounds": True},
        {"max_batches_per_run": 0},
        {"state_key": ""},
        {"state_key": "messages"},
        {"store": {}},
        {"namespace_from_config": ()},
        {"namespace_from_config": "user_id"},
        {"namespace_prefix": ("a.b",)},
    ],
)
def test_node_config_is_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        FactExtractionNode(ScriptedChatModel(script=["[]"], repeat_last=True), **kwargs)


def test_model_or_extractor() -> None:
    model = ScriptedChatModel(script=["[]"], repeat_last=True)
    with pytest.raises(ConfigurationError):
        FactExtractionNode()
    with pytest.raises(ConfigurationError):
        FactExtractionNode(model, extractor=FactExtractor(model))
    assert FactExtractionNode(extractor=FactExtractor(model)).extractor.model is model


def test_bad_state_is_a_clear_error() -> None:
    node = FactExtractionNode(ScriptedChatModel(script=["[]"], repeat_last=True))
    with pytest.raises(ConfigurationError):
        node.invoke({"messages": ["not a message"]})


# --------------------------------------------------------------------------- store / tenants


def user_facts(store: BaseStore, user: str) -> set[str]:
    namespace = ("histcompress", "facts", user)
    return {
        item.value["content"]
        for item in store.search(namespace, limit=100)
        if tuple(item.namespace) == namespace
    }


def tenant_script(messages: list[BaseMessage]) -> str:
    text = str(messages[1].content)
    match = re.search(r"I am (\w[\w-]*)", text)
    if match is None:
        return "[]"
    who = match.group(1)
    return ops(
        {
            "op": "ADD",
            "content": f"Customer is {who}",
            "user_id": "acme-corp",
            "namespace": ["histcompress", "facts", "acme-corp"],
        }
    )


def check_similar_tenants_never_see_each_other(store: BaseStore) -> None:
    model = ScriptedChatModel(script=[tenant_script], repeat_last=True)
    graph = build_graph(model, checkpointer=InMemorySaver(), store=store)
    graph.invoke({"messages": [HumanMessage("I am acme", id="h1")]}, config("t1", "acme"))
    graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t1", "acme"))
    assert user_facts(store, "acme") == {"Customer is acme"}
    assert user_facts(store, "acme-corp") == set()  # model output cannot pick a namespace

    graph.invoke({"messages": [HumanMessage("I am corp", id="h1")]}, config("t2", "acme-corp"))
    result = graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t2", "acme-corp"))
    assert contents(result["facts"]) == {"Customer is corp"}
    assert "Customer is acme" not in str(model.prompts[-1][1].content)
    assert user_facts(store, "acme") == {"Customer is acme"}
    assert user_facts(store, "acme-corp") == {"Customer is corp"}


def check_facts_follow_the_user_across_threads(store: BaseStore) -> None:
    model = ScriptedChatModel(script=[tenant_script], repeat_last=True)
    graph = build_graph(model, checkpointer=InMemorySaver(), store=store)
    graph.invoke({"messages": [HumanMessage("I am ana", id="h1")]}, config("t1", "ana"))
    graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t1", "ana"))
    calls = model.calls
    fresh = graph.invoke({"messages": [HumanMessage("hello", id="n1")]}, config("t9", "ana"))
    assert model.calls == calls  # nothing to extract yet, facts loaded from the store
    assert contents(fresh["facts"]) == {"Customer is ana"}
    other = graph.invoke({"messages": [HumanMessage("hello", id="n1")]}, config("t8", "bob"))
    assert other.get("facts", {}) == {}


def test_namespace_isolation_between_similar_tenants() -> None:
    check_similar_tenants_never_see_each_other(InMemoryStore())


def test_facts_follow_the_user_across_threads() -> None:
    check_facts_follow_the_user_across_threads(InMemoryStore())


def test_store_deletions_in_other_threads_reach_the_state() -> None:
    store = InMemoryStore()
    model = ScriptedChatModel(script=[tenant_script], repeat_last=True)
    graph = build_graph(model, checkpointer=InMemorySaver(), store=store)
    graph.invoke({"messages": [HumanMessage("I am ana", id="h1")]}, config("t1", "ana"))
    graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t1", "ana"))
    store.delete(("histcompress", "facts", "ana"), fact_id_for("Customer is ana"))
    result = graph.invoke({"messages": [HumanMessage("again", id="h3")]}, config("t1", "ana"))
    assert result["facts"] == {}


def test_runtime_store_is_used_and_user_id_is_required() -> None:
    store = InMemoryStore()
    node = FactExtractionNode(
        ScriptedChatModel(script=[tenant_script], repeat_last=True), batch_rounds=1
    )
    graph = StateGraph(State)
    graph.add_node("facts", node)
    graph.add_edge(START, "facts")
    graph.add_edge("facts", END)
    app = graph.compile(store=store)
    msgs = [HumanMessage("I am zed", id="h1"), AIMessage("hi", id="a1")]
    app.invoke({"messages": msgs}, {"configurable": {"user_id": "zed"}})
    assert user_facts(store, "zed") == {"Customer is zed"}
    with pytest.raises(ConfigurationError, match="user_id"):
        app.invoke({"messages": msgs}, {"configurable": {}})
    plain = FactExtractionNode(
        ScriptedChatModel(script=[tenant_script], repeat_last=True),
        batch_rounds=1,
        use_runtime_store=False,
    )
    graph2 = StateGraph(State)
    graph2.add_node("facts", plain)
    graph2.add_edge(START, "facts")
    graph2.add_edge("facts", END)
    out = graph2.compile(store=store).invoke({"messages": msgs}, {"configurable": {}})
    assert contents(out["facts"]) == {"Customer is zed"}


async def test_async_store_path() -> None:
    store = InMemoryStore()
    node = FactExtractionNode(
        ScriptedChatModel(script=[tenant_script], repeat_last=True), batch_rounds=1, store=store
    )
    msgs = [HumanMessage("I am amy", id="h1"), AIMessage("hi", id="a1")]
    update = await node.ainvoke({"messages": msgs}, {"configurable": {"user_id": "amy.b@x.io"}})
    assert contents(merge_facts({}, update["facts"])) == {"Customer is amy"}
    assert user_facts(store, "amy%2Eb@x%2Eio") == {"Customer is amy"}


def test_expired_store_facts_are_deleted() -> None:
    store = InMemoryStore()
    ns = ("histcompress", "facts", "u")
    old = Fact(id="f-old", content="old", expires_at=NOW - timedelta(hours=1))
    keep = Fact(id="f-keep", content="keep")
    store.put(ns, old.id, old.to_state())
    store.put(ns, keep.id, keep.to_state())
    store.put(ns, "f-bad", {"not": "a fact"})
    node = FactExtractionNode(
        ScriptedChatModel(script=["[]"], repeat_last=True), store=store, now=lambda: NOW
    )
    update = node.invoke({"messages": []}, {"configurable": {"user_id": "u"}})
    assert store.get(ns, "f-old") is None
    assert contents(merge_facts({}, update["facts"])) == {"keep"}


class FailingWrites(InMemoryStore):
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if any(isinstance(op, PutOp) for op in ops):
            msg = "disk full"
            raise OSError(msg)
        return super().batch(ops)


def test_store_write_failure_is_a_storage_error() -> None:
    node = FactExtractionNode(
        ScriptedChatModel(script=[ops({"op": "ADD", "content": "x"})], repeat_last=True),
        batch_rounds=1,
        store=FailingWrites(),
    )
    with pytest.raises(StorageError):
        node.invoke(node_state(*rounds(1)), {"configurable": {"user_id": "u"}})


@pytest.mark.parametrize(
    ("configurable", "keys"),
    [
        ({}, ("user_id",)),
        ({"user_id": ""}, ("user_id",)),
        ({"user_id": 7}, ("user_id",)),
        ({"user_id": "a"}, lambda c: "a"),
        ({"user_id": "a"}, lambda c: ()),
    ],
)
def test_namespace_validation(configurable: dict[str, Any], keys: Any) -> None:
    with pytest.raises(ConfigurationError):
        facts_namespace({"configurable": configurable}, keys=keys)


def test_namespace_encoding_is_injective() -> None:
    def ns(user: str) -> tuple[str, ...]:
        return facts_namespace({"configurable": {"user_id": user}})

    assert ns("a.b") != ns("a%2Eb")
    assert ns("acme") != ns("acme-corp")
    assert facts_namespace(
        {"configurable": {"org": "o", "user_id": "u"}}, keys=("org", "user_id")
    ) == ("histcompress", "facts", "o", "u")
    custom: Callable[[Any], tuple[str, ...]] = lambda c: ("tenant-" + c["configurable"]["org"],)  # noqa: E731
    assert facts_namespace({"configurable": {"org": "x"}}, keys=custom)[-1] == "tenant-x"


def test_extraction_tokens_never_stream_to_the_user() -> None:
    extraction = ScriptedChatModel(
        script=[ops({"op": "ADD", "content": "secret internal"})], repeat_last=True
    )
    graph = build_graph(extraction, checkpointer=InMemorySaver())
    cfg = config("stream")
    graph.invoke(turn(1), cfg)
    chunks = list(graph.stream(turn(2), cfg, stream_mode="messages"))
    assert extraction.calls == 1
    nodes = [metadata.get("langgraph_node") for _, metadata in chunks]
    assert "model" in nodes
    assert "facts" not in nodes
    assert all("secret internal" not in str(chunk.content) for chunk, _ in chunks)
