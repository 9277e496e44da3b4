"""Per-turn work of every face does not grow with the history it has already seen.

Each test drives one face turn by turn on a short and on a long grown history and counts what
a turn touches: the positions of the history it reads (a list that records them), the covered
ids it copies, the messages it fingerprints or tokenizes. The counts must be the same on both
histories. No timing: speed itself is measured by ``histcompress bench``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.coverage import CoveredIds
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary, extended_summary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.edge.thread_summary import thread_summarizer
from langchain_histcompress.faces.nodes import RoundCompressionNode, summary_to_state
from langchain_histcompress.faces.rephrase import HistoryRephraseNode, create_history_rephraser
from langchain_histcompress.recall import retrieval
from langchain_histcompress.recall.retrieval import BM25TurnRetriever, EvidenceRetriever
from tests.fakes import ScriptedSummarizer, conversation, model_request, through_middleware
from tests.unit_tests.test_compressor_incremental import Probe

SHORT, LONG = 250, 5_000  # rounds: 500 and 10,000 messages
TURNS = 6


def grown(rounds: int, *, ids: bool = True) -> list[BaseMessage]:
    history = conversation(rounds + TURNS + 1, system=SystemMessage("Be brief.", id="sys"))
    if not ids:
        history = [history[0], *(m.model_copy(update={"id": None}) for m in history[1:])]
    return history


def turn_ends(rounds: int) -> list[int]:
    """History lengths at each turn: through the question of the next round."""
    return [1 + 2 * (rounds + t) + 1 for t in range(TURNS)]


def far_reads(probe: Probe, end: int, window: int) -> set[int]:
    return {i for i in probe.reads if i < end - window}


def per_turn(
    rounds: int, warm: Callable[[list[BaseMessage]], None], turn: Callable[[Probe], Any]
) -> list[int]:
    """Positions read before the newest 40 at each turn (spot checks allowed)."""
    history = grown(rounds)
    ends = turn_ends(rounds)
    warm(history[: ends[0] - 2])
    out = []
    for end in ends:
        probe = Probe(history[:end])
        turn(probe)
        assert not probe.iterated
        out.append(len(far_reads(probe, end, 40)))
    return out


# --------------------------------------------------------------------------- coverage


class _NoFullRead:
    """Makes reading a whole covered-id set fail (a fold must touch only the new ids)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def refuse(self: CoveredIds, *args: Any) -> Any:
            raise AssertionError("a fold read the whole coverage")

        for name in ("__iter__", "to_list", "to_frozenset", "_apply"):
            monkeypatch.setattr(CoveredIds, name, refuse)


def test_folding_extends_coverage_without_copying_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fields = {"content": "x", "text": "x"}
    summaries = {}
    for size in (SHORT, LONG):
        summaries[size] = extended_summary(None, [f"m{i}" for i in range(size)], **fields)
    _NoFullRead(monkeypatch)
    for size, summary in summaries.items():
        grown_summary = extended_summary(summary, ["new1", "new2", "m3"], version=2, **fields)
        assert len(grown_summary.covered_ids) == size + 2
        assert "new2" in grown_summary.covered_ids and "new2" not in summary.covered_ids
        assert len(summary.covered_ids) == size  # the older version is unchanged


def test_thread_summary_folds_read_only_the_new_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fold every turn: the tail is read, the coverage only extended."""
    reads = {}
    for rounds in (SHORT, LONG):
        compressor = thread_summarizer(
            ScriptedSummarizer(), token_counter=count_tokens_approximately, timeout=None
        )
        history = grown(rounds)
        start = turn_ends(rounds)[0] - 2
        covered = [str(m.id) for m in history[1 : start - 2]]
        summary = RunningSummary(content="x", text="x", covered_ids=covered)
        summary = compressor.compress(history[:start], summary).summary
        with monkeypatch.context() as patch:
            _NoFullRead(patch)
            out = []
            for end in turn_ends(rounds):
                probe = Probe(history[:end])
                result = compressor.compress(probe, summary)
                assert result.compressed
                summary = result.summary
                out.append(len(far_reads(probe, end, 40)))
            reads[rounds] = out
    assert reads[SHORT] == reads[LONG]
    assert max(reads[LONG]) <= 3


# --------------------------------------------------------------------------- graph node


@pytest.mark.parametrize("ids", [True, False], ids=["add_messages", "operator.add"])
def test_compression_node_reads_only_the_tail(ids: bool) -> None:
    """Without ids (a state key reduced by ``operator.add``), ids are given to what is read."""
    reads = {}
    for rounds in (SHORT, LONG):
        node = RoundCompressionNode(
            RoundCompressor(
                ScriptedSummarizer(),
                token_counter=count_tokens_approximately,
                timeout=None,
                trigger=("rounds", 5),
            )
        )
        history = grown(rounds, ids=ids)
        ends = turn_ends(rounds)
        # Caught up: every round but the newest three is covered (ids as the node gives them).
        covered = [str(m.id) for m in ensure_ids(history[: ends[0] - 2 - 6])[1:]]
        summary = RunningSummary(content="x", text="x", covered_ids=covered)
        state: dict[str, Any] = {"running_summary": summary_to_state(summary)}
        warm = node.invoke({**state, "messages": history[: ends[0] - 2]})  # finds the cursor
        assert "running_summary" not in warm
        out = []
        folds = 0
        for end in ends:
            probe = Probe(history[:end])
            update = node.invoke({**state, "messages": probe})
            if "running_summary" in update:
                folds += 1
                state["running_summary"] = update["running_summary"]
            assert not probe.iterated, "the node read the whole history"
            shown = node.model_input({**state, "messages": probe})  # what the model node sends
            assert not probe.iterated, "model_input read the whole history"
            out.append(len(far_reads(probe, end, 40)))
            assert all(m.id for m in shown)
        assert folds >= 2
        reads[rounds] = out
    assert reads[SHORT] == reads[LONG]
    assert max(reads[LONG]) <= 3


def _node_replay(history: list[BaseMessage], ends: range) -> tuple[list[Any], Any]:
    """The node's views at each history length in ``ends``, and the coverage it ends with."""
    node = RoundCompressionNode(
        RoundCompressor(
            ScriptedSummarizer(),
            token_counter=count_tokens_approximately,
            timeout=None,
            trigger=("rounds", 5),
        )
    )
    state: dict[str, Any] = {"running_summary": None}
    views = []
    for end in ends:
        update = node.invoke({**state, "messages": history[:end]})
        state["running_summary"] = update.get("running_summary", state["running_summary"])
        shown = node.model_input({**state, "messages": history[:end]})
        views.append([(m.id, m.content) for m in shown])
    return views, state["running_summary"]["covered_ids"]


def test_node_without_ids_matches_the_node_on_ensured_ids() -> None:
    plain = grown(40, ids=False)
    ends = range(3, len(plain), 2)
    assert _node_replay(plain, ends) == _node_replay(ensure_ids(plain), ends)


def counting_identified(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the messages given a derived id (copied) from now on."""
    from langchain_histcompress.core import identified as identified_module

    made: list[int] = []
    original = identified_module.identified

    def counted(message: BaseMessage, index: int, namespace: str = "") -> BaseMessage:
        if message.id is None:
            made.append(index)
        return original(message, index, namespace)

    monkeypatch.setattr(identified_module, "identified", counted)
    return made


def _plain_node() -> RoundCompressionNode:
    return RoundCompressionNode(
        RoundCompressor(
            ScriptedSummarizer(),
            token_counter=count_tokens_approximately,
            timeout=None,
            trigger=("rounds", 53),
        )
    )


def test_node_without_ids_derives_ids_only_for_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn that does not fold copies only the messages added since the last turn."""
    history = grown(40, ids=False)
    covered = [str(m.id) for m in ensure_ids(history[:61])[1:]]
    state: dict[str, Any] = {
        "running_summary": summary_to_state(
            RunningSummary(content="x", text="x", covered_ids=covered)
        )
    }
    node = _plain_node()
    node.invoke({**state, "messages": history[:67]})  # warm: the tail gets its ids
    made = counting_identified(monkeypatch)
    for end in range(69, 81, 2):
        made.clear()
        update = node.invoke({**state, "messages": history[:end]})
        assert "running_summary" not in update
        assert made == [end - 2, end - 1]  # the two messages added since the last turn
        shown = node.model_input({**state, "messages": history[:end]})
        assert [m.id for m in shown[2:]] == [m.id for m in ensure_ids(history[:end])[61:]]


def test_middleware_without_ids_derives_ids_only_for_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model call through the middleware copies only the messages added since."""
    from langchain_histcompress.faces.middleware import RoundCompressionMiddleware

    history = grown(40, ids=False)[1:]  # an agent's state holds no system message
    covered = [str(m.id) for m in ensure_ids(history[:60])]
    summary = RunningSummary(content="x", text="x", covered_ids=covered)
    middleware = RoundCompressionMiddleware(_plain_node().compressor)
    state: dict[str, Any] = {"running_summary": summary_to_state(summary)}
    model = GenericFakeChatModel(messages=iter([]))

    def turn(end: int) -> list[BaseMessage]:
        turn_state = {**state, "messages": history[:end]}
        sent, update = through_middleware(
            middleware, model_request(model, history[:end], turn_state)
        )
        assert update == {}  # nothing folded
        return list(sent.messages)

    turn(66)  # warm: the tail gets its ids
    made = counting_identified(monkeypatch)
    for end in range(68, 80, 2):
        made.clear()
        shown = turn(end)
        assert made == [end - 2, end - 1]  # the two messages added since the last turn
        assert [m.id for m in shown[1:]] == [m.id for m in ensure_ids(history[:end])[60:]]


@pytest.mark.parametrize("ids", [True, False])
def test_middleware_context_builder_reads_only_new_messages(
    monkeypatch: pytest.MonkeyPatch, ids: bool
) -> None:
    """The request handed to a context builder gives ids only to messages that lack one."""
    from langchain.agents.middleware import ModelRequest

    from langchain_histcompress.core import identified as identified_module
    from langchain_histcompress.core import rounds as rounds_module
    from langchain_histcompress.faces.middleware import RoundCompressionMiddleware

    history = grown(40, ids=ids)[1:]
    builder = ContextBuilder(max_context_tokens=100_000, token_counter=count_tokens_approximately)
    middleware = RoundCompressionMiddleware(_plain_node().compressor, context_builder=builder)
    model = GenericFakeChatModel(messages=iter([]))
    calls: list[int] = []
    original = identified_module.identified

    def counted(message: BaseMessage, index: int, namespace: str = "") -> BaseMessage:
        calls.append(index)
        return original(message, index, namespace)

    monkeypatch.setattr(identified_module, "identified", counted)
    monkeypatch.setattr(rounds_module, "identified", counted)  # `ensure_ids`
    for end in range(60, 80, 2):
        calls.clear()
        request = ModelRequest(model=model, messages=history[:end], state={"messages": []})  # type: ignore[arg-type]
        shown = middleware.compressed_request(request).messages
        # with ids nothing is derived; without, each message once: all of them on the first
        # turn, then the two added since
        assert len(calls) == (0 if ids else end if end == 60 else 2)
        assert [m.id for m in shown] == [m.id for m in ensure_ids(history[:end])]


def test_node_without_ids_rederives_a_replaced_message() -> None:
    """A message replaced at the same position gets the id its new content gives."""
    history = grown(40, ids=False)
    covered = [str(m.id) for m in ensure_ids(history[:61])[1:]]
    state: dict[str, Any] = {
        "running_summary": summary_to_state(
            RunningSummary(content="x", text="x", covered_ids=covered)
        )
    }
    node = _plain_node()
    node.invoke({**state, "messages": history[:67]})
    before = ensure_ids(history[:67])[64].id
    edited = [*history[:67]]
    edited[63] = edited[63].model_copy(update={"content": "edited"})
    edited[64].content = "changed in place"
    node.invoke({**state, "messages": edited})
    shown = {m.id: m.content for m in node.model_input({**state, "messages": edited})}
    expected = ensure_ids(edited)
    assert shown[expected[63].id] == "edited"
    assert shown[expected[64].id] == "changed in place"
    assert expected[64].id != before


def test_node_without_ids_matches_ensured_ids_with_tool_calls() -> None:
    """Tool results carried over from one turn to the next keep the ids their content gives."""
    plain: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for n in range(30):
        call = {"name": "lookup", "args": {"n": n}, "id": f"call{n % 3}"}
        plain += [
            HumanMessage(f"look {n} up"),
            AIMessage("", tool_calls=[call]),
            ToolMessage("same result", tool_call_id=call["id"]),
            AIMessage(f"found {n}"),
        ]
    ends = range(5, len(plain) + 1, 4)
    assert _node_replay(plain, ends) == _node_replay(ensure_ids(plain), ends)


# --------------------------------------------------------------------------- rephrasing


def _answers() -> Iterator[AIMessage]:
    return itertools.repeat(AIMessage("What did the user ask?"))


def test_rephrase_node_reads_only_its_window() -> None:
    reads = {}
    for rounds in (SHORT, LONG):
        node = HistoryRephraseNode(GenericFakeChatModel(messages=_answers()))
        reads[rounds] = per_turn(
            rounds, lambda h: None, lambda p, node=node: node.invoke({"messages": p})
        )
    assert reads[SHORT] == reads[LONG]
    assert max(reads[LONG]) <= 2  # the preamble's end, looking for a summary there


def test_rephrase_chain_reads_only_its_window() -> None:
    reads = {}
    for rounds in (SHORT, LONG):
        chain = create_history_rephraser(GenericFakeChatModel(messages=_answers()))

        def turn(probe: Probe, chain: Any = chain) -> None:
            chain.invoke({"input": "and then?", "chat_history": probe})

        reads[rounds] = per_turn(rounds, lambda h: None, turn)
    assert reads[SHORT] == reads[LONG]
    assert max(reads[LONG]) <= 2


def test_rephrase_window_is_that_of_the_whole_history() -> None:
    from langchain_core.messages import ToolMessage

    from langchain_histcompress.faces.rephrase import newest_window, window_of

    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c"}])
    pieces = [HumanMessage("q"), AIMessage("a"), call, ToolMessage("r", tool_call_id="c")]
    pieces += [SystemMessage("note"), ToolMessage("orphan", tool_call_id="z")]
    for length in range(40):
        history = [pieces[(i * 7 + length) % len(pieces)] for i in range(length)]
        for limit in range(0, 12):
            for tools in (False, True):
                whole = window_of(history, limit, tools)[0]
                assert newest_window(history, limit, tools)[0] == whole


# --------------------------------------------------------------------------- token counter


def test_counter_fingerprints_only_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    keyed: list[int] = []
    original = TiktokenCounter._key

    def counting_key(message: BaseMessage) -> Any:
        keyed.append(1)
        return original(message)

    monkeypatch.setattr(TiktokenCounter, "_key", staticmethod(counting_key))
    per_size = {}
    for rounds in (SHORT, LONG):
        counter, fresh = TiktokenCounter(), TiktokenCounter(cache_size=0)
        history = grown(rounds)
        counter(history[: turn_ends(rounds)[0] - 2])
        counts = []
        for end in turn_ends(rounds):
            keyed.clear()
            assert counter(history[:end]) == fresh(history[:end])
            counts.append(len(keyed))
        per_size[rounds] = counts
    assert per_size[SHORT] == per_size[LONG] == [2] * TURNS


# --------------------------------------------------------------------------- retrieval


def test_retrievers_index_only_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenized: list[int] = []
    original = retrieval.BM25Index.add

    def counting_add(self: retrieval.BM25Index, key: str, text: str, **kwargs: Any) -> None:
        tokenized.append(1)
        original(self, key, text, **kwargs)

    monkeypatch.setattr(retrieval.BM25Index, "add", counting_add)
    facts = [Fact(id="f-1", content="The user likes question 7", source_ids=["h7"])]
    per_size = {}
    for rounds in (SHORT, LONG):
        evidence, turns = EvidenceRetriever(), BM25TurnRetriever()
        history = grown(rounds)
        start = turn_ends(rounds)[0] - 2
        evidence.rank("question 7", facts, history[:start])
        turns.retrieve("question 7", history[:start], 5)
        counts = []
        for end in turn_ends(rounds):
            tokenized.clear()
            ranked = evidence.rank(f"answer {end}", facts, history[:end], k=5)
            found = turns.retrieve(f"answer {end}", history[:end], 5)
            assert all(any(r.item is m for m in history[:end]) for r in ranked if not r.is_fact)
            assert all(any(f is m for m in history[:end]) for f in found)
            counts.append(len(tokenized))
        per_size[rounds] = counts
    assert per_size[SHORT] == per_size[LONG] == [4] * TURNS  # 2 new messages, 2 retrievers


class _Compared(Probe):
    """A `Probe` that counts list comparisons (one pointer check per element, in C) apart."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.compared = 0

    def __eq__(self, other: object) -> bool:
        self.compared += 1
        return list.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("strategy", ["facts", "hybrid", "hybrid_retrieval"])
def test_context_builder_reads_only_new_messages(strategy: str) -> None:
    """The retrieval strategies' context assembly reads the same few positions per turn.

    The only look at the older history is one pointer comparison of the list with the
    previous call's (which tells a grown history from another one), made as a plain list's:
    the probe's own ``__eq__`` is never called.
    """
    per_size = {}
    for rounds in (SHORT, LONG):
        history = grown(rounds)
        facts = [
            Fact(id=f"f-{n}", content=f"The user asked question {n}", source_ids=[f"h{n}"])
            for n in range(0, SHORT, 50)
        ]
        covered = CoveredIds(str(m.id) for m in history[1:41])
        summary = RunningSummary(content="s", text="Earlier questions.", covered_ids=covered)
        builder = ContextBuilder(
            max_context_tokens=800,
            token_counter=TiktokenCounter(),
            evidence_retriever=EvidenceRetriever(),
            raw_turn_retrieval=0 if strategy == "facts" else 8,
        )
        options: dict[str, Any] = {
            "facts": facts,
            "summary": summary if strategy == "hybrid" else None,
        }
        ends = turn_ends(rounds)
        builder.build(history[: ends[0] - 2], **options)
        counts = []
        for end in ends:
            probe = _Compared(history[:end])
            built = builder.assemble(probe, query=f"question {end % 97}", **options)
            assert built.messages[-1] is history[end - 1]
            assert not probe.iterated
            assert probe.compared == 0  # the prefix check compares plain list pointers, in C
            counts.append(len(far_reads(probe, end, 40)))
        per_size[rounds] = counts
    assert per_size[SHORT] == per_size[LONG]
    assert max(per_size[LONG]) <= 1  # the first message: the prefix check


def test_grown_context_equals_a_fresh_one_across_tool_steps_and_repairs() -> None:
    call = AIMessage("", id="c", tool_calls=[{"name": "f", "args": {}, "id": "t1"}])
    history: list[BaseMessage] = [*grown(30), AIMessage("fine", id="a-x")]
    steps: list[list[BaseMessage]] = [
        [HumanMessage("use the tool", id="h-t"), call],  # in flight at the end of a call
        [ToolMessage("42", tool_call_id="t1", id="r1"), AIMessage("it is 42", id="a-t")],
        [HumanMessage("again", id="h-u"), call.model_copy(update={"id": "c2"})],
        [HumanMessage("never mind", id="h-v")],  # the call above is left unanswered: repaired
        [AIMessage("ok", id="a-v"), HumanMessage("question 3?", id="h-w")],
    ]
    builder = ContextBuilder(
        max_context_tokens=700, evidence_retriever=EvidenceRetriever(), raw_turn_retrieval=4
    )
    for step in steps:
        history = [*history, *step]
        grown_built = builder.assemble(history)
        fresh = ContextBuilder(
            max_context_tokens=700, evidence_retriever=EvidenceRetriever(), raw_turn_retrieval=4
        ).assemble(history)
        assert grown_built == fresh


def test_retriever_returns_the_callers_messages_for_an_equal_history() -> None:
    history = grown(20)
    turns = BM25TurnRetriever()
    turns.retrieve("question 3", history, 3)
    copies = [m.model_copy() for m in history]
    found = turns.retrieve("question 3", copies, 3)
    assert found and all(any(f is c for c in copies) for f in found)


def test_vectorized_similarities_equal_the_python_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numpy")
    from array import array

    vectors = [retrieval._unit([float((i * j) % 7 - 3) for j in range(16)]) for i in range(40)]
    target = retrieval._unit([float(j % 5) for j in range(16)])
    fast = retrieval._dot_all(target, vectors)
    monkeypatch.setattr(retrieval, "_numpy", lambda: None)
    slow = retrieval._dot_all(target, vectors)
    assert fast == pytest.approx(slow, abs=1e-12)
    assert isinstance(vectors[0], array)


# --------------------------------------------------------------------------- bench section


def test_bench_faces_section_reports_every_face(tmp_path: Any) -> None:
    from pathlib import Path

    from langchain_histcompress.workbench.face_drivers import FACES
    from langchain_histcompress.workbench.face_report import write_face_reports
    from langchain_histcompress.workbench.faces import measure_faces

    base = conversation(12, system=SystemMessage("Be brief.", id="sys"))
    figures = measure_faces(base, sizes=(12, 24), turns=3)
    assert sorted({f.face for f in figures}) == sorted(FACES)
    assert all(f.error is None and f.turns == 3 for f in figures), [f.error for f in figures]
    for f in figures:
        assert f.folds == sum(f.folded)
        assert (f.fold_ms is None) == (f.folds == 0)
        assert (f.plain_ms is None) == (f.folds == f.turns)
    thread = [f for f in figures if f.face == "thread_summary"]
    assert all(f.folds == f.turns for f in thread)  # a fold every turn
    written = write_face_reports(figures, Path(tmp_path))
    assert written["plot:face_overhead"].read_bytes()[:4] == b"\x89PNG"
    assert "| thread_summary | 24 | 3 | 3 |" in written["faces:markdown"].read_text("utf-8")


def test_benchmark_runs_the_faces_section_when_asked(tmp_path: Any) -> None:
    import io
    from pathlib import Path

    from langchain_histcompress.workbench.bench_config import BenchConfig
    from langchain_histcompress.workbench.face_drivers import FACES
    from langchain_histcompress.workbench.report import write_reports
    from langchain_histcompress.workbench.runner import run_benchmark
    from tests.unit_tests.test_bench_locomo import write_tiny
    from tests.unit_tests.test_bench_runner import _long_tiny

    data = write_tiny(Path(tmp_path) / "t1.json", _long_tiny())
    config = BenchConfig(
        data=(data,),
        strategies=("truncation",),
        overhead_sizes=(40,),
        overhead_turns=2,
        faces=True,
        face_turns=2,
        face_passes=2,
        counting=False,
    )
    result = run_benchmark(config, progress=io.StringIO())
    assert sorted(f.face for f in result.faces) == sorted(FACES)
    assert all(f.error is None and f.turns == 2 for f in result.faces)
    assert all(len(f.pass_means_ms) == 2 for f in result.faces)
    assert not BenchConfig(data=(data,)).faces  # opt-in (`make bench` passes --faces)
    written = write_reports(result, Path(tmp_path) / "out", plots=False)
    assert "faces:markdown" in written and "plot:face_overhead" not in written


def test_faces_report_the_lowest_of_their_passes() -> None:
    from langchain_histcompress.core.errors import ConfigurationError
    from langchain_histcompress.workbench.faces import measure_faces

    base: list[BaseMessage] = [SystemMessage("s", id="s")]
    for n in range(8):
        base += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
    seen: list[float] = []
    figures = measure_faces(
        base,
        sizes=(10,),
        turns=2,
        faces=["tiktoken_counter", "round_compression"],
        passes=3,
        on_figure=lambda f: seen.append(f.mean_ms or 0.0),
    )
    assert [f.face for f in figures] == ["tiktoken_counter", "round_compression"]
    assert len(seen) == 6  # every pass reports its figure
    for figure in figures:
        assert len(figure.pass_means_ms) == 3
        assert figure.mean_ms == min(figure.pass_means_ms)
        assert figure.mean_ms == pytest.approx(sum(figure.samples_ms) / figure.turns)
    with pytest.raises(ConfigurationError, match="passes"):
        measure_faces(base, sizes=(10,), turns=2, faces=["tiktoken_counter"], passes=0)


def test_faces_report_the_memory_a_turn_allocates() -> None:
    from langchain_histcompress.core.errors import ConfigurationError
    from langchain_histcompress.workbench.face_report import face_overhead_table
    from langchain_histcompress.workbench.faces import measure_faces

    base = conversation(30, system=SystemMessage("Be brief.", id="sys"))
    names = ["reducer_full_history", "reducer_fed_back_reloaded", "context_builder_no_ids"]
    figures = measure_faces(base, sizes=(50,), turns=2, faces=names, traced_turns=3)
    assert [f.face for f in figures] == names
    for f in figures:
        assert f.error is None and f.turns == 2
        assert len(f.alloc_samples_kib) == len(f.alloc_folded) == 3
        assert f.alloc_kib == pytest.approx(sum(f.alloc_samples_kib) / 3)
        assert all(kib > 0 for kib in f.alloc_samples_kib)
        assert (f.fold_alloc_kib is None) == (not any(f.alloc_folded))
        assert (f.plain_alloc_kib is None) == all(f.alloc_folded)
    reducer = figures[0]
    assert reducer.folds == reducer.turns and all(reducer.alloc_folded)  # a fold every turn
    assert f"| {reducer.fold_alloc_kib:,.0f} | - |" in face_overhead_table([reducer])
    untraced = measure_faces(base, sizes=(50,), turns=2, faces=names[:1], traced_turns=0)
    assert untraced[0].alloc_kib is None and not untraced[0].alloc_samples_kib
    with pytest.raises(ConfigurationError, match="traced_turns"):
        measure_faces(base, sizes=(50,), turns=2, faces=names[:1], traced_turns=-1)


def test_identified_lists_keep_one_growing_list_per_conversation() -> None:
    from langchain_histcompress.core.identified import IdentifiedLists

    lists = IdentifiedLists(max_messages=100)
    lead = [SystemMessage("Be brief.")]
    shared, more = HumanMessage("hello"), HumanMessage("more")  # the very same objects
    a = [shared, *(m.model_copy(update={"id": None}) for m in conversation(range(1, 4)))]
    b = [shared, *(m.model_copy(update={"id": None}) for m in conversation(range(5, 8)))]
    first = lists.get(lead, a)
    copies = list(first)
    other = lists.get(lead, b)
    grown = lists.get(lead, [*a, more])
    assert grown is first and other is not first
    assert all(x is y for x, y in zip(copies, grown, strict=False))  # the same copies
    assert [m.id for m in grown[1:]] == [m.id for m in ensure_ids([*a, more])]
    assert [m.id for m in lists.get(lead, [*b, AIMessage("x")])[1:]] == [
        m.id for m in ensure_ids([*b, AIMessage("x")])
    ]
    # the same copies under another system prompt; an edited history gets a list of its own
    kind = [SystemMessage("Be kind.")]
    relead = lists.get(kind, [*a, more])
    assert relead[0].content == "Be kind."
    assert all(x is y for x, y in zip(relead[1:], grown[1:], strict=True))
    edited = [*a[:2], HumanMessage("changed"), *a[3:]]
    fresh = lists.get(lead, edited)
    assert fresh is not relead
    assert [m.id for m in fresh[1:]] == [m.id for m in ensure_ids(edited)]
    # at most ``max_messages`` messages are kept: the least recent conversations go first
    assert lists.get(kind, [*a, more]) is relead
    lists.get(lead, conversation(60, prefix="big"))
    assert lists.get(kind, [*a, more]) is not relead
