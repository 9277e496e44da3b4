"""The array ranking of `EvidenceRetriever` equals the pure-Python one and stays clean.

The numpy path spreads scores over zeroed work arrays that it must leave zero, fuses facts
from one sorted list and re-reads only appended facts; each test compares it with the
pure-Python path or with a fresh retriever, across settings and growing inputs.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall import _evidence_arrays, _turn_index, evidence
from langchain_histcompress.recall.bm25 import BM25Index, _FactIndex
from langchain_histcompress.recall.retrieval import EvidenceRetriever

np = pytest.importorskip("numpy")

_WORDS = ["kitten", "lake", "hiking", "clay", "guitar", "marathon", "tomato", "tent"]


def history(size: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for i in range(size // 2):
        a, b = _WORDS[i % 8], _WORDS[(i * 5 + 3) % 8]
        out.append(HumanMessage(f"the {a} and the {b}, note{i % 13}", id=f"h{i}"))
        out.append(AIMessage(f"more on the {b}", id=f"a{i}"))
    return out


def facts(count: int) -> list[Fact]:
    return [
        Fact(id=f"f{n}", content=f"about the {_WORDS[n % 8]}", source_ids=(f"h{n * 3}", f"a{n}"))
        for n in range(count)
    ]


def ranked(retriever: EvidenceRetriever, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    return [(r.is_fact, r.position, r.score, r.item.id) for r in retriever.rank(*args, **kwargs)]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"neighbour_window": 0},
        {"neighbour_window": 1, "max_term_postings": 30},
        {"neighbour_window": 3, "source_weight": 0.0},
        {"neighbour_weight": 0.0},
    ],
)
def test_array_ranking_equals_python_on_a_growing_history(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    messages = history(900)
    fast, slow = EvidenceRetriever(**options), EvidenceRetriever(**options)
    numpy_module = evidence._numpy
    for turn, end in enumerate(range(300, 900, 100)):
        pool = facts(10 + turn * 3)  # facts appended turn by turn
        for question, kwargs in itertools.product(
            ["kitten lake", "note3 guitar tent", "marathon"],
            [{}, {"only_before": end - 4}, {"only_before": 0}],
        ):
            monkeypatch.setattr(evidence, "_numpy", numpy_module)
            got = ranked(fast, question, pool, messages[:end], **kwargs)
            work = fast._work
            assert work is not None
            assert not work.score.any() and not work.best.any()
            monkeypatch.setattr(evidence, "_numpy", lambda: None)
            assert got == ranked(slow, question, pool, messages[:end], **kwargs)


def test_an_error_while_ranking_leaves_no_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    messages, pool = history(400), facts(12)
    retriever = EvidenceRetriever()
    original = _evidence_arrays.distinct
    monkeypatch.setattr(evidence, "distinct", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        retriever.rank("kitten lake", pool, messages)
    monkeypatch.setattr(evidence, "distinct", original)
    expected = ranked(EvidenceRetriever(), "kitten lake", pool, messages)
    assert ranked(retriever, "kitten lake", pool, messages) == expected


def test_appended_facts_are_the_only_ones_read(monkeypatch: pytest.MonkeyPatch) -> None:
    index = _FactIndex(k1=1.5, b=0.75, text=lambda fact: fact.content)
    read: list[str] = []

    def text(fact: Fact) -> str:
        read.append(fact.id)
        return fact.content

    monkeypatch.setattr(index, "_text", text)
    pool = facts(20)
    index.sync(pool)
    assert len(read) == 20
    read.clear()
    grown = [*pool, *facts(26)[20:], pool[3]]  # appended, one id repeated
    positions = index.sync(grown)
    assert read == [f"f{n}" for n in range(20, 26)]
    fresh = _FactIndex(k1=1.5, b=0.75, text=lambda fact: fact.content)
    assert positions == fresh.sync(grown)
    assert index.sources == fresh.sources
    assert index.index.scores("kitten tent") == fresh.index.scores("kitten tent")
    assert isinstance(index.index, BM25Index)


def test_messages_listed_per_question_do_not_grow_with_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the ranked chunks a caller reaches are mapped to messages."""
    listed: list[int] = []
    original = evidence._ranked_order

    def counting(*args: Any) -> Any:
        for chunk in original(*args):
            listed.append(len(chunk))
            yield chunk

    monkeypatch.setattr(evidence, "_ranked_order", counting)
    per_size = {}
    for size in (1_000, 8_000):
        messages, pool = history(size), facts(12)
        retriever = EvidenceRetriever()
        retriever.rank("warm up", pool, messages)
        seen = []
        for end in range(size - 40, size, 10):
            listed.clear()
            taken = list(
                itertools.islice(retriever.iter_rank("kitten note4", pool, messages[:end]), 12)
            )
            assert len(taken) == 12
            seen.append(sum(listed))
        per_size[size] = seen
    assert max(per_size[8_000]) <= 2 * evidence._FIRST_RANKED  # the head, ties included
    assert max(per_size[8_000]) <= 2 * max(per_size[1_000])


def test_known_prefix_skips_comparing_the_vouched_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[int] = []
    real = _turn_index.extends

    def counting(messages: Any, previous: list[BaseMessage]) -> bool:
        compared.append(len(previous))
        return real(messages, previous)

    monkeypatch.setattr(_turn_index, "extends", counting)
    messages = history(400)
    vouched, plain = EvidenceRetriever(), EvidenceRetriever()
    grown: list[BaseMessage] = []  # one list, appended to, as a caller vouching keeps it
    known = 0
    for end in range(100, 401, 60):
        query = f"{_WORDS[end % 8]} note{end % 13}?"
        grown += messages[len(grown) : end]
        got = ranked(vouched, query, facts(9), grown, known_prefix=known)
        assert got == ranked(plain, query, facts(9), messages[:end])
        known = end
    # the plain retriever compares every previous message; the vouched one none of them
    assert compared == [100, 160, 220, 280, 340]


def test_known_prefix_compares_only_past_the_vouched_part() -> None:
    messages = history(300)
    retriever, fresh = EvidenceRetriever(), EvidenceRetriever()
    retriever.rank("kitten", [], messages[:200])
    edited = list(messages)
    edited[150] = HumanMessage("the tomato and the clay, note9", id="h74")
    # messages 100..199 differ from the previous call's: the index restarts on them
    assert ranked(retriever, "tomato clay", [], edited, known_prefix=100) == ranked(
        fresh, "tomato clay", [], edited
    )


def test_known_prefix_is_ignored_after_another_callers_list() -> None:
    messages = history(300)
    # another caller indexes its own list of the same length in between
    other = [HumanMessage(f"the lake, note{i}", id=f"other-{i}") for i in range(100)]
    got = []
    for known_prefix in (100, 0):  # the same calls, vouched and not
        retriever = EvidenceRetriever()
        grown = messages[:100]
        retriever.rank("kitten", [], grown)
        retriever.rank("lake", [], other)
        grown += messages[100:160]
        got.append(ranked(retriever, "lake kitten", [], grown, known_prefix=known_prefix))
    assert got[0] == got[1]
    assert {m.id for m in messages[:160]} >= {item for *_, item in got[0]}


def test_known_prefix_is_ignored_after_a_call_that_indexed_nothing() -> None:
    messages = history(300)
    retriever, fresh = EvidenceRetriever(), EvidenceRetriever()
    retriever.rank("kitten", [], messages[:100])
    other = [*history(300)[:1], HumanMessage("the lake again", id="x"), *messages[2:200]]
    assert retriever.rank("  ", [], other) == []  # returns before indexing ``other``
    got = ranked(retriever, "lake", [], other, known_prefix=200)
    assert got == ranked(fresh, "lake", [], other)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_known_prefix_must_be_a_non_negative_int(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="known_prefix"):
        EvidenceRetriever().rank("kitten", [], history(10), known_prefix=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 7, 300, 5_000])
def test_best_n_keeps_the_best_and_the_lowest_ranked_of_the_tied(size: int) -> None:
    rng = np.random.default_rng(size)
    rank = rng.permutation(size)
    for values in (rng.random(size), rng.integers(0, 5, size).astype(float)):
        for n in (0, 1, 3, size // 2, size - 1, size):
            expected = sorted(sorted(range(size), key=lambda i: (-values[i], rank[i]))[:n])
            kept = _evidence_arrays.best_n(np, values, n, rank)
            assert (list(range(size)) if kept is None else kept.tolist()) == expected
            if 0 < n <= size:
                assert _evidence_arrays.nth(np, values, size - n) == sorted(values)[size - n]


def test_ranked_entries_are_ordinary_frozen_ranked_evidence() -> None:
    messages = history(4)
    entry = evidence.EvidenceRetriever().rank("kitten", [], messages)[0]
    built = evidence.RankedEvidence(messages[entry.position], entry.score, entry.position)
    assert entry == built and repr(entry) == repr(built) and vars(entry) == vars(built)
    with pytest.raises(AttributeError):
        entry.score = 1.0  # type: ignore[misc]


def test_sum_by_row_equals_the_sorted_sum_and_leaves_the_arrays_zero() -> None:
    from langchain_histcompress.recall.bm25 import _sum_by_slot

    rng = np.random.default_rng(7)
    work = _evidence_arrays.WorkArrays(np, 2)
    work.ensure(np, 500)
    counts = [40, 300, 1, 120]
    rows = np.concatenate([np.sort(rng.choice(500, c, replace=False)) + 2 for c in counts])
    values = rng.random(len(rows)) / 3
    found, sums = _evidence_arrays.sum_by_row(np, work, rows, values)
    order = np.argsort(found)
    expected_rows, expected_sums = _sum_by_slot(np, rows, values)
    assert found[order].tolist() == expected_rows.tolist()
    assert sums[order].tolist() == expected_sums.tolist()  # bit for bit
    assert not work.rows[:, :2].any()


def test_facts_only_ranking_scores_no_message_when_no_fact_names_a_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages = history(200)
    plain = [Fact(id=f"p{n}", content=f"about the {_WORDS[n % 8]}") for n in range(6)]
    retriever, fresh = EvidenceRetriever(), EvidenceRetriever()
    scored: list[str] = []
    real = BM25Index._posting_scores

    def counting(self: BM25Index, *args: Any) -> Any:
        scored.append("turns")
        return real(self, *args)

    monkeypatch.setattr(BM25Index, "_posting_scores", counting)
    got = ranked(retriever, "kitten lake", plain, messages, only_before=0)
    assert scored == []
    assert got == ranked(fresh, "kitten lake", plain, messages, only_before=0)
    assert [r[3] for r in got] == ["p0", "p1"]
    # with sources, messages are scored (for the facts), still none returned
    sourced = ranked(retriever, "kitten lake", facts(6), messages, only_before=0)
    assert scored and all(r[0] for r in sourced)


def test_a_turn_amid_matches_outranks_one_next_to_a_single_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neighbour scores add up: a reply amid a stretch about the topic is likelier on it."""
    texts = ["Ok then", "My garden", "Nice one", "Other news", "My garden", "So cool", "My garden"]
    history: list[BaseMessage] = [
        (AIMessage if n % 2 else HumanMessage)(text, id=f"m{n}") for n, text in enumerate(texts)
    ]
    numpy_module = evidence._numpy
    for module in (numpy_module, lambda: None):
        monkeypatch.setattr(evidence, "_numpy", module)
        retriever = EvidenceRetriever(neighbour_window=1)
        ranked = [r.item.id for r in retriever.rank("garden", [], history)]
        alone = [ranked.index(m) for m in ("m0", "m2", "m3")]  # next to one match each
        assert ranked.index("m5") < min(alone)  # between two, though m0 and m2 come first
        assert set(ranked[: len(ranked) - len(alone)]) == {"m1", "m4", "m5", "m6"}


@pytest.mark.parametrize("seed", range(6))
def test_array_ranking_equals_python_on_random_conversations(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random words, lengths, settings, edits and restrictions: both paths rank alike.

    Few distinct words make many equal scores (ties at the match and spread limits, at
    the lazy ordering's cut and between neighbours); small limits make the cuts bite.
    """
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{n}" for n in range(int(rng.integers(6, 40)))]

    def text() -> str:
        return " ".join(rng.choice(vocabulary, int(rng.integers(1, 9))).tolist())

    messages: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    dated = rng.random() < 0.5  # date terms from message times (see `query_terms`)
    for n in range(int(rng.integers(300, 1_500))):
        kind = HumanMessage if n % 2 else AIMessage
        stamp = {"timestamp": f"2023-{1 + n * 12 // 1_500:02d}-01T00:00:00Z"} if dated else {}
        name = vocabulary[2] if rng.random() < 0.05 else None  # a message's own name
        messages.append(
            kind(
                text(),
                id=None if rng.random() < 0.02 else f"m{n}",
                name=name,
                additional_kwargs=stamp,
            )
        )
    pool = [
        Fact(id=f"f{n}", content=text(), source_ids=[f"m{k}" for k in rng.integers(0, 900, 3)])
        for n in range(int(rng.integers(0, 40)))
    ]
    options = {
        "neighbour_window": int(rng.integers(0, 4)),
        "neighbour_weight": float(rng.choice([0.0, 0.6, 1.0])),
        "source_weight": float(rng.choice([0.0, 0.3])),
        "max_term_postings": [None, 20, 200][int(rng.integers(0, 3))],
        # speaker names among the words: they rank but do not retrieve (modifiers)
        "speaker_names": {"human": vocabulary[0], "ai": vocabulary[1]}
        if rng.random() < 0.5
        else None,
    }
    monkeypatch.setattr(evidence, "_MATCH_LIMIT", int(rng.integers(8, 400)))
    monkeypatch.setattr(evidence, "_SPREAD_LIMIT", int(rng.integers(2, 100)))
    monkeypatch.setattr(evidence, "_FIRST_RANKED", int(rng.integers(1, 60)))
    fast, slow = EvidenceRetriever(**options), EvidenceRetriever(**options)
    numpy_module = evidence._numpy
    ends = sorted(rng.integers(len(messages) // 3, len(messages), 6).tolist())
    for step, end in enumerate(ends):
        calls = messages[:end]
        if step == 3:  # a message's text replaced under the same id
            calls[5] = HumanMessage(text(), id=calls[5].id)
        question = " ".join(rng.choice(vocabulary, int(rng.integers(1, 6))).tolist())
        if step % 2:
            question += " in June 2023"
        kwargs: dict[str, Any] = {
            "only_before": [None, end - 3, 0][step % 3],
            "turn_ids": None if step % 2 else {f"m{k}" for k in range(0, end, 3)},
        }
        monkeypatch.setattr(evidence, "_numpy", numpy_module)
        got = ranked(fast, question, pool[: 10 + step * 5], calls, **kwargs)
        monkeypatch.setattr(evidence, "_numpy", lambda: None)
        assert got == ranked(slow, question, pool[: 10 + step * 5], calls, **kwargs), step


@pytest.mark.parametrize("size", [0, 1, 2, 3, 50, 3_000])
def test_largest_finds_each_cut_of_a_full_sort(size: int) -> None:
    rng = np.random.default_rng(size)
    values = rng.integers(0, 7, size) / 3  # ties
    counts = [0, 1, 2, size - 1, size, size + 5, 40, 2_048]
    got = _evidence_arrays.largest(np, values, counts)
    ordered = sorted(values.tolist(), reverse=True)
    assert got == [ordered[n - 1] if 0 < n < size else None for n in counts]
