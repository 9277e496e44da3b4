"""Run every strategy over every LoCoMo file: replay, recall, overhead, with a progress bar.

For each file and strategy, the conversation is replayed turn by turn: before each assistant
turn the strategy builds the answering model's input, which is counted as that call's prompt;
the answer is the file's own assistant turn (so the transcript stays the real one), counted as
its completion. The strategy's internal calls go to the internal model, the offline
`ReplayChatModel` by default or a real model (``BenchConfig.model``), metered by a
`UsageLedger`. After the replay, each recall question gets its context
(`Strategy.context_for_question`) and is scored (`recall.score_question`).

A pricing-aware strategy (`bench.strategies.StrategySpec.priced`) is replayed once per pricing
model of `bench.costs.REPORTED_PRICINGS`, built for it, and each replay is priced by its own
model only (`merge_priced_runs`): the cost columns show the strategy as a user paying that
way would configure it. With a real internal model this multiplies its calls accordingly.

Library overhead is measured once per run, on the first file extended to 1k / 10k / 100k
messages, always with the replay model (model time is excluded anyway, and a real model would
be billed for the warm-up).

Example:
    >>> import io
    >>> bar = ProgressBar(4, io.StringIO(), width=8, interactive=False)
    >>> bar.advance(2, "halfway")
    >>> print(bar.stream.getvalue().strip())
    [####....]  50% halfway
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.pricing import DEFAULT_PRICING, PRICING_MODELS
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.model_edge import InternalFailure, recording_failures
from langchain_histcompress.workbench.agent import TAU_BENCH_FILE, AgentResult, run_agent_workload
from langchain_histcompress.workbench.costs import (
    REPORTED_PRICINGS,
    CostFigures,
    CostMeter,
    RequestEncoder,
    RunCost,
    cost_figures,
    stamped_messages,
    turn_times,
)
from langchain_histcompress.workbench.faces import FACES, FaceOverhead, measure_faces
from langchain_histcompress.workbench.locomo import (
    LocomoConversation,
    find_locomo_files,
    load_locomo,
)
from langchain_histcompress.workbench.metrics import (
    ModelCall,
    OverheadFigure,
    ReplayFigures,
    TurnRecord,
    UsageLedger,
    extended_history,
    measure_overhead,
    replay_figures,
)
from langchain_histcompress.workbench.recall import (
    QuestionContext,
    QuestionRecall,
    RecallSummary,
    score_question,
    summarize_recall,
)
from langchain_histcompress.workbench.recall_costs import price_tool_call
from langchain_histcompress.workbench.replay import ReplayChatModel
from langchain_histcompress.workbench.strategies import (
    DEFAULT_STRATEGIES,
    Strategy,
    StrategyEnv,
    available_strategies,
    build_strategy,
    is_priced,
)

__all__ = [
    "BASELINE",
    "BenchConfig",
    "BenchResult",
    "InternalCallFigures",
    "ProgressBar",
    "StrategyRun",
    "make_chat_model",
    "replay_strategy",
    "run_benchmark",
]

logger = logging.getLogger(__name__)

BASELINE = "full"
"""The strategy savings are measured against; always run."""

FULL_SIZES: tuple[int, ...] = (1_000, 10_000, 100_000)
QUICK_SIZES: tuple[int, ...] = (1_000,)
QUICK_AGENT_TRAJECTORIES = 20


@dataclass(frozen=True)
class BenchConfig:
    """What to run (validated on construction).

    Example:
        >>> config = BenchConfig(data=(Path("26.json"),), strategies=("truncation",), quick=True)
        >>> config.strategy_names(), config.sizes
        (['full', 'truncation'], (1000,))
    """

    data: tuple[Path, ...]
    """LoCoMo files, or folders of them."""
    strategies: tuple[str, ...] = ()
    """Strategy names; empty for every available built-in one. ``full`` is always added."""
    model: str | None = None
    """``provider:name`` of a real internal model; ``None`` for the offline replay model."""
    quick: bool = False
    """Measure overhead at 1k messages only, with fewer turns, and skip the counting figure."""
    overhead_sizes: tuple[int, ...] | None = None
    """History sizes for the overhead figure (default 1k / 10k / 100k, 1k when quick)."""
    overhead_turns: int = 5
    """Turns timed per strategy and size."""
    budget_tokens: int = 2000
    """Token budget of token-bounded strategies."""
    keep_messages: int = 20
    """Messages kept by count-bounded strategies."""
    summary_tokens: int = 128
    """Cap on replayed and requested summaries."""
    context_tokens: int = 1500
    """Budget of the contexts assembled by ``ContextBuilder`` (facts and hybrid strategies)."""
    counting: bool = True
    """Also measure incremental token counting on a 100k-message history."""
    max_turns: int | None = None
    """Replay at most this many assistant turns per conversation (``None``: all); recall is
    then scored on the shortened history."""
    faces: bool = False
    """Also measure the overhead of every package face (see ``bench.faces``)."""
    face_turns: int = 100
    """Turns timed per face and size (10 when quick): enough that a few slow turns (a thread
    wake-up, a collection) do not decide the mean."""
    face_passes: int = 3
    """Passes over every face and size (1 when quick); each figure is its lowest pass mean
    (see ``bench.faces.measure_faces``)."""
    agent_data: Path | None = None
    """tau-bench folder replayed as the agent workload (``bench.agent``); ``None`` to skip."""
    agent_limit: int | None = None
    """Trajectories replayed from ``agent_data`` (default all, 20 when quick)."""

    def __post_init__(self) -> None:
        """Validate sizes and budgets."""
        if not self.data:
            msg = "no data given: pass at least one LoCoMo file or folder"
            raise ConfigurationError(msg)
        for name in (
            "overhead_turns",
            "face_turns",
            "face_passes",
            "budget_tokens",
            "keep_messages",
            "summary_tokens",
            "context_tokens",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"{name} must be an integer >= 1, got {value!r}"
                raise ConfigurationError(msg)
        if self.max_turns is not None and (
            isinstance(self.max_turns, bool)
            or not isinstance(self.max_turns, int)
            or self.max_turns < 1
        ):
            msg = f"max_turns must be None or an integer >= 1, got {self.max_turns!r}"
            raise ConfigurationError(msg)
        if self.overhead_sizes is not None and any(s < 10 for s in self.overhead_sizes):
            msg = f"overhead_sizes must all be >= 10, got {self.overhead_sizes!r}"
            raise ConfigurationError(msg)

    @property
    def sizes(self) -> tuple[int, ...]:
        """History sizes used for overhead."""
        if self.overhead_sizes is not None:
            return self.overhead_sizes
        return QUICK_SIZES if self.quick else FULL_SIZES

    def strategy_names(self) -> list[str]:
        """Names to run, baseline first; unknown names raise `ConfigurationError`."""
        available = available_strategies()
        wanted = list(self.strategies) or [n for n in DEFAULT_STRATEGIES if n in available]
        unknown = [n for n in wanted if n not in available]
        if unknown:
            msg = f"unknown strategy {unknown[0]!r}; available: {', '.join(available)}"
            raise ConfigurationError(msg)
        return [BASELINE, *dict.fromkeys(n for n in wanted if n != BASELINE)]


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
        """Strategies whose run failed or whose internal calls gave up, in report order."""
        return [
            s
            for s in self.strategies
            if self.internal_calls(s).failures or any(r.error for r in self.runs if r.strategy == s)
        ]

    def overhead_ms(self, strategy: str, size: int) -> float | None:
        """Median overhead per turn at ``size`` messages."""
        for figure in self.overhead:
            if figure.strategy == strategy and figure.messages == size:
                return figure.ms_per_turn
        return None


class ProgressBar:
    """A plain text progress bar (``[####....]  50% label``) on a stream, stderr by default.

    On a terminal it redraws one line (at most 10 times a second); elsewhere it prints a line
    whenever the label changes.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        *,
        width: int = 30,
        interactive: bool | None = None,
    ) -> None:
        """Prepare a bar for ``total`` units."""
        self.total = max(1, total)
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        isatty = getattr(self.stream, "isatty", None)
        self.interactive = bool(isatty and isatty()) if interactive is None else interactive
        self.done = 0
        self._label = ""
        self._last_draw = 0.0

    def _line(self) -> str:
        filled = int(self.width * min(self.done, self.total) / self.total)
        percent = int(100 * min(self.done, self.total) / self.total)
        return f"[{'#' * filled}{'.' * (self.width - filled)}] {percent:3d}% {self._label}"

    def advance(self, units: int = 1, label: str | None = None) -> None:
        """Add ``units`` done and optionally change the label."""
        self.done += units
        changed = label is not None and label != self._label
        if label is not None:
            self._label = label
        now = time.monotonic()
        if self.interactive:
            if changed or now - self._last_draw >= 0.1 or self.done >= self.total:
                self.stream.write("\r" + self._line().ljust(self.width + 60)[: self.width + 60])
                self.stream.flush()
                self._last_draw = now
        elif changed:
            self.stream.write(self._line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Finish the bar's line."""
        if self.interactive:
            self.stream.write("\r" + self._line().ljust(self.width + 60)[: self.width + 60] + "\n")
            self.stream.flush()


def make_chat_model(spec: str) -> BaseChatModel:
    """Build a real chat model from ``provider:name`` (see `models.chat_model_from_spec`).

    Raises:
        ConfigurationError: The spec is malformed, the provider is unknown, its package or
            API key is missing, or the model cannot be created.

    Example:
        >>> try:
        ...     make_chat_model("gpt-4o-mini")
        ... except ConfigurationError as exc:
        ...     print(str(exc).split(" (")[0])
        --model must look like provider:model
    """
    from langchain_histcompress.edge.models import chat_model_from_spec

    return chat_model_from_spec(spec, option="--model")


def _metered(model: BaseChatModel, ledger: UsageLedger) -> BaseChatModel:
    callbacks = model.callbacks if isinstance(model.callbacks, list) else []
    return model.model_copy(update={"callbacks": [*callbacks, ledger]})


def _assistant_turns(conversation: LocomoConversation, limit: int | None = None) -> int:
    turns = sum(1 for t in conversation.turns if not t.from_user)
    return turns if limit is None else min(turns, limit)


def replay_strategy(
    strategy: Strategy,
    conversation: LocomoConversation,
    *,
    counter: TiktokenCounter,
    ledger: UsageLedger,
    on_turn: Callable[[], None] | None = None,
    max_turns: int | None = None,
    meter: CostMeter | None = None,
) -> StrategyRun:
    """Replay ``conversation`` through ``strategy``, then score recall.

    Errors are recorded in the run, and so are the internal calls that gave up
    (`StrategyRun.failures`). ``max_turns`` stops the replay after that many assistant turns.
    With a ``meter``, every call is also priced under prompt caching, at the turn's time.
    """
    with recording_failures() as failures:
        run = _replay(
            strategy,
            conversation,
            counter=counter,
            ledger=ledger,
            on_turn=on_turn,
            max_turns=max_turns,
            meter=meter,
        )
    if failures:
        logger.warning(
            "strategy %s: %d internal call(s) gave up on %s",
            strategy.name,
            len(failures),
            conversation.name,
        )
    return replace(run, failures=tuple(failures))


def _replay(
    strategy: Strategy,
    conversation: LocomoConversation,
    *,
    counter: TiktokenCounter,
    ledger: UsageLedger,
    on_turn: Callable[[], None] | None,
    max_turns: int | None,
    meter: CostMeter | None,
) -> StrategyRun:
    strategy.reset()
    times = turn_times(conversation) if meter is not None else {}
    history: list[BaseMessage] = [conversation.system_message()]
    turns: list[TurnRecord] = []
    try:
        for message in stamped_messages(conversation):
            if isinstance(message, AIMessage):
                if max_turns is not None and len(turns) >= max_turns:
                    break
                snapshot = tuple(history)
                mark = ledger.mark()
                start = time.perf_counter()
                model_input = strategy.model_input(snapshot)
                elapsed = time.perf_counter() - start
                calls = tuple(ledger.since(mark))
                if meter is not None:
                    _price_turn(meter, model_input, message, calls, counter, times)
                turns.append(
                    TurnRecord(
                        message_id=str(message.id),
                        prompt_tokens=counter.count_messages(model_input),
                        completion_tokens=counter.count_text(message_text(message)),
                        input_messages=len(model_input),
                        internal_calls=calls,
                        overhead_s=max(0.0, elapsed - sum(c.seconds for c in calls)),
                    )
                )
                if on_turn is not None:
                    on_turn()
            history.append(message)
        questions: list[QuestionRecall] = []
        snapshot = tuple(history)
        for index, qa in enumerate(conversation.recall_questions()):
            question = HumanMessage(qa.question, id=f"question-{index}")
            context = strategy.context_for_question(snapshot, question)
            tokens = counter.count_messages(context.messages)
            scored = score_question(qa, context, context_tokens=tokens)
            if context.tool_request:
                scored = _with_tool_call(scored, context, strategy, counter, meter)
            questions.append(scored)
    except Exception as exc:
        logger.warning(
            "strategy %s failed on %s: %s", strategy.name, conversation.name, type(exc).__name__
        )
        return StrategyRun(
            strategy.name, conversation.name, tuple(turns), error=f"{type(exc).__name__}: {exc}"
        )
    return StrategyRun(
        strategy=strategy.name,
        conversation=conversation.name,
        turns=tuple(turns),
        recall=summarize_recall(questions),
        questions=tuple(questions),
        costs=meter.costs() if meter is not None else {},
        reported_cached_tokens=meter.reported_cached_tokens if meter is not None else None,
    )


def _with_tool_call(
    scored: QuestionRecall,
    context: QuestionContext,
    strategy: Strategy,
    counter: TiktokenCounter,
    meter: CostMeter | None,
) -> QuestionRecall:
    """``scored`` with the recalled tokens and the priced extra request of its tool call."""
    call = context.messages[len(context.tool_request)]
    result = context.messages[-1]
    call_tokens = counter.count_messages([call]) - counter.count_messages([AIMessage("")])
    pricings = (
        list(meter.pricings.values())
        if meter is not None
        else [PRICING_MODELS[name] for name in REPORTED_PRICINGS]
    )
    tools_text = getattr(strategy, "tools_text", None)
    costs = price_tool_call(
        context.tool_request,
        context.messages,
        call_tokens=call_tokens,
        encoder=meter.encoder if meter is not None else RequestEncoder(counter),
        pricings=pricings,
        tools_text=tools_text() if callable(tools_text) else "",
    )
    recalled = counter.count_text(message_text(result)) if isinstance(result, ToolMessage) else 0
    return replace(scored, recalled_tokens=recalled, tool_costs=costs)


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


def _price_turn(
    meter: CostMeter,
    model_input: Sequence[BaseMessage],
    answer: BaseMessage,
    calls: Sequence[ModelCall],
    counter: TiktokenCounter,
    times: Mapping[str, float],
) -> None:
    """Price a turn's internal calls, then its answering call, at the turn's time."""
    at = times.get(str(answer.id), 0.0)
    for call in calls:
        if not call.failed:
            meter.internal(
                call.prompt,
                output_tokens=call.completion_tokens,
                at=at,
                reported_cached=call.cached_tokens if call.reported else None,
            )
    meter.answer(model_input, output_tokens=counter.count_text(message_text(answer)), at=at)


def _unique_names(conversations: Sequence[LocomoConversation]) -> list[LocomoConversation]:
    seen: dict[str, int] = {}
    out: list[LocomoConversation] = []
    for conversation in conversations:
        count = seen.get(conversation.name, 0)
        seen[conversation.name] = count + 1
        if count:
            conversation = LocomoConversation(
                name=f"{conversation.name}-{count + 1}",
                speaker_a=conversation.speaker_a,
                speaker_b=conversation.speaker_b,
                sessions=conversation.sessions,
                qa=conversation.qa,
                source=conversation.source,
            )
        out.append(conversation)
    return out


def run_benchmark(
    config: BenchConfig,
    *,
    progress: TextIO | None = None,
    model: BaseChatModel | None = None,
) -> BenchResult:
    """Run the benchmark described by ``config``.

    Args:
        config: What to run.
        progress: Stream for the progress bar (default stderr).
        model: A ready internal model overriding ``config.model`` (tests, custom clients).

    Raises:
        ConfigurationError: A file is missing or malformed, a strategy is unknown, or the
            real model cannot be created. Nothing is run then.
    """
    started = time.perf_counter()
    names = config.strategy_names()
    conversations = _unique_names([load_locomo(p) for p in find_locomo_files(config.data)])
    real_model = model
    if real_model is None and config.model is not None:
        real_model = make_chat_model(config.model)
    counter = TiktokenCounter("gpt-4o-mini", cache_size=1_048_576)
    notes = [f"strategy {n!r} is not installed" for n in config.strategies if n not in names]
    replays = sum(len(REPORTED_PRICINGS) if is_priced(n) else 1 for n in names)
    replay_units = sum(_assistant_turns(c, config.max_turns) for c in conversations) * replays
    overhead_units = len(names) * len(config.sizes) * (config.overhead_turns + 1)
    face_units = len(FACES) * len(config.sizes) * _face_passes(config) if config.faces else 0
    bar = ProgressBar(replay_units + overhead_units + face_units + 1, progress)
    runs: list[StrategyRun] = []
    encoder = RequestEncoder(counter)
    for conversation in conversations:
        ledger = UsageLedger(counter, estimate=real_model is not None)
        internal = real_model or ReplayChatModel(
            conversation=conversation, counter=counter, summary_token_cap=config.summary_tokens
        )
        env = StrategyEnv(
            counter=counter,
            model=_metered(internal, ledger),
            budget_tokens=config.budget_tokens,
            keep_messages=config.keep_messages,
            summary_tokens=config.summary_tokens,
            context_tokens=config.context_tokens,
            speaker_names={"human": conversation.speaker_a, "ai": conversation.speaker_b},
        )
        for name in names:
            per_pricing: dict[str, StrategyRun] = {}
            for pricing in REPORTED_PRICINGS if is_priced(name) else (None,):
                bar.advance(0, f"{conversation.name} {name}" + (f" @ {pricing}" if pricing else ""))
                strategy = build_strategy(name, replace(env, pricing=pricing))
                run = replay_strategy(
                    strategy,
                    conversation,
                    counter=counter,
                    ledger=ledger,
                    on_turn=bar.advance,
                    max_turns=config.max_turns,
                    meter=CostMeter(counter, encoder=encoder, pricings=[pricing])
                    if pricing
                    else CostMeter(counter, encoder=encoder),
                )
                done = len(run.turns)
                bar.advance(_assistant_turns(conversation, config.max_turns) - done)
                per_pricing[pricing or ""] = run
            runs.append(merge_priced_runs(per_pricing))
    agent = _agent(config, names, counter, bar, notes)
    overhead = _overhead(config, names, conversations[0], counter, bar)
    faces = _faces(config, conversations[0], counter, bar) if config.faces else []
    counting = None
    if config.counting and not config.quick:
        bar.advance(0, "incremental counting")
        counting = _counting(max(config.sizes))
    bar.advance(1, "done")
    bar.close()
    return BenchResult(
        config=config,
        conversations=tuple(c.name for c in conversations),
        strategies=tuple(names),
        internal_model=config.model or ("custom" if model is not None else "locomo-replay"),
        runs=tuple(runs),
        overhead=tuple(overhead),
        counting=counting,
        faces=tuple(faces),
        seconds=time.perf_counter() - started,
        notes=tuple(notes),
        agent=agent,
    )


def _agent(
    config: BenchConfig,
    names: Sequence[str],
    counter: TiktokenCounter,
    bar: ProgressBar,
    notes: list[str],
) -> AgentResult | None:
    """Replay the agent workload when its folder is given and present."""
    folder = config.agent_data
    if folder is None:
        return None
    if not (folder / TAU_BENCH_FILE).is_file():
        notes.append(f"agent workload skipped: {folder / TAU_BENCH_FILE} not found")
        return None

    def env(model: BaseChatModel) -> StrategyEnv:
        return StrategyEnv(
            counter=counter,
            model=model,
            budget_tokens=config.budget_tokens,
            keep_messages=config.keep_messages,
            summary_tokens=config.summary_tokens,
            context_tokens=config.context_tokens,
        )

    limit = config.agent_limit or (QUICK_AGENT_TRAJECTORIES if config.quick else None)
    return run_agent_workload(
        folder,
        names,
        counter=counter,
        make_env=env,
        limit=limit,
        summary_tokens=config.summary_tokens,
        on_trajectory=lambda name: bar.advance(0, f"agent {name}"),
    )


def _overhead(
    config: BenchConfig,
    names: Sequence[str],
    conversation: LocomoConversation,
    counter: TiktokenCounter,
    bar: ProgressBar,
) -> list[OverheadFigure]:
    base = [conversation.system_message(), *conversation.messages()]
    history = extended_history(base, max(config.sizes) + 4 * len(base) // 3 + 50)
    ledger = UsageLedger(counter)
    internal = ReplayChatModel(
        conversation=conversation, counter=counter, summary_token_cap=config.summary_tokens
    )
    env = StrategyEnv(
        counter=counter,
        model=_metered(internal, ledger),
        budget_tokens=config.budget_tokens,
        keep_messages=config.keep_messages,
        summary_tokens=config.summary_tokens,
        context_tokens=config.context_tokens,
        speaker_names={"human": conversation.speaker_a, "ai": conversation.speaker_b},
    )
    figures: list[OverheadFigure] = []
    for size in config.sizes:
        for name in names:
            bar.advance(0, f"overhead {name} @ {size} messages")
            try:
                strategy = build_strategy(name, env)
                figure = measure_overhead(
                    strategy, history, size, ledger=ledger, turns=config.overhead_turns
                )
            except Exception as exc:
                logger.warning("overhead of %s at %d failed: %s", name, size, type(exc).__name__)
                figure = OverheadFigure(name, size, None, 0, error=f"{type(exc).__name__}: {exc}")
            figures.append(figure)
            bar.advance(config.overhead_turns + 1)
    return figures


def _faces(
    config: BenchConfig,
    conversation: LocomoConversation,
    counter: TiktokenCounter,
    bar: ProgressBar,
) -> list[FaceOverhead]:
    model = ReplayChatModel(
        conversation=conversation, counter=counter, summary_token_cap=config.summary_tokens
    )

    def advance(figure: FaceOverhead) -> None:
        bar.advance(1, f"face {figure.face} @ {figure.messages} messages")

    return measure_faces(
        [conversation.system_message(), *conversation.messages()],
        sizes=config.sizes,
        turns=10 if config.quick else config.face_turns,
        model=model,
        counter=counter,
        on_figure=advance,
        passes=_face_passes(config),
    )


def _face_passes(config: BenchConfig) -> int:
    return 1 if config.quick else config.face_passes


def _counting(size: int) -> dict[str, float] | None:
    try:
        from langchain_histcompress.workbench.counting import measure_incremental_counting
    except ImportError:  # pragma: no cover - shipped with the package
        return None
    try:
        return measure_incremental_counting(size)
    except Exception as exc:
        logger.warning("incremental counting benchmark failed: %s", type(exc).__name__)
        return None
