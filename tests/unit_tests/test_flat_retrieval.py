"""Per-question work of the retrieval faces does not grow with the history.

The retrieval strategies (facts, hybrid, hybrid_retrieval) rank evidence for every turn. Each
test drives a face on a short and on a long grown history and counts what a question costs:
postings scored, messages indexed, ranked messages resolved, facts validated, fact and
message lines costed. The counts must not grow with the history. The numpy and pure-Python
scoring paths must rank identically. No timing: speed is measured by ``histcompress bench``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.facts import Fact, facts_to_state
from langchain_histcompress.edge.extraction import FactExtractor
from langchain_histcompress.recall import _evidence_arrays, _turn_index, evidence, turn_retriever
from langchain_histcompress.recall.bm25 import BM25Index
from langchain_histcompress.recall.retrieval import EvidenceRetriever

np = pytest.importorskip("numpy")

_TOPICS = [
    "adopted a kitten from the shelter",
    "painted the lake at sunrise",
    "hiking trip in the mountains",
    "pottery class with wet clay",
    "guitar lessons before the concert",
    "marathon training every morning",
    "garden tomatoes ready for harvest",
    "camping tent deep in the forest",
]
SHORT, LONG = 1_000, 10_000  # messages
TURNS = 5


def grown(size: int) -> list[BaseMessage]:
    """A system message then rounds about recurring topics; ``code<i>`` words occur once."""
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for i in range(size // 2 + TURNS + 1):
        topic, other = _TOPICS[i % len(_TOPICS)], _TOPICS[(i * 3 + 1) % len(_TOPICS)]
        history.append(HumanMessage(f"Tell me about the {topic}, code{i} {i % 17}", id=f"h{i}"))
        history.append(AIMessage(f"Sure: the {other}, then the {topic}.", id=f"a{i}"))
    return history


def facts_about(history: list[BaseMessage], count: int = 24) -> list[Fact]:
    return [
        Fact(id=f"f-{n}", content=f"The user mentioned the {topic}", source_ids=(f"h{n}",))
        for n, topic in zip(range(count), itertools.cycle(_TOPICS), strict=False)
    ]


def ranked(retriever: EvidenceRetriever, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    return [
        (r.is_fact, r.position, r.score, str(r.item.id)) for r in retriever.rank(*args, **kwargs)
    ]


# --------------------------------------------------------------------------- numpy = Python


@pytest.mark.parametrize("max_term_postings", [None, 40, 2_000])
def test_numpy_and_python_rank_identically(
    monkeypatch: pytest.MonkeyPatch, max_term_postings: int | None
) -> None:
    history = grown(6_000)  # with no cap, more matches than the match limit, tied at the cut
    facts = facts_about(history)
    fast = EvidenceRetriever(max_term_postings=max_term_postings)
    slow = EvidenceRetriever(max_term_postings=max_term_postings)
    questions = [
        "kitten shelter code12",
        "who went hiking in the mountains or camping in the forest?",
        "pottery clay guitar concert marathon morning",
        "code5999 code3",
        "nothing here matches",
    ]
    calls: list[tuple[list[BaseMessage], dict[str, Any]]] = [
        (history[:4_000], {}),
        (history, {}),
        (history, {"only_before": len(history) - 30}),
        (history, {"only_before": 0}),
        (history, {"turn_ids": {f"a{i}" for i in range(0, 3_000, 7)}}),
        (history[:500] + history[3_000:3_500], {}),  # not an extension: a restart
        (history[:500] + history[3_000:3_600], {}),
    ]
    edited = list(history)
    edited[7] = HumanMessage("Now about the kitten code12 again", id=edited[7].id)
    fewer = [*facts[3:], Fact(id="f-new", content="kitten shelter visit", source_ids=("h9",))]
    changes: list[tuple[list[BaseMessage], list[Fact]]] = [
        *((messages, facts) for messages, _ in calls),
        (history, fewer),  # facts changed
        (edited, fewer),  # a message's text replaced under the same id
    ]
    numpy_module = evidence._numpy
    compared = 0
    settings = [*(options for _, options in calls), {}, {}]
    for (messages, fact_list), options in zip(changes, settings, strict=True):
        for question in questions:
            monkeypatch.setattr(evidence, "_numpy", numpy_module)
            expected_fast = ranked(fast, question, fact_list, messages, **options)
            monkeypatch.setattr(evidence, "_numpy", lambda: None)
            expected_slow = ranked(slow, question, fact_list, messages, **options)
            assert expected_fast == expected_slow, (question, options)
            compared += len(expected_fast)
    assert compared > 1_000


@pytest.mark.parametrize("max_term_postings", [None, 40, 2_000])
def test_turn_retriever_picks_the_same_messages_with_and_without_numpy(
    monkeypatch: pytest.MonkeyPatch, max_term_postings: int | None
) -> None:
    history = grown(6_000)  # many messages tied on the same words
    calls: list[list[BaseMessage]] = [
        history[:4_000],
        history,
        history[:500] + history[3_000:3_500],  # not an extension: a restart
        history[:500] + history[3_000:3_600],
        [*history[:100], HumanMessage("code1 kitten", id="h7"), *history[101:200]],  # edited
        [m.model_copy(update={"id": None}) for m in history[:300]],  # no ids: by position
        # speaker names rank a message but do not retrieve it
        [m.model_copy(update={"name": ("Ann", "Bob")[i % 2]}) for i, m in enumerate(history)],
    ]
    questions = [
        "kitten shelter code12",
        "what did ann paint at the lake?",
        "did ann mention code12?",
        "bob",
        "who went hiking in the mountains or camping in the forest?",
        "pottery clay guitar concert marathon morning",
        "code5999 code3",
        "nothing here matches",
    ]
    fast = turn_retriever.BM25TurnRetriever(max_term_postings=max_term_postings)
    slow = turn_retriever.BM25TurnRetriever(max_term_postings=max_term_postings)
    numpy_module = turn_retriever._numpy
    compared = 0
    for messages in calls:
        for question in questions:
            for k in (1, 4, 50):
                monkeypatch.setattr(turn_retriever, "_numpy", numpy_module)
                picked = fast.retrieve(question, messages, k)
                monkeypatch.setattr(turn_retriever, "_numpy", lambda: None)
                assert [id(m) for m in picked] == [
                    id(m) for m in slow.retrieve(question, messages, k)
                ], (question, k)
                compared += len(picked)
    assert compared > 300


@pytest.mark.parametrize("size", [0, 1, 127, 128, 129, 700])
def test_lazy_ranking_equals_one_sort(size: int) -> None:
    """Ordering the best slots first, the rest on demand, gives the order of one full sort."""
    rng = np.random.default_rng(size)
    slots = rng.permutation(3 * size)[:size].astype(np.int64)
    scores = rng.integers(0, 9, size).astype(np.float64) / 7  # many ties, some at the cut
    turns = rng.permutation(2 * size)[:size].astype(np.int64)
    expected = slots[np.lexsort((turns, -scores))].tolist()
    chunks = list(evidence._ranked_order(np, scores, turns))
    assert [s for chunk in chunks for s in slots[chunk].tolist()] == expected


@pytest.mark.parametrize("size", [0, 1, 40, 2_000])
def test_distinct_equals_unique(size: int) -> None:
    rng = np.random.default_rng(size)
    values = rng.integers(0, max(1, size // 3), size).astype(np.int64)  # repeated values
    owner = np.full(max(1, size), -7, dtype=np.int64)
    got = _evidence_arrays.distinct(np, owner, values)
    assert sorted(got.tolist()) == np.unique(values).tolist()


@pytest.mark.parametrize("size", [0, 5, 40, 2_000, 9_000])
@pytest.mark.parametrize("levels", [6, 10_000])
def test_best_n_keeps_the_first_tied_at_the_cut(size: int, levels: int) -> None:
    rng = np.random.default_rng(size)
    scores = rng.integers(0, levels, size).astype(np.float64) / 7  # few levels: many ties
    for n in {1, size // 3, size // 10, size // 40}:
        kept = _evidence_arrays.best_n(np, scores, n, np.arange(size))
        expected = sorted(range(size), key=lambda i: (-scores[i], i))[:n]
        assert (list(range(size)) if kept is None else kept.tolist()) == sorted(expected)


def test_slot_scores_equal_scores_after_edits() -> None:
    index = BM25Index()
    for i in range(300):
        index.add(f"k{i}", f"{_TOPICS[i % 8]} item{i % 11}")
    for i in range(0, 300, 3):
        index.remove(f"k{i}")
    for i in range(0, 300, 5):
        index.add(f"k{i}", f"{_TOPICS[(i + 3) % 8]} edited item{i % 7}")
    for query in ["kitten item3", "sunrise lake edited", "item5 item6 clay", "absent"]:
        for cap in (None, 10, 1_000):
            slots, scores = index.slot_scores(np, query, max_postings=cap)
            expected = index.scores(query, max_postings=cap)
            got = dict(zip(map(index.slot_key, slots.tolist()), scores.tolist(), strict=True))
            assert got == expected
            assert list(slots) == sorted(slots)


# --------------------------------------------------------------------------- evidence face


class _Counts:
    """Counts postings scored, texts indexed and ranked slots resolved."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.postings = self.indexed = self.resolved = 0
        column, add, slot_key = BM25Index._column, BM25Index.add, BM25Index.slot_key

        def counting_column(index: BM25Index, term: str, newest: int | None = None) -> Any:
            out = column(index, term, newest)
            self.postings += len(out[0])
            return out

        def counting_add(index: BM25Index, key: str, text: str, **kwargs: Any) -> None:
            self.indexed += 1
            add(index, key, text, **kwargs)

        def counting_slot_key(index: BM25Index, slot: int) -> str:
            self.resolved += 1
            return slot_key(index, slot)

        monkeypatch.setattr(BM25Index, "_column", counting_column)
        monkeypatch.setattr(BM25Index, "add", counting_add)
        monkeypatch.setattr(BM25Index, "slot_key", counting_slot_key)

    def take(self) -> tuple[int, int, int]:
        out = (self.postings, self.indexed, self.resolved)
        self.postings = self.indexed = self.resolved = 0
        return out


def turn_ends(size: int) -> Iterator[int]:
    """History lengths at each turn: through the question of the next round."""
    return (size + 2 * t + 2 for t in range(TURNS))


def test_evidence_work_per_question_is_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _Counts(monkeypatch)
    per_size = {}
    for size in (SHORT, LONG):
        history = grown(size)
        retriever = EvidenceRetriever(max_term_postings=60)
        facts = facts_about(history)
        retriever.rank("warm up", facts, history[:size])
        counts.take()
        seen = []
        for turn, end in enumerate(turn_ends(size)):
            # "kitten" is in more messages than the cap at both sizes, code<i> in one
            question = f"the kitten code{turn * 50} tomatoes" if turn % 2 else "kitten shelter"
            taken = list(itertools.islice(retriever.iter_rank(question, facts, history[:end]), 12))
            assert any(not r.is_fact for r in taken)
            seen.append(counts.take())
        per_size[size] = seen
    assert per_size[SHORT] == per_size[LONG]
    postings, indexed, resolved = zip(*per_size[LONG], strict=True)
    assert max(postings) <= 60 * 4  # the cap times the question's words
    assert set(indexed) == {2}  # the new round only
    assert max(resolved) <= 12


# --------------------------------------------------------------------------- context builder


def test_context_builder_work_per_turn_is_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _Counts(monkeypatch)
    validated: list[int] = []
    validate = Fact.model_validate.__func__  # type: ignore[attr-defined]

    def counting_validate(cls: type[Fact], *args: Any, **kwargs: Any) -> Fact:
        validated.append(1)
        return validate(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Fact, "model_validate", classmethod(counting_validate))
    costed: list[str] = []
    per_size = {}
    for size in (SHORT, LONG):
        history = grown(size)
        state = facts_to_state(facts_about(history))
        builder = ContextBuilder(
            max_context_tokens=900,
            token_counter=count_tokens_approximately,
            top_k_facts=1_000,
            raw_turn_retrieval=1_000,
            evidence_retriever=EvidenceRetriever(max_term_postings=60),
        )
        original_cost = builder._costs.text_cost

        def counting_cost(text: str, original: Any = original_cost) -> int:
            costed.append(text)
            return int(original(text))

        monkeypatch.setattr(builder._costs, "text_cost", counting_cost)
        builder.build(history[: size + 2], facts=state)
        counts.take()
        seen = []
        for end in turn_ends(size):
            validated.clear()
            costed.clear()
            built = builder.assemble(history[:end], facts=state)
            assert built.retrieved_ids
            seen.append((*counts.take(), len(validated), len(costed)))
        per_size[size] = seen
    # The questions differ between the sizes (they name their round), so the counts are
    # bounded rather than equal: by the cap and the budget, never by the history.
    for size, seen in per_size.items():
        postings, indexed, resolved, validated_facts, lines = zip(*seen, strict=True)
        assert max(postings) <= 60 * 8, size  # the cap times the question's words
        assert set(indexed) <= {0, 2}, size  # at most the newest round
        assert max(resolved) <= 120, size  # messages looked at while filling the budget
        assert set(validated_facts) == {0}, size  # unchanged facts are not parsed again
        assert max(lines) <= 120, size  # fact and message lines costed


class _Unvouched(EvidenceRetriever):
    """Ignores ``known_prefix``: compares the whole previous history on every call."""

    def iter_rank(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["known_prefix"] = 0
        return super().iter_rank(*args, **kwargs)


def test_context_builder_vouches_for_the_history_it_only_appended_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[int] = []
    real = _turn_index.extends

    def counting(messages: Any, previous: Any) -> bool:
        compared.append(len(previous))
        return bool(real(messages, previous))

    monkeypatch.setattr(_turn_index, "extends", counting)
    history = grown(LONG)
    state = facts_to_state(facts_about(history))
    builders = [
        ContextBuilder(
            max_context_tokens=900,
            token_counter=count_tokens_approximately,
            top_k_facts=1_000,
            raw_turn_retrieval=1_000,
            evidence_retriever=retriever,
        )
        for retriever in (EvidenceRetriever(), _Unvouched())
    ]
    for builder in builders:
        builder.build(history[: LONG + 2], facts=state)
    per_builder: list[list[int]] = [[], []]
    outputs: list[list[Any]] = [[], []]
    for end in turn_ends(LONG):
        for n, builder in enumerate(builders):
            compared.clear()
            built = builder.assemble(history[:end], facts=state)
            outputs[n].append((built.messages, built.tokens, built.retrieved_ids))
            per_builder[n].append(sum(compared))
    assert outputs[0] == outputs[1]
    assert max(per_builder[0]) <= 8  # the newest messages, not the history
    assert min(per_builder[1]) >= LONG // 2  # the unvouched retriever compares it all


def test_context_builder_counts_a_round_once() -> None:
    """A verbatim window over a grown history counts only the rounds it has not seen."""
    history = grown(400)
    builder = ContextBuilder(max_context_tokens=900, token_counter=count_tokens_approximately)
    counted: list[int] = []
    original = builder._round_costs._cost

    def counting(messages: Any) -> int:
        counted.append(len(messages))
        return int(original(messages))

    builder._round_costs._cost = counting
    builder.build(history[:201])
    assert len(counted) > 3  # the first call counts every round its window reaches
    for end in range(203, 243, 2):
        counted.clear()
        built = builder.build(history[:end])
        assert len(built) > 5  # several older rounds shown verbatim
        assert len(counted) <= 1, end  # only the round completed since the last call


# --------------------------------------------------------------------------- fact extraction


def test_extraction_reindexes_only_changed_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _Counts(monkeypatch)
    extractor = FactExtractor(GenericFakeChatModel(messages=iter(["[]"] * 10)), max_prompt_facts=5)
    facts = {f.id: f for f in facts_about(grown(100), count=40)}
    batch = grown(4)[1:5]
    extractor.extract(batch, facts)
    assert counts.take()[1] == 40 + 0  # first call: every fact indexed once
    for n in range(3):
        new = Fact(id=f"g-{n}", content=f"The user also mentioned code{n}")
        facts[new.id] = new
        extractor.extract(batch, facts)
        assert counts.take()[1] == 1  # only the new fact
