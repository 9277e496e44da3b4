from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_histcompress.workbench.coverage import answer_covered, normalize_answer
from langchain_histcompress.workbench.locomo import QAItem
from langchain_histcompress.workbench.recall import (
    QuestionContext,
    score_question,
    summarize_recall,
)


def test_normalization_drops_case_punctuation_articles_and_escapes() -> None:
    assert normalize_answer("The Eiffel-Tower!") == "eiffel tower"
    assert normalize_answer("caf\\u00e9 &amp; tea") == "café tea"
    assert normalize_answer("a\\nb") == "b"  # "a" is an article once the escape is a space


def test_answer_must_appear_as_whole_words() -> None:
    context = [AIMessage("She paints landscapes.")]
    assert answer_covered("landscapes", context) is True
    assert answer_covered("scapes", context) is False
    assert answer_covered("paints landscapes", context) is True


def test_the_question_itself_does_not_cover_its_answer() -> None:
    question = "Did Ann go to Oslo?"
    context = [SystemMessage("rules"), HumanMessage(question)]
    assert answer_covered("Oslo", context, question=question) is False


def test_a_summary_covers_an_answer_that_evidence_recall_does_not_credit() -> None:
    qa = QAItem(question="Where does Ann live?", answer="Oslo", evidence=("D1:3",), category=4)
    context = QuestionContext(
        (SystemMessage("<summary>Ann lives in Oslo.</summary>"), HumanMessage(qa.question))
    )
    scored = score_question(qa, context, context_tokens=20)
    assert not scored.hit
    assert scored.answer_covered is True
    summary = summarize_recall([scored])
    assert (summary.recall, summary.answer_coverage, summary.answered) == (0.0, 1.0, 1)


def test_questions_without_a_gold_answer_are_left_out_of_coverage() -> None:
    qa = QAItem(question="?", answer=None, evidence=("D1:1",), category=1)
    scored = score_question(qa, QuestionContext((HumanMessage("x", id="D1:1"),)), context_tokens=5)
    assert scored.answer_covered is None
    assert summarize_recall([scored]).answer_coverage == 0.0
    assert summarize_recall([scored]).answered == 0
