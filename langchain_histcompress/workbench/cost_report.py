"""Benchmark reports of cost under prompt caching: table, Markdown, JSON data and a plot.

Each strategy's replay is priced by every pricing model of `bench.costs.REPORTED_PRICINGS`
(see `pricing.PRICING_MODELS`); savings are against the full history priced the same way.

Example:
    >>> print(pricing_assumptions_markdown().splitlines()[0])
    | pricing | cache rule | input $/M | cached input | cache write | output $/M | lifetime |
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_histcompress.core.pricing import PRICING_MODELS, PricingModel
from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.costs import REPORTED_PRICINGS, CostFigures
from langchain_histcompress.workbench.tables import columns, markdown_table, percent, text_table

__all__ = [
    "BOUND",
    "BOUND_STRATEGIES",
    "CEILING",
    "COST_DEFINITIONS",
    "agent_rows",
    "agent_to_dict",
    "compact_agent_rows",
    "compact_cost_rows",
    "cost_rows",
    "cost_to_dict",
    "format_agent_table",
    "format_cost_table",
    "markdown_agent_table",
    "markdown_cost_table",
    "pricing_assumptions_markdown",
    "write_cost_plot",
]

BOUND_STRATEGIES: tuple[str, ...] = ("round_compression",)
"""Strategies whose "summaries free" bound is reported beside them."""

CEILING = "output only (ceiling)"
"""Row label of the savings left when every prompt is free."""

BOUND = "(summaries free)"
"""Row label, right under a strategy of `BOUND_STRATEGIES`, of its bound."""

COST_DEFINITIONS: dict[str, str] = {
    "cost under caching": "every call of the replay (answering and internal) priced as the "
    "provider bills it: a call's cached part is its longest token prefix shared with an "
    "earlier call of the same conversation while the cache is warm (OpenAI: from 1,024 "
    "tokens in 128-token steps; Anthropic: at cache breakpoints, one after the preamble "
    "(tools and system prompt) and one at the end of each prompt); turns of a session are "
    "30 s apart, sessions start at their dates (cold cache)",
    "savings @ pricing": "1 - cost(strategy) / cost(full) with both priced by that model",
    "cached": "share of prompt tokens read from the cache",
    CEILING: "the savings if every prompt were free: the answers' output tokens, the same "
    "for every strategy, are all that is left",
    BOUND: "a bound, not a strategy, on the row of the strategy above it: the savings of its "
    "answering requests alone, its internal calls priced at zero",
    "no_history": "a reference, not a strategy: system prompt + current round only; "
    "what any strategy that keeps history costs at least (both pay the answers' output)",
}
"""What the cost figures mean."""


def _family_label(pricing: PricingModel) -> str:
    if pricing.family == "openai":
        return f"prefix >= {pricing.min_cached_tokens:,}, {pricing.cache_step}-token steps"
    if pricing.family == "anthropic":
        return f"breakpoints, prefix >= {pricing.min_cached_tokens:,}"
    return "no caching"


def pricing_assumptions_markdown(names: Sequence[str] = REPORTED_PRICINGS) -> str:
    """The pricing models as a Markdown table (prices per million tokens)."""
    lines = [
        "| pricing | cache rule | input $/M | cached input | cache write | output $/M | lifetime |",
        "| :--- | :--- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        p = PRICING_MODELS[name]
        cached = f"{100 * p.cache_read_ratio:.0f}%" if p.caches else "-"
        write = f"{100 * p.cache_write_ratio:.0f}%" if p.caches else "-"
        lifetime = f"{p.cache_lifetime / 60:.0f} min" if p.caches else "-"
        lines.append(
            f"| `{name}` ({p.description}) | {_family_label(p)} | {p.input_price:.3g} | "
            f"{cached} | {write} | {p.output_price:.3g} | {lifetime} |"
        )
    return "\n".join(lines)


_SAVINGS = "savings @ "


def cost_rows(
    result: BenchResult, conversation: str | None = None
) -> tuple[list[str], list[list[str]]]:
    """Header and rows: billed tokens, cached shares, then savings under each pricing model."""
    header = ["strategy", "billed", "cached openai", "cached anthropic"]
    header += [f"{_SAVINGS}{name}" for name in REPORTED_PRICINGS]
    rows: list[list[str]] = []
    for strategy in result.strategies:
        figures = result.figures(strategy, conversation)
        costs = {name: result.cost(strategy, name, conversation) for name in REPORTED_PRICINGS}
        openai = costs.get("openai-90")
        anthropic = costs.get("anthropic")
        cells = [
            strategy,
            "-" if figures is None else f"{figures.billed:,}",
            percent(openai.cached_share if openai else None),
            percent(anthropic.cached_share if anthropic else None),
        ]
        cells += [percent(c.savings if c else None) for c in costs.values()]
        rows.append(cells)
        if strategy == result.strategies[0]:  # the baseline: what every strategy pays
            ceiling = [CEILING, "-", "-", "-"]
            ceiling += [
                percent(1 - c.output_cost / c.cost if c and c.cost else None)
                for c in costs.values()
            ]
            rows.append(ceiling)
        if strategy in BOUND_STRATEGIES:
            bound = [BOUND, "-", "-", "-"]
            bound += [percent(c.answer_savings if c else None) for c in costs.values()]
            rows.append(bound)
    return header, rows


def format_cost_table(result: BenchResult, conversation: str | None = None) -> str:
    """The cost figures as aligned plain-text tables (at most 100 columns wide)."""
    header, rows = cost_rows(result, conversation)
    savings = [h for h in header if h.startswith(_SAVINGS)]
    short = [h.removeprefix(_SAVINGS) for h in header]
    return "\n".join(
        [
            text_table(
                *columns(header, rows, ["billed", "cached openai", "cached anthropic"]),
                title="Cost under prompt caching: billed tokens and the share of prompt tokens "
                "read from the cache",
            ),
            "",
            text_table(
                *columns(short, rows, [h.removeprefix(_SAVINGS) for h in savings]),
                title="Savings against the full history priced the same way, per pricing model",
            ),
        ]
    )


def markdown_cost_table(result: BenchResult, conversation: str | None = None) -> str:
    """The cost figures as a Markdown table."""
    return markdown_table(*cost_rows(result, conversation))


def compact_cost_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """The cost table without billed tokens, headed by pricing names (fits 100 columns)."""
    header, rows = cost_rows(result)
    picked = columns(header, rows, [h for h in header[1:] if h != "billed"])
    short = {"cached anthropic": "cached anthr."}
    return [short.get(h, h.removeprefix(_SAVINGS)) for h in picked[0]], picked[1]


_AGENT_COUNTS = ["failed", "internal", "gave up", "broken", "sys changed", "worse"]
"""The agent table's count columns, between the strategy and the savings per pricing."""


def agent_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Agent workload: per strategy, failures, calls, tool-pairing breaks, savings per pricing.

    ``gave up`` counts internal calls that gave up after their retries (the strategy went
    on without them), ``broken`` requests breaking the tool-pairing rules or without a user
    message, ``sys changed`` requests whose system text differs from the trajectory's;
    ``worse`` counts the trajectories on which the strategy cost more than the full history
    under at least one pricing model.
    """
    header = ["strategy", *_AGENT_COUNTS]
    header += [f"{_SAVINGS}{name}" for name in REPORTED_PRICINGS]
    agent = result.agent
    rows: list[list[str]] = []
    if agent is None:
        return header, rows
    for strategy in agent.strategies:
        runs = agent.runs_of(strategy)
        worse: set[str] = set()
        for name in REPORTED_PRICINGS:
            figures = agent.cost(strategy, name)
            if figures is None:
                continue
            completed = [r.trajectory for r in runs if not r.error]
            worse |= {
                t
                for t, s in zip(completed, figures.per_conversation_savings, strict=False)
                if s < -1e-12
            }
        cells = [
            strategy,
            f"{len(agent.failures(strategy))}/{len(runs)}",
            f"{sum(r.internal_calls for r in runs):,}",
            f"{agent.gave_up(strategy):,}",
            f"{sum(r.violations for r in runs):,}",
            f"{sum(r.system_changed for r in runs):,}",
            str(len(worse)),
        ]
        for name in REPORTED_PRICINGS:
            figures = agent.cost(strategy, name)
            cells.append(percent(figures.savings if figures else None))
        rows.append(cells)
    return header, rows


def format_agent_table(result: BenchResult) -> str:
    """The agent workload as aligned plain-text tables ("" when it was not run)."""
    if result.agent is None:
        return ""
    header, rows = agent_rows(result)
    short = [h.removeprefix(_SAVINGS) for h in header]
    return "\n".join(
        [
            text_table(
                *columns(header, rows, _AGENT_COUNTS),
                title=f"Agent workload: {len(result.agent.trajectories)} tau-bench trajectories",
            ),
            "",
            text_table(
                *columns(short, rows, short[len(_AGENT_COUNTS) + 1 :]),
                title="Agent workload: savings against the full history per pricing model, over "
                "the trajectories each strategy completed",
            ),
        ]
    )


def markdown_agent_table(result: BenchResult) -> str:
    """The agent workload as a Markdown table ("" when it was not run)."""
    if result.agent is None:
        return ""
    return markdown_table(*agent_rows(result))


def compact_agent_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Failures, rule breaks, costlier trajectories and savings per pricing name (100 columns)."""
    header, rows = agent_rows(result)
    picked = columns(header, rows, ["failed", "broken", "worse", *header[len(_AGENT_COUNTS) + 1 :]])
    return [h.removeprefix(_SAVINGS) for h in picked[0]], picked[1]


def agent_to_dict(result: BenchResult) -> dict[str, Any] | None:
    """The agent workload as JSON-ready data (``None`` when it was not run)."""
    agent = result.agent
    if agent is None:
        return None
    return {
        "trajectories": list(agent.trajectories),
        "strategies": {
            s: {
                "failed": [
                    {"trajectory": r.trajectory, "error": r.error} for r in agent.failures(s)
                ],
                "internal_calls": sum(r.internal_calls for r in agent.runs_of(s)),
                "internal_calls_gave_up": agent.gave_up(s),
                "answering_calls": sum(r.calls for r in agent.runs_of(s)),
                "tool_pairing_violations": sum(r.violations for r in agent.runs_of(s)),
                "system_text_changed": sum(r.system_changed for r in agent.runs_of(s)),
                "costs": {name: _figures_dict(agent.cost(s, name)) for name in REPORTED_PRICINGS},
            }
            for s in agent.strategies
        },
    }


def _figures_dict(figures: CostFigures | None) -> dict[str, Any] | None:
    if figures is None:
        return None
    return {
        "cost_usd": figures.cost,
        "internal_cost_usd": figures.internal_cost,
        "input_tokens": figures.input_tokens,
        "cached_tokens": figures.cached_tokens,
        "cached_share": figures.cached_share,
        "savings": figures.savings,
        "per_conversation_savings": list(figures.per_conversation_savings),
        "answer_output_cost_usd": figures.output_cost,
        "savings_with_free_internal_calls": figures.answer_savings,
    }


def cost_to_dict(result: BenchResult) -> dict[str, Any]:
    """The cost figures as JSON-ready data: pricing models, totals and per conversation."""
    reported: dict[str, int | None] = {}
    for strategy in result.strategies:
        values = [
            r.reported_cached_tokens
            for c in result.conversations
            if (r := result.run(strategy, c)) is not None
        ]
        known = [v for v in values if v is not None]
        reported[strategy] = sum(known) if known else None
    return {
        "pricing_models": {
            name: {
                "family": p.family,
                "input_price_per_million": p.input_price,
                "output_price_per_million": p.output_price,
                "cache_read_ratio": p.cache_read_ratio,
                "cache_write_ratio": p.cache_write_ratio,
                "min_cached_tokens": p.min_cached_tokens,
                "cache_step": p.cache_step,
                "cache_lifetime_s": p.cache_lifetime,
                "description": p.description,
            }
            for name in REPORTED_PRICINGS
            if (p := PRICING_MODELS[name])
        },
        "definitions": COST_DEFINITIONS,
        "totals": {
            s: {name: _figures_dict(result.cost(s, name)) for name in REPORTED_PRICINGS}
            for s in result.strategies
        },
        "per_conversation": {
            c: {
                s: {name: _figures_dict(result.cost(s, name, c)) for name in REPORTED_PRICINGS}
                for s in result.strategies
            }
            for c in result.conversations
        },
        "provider_reported_cached_tokens": reported,
        "agent_workload": agent_to_dict(result),
    }


def write_cost_plot(result: BenchResult, out_dir: Path) -> Path | None:
    """Draw ``cost_by_pricing.png``: each strategy's cost under each pricing model.

    One row per strategy (named on the axis), one bar per pricing model, as a share of the
    full history's cost under the same model (100% = full history). ``None`` when nothing
    was priced.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    strategies = [s for s in result.strategies if result.cost(s, REPORTED_PRICINGS[0])]
    if not strategies:
        return None
    figure = Figure(figsize=(9, 1.2 + 0.42 * len(strategies)), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    height = 0.8 / len(REPORTED_PRICINGS)
    for index, name in enumerate(REPORTED_PRICINGS):
        shares = []
        for strategy in strategies:
            figures = result.cost(strategy, name)
            savings = figures.savings if figures is not None else None
            shares.append(100 * (1 - savings) if savings is not None else 0.0)
        offset = (index - (len(REPORTED_PRICINGS) - 1) / 2) * height
        axes.barh(
            [row + offset for row in range(len(strategies))], shares, height=height,
            label=name, color=_PRICING_COLOURS[index % len(_PRICING_COLOURS)],
            edgecolor="white", linewidth=0.3,
        )  # fmt: skip
    axes.axvline(100, color="black", linewidth=0.8, linestyle="--")
    axes.set_yticks(range(len(strategies)), strategies)
    axes.invert_yaxis()  # the report's order, top to bottom
    axes.xaxis.set_major_formatter(PercentFormatter(decimals=0))
    axes.set_xlabel("cost, % of the full history priced the same way (lower is better)")
    axes.set_title("Cost per strategy under each pricing model")
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(title="pricing", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                frameon=False)  # fmt: skip
    path = out_dir / "cost_by_pricing.png"
    figure.savefig(path, bbox_inches="tight")
    return path


_PRICING_COLOURS = ("#4d4d4d", "#1f77b4", "#2ca02c", "#d62728", "#9467bd")
