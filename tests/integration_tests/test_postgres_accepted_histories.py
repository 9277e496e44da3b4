"""Wild histories and removals (see `tests.histories`) through the chat history on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage

from langchain_histcompress.storage import SQLHistoryStore
from tests.histories import history_updates, wild_history
from tests.unit_tests.test_accepted_histories import check_chat_history, check_chat_updates

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def store(postgres_url: str) -> Iterator[SQLHistoryStore]:
    pg = SQLHistoryStore(postgres_url)
    yield pg
    pg.close()


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(messages=wild_history(max_rounds=6))
def test_chat_history_on_wild_histories(
    store: SQLHistoryStore, messages: list[BaseMessage]
) -> None:
    check_chat_history(messages, store)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=history_updates(max_rounds=5), strict=st.booleans())
def test_chat_history_applies_removals_and_strict_checks(
    store: SQLHistoryStore, batches: list[list[BaseMessage]], strict: bool
) -> None:
    check_chat_updates(batches, store, strict=strict)
