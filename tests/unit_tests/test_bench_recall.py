from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.workbench.locomo import QAItem
from langchain_histcompress.workbench.recall import (
    QuestionContext,
    QuestionRecall,
    score_question,
    summarize_recall,
)

QUESTION = HumanMessage("Where does Ana live?", id="question-0")


def _qa(*evidence: str, category: int = 1) -> QAItem:
    return QAItem(question="Where?", answer="Bergen", evidence=evidence, category=category)


def test_verbatim_evidence_is_a_hit() -> None:
    context = QuestionContext(
        (SystemMessage("sys", id="s"), HumanMessage("I live in Bergen", id="D2:3"), QUESTION)
    )
    result = score_question(_qa("D2:3"), context, context_tokens=30)
    assert result.hit
    assert result.verbatim == ("D2:3",)
    assert result.via_fact == ()
    assert result.context_tokens == 30


def test_evidence_through_a_fact_is_a_hit() -> None:
    context = QuestionContext(
        (SystemMessage("<facts>Ana lives in Bergen</facts>", id="facts"), QUESTION),
        fact_source_ids=frozenset({"D2:3"}),
    )
    result = score_question(_qa("D2:3"), context, context_tokens=20)
    assert result.hit
    assert result.via_fact == ("D2:3",)
    assert result.verbatim == ()


def test_one_of_two_evidence_turns_missing_is_a_miss() -> None:
    context = QuestionContext((AIMessage("Bergen is rainy", id="D2:4"), QUESTION))
    result = score_question(_qa("D2:3", "D2:4"), context, context_tokens=10)
    assert not result.hit
    assert result.verbatim == ("D2:4",)
    assert result.missing == ("D2:3",)


def test_mixed_verbatim_and_fact_is_a_hit() -> None:
    context = QuestionContext(
        (AIMessage("Bergen is rainy", id="D2:4"), QUESTION), fact_source_ids=frozenset({"D1:1"})
    )
    result = score_question(_qa("D1:1", "D2:4"), context, context_tokens=10)
    assert result.hit
    assert (result.verbatim, result.via_fact) == (("D2:4",), ("D1:1",))


def test_summary_coverage_does_not_count() -> None:
    summary = RunningSummary(
        content="Ana moved to Bergen.",
        text="Ana moved to Bergen.",
        covered_ids=frozenset({"D2:3"}),
        rounds_covered=1,
    )
    context = QuestionContext((summary.to_message(), QUESTION))
    result = score_question(_qa("D2:3"), context, context_tokens=40)
    assert not result.hit
    assert result.missing == ("D2:3",)


def test_a_message_with_another_id_does_not_count() -> None:
    context = QuestionContext((HumanMessage("I live in Bergen", id="D2:3#1"), QUESTION))
    assert not score_question(_qa("D2:3"), context, context_tokens=5).hit


def test_summarize_recall_aggregates_by_category() -> None:
    results = [
        QuestionRecall("a", 1, ("x",), ("x",), (), (), 100),
        QuestionRecall("b", 1, ("y",), (), ("y",), (), 200),
        QuestionRecall("c", 4, ("z",), (), (), ("z",), 300),
    ]
    summary = summarize_recall(results)
    assert summary.questions == 3
    assert summary.hits == 2
    assert summary.recall == 2 / 3
    assert summary.mean_context_tokens == 200.0
    assert summary.by_category == {1: (2, 2), 4: (0, 1)}
    assert summary.via_fact_hits == 1
    empty = summarize_recall([])
    assert (empty.recall, empty.mean_context_tokens) == (0.0, 0.0)


def test_counts_for_recall() -> None:
    assert _qa("D1:1", category=4).counts_for_recall
    assert not _qa("D1:1", category=5).counts_for_recall
    assert not _qa(category=2).counts_for_recall


def test_retrieved_raw_turn_counts_as_verbatim() -> None:
    context = QuestionContext(
        (SystemMessage('<turn id="D2:3">I move to Bergen</turn>', id="data"), QUESTION),
        retrieved_ids=frozenset({"D2:3"}),
    )
    result = score_question(_qa("D2:3"), context, context_tokens=15)
    assert result.hit
    assert result.verbatim == ("D2:3",)
