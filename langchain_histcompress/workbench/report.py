"""Benchmark reports: console tables, a JSON file with every figure, Markdown, PNG plots.

Console tables and the README's section stay within 100 columns; ``bench.md`` and the
documentation's benchmark page (`docs_section`) hold every table.

Plots are drawn with matplotlib's object API on the Agg canvas (no pyplot, no GUI backend,
no global state changed).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.workbench.bench_config import BASELINE
from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.cost_report import (
    COST_DEFINITIONS,
    compact_agent_rows,
    compact_cost_rows,
    cost_to_dict,
    markdown_agent_table,
    markdown_cost_table,
    pricing_assumptions_markdown,
    write_cost_plot,
)
from langchain_histcompress.workbench.face_report import face_overhead_table, write_face_reports
from langchain_histcompress.workbench.metrics import ReplayFigures
from langchain_histcompress.workbench.plot_style import Style, label_column, strategy_styles
from langchain_histcompress.workbench.recall import RecallSummary
from langchain_histcompress.workbench.recall_report import (
    markdown_tool_recall_tables,
    tool_recall_to_dict,
)
from langchain_histcompress.workbench.strategies import DEFAULT_STRATEGIES, available_strategies
from langchain_histcompress.workbench.tables import (
    columns,
    markdown_table,
    percent,
    text_table,
    wrap,
)

__all__ = [
    "DEFINITIONS",
    "INTERNAL_CALLS_DEFINITION",
    "RECALL_TARGET",
    "docs_section",
    "format_table",
    "markdown_report",
    "plot_billed_vs_history",
    "plot_recall_vs_tokens",
    "plot_tokens_per_call",
    "readme_section",
    "result_to_dict",
    "update_readme",
    "write_json",
    "write_markdown",
    "write_plots",
    "write_reports",
]

DEFINITIONS: dict[str, str] = {
    "prompt tokens": "tiktoken count (o200k_base, OpenAI chat overhead) of the answering "
    "model's input at each assistant turn; mean, 95th percentile (nearest rank) and last call",
    "billed tokens": "prompt + completion tokens of every model call: the answering calls and "
    "the strategy's own summarize / extract calls",
    "savings": "1 - billed(strategy) / billed(full) over the whole replayed conversations",
    "internal calls": "summarize / extract calls the strategy made on the internal model",
    "evidence recall": "share of category 1-4 questions whose evidence turns are all in the "
    "context built for the question, verbatim or through a fact sourced from them; a summary "
    "covering a turn does not count",
    "answer coverage": "share of category 1-4 questions whose normalized gold answer "
    "appears in the context built for the question (summary and facts included, the question "
    "left out); an upper bound that credits what a summary keeps",
    "context tokens": "mean token count of the question contexts (question included)",
    "overhead": "wall time of the strategy's own work per assistant turn, internal model time "
    "excluded: mean over the replay, and median over a few turns once the history holds "
    "1k / 10k / 100k messages (the first conversation repeated with fresh ids)",
}
"""What each reported figure means."""

_COLUMNS = (
    "strategy",
    "calls",
    "internal",
    "prompt mean",
    "p95",
    "last",
    "billed",
    "savings",
    "recall",
    "answer cov",
    "ctx tokens",
    "ms/turn",
)


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{round(value):,}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _size_label(size: int) -> str:
    return f"{size // 1000}k" if size >= 1000 and size % 1000 == 0 else str(size)


def _row(
    result: BenchResult, strategy: str, conversation: str | None
) -> tuple[list[str], str | None]:
    figures = result.figures(strategy, conversation)
    recall = result.recall(strategy, conversation)
    error = None
    names = [conversation] if conversation else list(result.conversations)
    for name in names:
        run = result.run(strategy, name)
        if run is not None and run.error:
            error = f"{name}: {run.error}"
            break
    if figures is None:
        cells = [strategy] + ["-"] * (len(_COLUMNS) - 1)
        return cells, error
    cells = [
        strategy,
        f"{figures.calls:,}",
        f"{figures.internal_calls:,}",
        _tokens(figures.prompt_mean),
        _tokens(figures.prompt_p95),
        _tokens(figures.prompt_last),
        _tokens(figures.billed),
        percent(figures.savings),
        percent(recall.recall if recall else None),
        percent(recall.answer_coverage if recall and recall.answered else None),
        _tokens(recall.mean_context_tokens if recall else None),
        _ms(figures.overhead_ms_mean),
    ]
    return cells, error


def _table_rows(result: BenchResult, conversation: str | None) -> tuple[list[str], list[list[str]]]:
    header = list(_COLUMNS)
    sizes = result.config.sizes if result.overhead and conversation is None else ()
    header += [f"ms@{_size_label(s)}" for s in sizes]
    rows: list[list[str]] = []
    for strategy in result.strategies:
        cells, _ = _row(result, strategy, conversation)
        rows.append(cells + [_ms(result.overhead_ms(strategy, s)) for s in sizes])
    return header, rows


def format_table(result: BenchResult, conversation: str | None = None) -> str:
    """The figures as aligned plain-text tables (all conversations, or one), 100 columns wide.

    Tokens and savings first, then evidence recall and overhead per turn (ms), each table
    repeating the strategy column; every figure is also in ``bench.md`` and ``bench.json``.

    Example output row: ``truncation  208  0  763  962  ...``.
    """
    header, rows = _table_rows(result, conversation)
    split = header.index("recall")
    out = [
        text_table(*columns(header, rows, header[1:split])),
        "",
        text_table(
            *columns(header, rows, header[split:]),
            title="Evidence recall at question time, context tokens, overhead per turn (ms)",
        ),
    ]
    errors = [e for s in result.strategies if (e := _row(result, s, conversation)[1])]
    out += [f"failed: {e}" for e in errors]
    if conversation is None:
        out += ["", _internal_calls_text(result)]
    return "\n".join(out)


# --------------------------------------------------------------------------- internal calls

INTERNAL_CALLS_DEFINITION = (
    "Per strategy, over every conversation: internal calls that gave up after their retries "
    "(the strategy went on without them), requests sent to the internal model and how many "
    "raised, then input / output / cached-input tokens as the provider reported them "
    "(usage_metadata) beside the tiktoken estimate of the same requests"
)
"""What the internal-calls table shows."""

_INTERNAL_HEADER = (
    "strategy",
    "failures",
    "requests",
    "failed req",
    "in",
    "out",
    "cached in",
    "tiktoken in",
    "tiktoken out",
)


def _internal_calls_rows(result: BenchResult) -> list[list[str]]:
    rows = []
    for strategy in result.strategies:
        f = result.internal_calls(strategy)
        rows.append(
            [
                strategy,
                f"{f.failures:,}",
                f"{f.requests:,}",
                f"{f.failed_requests:,}",
                _tokens(f.prompt_tokens),
                _tokens(f.completion_tokens),
                _tokens(f.cached_tokens) if f.reported_requests else "-",
                _tokens(f.estimated_prompt_tokens),
                _tokens(f.estimated_completion_tokens),
            ]
        )
    return rows


def _internal_calls_text(result: BenchResult) -> str:
    rows = _internal_calls_rows(result)
    table = "\n".join(
        [
            text_table(*columns(_INTERNAL_HEADER, rows, _INTERNAL_HEADER[1:4]),
                       title="internal calls"),
            "",
            text_table(
                *columns(_INTERNAL_HEADER, rows, _INTERNAL_HEADER[4:]),
                title="internal calls: tokens as the provider reported them, beside the "
                "tiktoken estimate",
            ),
        ]
    )  # fmt: skip
    failed = result.failed_strategies()
    verdict = (
        wrap(f"INTERNAL CALL FAILURES in: {', '.join(failed)} (their figures are not trustworthy)")
        if failed
        else "internal calls: no failures"
    )
    return "\n".join([table, verdict])


def _internal_calls_markdown(result: BenchResult) -> list[str]:
    lines = ["## Internal calls", "", f"{INTERNAL_CALLS_DEFINITION}.", ""]
    lines += [markdown_table(_INTERNAL_HEADER, _internal_calls_rows(result)), ""]
    failed = result.failed_strategies()
    if failed:
        lines += [
            f"**Internal call failures in: {', '.join(failed)}.** Their figures do not "
            "describe a healthy run.",
            "",
        ]
    return lines


def _figures_dict(figures: ReplayFigures | None) -> dict[str, Any] | None:
    if figures is None:
        return None
    data = asdict(figures)
    data["billed"] = figures.billed
    return data


def _recall_dict(recall: RecallSummary | None) -> dict[str, Any] | None:
    if recall is None:
        return None
    return {
        "questions": recall.questions,
        "hits": recall.hits,
        "recall": recall.recall,
        "via_fact_hits": recall.via_fact_hits,
        "answered": recall.answered,
        "answers_covered": recall.answers_covered,
        "answer_coverage": recall.answer_coverage,
        "mean_context_tokens": recall.mean_context_tokens,
        "by_category": {
            str(k): {"hits": h, "questions": n, "recall": h / n if n else 0.0}
            for k, (h, n) in recall.by_category.items()
        },
    }


def result_to_dict(result: BenchResult) -> dict[str, Any]:
    """Every figure of ``result`` as JSON-ready data (per-turn series included)."""
    config = result.config
    specs = available_strategies()
    per_conversation: dict[str, Any] = {}
    turns: dict[str, Any] = {}
    for conversation in result.conversations:
        per_conversation[conversation] = {}
        turns[conversation] = {}
        for strategy in result.strategies:
            run = result.run(strategy, conversation)
            per_conversation[conversation][strategy] = {
                "figures": _figures_dict(result.figures(strategy, conversation)),
                "recall": _recall_dict(result.recall(strategy, conversation)),
                "error": run.error if run else "not run",
                "missed_questions": [
                    {"question_index": i, "category": q.category, "missing": list(q.missing)}
                    for i, q in enumerate(run.questions if run else ())
                    if not q.hit
                ],
            }
            turns[conversation][strategy] = {
                "message_ids": [t.message_id for t in run.turns] if run else [],
                "prompt_tokens": [t.prompt_tokens for t in run.turns] if run else [],
                "completion_tokens": [t.completion_tokens for t in run.turns] if run else [],
                "internal_calls": [len(t.internal_calls) for t in run.turns] if run else [],
                "internal_billed": [t.internal_billed for t in run.turns] if run else [],
                "overhead_ms": [round(t.overhead_s * 1000, 4) for t in run.turns] if run else [],
            }
    return {
        "format_version": 1,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(result.seconds, 3),
        "config": {
            "data": [str(p) for p in config.data],
            "strategies": list(result.strategies),
            "internal_model": result.internal_model,
            "quick": config.quick,
            "overhead_sizes": list(config.sizes),
            "overhead_turns": config.overhead_turns,
            "budget_tokens": config.budget_tokens,
            "keep_messages": config.keep_messages,
            "summary_tokens": config.summary_tokens,
            "context_tokens": config.context_tokens,
            "token_counter": "tiktoken gpt-4o-mini (o200k_base)",
        },
        "definitions": DEFINITIONS,
        "conversations": list(result.conversations),
        "strategies": [
            {"name": s, "description": specs[s].description if s in specs else ""}
            for s in result.strategies
        ],
        "totals": {
            s: {
                "figures": _figures_dict(result.figures(s)),
                "recall": _recall_dict(result.recall(s)),
                "overhead_ms": {str(size): result.overhead_ms(s, size) for size in config.sizes}
                if result.overhead
                else {},
            }
            for s in result.strategies
        },
        "internal_calls": {s: asdict(result.internal_calls(s)) for s in result.strategies},
        "failed_strategies": result.failed_strategies(),
        "per_conversation": per_conversation,
        "turns": turns,
        "overhead": [asdict(o) for o in result.overhead],
        "incremental_counting": result.counting,
        "notes": list(result.notes),
        "costs": cost_to_dict(result),
        "tool_recall": tool_recall_to_dict(result),
    }


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_json(result: BenchResult, path: Path) -> Path:
    """Write `result_to_dict` to ``path`` (UTF-8, indented)."""
    path.write_text(
        json.dumps(_finite(result_to_dict(result)), indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    return path


def _settings(result: BenchResult) -> str:
    config = result.config
    return (
        f"Conversations: {', '.join(result.conversations)}. Internal model: "
        f"`{result.internal_model}`. Token budget {config.budget_tokens}, kept messages "
        f"{config.keep_messages}, summary cap {config.summary_tokens} tokens, assembled "
        f"contexts {config.context_tokens} tokens. Run time {result.seconds:.1f} s."
    )


def _per_conversation_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Savings against the full history and recall @ mean context tokens, per conversation."""
    header = ["strategy"] + [
        f"{c} {kind}" for c in result.conversations for kind in ("savings", "recall")
    ]
    rows = []
    for strategy in result.strategies:
        cells = [strategy]
        for conversation in result.conversations:
            figures = result.figures(strategy, conversation)
            recall = result.recall(strategy, conversation)
            cells.append(percent(figures.savings if figures else None))
            cells.append(
                f"{percent(recall.recall)} @ {_tokens(recall.mean_context_tokens)}"
                if recall
                else "-"
            )
        rows.append(cells)
    return header, rows


def _category_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    categories = sorted(
        {k for s in result.strategies if (r := result.recall(s)) is not None for k in r.by_category}
    )
    header = ["strategy", *[f"cat {k}" for k in categories], "via fact"]
    rows = []
    for strategy in result.strategies:
        recall = result.recall(strategy)
        if recall is None:
            continue
        cells = [strategy]
        for k in categories:
            hits, total = recall.by_category.get(k, (0, 0))
            cells.append(f"{hits}/{total}")
        cells.append(str(recall.via_fact_hits))
        rows.append(cells)
    return header, rows


def markdown_report(result: BenchResult, *, plots: Sequence[Path] = ()) -> str:
    """Every table of the run as Markdown sections (``##`` headings), definitions last.

    The body of ``bench.md`` and of the documentation's benchmark page.
    """
    specs = available_strategies()
    lines = [
        _settings(result),
        "",
        "## All conversations",
        "",
        markdown_table(*_table_rows(result, None)),
        "",
    ]
    failures = [e for s in result.strategies if (e := _row(result, s, None)[1])]
    lines += [f"- failed: {e}" for e in failures]
    if failures:
        lines.append("")
    lines += [
        "## Savings and recall per conversation",
        "",
        "Savings against the full history; evidence recall at question time @ the mean "
        "context tokens.",
        "",
        markdown_table(*_per_conversation_rows(result)),
        "",
    ]
    lines += _internal_calls_markdown(result)
    lines += [
        "## Cost under prompt caching",
        "",
        markdown_cost_table(result),
        "",
        pricing_assumptions_markdown(),
        "",
    ]
    if tool_recall := markdown_tool_recall_tables(result):
        lines += ["## Recall tool at question time", "", tool_recall, ""]
    if result.agent is not None:
        lines += ["## Agent workload (tau-bench)", "", markdown_agent_table(result), ""]
    lines += ["## Strategies", ""]
    lines += [f"- `{s}`: {specs[s].description if s in specs else ''}" for s in result.strategies]
    lines.append("")
    for conversation in result.conversations:
        lines += [
            f"## Conversation {conversation}",
            "",
            markdown_table(*_table_rows(result, conversation)),
            "",
        ]
    lines += ["## Evidence recall by category", "", markdown_table(*_category_rows(result)), ""]
    if result.counting:
        c = result.counting
        lines += [
            "## Incremental token counting",
            "",
            f"First count of {int(c.get('messages', 0)):,} messages: "
            f"{c.get('first_count_s', 0.0):.3f} s; recount after appending: "
            f"{c.get('recount_s', 0.0):.4f} s (ratio {c.get('ratio', 0.0):.4f}).",
            "",
        ]
    errors = [o for o in result.overhead if o.error]
    if errors:
        lines += ["## Overhead failures", ""]
        lines += [f"- `{o.strategy}` @ {o.messages}: {o.error}" for o in errors]
        lines.append("")
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}]({p.name})" for p in plots]
        lines.append("")
    lines += ["## Definitions", ""]
    lines += [f"- **{k}**: {v}." for k, v in {**DEFINITIONS, **COST_DEFINITIONS}.items()]
    if result.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines)


def write_markdown(result: BenchResult, path: Path, *, plots: Sequence[Path] = ()) -> Path:
    """Write a Markdown report (every table, definitions, plot links) to ``path``."""
    text = "# histcompress benchmark\n\n" + markdown_report(result, plots=plots) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


RECALL_TARGET = 0.85
"""Evidence recall the retrieval strategies aim for (marked on the recall plot)."""


def _styles(strategies: Sequence[str]) -> dict[str, Style]:
    """One colour and marker per strategy, the same in every plot and every run."""
    return strategy_styles(strategies, order=DEFAULT_STRATEGIES)


def _axes(width: float = 10.0, height: float = 5.5) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _save(figure: Any, axes: Any, path: Path, *, legend: bool = True) -> Path:
    axes.grid(True, which="major", alpha=0.3)
    if legend:
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    figure.savefig(path, bbox_inches="tight")
    return path


def _count_axis(axis: Any, *, log: bool = False) -> None:
    """Ticks of a count axis: whole numbers only, written out (1,000 rather than 10^3)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    if log:
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else ""))
        axis.set_minor_formatter(NullFormatter())
    else:
        axis.set_major_locator(MaxNLocator(integer=True))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def _line(
    axes: Any, xs: Sequence[float], ys: Sequence[float], label: str, style: Style, index: int
) -> None:
    step = max(1, len(xs) // 10)
    axes.plot(
        xs,
        ys,
        label=label,
        color=style.colour,
        linestyle=style.linestyle,
        linewidth=1.3,
        markevery=(index % step, step),  # staggered, so overlapping lines show every marker
        **style.marker_kwargs(5),
    )


def plot_tokens_per_call(result: BenchResult, conversation: str, out_dir: Path) -> Path:
    """How many prompt tokens each strategy sends per call as ``conversation`` goes on.

    Log scale: the full history grows by orders of magnitude past every other strategy.
    """
    styles = _styles(result.strategies)
    figure, axes = _axes()
    for index, strategy in enumerate(result.strategies):
        run = result.run(strategy, conversation)
        if run is None or not run.turns:
            continue
        series = [max(t.prompt_tokens, 1) for t in run.turns]
        _line(axes, range(1, len(series) + 1), series, strategy, styles[strategy], index)
    axes.set_yscale("log")
    _count_axis(axes.xaxis)
    _count_axis(axes.yaxis, log=True)
    axes.set_xlabel("assistant turn")
    axes.set_ylabel("prompt tokens per answering call (log)")
    axes.set_title(f"Prompt tokens per call, conversation {conversation}")
    return _save(figure, axes, out_dir / f"tokens_per_call_{_safe(conversation)}.png")


def plot_billed_vs_history(result: BenchResult, conversation: str, out_dir: Path) -> Path:
    """What each strategy has billed so far against the history's size, on ``conversation``.

    Billed = prompt + completion tokens of every call, the strategy's own internal calls
    included; the history size is the full history's message count at that turn. Log-log.
    """
    styles = _styles(result.strategies)
    baseline = result.run(BASELINE, conversation)
    sizes = [t.input_messages for t in baseline.turns] if baseline is not None else []
    figure, axes = _axes()
    for index, strategy in enumerate(result.strategies):
        run = result.run(strategy, conversation)
        if run is None or not run.turns:
            continue
        billed = list(
            itertools.accumulate(
                t.prompt_tokens + t.completion_tokens + t.internal_billed for t in run.turns
            )
        )
        xs = sizes[: len(billed)] if len(sizes) >= len(billed) else range(1, len(billed) + 1)
        _line(axes, xs, billed, strategy, styles[strategy], index)
    axes.set_xscale("log")
    axes.set_yscale("log")
    _count_axis(axes.xaxis, log=True)
    _count_axis(axes.yaxis, log=True)
    axes.set_xlabel("messages in the history (log)")
    axes.set_ylabel("billed tokens so far, internal calls included (log)")
    axes.set_title(f"Billed tokens as the history grows, conversation {conversation}")
    return _save(figure, axes, out_dir / f"billed_vs_history_{_safe(conversation)}.png")


def plot_recall_vs_tokens(result: BenchResult, out_dir: Path) -> Path:
    """Evidence recall against the context tokens spent per question, every strategy named.

    The recall target is drawn as a dashed line. Names stand in a column beside the plot,
    each joined to its point, so points that coincide or crowd together stay readable.
    """
    styles = _styles(result.strategies)
    figure, axes = _axes(9.0, 6.0)
    points: list[tuple[str, float, float]] = []
    for strategy in result.strategies:
        recall = result.recall(strategy)
        if recall is not None:
            points.append((strategy, max(recall.mean_context_tokens, 1.0), 100 * recall.recall))
    for strategy, x, y in points:
        axes.plot([x], [y], linestyle="none", zorder=3, alpha=0.9,
                  **styles[strategy].marker_kwargs(8))  # fmt: skip
    axes.set_xscale("log")
    if points:
        xs = [x for _, x, _ in points]
        axes.set_xlim(min(xs) / 1.5, max(xs) * 1.5)
    axes.set_ylim(-5, 105)
    _count_axis(axes.xaxis, log=True)
    axes.axhline(100 * RECALL_TARGET, color="grey", linestyle="--", linewidth=1)
    axes.annotate(
        f"target {RECALL_TARGET:.0%}", (0.01, 100 * RECALL_TARGET), xycoords=("axes fraction",
        "data"), xytext=(0, 4), textcoords="offset points", fontsize="small", color="grey",
    )  # fmt: skip
    label_column(figure, axes, points, styles)
    axes.set_xlabel("mean context tokens at question time (log)")
    axes.set_ylabel("evidence recall (%): every evidence turn in the context")
    axes.set_title("Evidence recall vs context size (top left is best)")
    return _save(figure, axes, out_dir / "recall_vs_tokens.png", legend=False)


def write_plots(result: BenchResult, out_dir: Path) -> list[Path]:
    """Draw every PNG plot into ``out_dir`` and return their paths.

    Per conversation: `plot_tokens_per_call` and `plot_billed_vs_history`; once:
    `plot_recall_vs_tokens` and the cost per pricing model (`cost_report.write_cost_plot`).
    Each plot answers one question and has its own function.
    """
    written: list[Path] = []
    for conversation in result.conversations:
        written.append(plot_tokens_per_call(result, conversation, out_dir))
        written.append(plot_billed_vs_history(result, conversation, out_dir))
    written.append(plot_recall_vs_tokens(result, out_dir))
    cost_plot = write_cost_plot(result, out_dir)
    if cost_plot is not None:
        written.append(cost_plot)
    return written


def write_reports(result: BenchResult, out_dir: Path, *, plots: bool = True) -> dict[str, Path]:
    """Write JSON, Markdown and (optionally) plots into ``out_dir`` (created if needed).

    Returns:
        ``{"json": ..., "markdown": ..., "plot:<name>": ...}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {"json": write_json(result, out_dir / "bench.json")}
    images = write_plots(result, out_dir) if plots else []
    written["markdown"] = write_markdown(result, out_dir / "bench.md", plots=images)
    written.update({f"plot:{p.stem}": p for p in images})
    written.update(write_face_reports(result.faces, out_dir, plots=plots))
    return written


README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"

HEADLINE_STRATEGIES = (
    "round_compression",
    "round_compression_recall",
    "hybrid_retrieval",
    "langmem",
    "summarization_middleware",
    "no_history",
)
"""The strategies of the README's headline table (those the run measured), in this order."""


def readme_section(result: BenchResult) -> str:
    """The README's one small headline table (every line at most 100 characters).

    For the package's default, its recall tool, facts + retrieved turns and the peers: savings
    against the full history under each pricing model, evidence recall at question time, and
    how many tau-bench trajectories cost more than the full history. The full tables go to
    `docs_section` and ``bench.md``.
    """
    config = result.config
    cost_header, cost_rows_ = compact_cost_rows(result)
    savings = {row[0]: row for row in cost_rows_}
    main_header, main_rows = _table_rows(result, None)
    recall_at = main_header.index("recall")
    recall = {row[0]: row[recall_at] for row in main_rows}
    worse: dict[str, str] = {}
    if result.agent is not None:
        agent_header, agent_body = compact_agent_rows(result)
        at = agent_header.index("worse")
        worse = {row[0]: f"{row[at]}/{len(result.agent.trajectories)}" for row in agent_body}
    pricing_columns = [h for h in cost_header[1:] if not h.startswith("cached")]
    header = ["strategy", *pricing_columns, "recall", "tau worse"]
    rows = []
    for name in HEADLINE_STRATEGIES:
        if name not in savings:
            continue
        row = savings[name]
        cells = [row[cost_header.index(h)] for h in pricing_columns]
        label = f"{name} (default)" if name == "round_compression" else name
        rows.append([label, *cells, recall.get(name, "-"), worse.get(name, "-")])
    lines = [
        wrap(
            f"Savings against the full history, priced as each provider bills with prompt "
            f"caching (LoCoMo {', '.join(result.conversations)}; summary cap "
            f"{config.summary_tokens} tokens); evidence recall at question time; tau-bench "
            "trajectories costing more than the full history. Generated by `make bench-readme`; "
            "every table: docs/benchmark.md."
        ),
        "",
        markdown_table(header, rows),
    ]
    return "\n".join(lines)


def docs_section(result: BenchResult) -> str:
    """Every table of the run for the documentation's benchmark page.

    `markdown_report`, then the overhead of every face when the run measured them.
    """
    text = (
        "Generated by `make bench-readme` "
        f"({', '.join(result.conversations)}; internal model `{result.internal_model}`).\n\n"
        + markdown_report(result)
    )
    if result.faces:
        text += (
            "\n\n## Library overhead per face\n\nMean ms per turn of each face driven through "
            "its public API, folding turns apart; the lowest of several passes, every pass's "
            "mean beside it.\n\n" + face_overhead_table(result.faces)
        )
    return text


def update_readme(path: Path, section: str) -> Path:
    """Replace the text between the bench markers of a Markdown file with ``section``.

    The README holds `readme_section` there, the documentation's benchmark page `docs_section`.

    Raises:
        ConfigurationError: The file lacks the markers (nothing is written).
    """
    text = path.read_text(encoding="utf-8")
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        msg = f"{path} has no {README_START} ... {README_END} markers"
        raise ConfigurationError(msg)
    head, tail = text[: start + len(README_START)], text[end:]
    path.write_text(f"{head}\n{section}\n{tail}", encoding="utf-8")
    return path
