"""Cross-thread fact memory on a real PostgreSQL ``PostgresStore`` (per-user namespaces)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore

from langchain_histcompress import FactExtractionNode, merge_facts
from tests.unit_tests.test_memory_node import (
    ScriptedModel,
    build_graph,
    config,
    contents,
    tenant_script,
    user_facts,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(postgres_url: str) -> Iterator[BaseStore]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(postgres_url) as pg_store:
        pg_store.setup()
        yield pg_store
        for user in ("acme", "acme-corp", "ana"):
            for item in pg_store.search(("histcompress", "facts", user), limit=1000):
                pg_store.delete(item.namespace, item.key)


def test_similar_tenants_never_see_each_other(store: BaseStore) -> None:
    model = ScriptedModel(script=[tenant_script])
    graph = build_graph(model, checkpointer=InMemorySaver(), store=store)
    graph.invoke({"messages": [HumanMessage("I am acme", id="h1")]}, config("t1", "acme"))
    graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t1", "acme"))
    assert user_facts(store, "acme") == {"Customer is acme"}
    assert user_facts(store, "acme-corp") == set()  # model output cannot pick a namespace

    graph.invoke({"messages": [HumanMessage("I am corp", id="h1")]}, config("t2", "acme-corp"))
    result = graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t2", "acme-corp"))
    assert contents(result["facts"]) == {"Customer is corp"}
    assert user_facts(store, "acme") == {"Customer is acme"}
    assert user_facts(store, "acme-corp") == {"Customer is corp"}


def test_facts_follow_the_user_to_a_new_thread(store: BaseStore) -> None:
    model = ScriptedModel(script=[tenant_script])
    graph = build_graph(model, checkpointer=InMemorySaver(), store=store)
    graph.invoke({"messages": [HumanMessage("I am ana", id="h1")]}, config("t1", "ana"))
    graph.invoke({"messages": [HumanMessage("ok", id="h2")]}, config("t1", "ana"))
    calls = model.calls
    fresh = graph.invoke({"messages": [HumanMessage("hello", id="n1")]}, config("t9", "ana"))
    assert model.calls == calls  # loaded from PostgreSQL, nothing extracted again
    assert contents(fresh["facts"]) == {"Customer is ana"}


async def test_async_postgres_store(postgres_url: str) -> None:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with AsyncPostgresStore.from_conn_string(postgres_url) as pg_store:
        await pg_store.setup()
        node = FactExtractionNode(
            ScriptedModel(script=[tenant_script]), batch_rounds=1, store=pg_store
        )
        msgs: list[Any] = [HumanMessage("I am amy", id="h1"), AIMessage("hi", id="a1")]
        update = await node.ainvoke({"messages": msgs}, {"configurable": {"user_id": "amy"}})
        assert contents(merge_facts({}, update["facts"])) == {"Customer is amy"}
        items = await pg_store.asearch(("histcompress", "facts", "amy"), limit=10)
        assert [i.value["content"] for i in items] == ["Customer is amy"]
        # a namespace that is a string prefix of another is a different tenant
        assert await pg_store.asearch(("histcompress", "facts", "am"), limit=10) == []
        for item in items:
            await pg_store.adelete(item.namespace, item.key)
