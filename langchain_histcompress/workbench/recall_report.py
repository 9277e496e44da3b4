"""Benchmark report of the recall tool at question time (``round_compression_recall``).

For every strategy whose question contexts come through a tool call, per conversation and
pooled: evidence recall and answer coverage at question time, the recalled tokens (mean and
largest), and the extra request of one call under each pricing model beside the bill of the
whole conversation (`bench.recall_costs`). The conversation's own turns are the default
compression's requests: the tool adds nothing until it is called. Whether a real model
calls it is not measured offline.

Example:
    >>> print(TOOL_RECALL_NOTE.split(". ")[0])
    Offline, the tool is called at every question with the question as its query
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.costs import REPORTED_PRICINGS
from langchain_histcompress.workbench.recall import QuestionRecall
from langchain_histcompress.workbench.tables import percent

__all__ = [
    "TOOL_RECALL_NOTE",
    "ToolRecallFigures",
    "format_tool_recall_tables",
    "markdown_tool_recall_tables",
    "tool_recall_figures",
    "tool_recall_strategies",
    "tool_recall_to_dict",
]

TOOL_RECALL_NOTE = (
    "Offline, the tool is called at every question with the question as its query. Whether a "
    "real model calls it, and with what query, is not measured: recall here is what one "
    "call would bring back, not what an agent would do"
)
"""What the tool-recall figures do not measure."""


@dataclass(frozen=True)
class ToolRecallFigures:
    """One strategy's recall-tool figures over one conversation or several."""

    strategy: str
    """Strategy name."""
    questions: int
    """Questions scored."""
    recall: float
    """Evidence recall at question time (view + recalled messages)."""
    answer_coverage: float
    """Share of answered questions whose gold answer appears in the final request."""
    mean_recalled_tokens: float
    """Mean tokens of the tool's result."""
    max_recalled_tokens: int
    """Largest tool result."""
    bill: dict[str, float] = field(default_factory=dict)
    """Pricing -> the conversations' own bill (every turn and internal call), mean per
    conversation."""
    extra: dict[str, float] = field(default_factory=dict)
    """Pricing -> mean cost of one call's extra request."""
    extra_share: dict[str, float] = field(default_factory=dict)
    """Pricing -> mean of (one call's extra / its conversation's bill)."""
    cached_share: dict[str, float] = field(default_factory=dict)
    """Pricing -> share of the extra requests' input read from the cache."""


def tool_recall_strategies(result: BenchResult) -> list[str]:
    """Strategies whose question contexts came through a tool call, in report order."""
    return [
        s
        for s in result.strategies
        if any(
            q.recalled_tokens is not None
            for r in result.runs
            if r.strategy == s
            for q in r.questions
        )
    ]


def tool_recall_figures(
    result: BenchResult, strategy: str, conversation: str | None = None
) -> ToolRecallFigures | None:
    """The figures of ``strategy`` on one conversation or all (``None`` when not measured)."""
    names = [conversation] if conversation is not None else list(result.conversations)
    runs = [result.run(strategy, name) for name in names]
    if not runs or any(r is None or r.error or not r.questions for r in runs):
        return None
    pairs: list[tuple[QuestionRecall, dict[str, float]]] = []
    bill: dict[str, float] = {}
    for run in runs:
        assert run is not None
        totals = {p: run.costs[p].total.cost for p in REPORTED_PRICINGS if p in run.costs}
        for p, cost in totals.items():
            bill[p] = bill.get(p, 0.0) + cost / len(runs)
        pairs += [(q, totals) for q in run.questions if q.recalled_tokens is not None]
    if not pairs:
        return None
    questions = [q for q, _ in pairs]
    answered = [q for q in questions if q.answer_covered is not None]
    extra: dict[str, float] = {}
    share: dict[str, float] = {}
    cached: dict[str, float] = {}
    for p in REPORTED_PRICINGS:
        priced = [(q.tool_costs[p], totals) for q, totals in pairs if p in q.tool_costs]
        if len(priced) != len(pairs):
            continue
        extra[p] = sum(c.cost for c, _ in priced) / len(priced)
        if all(totals.get(p) for _, totals in priced):
            share[p] = sum(c.cost / totals[p] for c, totals in priced) / len(priced)
        inputs = sum(c.input_tokens for c, _ in priced)
        cached[p] = sum(c.cached_tokens for c, _ in priced) / inputs if inputs else 0.0
    recalled = [q.recalled_tokens or 0 for q in questions]
    return ToolRecallFigures(
        strategy=strategy,
        questions=len(questions),
        recall=sum(q.hit for q in questions) / len(questions),
        answer_coverage=sum(bool(q.answer_covered) for q in answered) / len(answered)
        if answered
        else 0.0,
        mean_recalled_tokens=sum(recalled) / len(recalled),
        max_recalled_tokens=max(recalled),
        bill=bill,
        extra=extra,
        extra_share=share,
        cached_share=cached,
    )


def _dollars(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _rows(result: BenchResult) -> tuple[list[list[str]], list[list[str]]]:
    """(recall rows, cost rows), one per strategy and conversation plus the pooled one."""
    recall_rows: list[list[str]] = []
    cost_rows: list[list[str]] = []
    for strategy in tool_recall_strategies(result):
        for conversation in [*result.conversations, None]:
            figures = tool_recall_figures(result, strategy, conversation)
            if figures is None:
                continue
            label = f"{strategy} {conversation}" if conversation else f"{strategy} (all)"
            recall_rows.append(
                [
                    label,
                    str(figures.questions),
                    percent(figures.recall),
                    percent(figures.answer_coverage),
                    f"{figures.mean_recalled_tokens:,.0f}",
                    f"{figures.max_recalled_tokens:,}",
                ]
            )
            for p in REPORTED_PRICINGS:
                if p not in figures.extra:
                    continue
                cost_rows.append(
                    [
                        label,
                        f"`{p}`",
                        _dollars(figures.bill.get(p)),
                        _dollars(figures.extra[p]),
                        percent(figures.extra_share.get(p), 2),
                        percent(figures.cached_share.get(p)),
                    ]
                )
    return recall_rows, cost_rows


_RECALL_HEADER = [
    "strategy",
    "questions",
    "evidence recall",
    "answer cov",
    "recalled tokens (mean)",
    "max",
]
_COST_HEADER = [
    "strategy",
    "pricing",
    "conversation bill",
    "one call (extra request)",
    "one call / bill",
    "cached input of the extra",
]


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "| :--- | " + " | ".join("---:" for _ in header[1:]) + " |",
    ]
    return "\n".join([*lines, *["| " + " | ".join(r) + " |" for r in rows]])


def markdown_tool_recall_tables(result: BenchResult) -> str:
    """Both tables as Markdown, with the note (empty when no strategy calls a tool)."""
    recall_rows, cost_rows = _rows(result)
    if not recall_rows:
        return ""
    return "\n\n".join(
        [
            _markdown(_RECALL_HEADER, recall_rows),
            "The extra request of one call at a question (the request that asked, the call "
            "and its result, the first part read from the cache where the pricing caches it; "
            "plus the call's output tokens), beside the whole conversation's bill, per "
            "conversation (mean):",
            _markdown(_COST_HEADER, cost_rows),
            TOOL_RECALL_NOTE + ".",
        ]
    )


def format_tool_recall_tables(result: BenchResult) -> str:
    """Both tables as aligned plain text (empty when no strategy calls a tool)."""
    recall_rows, cost_rows = _rows(result)
    if not recall_rows:
        return ""
    out = ["Recall tool at question time (one call per question, the question as query)"]
    for header, rows in ((_RECALL_HEADER, recall_rows), (_COST_HEADER, cost_rows)):
        cells = [[c.strip("`") for c in r] for r in [header, *rows]]
        widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
        for row in [*cells[:1], ["-" * w for w in widths], *cells[1:]]:
            first = f"{row[0]:<{widths[0]}}"
            rest = [f"{c:>{w}}" for c, w in zip(row[1:], widths[1:], strict=True)]
            out.append("  ".join([first, *rest]).rstrip())
        out.append("")
    out.append(TOOL_RECALL_NOTE + ".")
    return "\n".join(out)


def tool_recall_to_dict(result: BenchResult) -> dict[str, Any]:
    """The figures as JSON-ready data: strategy -> conversation (or ``"all"``) -> figures."""
    out: dict[str, Any] = {}
    for strategy in tool_recall_strategies(result):
        out[strategy] = {}
        for conversation in [*result.conversations, None]:
            figures = tool_recall_figures(result, strategy, conversation)
            if figures is not None:
                out[strategy][conversation or "all"] = {
                    "questions": figures.questions,
                    "recall": figures.recall,
                    "answer_coverage": figures.answer_coverage,
                    "mean_recalled_tokens": figures.mean_recalled_tokens,
                    "max_recalled_tokens": figures.max_recalled_tokens,
                    "bill": figures.bill,
                    "extra_per_call": figures.extra,
                    "extra_share_of_bill": figures.extra_share,
                    "extra_cached_share": figures.cached_share,
                }
    if out:
        out["note"] = TOOL_RECALL_NOTE
    return out
