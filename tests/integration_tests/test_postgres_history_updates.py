"""History writes on PostgreSQL: refused writes change no row, removals are one transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from langchain_histcompress.storage import HistoryStore, SQLHistoryStore
from tests.unit_tests.test_history_updates import CHECKS

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def store(postgres_url: str) -> Iterator[SQLHistoryStore]:
    pg = SQLHistoryStore(postgres_url)
    yield pg
    pg.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_history_updates_on_postgres(
    store: SQLHistoryStore, check: Callable[[HistoryStore], None]
) -> None:
    check(store)
