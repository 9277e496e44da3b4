"""Cross-thread fact memory on a real PostgreSQL ``PostgresStore`` (per-user namespaces)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.base import BaseStore

from langchain_histcompress import FactExtractionNode
from langchain_histcompress.core.facts import merge_facts
from tests.fakes import ScriptedChatModel
from tests.unit_tests.test_memory_node import (
    check_facts_follow_the_user_across_threads,
    check_similar_tenants_never_see_each_other,
    contents,
    tenant_script,
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
    check_similar_tenants_never_see_each_other(store)


def test_facts_follow_the_user_to_a_new_thread(store: BaseStore) -> None:
    check_facts_follow_the_user_across_threads(store)


async def test_async_postgres_store(postgres_url: str) -> None:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with AsyncPostgresStore.from_conn_string(postgres_url) as pg_store:
        await pg_store.setup()
        node = FactExtractionNode(
            ScriptedChatModel(script=[tenant_script], repeat_last=True),
            batch_rounds=1,
            store=pg_store,
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
