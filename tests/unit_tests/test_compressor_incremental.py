"""Per-turn work stays proportional to the uncovered tail: cursors, caches and their fallbacks.

No timing assertions: the tests check *what is read* (a list that records every index it
serves) and that the shortcuts give exactly the results of the full computation.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, SupportsIndex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core import summary_state as _summary_state
from langchain_histcompress.core.errors import ConfigurationError, InvalidHistoryError
from langchain_histcompress.core.rounds import ensure_ids, validate_history
from langchain_histcompress.core.running_summary import (
    _INSORT_LIMIT,
    RunningSummary,
    extended_summary,
    ids_added_since,
)
from langchain_histcompress.edge.compressor import RoundCompressor, view, with_ids
from langchain_histcompress.edge.round_planning import pending_rounds
from langchain_histcompress.edge.thread_summary import thread_summarizer
from langchain_histcompress.faces.memory import FactExtractionNode
from langchain_histcompress.faces.middleware import RoundCompressionMiddleware
from langchain_histcompress.faces.nodes import (
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
    summary_to_state,
)
from tests.fakes import (
    ScriptedSummarizer,
    conversation,
    model_request,
    prompt_ids,
    through_middleware,
)
from tests.unit_tests.test_compressor_properties import make, options, scenario

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


class Probe(list[BaseMessage]):
    """A message list that records every position it serves."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads: set[int] = set()
        self.prefix_copies: list[tuple[int, int]] = []
        self.iterated = False

    def reset(self) -> None:
        self.reads.clear()
        self.prefix_copies.clear()
        self.iterated = False

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if start <= 1 < stop < len(self) and step == 1:  # the cursor's pointer check
                self.prefix_copies.append((start, stop))
            else:
                self.reads.update(range(start, stop, step))
        else:
            self.reads.add(key if key >= 0 else len(self) + key)
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[BaseMessage]:
        self.iterated = True
        return super().__iter__()

    def index(self, *args: Any) -> int:  # pragma: no cover - not used by the package
        self.iterated = True
        return super().index(*args)

    def __contains__(self, item: object) -> bool:  # pragma: no cover
        self.iterated = True
        return super().__contains__(item)

    def count(self, value: Any) -> int:  # pragma: no cover
        self.iterated = True
        return super().count(value)

    def __reversed__(self) -> Iterator[BaseMessage]:  # pragma: no cover
        self.iterated = True
        return super().__reversed__()

    def __eq__(self, other: object) -> bool:
        self.iterated = True
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def pop(self, index: SupportsIndex = -1) -> BaseMessage:  # pragma: no cover
        raise AssertionError("the package must not mutate the history")


def chat(rounds: int, *, system: bool = True, prefix: str = "") -> list[BaseMessage]:
    preamble = SystemMessage("Be brief.", id=f"{prefix}sys") if system else None
    return conversation(rounds, system=preamble, prefix=prefix)


def compressor(**kwargs: Any) -> RoundCompressor:
    return RoundCompressor(
        ScriptedSummarizer(), token_counter=count_tokens_approximately, timeout=None, **kwargs
    )


def clone(summary: RunningSummary | None) -> RunningSummary | None:
    """An equal summary without any private cache (as read back from storage)."""
    if summary is None:
        return None
    return RunningSummary.model_validate(summary.model_dump(mode="json"))


def assert_tail_only(probe: Probe, end: int, window: int) -> None:
    """Only the newest ``window`` positions were read, plus at most three O(1) spot checks
    (the lead scan's stop and the cursor's checks around the tail start), and at most one
    copy of the covered prefix per cursor check or new cursor (the cursor compares object
    pointers, reading no message): a turn checks once per face hook and records one new
    cursor when it compresses.
    """
    assert not probe.iterated
    assert len(probe.prefix_copies) <= 3, probe.prefix_copies
    far = {i for i in probe.reads if i < end - window}
    assert len(far) <= 3, sorted(far)[:10]


def read(raw: dict[str, Any]) -> RunningSummary:
    found = summary_from_state({"running_summary": raw})
    assert found is not None
    return found


# --------------------------------------------------------------------------- equivalence


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), options(), st.data())
def test_cursor_gives_the_same_results_as_a_full_scan(
    messages: list[BaseMessage], opts: dict[str, Any], data: st.DataObject
) -> None:
    """Replaying with the summary object (cursor) equals replaying with a cache-free copy."""
    fast, fast_model = make(opts)
    full, full_model = make(opts)
    valid_ends = [n for n in range(1, len(messages) + 1) if validate_history(messages[:n]) == []]
    ends = [
        *data.draw(st.lists(st.sampled_from(valid_ends), max_size=8).map(sorted)),
        len(messages),
    ]
    summary: RunningSummary | None = None
    for end in ends:
        prefix = messages[:end]
        expected = full.compress(prefix, clone(summary))
        got = fast.compress(prefix, summary)
        assert [m.id for m in got.messages] == [m.id for m in expected.messages]
        assert [m.content for m in got.messages] == [m.content for m in expected.messages]
        assert (got.calls, got.deferred_rounds) == (expected.calls, expected.deferred_rounds)
        if expected.summary is None:
            assert got.summary is None
        else:
            assert got.summary is not None
            assert got.summary.covered_ids == expected.summary.covered_ids
            assert got.summary.model_dump(mode="json")["covered_ids"] == sorted(
                expected.summary.covered_ids
            )
            assert view(prefix, got.summary) == view(prefix, clone(got.summary))
            assert pending_rounds(prefix, got.summary) == pending_rounds(prefix, clone(got.summary))
        summary = got.summary
    assert [prompt_ids(p) for p in fast_model.prompts] == [
        prompt_ids(p) for p in full_model.prompts
    ]


def test_stale_cursor_falls_back_to_the_scan() -> None:
    c = compressor(trigger=("rounds", 3), keep=("rounds", 1))
    history = chat(12)
    result = c.compress(history)
    summary = result.summary
    assert summary is not None and result.calls == 1 and summary.rounds_covered == 11
    # The first covered messages were removed (destructive mode), or replaced by others.
    trimmed = [history[0], *history[5:]]
    assert view(trimmed, summary) == view(trimmed, clone(summary))
    replaced = [history[0], *chat(12, system=False, prefix="x")]
    assert view(replaced, summary) == view(replaced, clone(summary))
    # ... then the original history again: a fresh scan, the same answer.
    assert view(history, summary) == view(history, clone(summary))


def test_cursor_rejects_a_different_history_with_the_same_ids_at_the_cut() -> None:
    c = compressor(trigger=("rounds", 3), keep=("rounds", 1))
    history = chat(12)
    summary = c.compress(history).summary
    assert summary is not None
    uncovered = {m.id for m in history if m.id not in summary.covered_ids}
    # Same ids around the cut, but the first conversation message is not covered.
    edited = [history[0], HumanMessage("new", id="new-h"), *history[2:]]
    shown = [m.id for m in view(edited, summary)]
    assert "new-h" in shown
    assert uncovered <= set(shown)
    assert view(edited, summary) == view(edited, clone(summary))


# --------------------------------------------------------------------------- reads


def test_compress_reads_only_the_tail_once_the_cursor_is_known() -> None:
    c = compressor(trigger=("rounds", 5), keep=("rounds", 3))
    full = chat(1500)
    summary = c.compress(full[:1001]).summary  # 500 rounds pending: one call folds 497
    while summary is not None:
        again = c.compress(full[:1001], summary)
        if not again.compressed:
            break
        summary = again.summary
    assert summary is not None
    for end in range(1003, 1021, 2):
        probe = Probe(full[:end])
        result = c.compress(probe, summary)
        assert_tail_only(probe, end, 24)
        summary = result.summary
    # The results are those of the full computation.
    assert view(full[:1019], summary) == view(full[:1019], clone(summary))


def test_invalid_tail_is_still_rejected_with_the_cursor() -> None:
    c = compressor(trigger=("rounds", 3), keep=("rounds", 1))
    history = chat(20)
    summary = c.compress(history).summary
    assert summary is not None
    duplicate = AIMessage("again", id="a0")  # reuses a covered id
    with pytest.raises(InvalidHistoryError, match="duplicate_message_id"):
        c.compress([*history, HumanMessage("q", id="q"), duplicate], summary)
    with pytest.raises(ConfigurationError, match=r"messages\[41\] \(human\) has no id"):
        c.compress([*history, HumanMessage("no id")], summary)
    with pytest.raises(ConfigurationError, match=r"messages\[41\] is a str"):
        c.compress([*history, "garbage"], summary)  # type: ignore[list-item]


def test_thread_summarizer_replay_reads_only_new_messages() -> None:
    c = thread_summarizer(
        ScriptedSummarizer(), token_counter=count_tokens_approximately, timeout=None
    )
    full = chat(300)
    summary = None
    for end in range(2, 400, 2):
        summary = c.compress(full[:end], summary).summary
    assert summary is not None
    for end in range(400, 420, 2):
        probe = Probe(full[:end])
        summary = c.compress(probe, summary).summary
        assert summary is not None
        assert_tail_only(probe, end, 8)
    assert summary.model_dump(mode="json")["covered_ids"] == sorted(summary.covered_ids)


# --------------------------------------------------------------------------- summaries


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.text(min_size=1, max_size=6), max_size=_INSORT_LIMIT + 10), max_size=6),
    st.sets(st.integers(0, 5)),
)
def test_grown_summaries_serialize_like_validated_ones(
    deltas: list[list[str]], dumped: set[int]
) -> None:
    summary: RunningSummary | None = None
    fields = {"content": {"ConversationSummary": "x"}, "text": "x", "created_at": T0}
    for step, delta in enumerate(deltas):
        grown = extended_summary(summary, delta, version=step + 1, **fields)
        base = summary.covered_ids if summary is not None else frozenset()
        expected = RunningSummary(covered_ids=base | set(delta), version=step + 1, **fields)
        assert grown == expected
        assert grown.model_fields_set == expected.model_fields_set
        if step in dumped:
            assert grown.model_dump(mode="json") == expected.model_dump(mode="json")
        summary = grown
    if summary is not None:
        state, dump = summary_to_state(summary), summary.model_dump(mode="json")
        runs, ids = state.pop("covered_ids"), dump.pop("covered_ids")
        assert state == dump  # every other field as dumped; the ids as runs:
        assert sorted(i for run in runs for i in run) == ids
        assert RunningSummary.model_validate(summary_to_state(summary)) == summary
        assert list(summary_to_state(summary)) == list(RunningSummary.model_fields)


def test_next_summary_validates_new_ids() -> None:
    with pytest.raises(ValueError, match="valid string"):
        extended_summary(None, [3], content="x", text="x")  # type: ignore[list-item]


def test_serialized_ids_are_a_private_copy() -> None:
    summary = extended_summary(None, ["b", "a"], content="x", text="x")
    first = summary.model_dump(mode="json")["covered_ids"]
    first.append("zzz")
    grown = extended_summary(summary, ["c"], content="y", text="y", version=2)
    assert grown.model_dump(mode="json")["covered_ids"] == ["a", "b", "c"]
    assert summary.model_dump(mode="json")["covered_ids"] == ["a", "b"]


# --------------------------------------------------------------------------- state faces


def test_summary_read_back_from_state_is_the_same_object_until_changed() -> None:
    summary = extended_summary(None, ["m2", "m1"], content={"ConversationSummary": "x"}, text="x")
    raw = summary_to_state(summary)
    assert read(raw) is summary
    raw["covered_ids"].append("m3")  # edited in place: validated again
    assert read(raw) is not summary and "m3" in read(raw).covered_ids
    raw["covered_ids"] = ["m1"]
    assert read(raw).covered_ids == {"m1"}
    raw["content"]["ConversationSummary"] = "edited"
    assert read(raw).content == {"ConversationSummary": "edited"}
    raw["version"] = 7
    assert read(raw).version == 7
    raw["text"] = "tampered"
    with pytest.raises(ConfigurationError, match="sha256"):
        read(raw)

    other = extended_summary(None, ["m1"], content="y", text="y")
    copied = copy.deepcopy(summary_to_state(other))  # as a checkpointer hands it back
    first = read(copied)
    assert first == other and first is not other
    assert read(copied) is first


def test_state_cache_keeps_about_one_entry_per_thread() -> None:
    begin = extended_summary(None, ["cache-test-0"], content="x", text="x")
    summary = read(copy.deepcopy(summary_to_state(begin)))
    for step in range(2, 60):  # a thread behind a checkpointer: every turn reads a copy
        read(copy.deepcopy(summary_to_state(summary)))
        grown = extended_summary(
            summary, [f"cache-test-{step}"], content="x", text="x", version=step
        )
        summary = read(copy.deepcopy(summary_to_state(grown)))
    mine = [e for e in _summary_state._cache.values() if "cache-test-0" in e.summary.covered_ids]
    assert len(mine) == 1
    assert mine[0].summary is summary
    assert len(_summary_state._cache) <= _summary_state._CACHE_SIZE


def test_node_reads_only_the_tail_of_a_long_state() -> None:
    c = compressor(trigger=("rounds", 5), keep=("rounds", 3))
    node = RoundCompressionNode(c)
    full = chat(700)
    state: dict[str, Any] = {"messages": full[:1001]}
    for _ in range(100):  # fold the backlog
        update = node.invoke(state)
        if "running_summary" not in update:
            break
        state["running_summary"] = update["running_summary"]
    for end in range(1003, 1021, 2):
        probe = Probe(full[:end])
        state["messages"] = probe
        update = node.invoke(state)
        state.update({k: v for k, v in update.items() if k == "running_summary"})
        shown = node.model_input(state)
        assert_tail_only(probe, end, 24)
        summary = summary_from_state(state)
        assert shown == view(full[:end], clone(summary))
        assert build_model_input(state) == shown


def test_node_with_id_less_messages_still_uses_deterministic_ids() -> None:
    c = compressor(trigger=("rounds", 3), keep=("rounds", 1))
    node = RoundCompressionNode(c)
    history: list[BaseMessage] = [SystemMessage("sys")]
    for n in range(6):
        history += [HumanMessage(f"q{n}"), AIMessage(f"a{n}")]
    state: dict[str, Any] = {"messages": history}
    first = node.invoke(state)
    state["running_summary"] = first["running_summary"]
    again = node.invoke(state)
    assert "running_summary" not in again
    shown = node.model_input(state)
    assert shown[0] is history[0]  # the caller's own preamble
    expected = view(ensure_ids(history), clone(summary_from_state(state)))
    assert shown[1:] == expected[1:]
    ided = with_ids(history, None)
    assert ided[0] is history[0] and all(m.id for m in ided[1:])
    complete = ensure_ids(history)
    assert with_ids(complete, None) is complete


def test_middleware_request_reads_only_the_tail() -> None:
    c = compressor(trigger=("rounds", 5), keep=("rounds", 3))
    middleware = RoundCompressionMiddleware(c)
    full = chat(600, system=False)
    state: dict[str, Any] = {"messages": full[:1001]}
    system = SystemMessage("Be brief.")
    model = c.summarizer.model
    for _ in range(100):
        _, update = through_middleware(middleware, model_request(model, state["messages"], state))
        if not update:
            break
        state.update(update)
    for end in range(1003, 1011, 2):
        probe = Probe(full[:end])
        state["messages"] = probe
        sent, update = through_middleware(middleware, model_request(model, probe, state, system))
        state.update(update)
        assert_tail_only(probe, end, 24)
        expected = view([system, *full[:end]], clone(summary_from_state(state)))
        assert [sent.system_message, *sent.messages] == expected


def test_fact_node_reads_only_messages_after_its_cursor() -> None:
    model = GenericFakeChatModel(messages=itertools.repeat(AIMessage("[]")))
    node = FactExtractionNode(model, batch_rounds=2, use_runtime_store=False)
    full = chat(600, system=False)
    probe = Probe(full[:1000])
    cursor = full[989].id
    update = node.invoke({"messages": probe, "facts_processed_through": cursor})
    assert not probe.iterated
    assert min(probe.reads) >= 989
    assert update["facts_processed_through"] == full[997].id
    assert update["facts_extraction"]["pending_rounds"] == 1


def test_added_since_gives_the_commit_delta_without_a_set_difference() -> None:
    first = extended_summary(None, ["a", "b"], content="x", text="x")
    second = extended_summary(first, ["c", "a"], content="y", text="y", version=2)
    third = extended_summary(second, ["e", "d"], content="z", text="z", version=3)
    assert ids_added_since(third, second) == ["d", "e"]
    assert ids_added_since(third, first) == sorted(third.covered_ids - first.covered_ids)
    assert ids_added_since(third, clone(second)) is None  # type: ignore[arg-type]
    assert ids_added_since(first, third) is None
