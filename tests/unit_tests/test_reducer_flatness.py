"""Each reducer's per-turn work on a growing history reads only what is new or kept.

A reducer is run turn after turn on a history that grows by one exchange per turn, once from a
short history and once from a long one. Messages record when one of their fields is read; the
number of distinct messages read over the same turns must not grow with the history's length.
(Comparing object identities reads no field, so it is not counted.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, SystemMessage

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.faces.reducers import (
    HistoryReducer,
    MaxTokensReducer,
    SummarizationReducer,
    TruncationReducer,
    with_history_reducer,
)
from tests.fakes import ScriptedChatModel, numbered, summary_json
from tests.read_counting import LOG, ReadAI, ReadHuman


def _exchange(n: int, *, ids: bool) -> list[BaseMessage]:
    return [
        ReadHuman(f"question {n}", id=f"h{n}" if ids else None),
        ReadAI(f"answer {n}", id=f"a{n}" if ids else None),
    ]


def _reads_per_turns(make: Callable[[], HistoryReducer], size: int, *, ids: bool) -> int:
    """Distinct messages read over 12 turns after warming up on ``size`` exchanges."""
    reducer = make()
    history: list[BaseMessage] = [SystemMessage("be brief")]
    for n in range(size):
        history += _exchange(n, ids=ids)
    reducer.reduce(history)  # the first call may read everything once
    reads = 0
    with LOG.watching(None) as read:
        for n in range(size, size + 12):
            history += _exchange(n, ids=ids)
            read.clear()
            reducer.reduce(history)
            reads += len(read)
    return reads


def _summarizing() -> SummarizationReducer:
    model = ScriptedChatModel(default=numbered(lambda n: summary_json(f"summary #{n}")))
    return SummarizationReducer(model, target_count=6, threshold_count=3)


REDUCERS: dict[str, Callable[[], HistoryReducer]] = {
    "truncation": lambda: TruncationReducer(target_count=10),
    "max_tokens": lambda: MaxTokensReducer(max_tokens=150, token_counter=TiktokenCounter()),
    "summarization": _summarizing,
}


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_per_turn_reads_do_not_grow_with_history(name: str, ids: bool) -> None:
    short = _reads_per_turns(REDUCERS[name], 100, ids=ids)
    long = _reads_per_turns(REDUCERS[name], 1_000, ids=ids)
    assert short > 0
    assert long <= short + 4, (short, long)


class _WalkedList(list):  # type: ignore[type-arg]
    """A history that counts the items any loop over it walks."""

    walked = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            _WalkedList.walked += 1
            yield item


def _walked_per_turns(size: int) -> int:
    answer = ScriptedChatModel(default=lambda _p: "ok")
    chat = with_history_reducer(answer, TruncationReducer(target_count=10))
    history = _WalkedList([SystemMessage("be brief")])
    for n in range(size):
        history += _exchange(n, ids=True)
    chat.invoke(history)  # the first call may walk everything once
    _WalkedList.walked = 0
    for n in range(size, size + 12):
        history += _exchange(n, ids=True)
        chat.invoke(history)
    return _WalkedList.walked


def test_with_history_reducer_does_not_walk_the_whole_history_each_turn() -> None:
    short, long = _walked_per_turns(100), _walked_per_turns(1_000)
    assert long <= short + 4, (short, long)
    assert _walked_per_turns(100) < 12 * 100  # not one full walk per turn
