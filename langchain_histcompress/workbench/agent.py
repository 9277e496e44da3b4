"""Agent workload: real tool-calling trajectories (tau-bench airline) through every strategy.

Each trajectory of ``airline-gpt-4o-dev.json`` is turned into LangChain messages and replayed
like a LoCoMo conversation: before each assistant message the strategy builds the model input,
which is checked against the OpenAI tool-pairing rules (`tool_pairing_violations`) and priced
with the tool definitions ahead of it. The internal model is the offline `AgentReplayModel`.
The workload is described in docs/design/workbench.md.
"""

from __future__ import annotations

import html
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.outputs import ChatResult
from pydantic import Field

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.pricing import DEFAULT_PRICING
from langchain_histcompress.core.render import message_text, read_turn_lines
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.model_edge import recording_failures
from langchain_histcompress.workbench.costs import (
    REPORTED_PRICINGS,
    CostFigures,
    CostMeter,
    RunCost,
)
from langchain_histcompress.workbench.costs import cost_figures as pool_costs
from langchain_histcompress.workbench.metrics import UsageLedger
from langchain_histcompress.workbench.replay import (
    counted_reply,
    detect_prompt_kind,
    fact_operations_format,
    render_fact_operations,
)
from langchain_histcompress.workbench.strategies import build_strategy, is_priced
from langchain_histcompress.workbench.strategy import StrategyEnv

__all__ = [
    "AGENT_CALL_GAP",
    "TAU_BENCH_FILE",
    "AgentReplayModel",
    "AgentResult",
    "AgentRun",
    "AgentTrajectory",
    "load_tau_bench",
    "run_agent_workload",
    "tool_pairing_violations",
]

logger = logging.getLogger(__name__)

TAU_BENCH_FILE = "airline-gpt-4o-dev.json"
"""The trajectory file inside the tau-bench folder."""
AGENT_CALL_GAP = 10.0
"""Seconds between two model calls of a trajectory."""

_ELEMENT = re.compile(r'<message\b[^>]*\bid="([^"]*)"[^>]*>([^<]*)</message>')
_TURN_LINES = re.compile(r"^\[[^\s\]]+ [^\s\]]+(?: [^\s\]]+)*\].*(?:\n  .*)*$", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class AgentTrajectory:
    """One replayable agent conversation."""

    name: str
    """``task<id>-<trial>``."""
    messages: tuple[BaseMessage, ...]
    """System message first, every message with a UUID id."""


def load_tau_bench(
    folder: Path, *, limit: int | None = None, seed: int = 0
) -> tuple[list[AgentTrajectory], str]:
    """Read the trajectories (the first ``limit``) and the tool definitions' JSON text.

    Raises:
        ConfigurationError: The file is missing or malformed.
    """
    path = folder / TAU_BENCH_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        tools = data["tools"]
        raw = data["trajectories"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"cannot read tau-bench trajectories from {path}: {exc}"
        raise ConfigurationError(msg) from exc
    rng = random.Random(seed)
    trajectories: list[AgentTrajectory] = []
    for item in raw[:limit]:
        messages = [
            m.model_copy(update={"id": str(uuid.UUID(int=rng.getrandbits(128), version=4))})
            for m in convert_to_messages(item["traj"])
        ]
        name = f"task{item.get('task_id', len(trajectories))}-{item.get('trial', 0)}"
        trajectories.append(AgentTrajectory(name, tuple(messages)))
    return trajectories, json.dumps(tools, ensure_ascii=False)


def tool_pairing_violations(messages: Sequence[BaseMessage]) -> list[str]:
    """Breaks of the OpenAI chat-completions tool rules in one request, as messages.

    Each tool message must answer a call of the AI message before it in the same step (only
    tool messages in between), each call at most once; every call of an AI message must be
    answered before the next non-tool message (an unanswered call at the very end of the
    request is allowed: the model is being asked to continue).

    Example:
        >>> from langchain_core.messages import AIMessage, ToolMessage
        >>> call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> tool_pairing_violations([call, ToolMessage("ok", tool_call_id="c1")])
        []
        >>> tool_pairing_violations([ToolMessage("ok", tool_call_id="c1")])
        ['messages[0]: tool message answers no call of the AI message before it']
    """
    problems: list[str] = []
    open_calls: list[str] = []
    answered: set[str] = set()
    in_step = False
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            if not in_step or message.tool_call_id not in open_calls:
                problems.append(
                    f"messages[{index}]: tool message answers no call of the AI message before it"
                )
            elif message.tool_call_id in answered:
                problems.append(f"messages[{index}]: call answered twice")
            answered.add(message.tool_call_id)
            continue
        if in_step and set(open_calls) - answered:
            problems.append(f"messages[{index}]: calls left unanswered before this message")
        calls = []
        if isinstance(message, AIMessage):
            calls = [c["id"] or "" for c in message.tool_calls]
            calls += [c["id"] or "" for c in message.invalid_tool_calls]
        open_calls, answered, in_step = calls, set(), bool(calls)
    return problems


class AgentReplayModel(BaseChatModel):
    """Offline internal model for agent histories (docs/design/workbench.md)."""

    counter: TiktokenCounter = Field(default_factory=TiktokenCounter)
    """Counter for usage metadata and the summary cap."""
    summary_token_cap: int = Field(default=128, gt=0)
    """Largest summary, in tokens."""

    @property
    def _llm_type(self) -> str:
        return "histcompress-agent-replay"

    def reply_for(self, messages: Sequence[BaseMessage]) -> str:
        """The reply text for a summarizer or extractor prompt.

        Example:
            >>> prompt = [HumanMessage('<message id="m1" role="user">Book a flight. Now.'
            ...                        '</message> Return [{"op": "ADD"}]')]
            >>> json.loads(AgentReplayModel().reply_for(prompt))[0]["source_ids"]
            ['m1']
        """
        text = "\n".join(message_text(m) for m in messages)
        shown = [(i, html.unescape(t).strip()) for i, t in _ELEMENT.findall(text)]
        # turn lines are read outside the message elements: an assistant's tool calls
        # ("[calls name(args) id=c1]") start a line inside its element, as a turn line does
        outside = _ELEMENT.sub("", text)
        shown += [(i, body.strip()) for i, _role, body in read_turn_lines(outside)]
        kind = detect_prompt_kind(_TURN_LINES.sub("", outside))
        if kind == "fact_operations":
            operations = [
                {
                    "op": "ADD",
                    "type": "confirmed_detail",
                    "content": _SENTENCE.split(body)[0][:300],
                    "confidence": 0.9,
                    "source_ids": [message_id],
                }
                for message_id, body in shown
                if body and 'role="user"' in text.split(f'id="{message_id}"', 1)[1][:40]
            ]
            return render_fact_operations(
                operations, fact_operations_format(_ELEMENT.sub("", text))
            )
        pieces = [" ".join(body.split()[:12]) for _, body in shown if body]
        summary = "Earlier:"  # a quoted "I'm sorry..." must not open the summary
        for piece in pieces:
            candidate = f"{summary} {piece}".strip()
            if self.counter.count_text(candidate) > self.summary_token_cap:
                break
            summary = candidate
        if kind == "summary_json":
            return json.dumps({"ConversationSummary": summary}, ensure_ascii=False)
        return summary

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return counted_reply(self.reply_for(messages), messages, self.counter)


@dataclass(frozen=True)
class AgentRun:
    """One strategy replayed over one trajectory."""

    strategy: str
    """Strategy name."""
    trajectory: str
    """Trajectory name."""
    calls: int = 0
    """Answering calls replayed."""
    internal_calls: int = 0
    """Summarizer / extractor calls made."""
    violations: int = 0
    """Requests that broke the tool-pairing rules or left out the latest user message."""
    system_changed: int = 0
    """Requests whose system text differs from the trajectory's (``append_to_system``
    placements do this on purpose; it also invalidates the provider's cache)."""
    costs: Mapping[str, RunCost] = field(default_factory=dict)
    """The replay priced by each pricing model."""
    error: str | None = None
    """Why the replay failed, if it did."""
    gave_up: int = 0
    """Internal calls that gave up after their retries (the strategy went on without them)."""


@dataclass(frozen=True)
class AgentResult:
    """The agent workload's runs."""

    trajectories: tuple[str, ...]
    """Trajectory names, in file order."""
    strategies: tuple[str, ...]
    """Strategy names, the baseline first."""
    runs: tuple[AgentRun, ...]
    """Every (strategy, trajectory) replay."""
    baseline: str = "full"
    """Strategy savings are measured against."""

    def runs_of(self, strategy: str) -> list[AgentRun]:
        """The runs of ``strategy``, in trajectory order."""
        return [r for r in self.runs if r.strategy == strategy]

    def failures(self, strategy: str) -> list[AgentRun]:
        """Runs of ``strategy`` that raised."""
        return [r for r in self.runs_of(strategy) if r.error]

    def gave_up(self, strategy: str) -> int:
        """Internal calls of ``strategy`` that gave up, over every trajectory."""
        return sum(r.gave_up for r in self.runs_of(strategy))

    def failed_strategies(self) -> list[str]:
        """Strategies with a replay that raised or an internal call that gave up."""
        return [s for s in self.strategies if self.failures(s) or self.gave_up(s)]

    def cost(self, strategy: str, pricing: str) -> CostFigures | None:
        """Cost of ``strategy`` under ``pricing``, pooled over the trajectories it completed."""
        base = {r.trajectory: r for r in self.runs_of(self.baseline) if not r.error}
        runs = [r for r in self.runs_of(strategy) if not r.error and r.trajectory in base]
        if not runs:
            return None
        return pool_costs(
            [r.costs for r in runs],
            pricing,
            baselines=[base[r.trajectory].costs for r in runs],
        )

    def costlier_than_baseline(self, strategy: str, pricing: str) -> int:
        """Trajectories on which ``strategy`` cost more than the baseline under ``pricing``."""
        figures = self.cost(strategy, pricing)
        if figures is None:
            return 0
        return sum(1 for s in figures.per_conversation_savings if s < -1e-12)


def _replay(
    strategy_name: str,
    trajectory: AgentTrajectory,
    env: StrategyEnv,
    ledger: UsageLedger,
    meter: CostMeter,
) -> AgentRun:
    """Replay ``trajectory`` through the strategy, recording what went wrong in the run.

    An error ends the replay; internal calls that gave up let it go on. Both are logged.
    """
    strategy = build_strategy(strategy_name, env)
    strategy.reset()
    history: list[BaseMessage] = []
    calls = internal = violations = system_changed = 0
    error: str | None = None
    with recording_failures() as failures:
        try:
            for message in trajectory.messages:
                if isinstance(message, AIMessage) and history:
                    mark = ledger.mark()
                    model_input = strategy.model_input(tuple(history))
                    at = calls * AGENT_CALL_GAP
                    for call in ledger.since(mark):
                        internal += 1
                        if not call.failed:
                            meter.internal(call.prompt, output_tokens=call.completion_tokens, at=at)
                    output = env.counter.count_message(message)
                    meter.answer(model_input, output_tokens=output, at=at)
                    latest = any(isinstance(m, HumanMessage) for m in model_input)
                    violations += bool(tool_pairing_violations(model_input)) or not latest
                    system_changed += model_input[0].content != trajectory.messages[0].content
                    calls += 1
                history.append(message)
        except Exception as exc:
            logger.warning(
                "strategy %s failed on %s: %s", strategy_name, trajectory.name, type(exc).__name__
            )
            error = f"{type(exc).__name__}: {exc}"
    if failures:
        logger.warning(
            "strategy %s: %d internal call(s) gave up on %s",
            strategy_name,
            len(failures),
            trajectory.name,
        )
    return AgentRun(
        strategy_name,
        trajectory.name,
        calls,
        internal,
        violations,
        system_changed,
        meter.costs() if error is None else {},
        error=error,
        gave_up=len(failures),
    )


def _merge(runs: Mapping[str, AgentRun]) -> AgentRun:
    """One run from replays configured per pricing model (see `bench_result.merge_priced_runs`)."""
    if "" in runs:
        return runs[""]
    main = runs.get(DEFAULT_PRICING) or next(iter(runs.values()))
    error = main.error or next((r.error for r in runs.values() if r.error), None)
    costs = {name: run.costs[name] for name, run in runs.items() if name in run.costs}
    gave_up = sum(run.gave_up for run in runs.values())
    return replace(main, costs=costs if error is None else {}, error=error, gave_up=gave_up)


def run_agent_workload(
    folder: Path,
    strategies: Sequence[str],
    *,
    counter: TiktokenCounter,
    make_env: Callable[[BaseChatModel], StrategyEnv],
    limit: int | None = None,
    summary_tokens: int = 128,
    on_trajectory: Callable[[str], None] | None = None,
) -> AgentResult:
    """Replay the trajectories of ``folder`` through every strategy (baseline first).

    Args:
        folder: The tau-bench folder.
        strategies: Strategy names, ``full`` first.
        counter: The shared token counter.
        make_env: Builds a strategy environment around the (metered) internal model.
        limit: Replay only the first ``limit`` trajectories.
        summary_tokens: Cap on the internal model's summaries.
        on_trajectory: Called with a label before each trajectory (progress).
    """
    trajectories, tools_text = load_tau_bench(folder, limit=limit)
    runs: list[AgentRun] = []
    started = time.perf_counter()
    for trajectory in trajectories:
        if on_trajectory is not None:
            on_trajectory(trajectory.name)
        for name in strategies:
            per_pricing: dict[str, AgentRun] = {}
            for pricing in REPORTED_PRICINGS if is_priced(name) else (None,):
                ledger = UsageLedger(counter)
                model = AgentReplayModel(
                    counter=counter, summary_token_cap=summary_tokens, callbacks=[ledger]
                )
                meter = CostMeter(
                    counter,
                    pricings=[pricing] if pricing else REPORTED_PRICINGS,
                    tools_text=tools_text,
                )
                env = replace(make_env(model), pricing=pricing)
                per_pricing[pricing or ""] = _replay(name, trajectory, env, ledger, meter)
            runs.append(_merge(per_pricing))
    logger.info(
        "agent workload: %d trajectories x %d strategies in %.1f s",
        len(trajectories),
        len(strategies),
        time.perf_counter() - started,
    )
    return AgentResult(tuple(t.name for t in trajectories), tuple(strategies), tuple(runs))
