"""What a benchmark run measured: one `StrategyRun` per replay, gathered in a `BenchResult`.

`BenchResult` aggregates the runs per strategy (replay figures, recall, costs, internal calls)
against the `bench_config.BASELINE` runs; `merge_priced_runs` joins the replays of a strategy
configured once per pricing model into one run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from langchain_histcompress.core.pricing import DEFAULT_PRICING
from langchain_histcompress.edge.model_edge import InternalFailure
from langchain_histcompress.workbench.agent import AgentResult
from langchain_histcompress.workbench.bench_config import BASELINE, BenchConfig
from langchain_histcompress.workbench.costs import CostFigures, RunCost, cost_figures
from langchain_histcompress.workbench.faces import FaceOverhead
from langchain_histcompress.workbench.metrics import (
    OverheadFigure,
    ReplayFigures,
    TurnRecord,
    replay_figures,
)
from langchain_histcompress.workbench.recall import QuestionRecall, RecallSummary, summarize_recall

__all__ = [
    "BenchResult",
    "InternalCallFigures",
    "StrategyRun",
    "merge_priced_runs",
]


@dataclass(frozen=True)
class StrategyRun:
    """One strategy replayed over one conversation."""

    strategy: str
    """Strategy name."""
    conversation: str
    """Conversation name."""
    turns: tuple[TurnRecord, ...] = ()
    """One record per assistant turn."""
    recall: RecallSummary | None = None
    """Evidence recall at the end of the conversation."""
    questions: tuple[QuestionRecall, ...] = ()
    """Per-question recall details."""
    error: str | None = None
    """Why the run failed, if it did (figures then stop at the failing turn)."""
    failures: tuple[InternalFailure, ...] = ()
    """Internal calls (summarize / extract / rephrase) that gave up during the run: their
    strategy then went on without them (stale summary, missing facts, raw question)."""

    costs: Mapping[str, RunCost] = field(default_factory=dict)
    """The replay priced by each pricing model under prompt caching (``bench.costs``)."""
    reported_cached_tokens: int | None = None
    """Cached input tokens a real internal model reported (``None``: not reported)."""


@dataclass(frozen=True)
class InternalCallFigures:
    """What one strategy's internal calls did, over every conversation."""

    failures: int
    """Internal calls that gave up (after their retries)."""
    requests: int
    """Requests sent to the internal model (retries included)."""
    failed_requests: int
    """Requests that raised (a retried one counts each time)."""
    reported_requests: int
    """Requests whose token usage the provider reported."""
    prompt_tokens: int
    """Input tokens of every request (the provider's figure when reported)."""
    completion_tokens: int
    """Output tokens of every request (the provider's figure when reported)."""
    cached_tokens: int
    """Input tokens the provider served from its cache (reported requests)."""
    estimated_prompt_tokens: int | None
    """tiktoken count of the reported requests' inputs (``None``: none reported/estimated)."""
    estimated_completion_tokens: int | None
    """tiktoken count of the reported requests' outputs."""


@dataclass(frozen=True)
class BenchResult:
    """Everything a benchmark run measured."""

    config: BenchConfig
    """The configuration."""
    conversations: tuple[str, ...]
    """Conversation names in file order."""
    strategies: tuple[str, ...]
    """Strategy names in report order."""
    internal_model: str
    """Name of the internal model."""
    runs: tuple[StrategyRun, ...]
    """Every (strategy, conversation) replay."""
    overhead: tuple[OverheadFigure, ...] = ()
    """Library overhead per strategy and history size."""
    counting: dict[str, float] | None = None
    """Incremental token counting figures (see ``bench.counting``)."""
    faces: tuple[FaceOverhead, ...] = ()
    """Overhead of every package face per history size (see ``bench.faces``)."""
    seconds: float = 0.0
    """Wall time of the whole run."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Warnings worth reporting (e.g. strategies not installed)."""
    agent: AgentResult | None = None
    """The agent workload (``None`` when not run; see ``notes`` for why)."""

    def run(self, strategy: str, conversation: str) -> StrategyRun | None:
        """The run of ``strategy`` on ``conversation``."""
        for run in self.runs:
            if run.strategy == strategy and run.conversation == conversation:
                return run
        return None

    def figures(self, strategy: str, conversation: str | None = None) -> ReplayFigures | None:
        """Replay figures of ``strategy`` on one conversation or all (``None`` if it failed)."""
        names = [conversation] if conversation is not None else list(self.conversations)
        runs = [self.run(strategy, name) for name in names]
        if not runs or any(r is None or r.error for r in runs):
            return None
        base_runs = [self.run(BASELINE, name) for name in names]
        baseline = None
        if all(r is not None and not r.error for r in base_runs):
            baseline = replay_figures([r.turns for r in base_runs if r is not None]).billed
        return replay_figures([r.turns for r in runs if r is not None], baseline_billed=baseline)

    def recall(self, strategy: str, conversation: str | None = None) -> RecallSummary | None:
        """Evidence recall of ``strategy`` on one conversation or all."""
        names = [conversation] if conversation is not None else list(self.conversations)
        runs = [self.run(strategy, name) for name in names]
        if not runs or any(r is None or r.error or r.recall is None for r in runs):
            return None
        return summarize_recall(q for r in runs if r is not None for q in r.questions)

    def cost(
        self, strategy: str, pricing: str, conversation: str | None = None
    ) -> CostFigures | None:
        """Cost of ``strategy`` under ``pricing`` on one conversation or all (``bench.costs``)."""
        names = [conversation] if conversation is not None else list(self.conversations)
        runs = [self.run(strategy, name) for name in names]
        if not runs or any(r is None or r.error or not r.costs for r in runs):
            return None
        base = [self.run(BASELINE, name) for name in names]
        baselines = None
        if all(b is not None and not b.error and b.costs for b in base):
            baselines = [b.costs for b in base if b is not None]
        return cost_figures([r.costs for r in runs if r is not None], pricing, baselines=baselines)

    def internal_calls(self, strategy: str) -> InternalCallFigures:
        """Failures and token usage of ``strategy``'s internal calls, over all conversations."""
        runs = [r for r in self.runs if r.strategy == strategy]
        calls = [c for r in runs for t in r.turns for c in t.internal_calls]
        reported = [c for c in calls if c.reported]
        estimated = [c for c in reported if c.estimated_prompt_tokens is not None]
        return InternalCallFigures(
            failures=sum(len(r.failures) for r in runs),
            requests=len(calls),
            failed_requests=sum(1 for c in calls if c.failed),
            reported_requests=len(reported),
            prompt_tokens=sum(c.prompt_tokens for c in calls),
            completion_tokens=sum(c.completion_tokens for c in calls),
            cached_tokens=sum(c.cached_tokens for c in reported),
            estimated_prompt_tokens=(
                sum(c.estimated_prompt_tokens or 0 for c in estimated) if estimated else None
            ),
            estimated_completion_tokens=(
                sum(c.estimated_completion_tokens or 0 for c in estimated) if estimated else None
            ),
        )

    def failed_strategies(self) -> list[str]:
        """Strategies whose run failed or whose internal calls gave up, in report order.

        The agent workload counts too: a trajectory's replay that raised, or an internal call
        that gave up on it.
        """
        agent = self.agent.failed_strategies() if self.agent is not None else []
        failed = [
            s
            for s in self.strategies
            if self.internal_calls(s).failures
            or any(r.error for r in self.runs if r.strategy == s)
            or s in agent
        ]
        return failed + [s for s in agent if s not in failed]

    def overhead_ms(self, strategy: str, size: int) -> float | None:
        """Median overhead per turn at ``size`` messages."""
        for figure in self.overhead:
            if figure.strategy == strategy and figure.messages == size:
                return figure.ms_per_turn
        return None


def merge_priced_runs(runs: Mapping[str, StrategyRun]) -> StrategyRun:
    """One run from a strategy's replays configured for each pricing model (by name).

    Costs under each pricing model come from the replay configured for it; everything else
    (turns, recall, internal calls) from the one configured for `pricing.DEFAULT_PRICING`
    (the package default), else the first. A single replay (key ``""``) is returned as is.
    """
    if "" in runs:
        return runs[""]
    main = runs.get(DEFAULT_PRICING) or next(iter(runs.values()))
    error = main.error or next((r.error for r in runs.values() if r.error), None)
    costs = {name: run.costs[name] for name, run in runs.items() if name in run.costs}
    failures = tuple(f for r in runs.values() for f in r.failures)
    questions = main.questions
    if any(q.tool_costs for q in questions):  # each pricing's tool calls from its own replay
        questions = tuple(
            replace(
                q,
                tool_costs={
                    name: run.questions[i].tool_costs[name]
                    for name, run in runs.items()
                    if i < len(run.questions) and name in run.questions[i].tool_costs
                },
            )
            for i, q in enumerate(questions)
        )
    return replace(
        main,
        costs=costs if error is None else {},
        error=error,
        failures=failures,
        questions=questions,
    )
