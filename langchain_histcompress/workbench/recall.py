"""Evidence recall: does the context built for a question still hold the turns that answer it?

A question (category 1-4, naming at least one evidence turn of the conversation) is a *hit*
when every evidence turn is in its context: verbatim (`QuestionContext.retrieved_ids`
included) or via a shown fact's ``source_ids`` (`QuestionContext.fact_source_ids`). A summary
covering the turn does not count: coverage says the turn was sent to the summarizer, not that
the detail survived. Recall is reported with the contexts' mean token count. The definition
is in docs/design/workbench.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage

from langchain_histcompress.workbench.coverage import answer_covered
from langchain_histcompress.workbench.locomo import QAItem
from langchain_histcompress.workbench.recall_costs import ToolCallCost

__all__ = [
    "QuestionContext",
    "QuestionRecall",
    "RecallSummary",
    "score_question",
    "summarize_recall",
]


@dataclass(frozen=True)
class QuestionContext:
    """The context a strategy builds to answer a question."""

    messages: tuple[BaseMessage, ...]
    """Exactly what the answering model would receive, the question last."""
    fact_source_ids: frozenset[str] = frozenset()
    """Ids of turns that a fact shown in ``messages`` was extracted from."""
    retrieved_ids: frozenset[str] = frozenset()
    """Ids of turns whose whole text ``messages`` shows inside a data block (retrieved raw
    turns, or recalled by a tool); they count as verbatim."""
    tool_request: tuple[BaseMessage, ...] = ()
    """When the context was reached through one tool call: the request that made the call
    (``messages`` extends it with the call and the tool's result). Empty otherwise."""


@dataclass(frozen=True)
class QuestionRecall:
    """Where each evidence turn of one question was found."""

    question: str
    """The question text."""
    category: int
    """The LoCoMo category."""
    evidence: tuple[str, ...]
    """The evidence turn ids."""
    verbatim: tuple[str, ...]
    """Evidence ids present as messages of the context."""
    via_fact: tuple[str, ...]
    """Evidence ids absent verbatim but present through a fact sourced from them."""
    missing: tuple[str, ...]
    """Evidence ids present neither way."""
    context_tokens: int
    """Token count of the context."""
    answer_covered: bool | None = None
    """The normalized gold answer appears in the context (``bench.coverage``); ``None``
    when the question has no gold answer."""
    recalled_tokens: int | None = None
    """Tokens of the tool result the context ends with (``None``: no tool call)."""
    tool_costs: Mapping[str, ToolCallCost] = field(default_factory=dict)
    """The extra request the tool call made, priced by each pricing model (by name)."""

    @property
    def hit(self) -> bool:
        """Every evidence turn is present."""
        return not self.missing


def score_question(qa: QAItem, context: QuestionContext, *, context_tokens: int) -> QuestionRecall:
    """Check which evidence turns of ``qa`` the ``context`` holds (evidence recall).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> qa = QAItem(question="?", answer="", evidence=("D1:1", "D1:2"), category=4)
        >>> score_question(qa, QuestionContext((HumanMessage("x", id="D1:1"),)),
        ...                context_tokens=5).missing
        ('D1:2',)
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.workbench.locomo import QAItem
        >>> qa = QAItem(question="Where?", answer="Oslo", evidence=("D1:3", "D2:1"), category=1)
        >>> context = QuestionContext((HumanMessage("I live in Oslo", id="D1:3"),),
        ...                           fact_source_ids=frozenset({"D2:1"}))
        >>> found = score_question(qa, context, context_tokens=12)
        >>> found.hit, found.verbatim, found.via_fact
        (True, ('D1:3',), ('D2:1',))
    """
    present = {m.id for m in context.messages if m.id is not None} | context.retrieved_ids
    verbatim = tuple(i for i in qa.evidence if i in present)
    via_fact = tuple(i for i in qa.evidence if i not in present and i in context.fact_source_ids)
    missing = tuple(i for i in qa.evidence if i not in present and i not in context.fact_source_ids)
    return QuestionRecall(
        question=qa.question,
        category=qa.category,
        evidence=qa.evidence,
        verbatim=verbatim,
        via_fact=via_fact,
        missing=missing,
        context_tokens=context_tokens,
        answer_covered=answer_covered(qa.answer, context.messages, question=qa.question),
    )


@dataclass(frozen=True)
class RecallSummary:
    """Evidence recall over a set of questions."""

    questions: int
    """Questions scored."""
    hits: int
    """Questions whose evidence turns were all present."""
    mean_context_tokens: float
    """Mean token count of the question contexts (0.0 without questions)."""
    by_category: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Category -> (hits, questions)."""
    via_fact_hits: int = 0
    """Hits that needed at least one fact (not all evidence verbatim)."""
    answered: int = 0
    """Questions with a gold answer (the base of answer coverage)."""
    answers_covered: int = 0
    """Questions whose gold answer appears in the context (``bench.coverage``)."""

    @property
    def recall(self) -> float:
        """``hits / questions`` (0.0 without questions)."""
        return self.hits / self.questions if self.questions else 0.0

    @property
    def answer_coverage(self) -> float:
        """``answers_covered / answered`` (0.0 without answers)."""
        return self.answers_covered / self.answered if self.answered else 0.0


def summarize_recall(results: Iterable[QuestionRecall]) -> RecallSummary:
    """Aggregate per-question results.

    Example:
        >>> r = QuestionRecall("?", 1, ("a",), ("a",), (), (), 10)
        >>> m = QuestionRecall("?", 2, ("b",), (), (), ("b",), 30)
        >>> s = summarize_recall([r, m])
        >>> s.recall, s.mean_context_tokens, s.by_category
        (0.5, 20.0, {1: (1, 1), 2: (0, 1)})
    """
    items: Sequence[QuestionRecall] = list(results)
    by_category: dict[int, tuple[int, int]] = {}
    for item in items:
        hits, total = by_category.get(item.category, (0, 0))
        by_category[item.category] = (hits + int(item.hit), total + 1)
    tokens = sum(i.context_tokens for i in items)
    return RecallSummary(
        questions=len(items),
        hits=sum(1 for i in items if i.hit),
        mean_context_tokens=tokens / len(items) if items else 0.0,
        by_category=dict(sorted(by_category.items())),
        via_fact_hits=sum(1 for i in items if i.hit and i.via_fact),
        answered=sum(1 for i in items if i.answer_covered is not None),
        answers_covered=sum(1 for i in items if i.answer_covered),
    )
