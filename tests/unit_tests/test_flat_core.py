"""Round compression's per-turn work, folding turns included, does not grow with the history.

Each test drives a face (the compressor, thread summarization, the graph node with and without
ids) turn by turn on a short and on a long grown history and counts what a turn does with the
history and the coverage: message positions it reads, message pointers it copies (slices), ids
it writes into graph state, bytes it allocates. The counts must not depend on the history's
length. No timing: speed itself is measured by ``histcompress bench``. The soundness tests check
that the cheaper bookkeeping still notices a covered message that was replaced or removed.
"""

from __future__ import annotations

import copy
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.message import add_messages

from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.edge.thread_summary import thread_summarizer
from langchain_histcompress.faces.nodes import (
    RoundCompressionNode,
    summary_from_state,
    summary_to_state,
)
from tests.fakes import ScriptedSummarizer
from tests.unit_tests.test_flat_turns import LONG, SHORT, grown, turn_ends

# the same grown histories and turn positions as the other flat-turn tests


class Counted(list[BaseMessage]):
    """A message list that counts the positions it serves, one by one or as slices."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.served = 0

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        found = super().__getitem__(key)
        self.served += len(found) if isinstance(key, slice) else 1
        return found

    def __iter__(self) -> Iterator[BaseMessage]:
        self.served += len(self)
        return super().__iter__()


def _summarizer() -> ScriptedSummarizer:
    return ScriptedSummarizer()


def _compressor(retain: int = 3) -> RoundCompressor:
    """Folds 2 rounds once 2 + ``retain`` are pending (one round a turn: TaskWeaver's rhythm)."""
    return RoundCompressor(
        _summarizer(),
        token_counter=count_tokens_approximately,
        timeout=None,
        trigger=("rounds", 2 + retain),
        keep=("rounds", retain),
    )


def _caught_up(history: list[BaseMessage], end: int, retained: int) -> RunningSummary:
    """A summary covering every round of ``history[:end]`` (ending with a question) but the
    newest ``retained``."""
    covered = [str(m.id) for m in ensure_ids(history[: end - 1 - 2 * (retained - 1)])[1:]]
    return RunningSummary(content="x", text="x", covered_ids=covered)


# --------------------------------------------------------------------------- compressor


FACES: dict[str, Callable[[], RoundCompressor]] = {
    "round_compression": _compressor,
    "thread_summary": lambda: thread_summarizer(
        _summarizer(), token_counter=count_tokens_approximately, timeout=None
    ),
}


def _compressor_turns(name: str, rounds: int) -> list[tuple[bool, int]]:
    """(folded, positions served) per turn of a caught-up compressor."""
    compressor = FACES[name]()
    history = grown(rounds)
    ends = turn_ends(rounds)
    summary = _caught_up(history, ends[0] - 2, retained=3)
    summary = compressor.compress(history[: ends[0] - 2], summary).summary  # finds the tail
    out = []
    for end in ends:
        counted = Counted(history[:end])
        result = compressor.compress(counted, summary)
        summary = result.summary
        out.append((result.compressed, counted.served))
    return out


@pytest.mark.parametrize("name", sorted(FACES))
def test_compressor_turns_serve_as_many_positions_on_any_history(name: str) -> None:
    """Every position read or copied (the covered prefix included) is counted."""
    short, long = _compressor_turns(name, SHORT), _compressor_turns(name, LONG)
    assert [f for f, _ in short] == [f for f, _ in long]
    assert any(f for f, _ in long)  # folding turns are among those counted
    assert short == long
    assert max(n for _, n in long) < 100  # the tail and the lead, never the prefix


def _fold_allocations(rounds: int) -> int:
    """Peak bytes allocated by the worst of a thread summarizer's folding turns."""
    compressor = FACES["thread_summary"]()
    history = grown(rounds)
    ends = turn_ends(rounds)
    summary = _caught_up(history, ends[0] - 2, retained=1)
    summary = compressor.compress(history[: ends[0] - 2], summary).summary
    peaks = []
    for end in ends:
        turn = history[:end]
        tracemalloc.start()
        try:
            result = compressor.compress(turn, summary)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert result.compressed
        summary = result.summary
    return max(peaks[1:])  # the first turn may still settle caches


def test_folding_allocates_the_same_on_a_long_history() -> None:
    """Copying the covered prefix once would allocate 80 KB more on the long history."""
    short, long = _fold_allocations(SHORT), _fold_allocations(LONG)
    assert long < short + 20_000


# --------------------------------------------------------------------------- graph node


def _node_turns(rounds: int, *, ids: bool) -> list[tuple[bool, int, int, int]]:
    """(folded, positions served, ids written, runs) per turn of a caught-up node."""
    node = RoundCompressionNode(_compressor())
    history = grown(rounds, ids=ids)
    ends = turn_ends(rounds)
    state: dict[str, Any] = {
        "running_summary": summary_to_state(_caught_up(history, ends[0] - 2, retained=3))
    }
    node.invoke({**state, "messages": history[: ends[0] - 2]})  # finds the tail
    out = []
    for end in ends:
        counted = Counted(history[:end])
        update = node.invoke({**state, "messages": counted})
        node.model_input({**state, **update, "messages": counted})  # what the model node sends
        written = 0
        if "running_summary" in update:
            before = state["running_summary"]["covered_ids"]
            runs = update["running_summary"]["covered_ids"]
            # Runs shared with the previous value (the same list objects) are not written.
            written = sum(len(r) for r in runs if not any(r is old for old in before))
            state["running_summary"] = update["running_summary"]
        out.append(
            (
                "running_summary" in update,
                counted.served,
                written,
                len(state["running_summary"]["covered_ids"]),
            )
        )
    return out


@pytest.mark.parametrize("ids", [True, False], ids=["add_messages", "operator.add"])
def test_node_turns_read_and_write_as_much_on_any_history(ids: bool) -> None:
    short, long = _node_turns(SHORT, ids=ids), _node_turns(LONG, ids=ids)
    assert sum(f for f, *_ in long) >= 3  # folding turns are among those counted
    assert short == long
    assert max(n for _, n, _, _ in long) < 200  # the short history alone has 500
    assert max(w for _, _, w, _ in long) <= 4 * 4  # a fold writes its own ids (merged runs)


def test_node_state_survives_a_checkpoint_round_trip() -> None:
    serde = JsonPlusSerializer()
    node = RoundCompressionNode(_compressor(retain=1))
    history = grown(20)
    state: dict[str, Any] = {"running_summary": None}
    written = []
    for end in range(4, len(history), 2):
        update = node.invoke({**state, "messages": history[:end]})
        if "running_summary" in update:
            # As a checkpointer stores and hands it back: a deserialized copy.
            state["running_summary"] = serde.loads_typed(
                serde.dumps_typed(update["running_summary"])
            )
            written.append(summary_from_state(update))
    restored = summary_from_state(state)
    assert restored == written[-1]
    assert len(written) > 3
    # Every message is in the view or covered, never both (rule 2).
    node.invoke({**state, "messages": history})
    shown = {m.id for m in node.model_input({**state, "messages": history})}
    for message in history[1:]:
        assert (message.id in shown) != (message.id in restored.covered_ids)


def test_node_reads_the_flat_covered_id_list_earlier_versions_wrote() -> None:
    node = RoundCompressionNode(_compressor(retain=1))
    history = grown(10)
    summary = _caught_up(history, 13, retained=1)
    old_shape = {**summary.model_dump(mode="json")}  # covered_ids: one sorted list
    assert isinstance(old_shape["covered_ids"][0], str)
    update = node.invoke({"running_summary": old_shape, "messages": history[:17]})
    grown_summary = summary_from_state(update)
    assert grown_summary is not None and grown_summary.covered_ids > summary.covered_ids
    assert all(isinstance(run, list) for run in update["running_summary"]["covered_ids"])


# --------------------------------------------------------------------------- soundness


def _caught_up_compressor(
    history: list[BaseMessage],
) -> tuple[RoundCompressor, RunningSummary, int]:
    compressor = _compressor(retain=1)
    end = len(history) - 7  # three more rounds follow
    summary = compressor.compress(history[:end], _caught_up(history, end, retained=1)).summary
    assert summary is not None
    assert compressor.compress(history[:end], summary).messages  # the cursor is in place
    return compressor, summary, end


def _check_rule_2(
    result_messages: list[BaseMessage], history: list[BaseMessage], covered: Any
) -> None:
    shown = {m.id for m in result_messages}
    for message in history[1:]:
        assert (message.id in shown) != (message.id in covered), message.id


def test_a_covered_message_replaced_with_a_new_id_is_shown() -> None:
    history = grown(30)
    compressor, summary, end = _caught_up_compressor(history)
    replaced = list(history[:end])
    replaced[9] = HumanMessage("edited", id="new-id")
    result = compressor.compress(replaced, summary)
    assert "new-id" in {m.id for m in result.messages}
    _check_rule_2(result.messages, replaced, result.summary.covered_ids)  # type: ignore[union-attr]


def test_a_covered_message_replaced_in_place_is_noticed() -> None:
    """The caller's own list edited in place: the recorded objects still differ."""
    history = grown(30)
    compressor, summary, end = _caught_up_compressor(history)
    mine = list(history[:end])
    compressor.compress(mine, summary)
    mine[9] = AIMessage("edited", id="in-place")
    result = compressor.compress(mine, summary)
    assert "in-place" in {m.id for m in result.messages}


def test_add_messages_replacing_and_removing_covered_messages() -> None:
    history = grown(30)
    compressor, summary, end = _caught_up_compressor(history)
    state = list(history[:end])
    covered_id = str(history[7].id)
    # LangGraph replaces a message by id (same id, new content): still covered by id.
    step = add_messages(state, [AIMessage("rewritten", id=covered_id)])
    result = compressor.compress(step, summary)
    assert covered_id not in {m.id for m in result.messages}
    _check_rule_2(result.messages, step, result.summary.covered_ids)  # type: ignore[union-attr]
    # A removed covered message shifts the prefix: the cursor is not trusted, nothing is lost.
    step = add_messages(step, [RemoveMessage(id=str(history[3].id))])
    result = compressor.compress(step, summary)
    _check_rule_2(result.messages, step, result.summary.covered_ids)  # type: ignore[union-attr]
    # A new message inserted in the prefix (new id) is shown.
    inserted = [*step[:5], HumanMessage("late", id="late"), *step[5:]]
    result = compressor.compress(inserted, summary)
    assert "late" in {m.id for m in result.messages}


def test_copies_of_the_history_match_by_id() -> None:
    """A history rebuilt from a checkpoint (equal copies) keeps its tail and coverage."""
    history = grown(30)
    compressor, summary, end = _caught_up_compressor(history)
    before = compressor.compress(history[:end], summary)
    copies = copy.deepcopy(history[:end])
    after = compressor.compress(copies, summary)
    assert [m.id for m in after.messages] == [m.id for m in before.messages]


def test_an_older_summary_still_checks_its_own_prefix() -> None:
    """After a fold extends the shared objects, the previous summary's cursor still works."""
    history = grown(30)
    compressor, summary, end = _caught_up_compressor(history)
    folded = compressor.compress(history[: end + 4], summary)
    assert folded.compressed
    again = compressor.compress(history[:end], summary)  # the older summary, reused
    _check_rule_2(again.messages, history[:end], summary.covered_ids)
    other = list(history[:end])
    other[5] = HumanMessage("changed", id="changed")
    result = compressor.compress(other, summary)
    assert "changed" in {m.id for m in result.messages}
