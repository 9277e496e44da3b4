from __future__ import annotations

import copy
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core.errors import BudgetError
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.faces.reducers import MaxTokensReducer, TruncationReducer
from tests.histories import history

COUNTER = TiktokenCounter()


def _check(
    before: list[BaseMessage], original: list[BaseMessage], out: list[BaseMessage] | None
) -> None:
    assert original == before, "input was mutated"
    if out is None:
        return
    assert validate_history(out) == []
    if original and isinstance(original[0], SystemMessage):
        assert out[0] is original[0]
    humans = [m for m in original if isinstance(m, HumanMessage)]
    if humans:
        assert any(m is humans[-1] for m in out)
    ids = [m.id for m in original]
    positions = [ids.index(m.id) for m in out]
    assert positions == sorted(positions), "order changed"


@settings(max_examples=200, deadline=None)
@given(history(), st.integers(1, 15), st.integers(0, 5))
def test_truncation_invariants(msgs: list[BaseMessage], target: int, threshold: int) -> None:
    before = copy.deepcopy(msgs)
    _check(
        before, msgs, TruncationReducer(target_count=target, threshold_count=threshold).reduce(msgs)
    )


@settings(max_examples=200, deadline=None)
@given(history(), st.integers(20, 600))
def test_max_tokens_invariants(msgs: list[BaseMessage], budget: int) -> None:
    before = copy.deepcopy(msgs)
    try:
        out = MaxTokensReducer(max_tokens=budget, token_counter=COUNTER).reduce(msgs)
    except BudgetError:
        return
    _check(before, msgs, out)
    if out is not None:
        assert COUNTER(out) <= budget


@settings(max_examples=60, deadline=None)
@given(history(), st.integers(20, 600), st.booleans(), st.booleans())
def test_max_tokens_invariants_with_a_whole_request_counter(
    msgs: list[BaseMessage], budget: int, partial: bool, start_on_human: bool
) -> None:
    requests: list[list[BaseMessage]] = []

    def counter(messages: Sequence[BaseMessage]) -> int:
        requests.append(list(messages))
        return count_tokens_approximately(messages)

    before = copy.deepcopy(msgs)
    reducer = MaxTokensReducer(
        max_tokens=budget,
        token_counter=counter,
        allow_partial=partial,
        start_on_human=start_on_human,
    )
    try:
        out = reducer.reduce(msgs)
    except BudgetError:
        return
    _check(before, msgs, out)
    if out is not None:
        assert count_tokens_approximately(out) <= budget
    for request in requests:  # never a lone tool result or a split tool group
        assert not any(m.type == "tool" for m in request[:1])
        assert validate_history(request) == []
