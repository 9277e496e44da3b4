"""Run every strategy over every LoCoMo file: replay, recall, overhead, with a progress bar.

`run_benchmark` replays each strategy on each conversation (`strategy_replay`), once per
reported pricing model for a pricing-aware strategy, then measures library overhead on the
first file extended to 1k / 10k / 100k messages, always with the offline replay model. The
method is described in docs/design/workbench.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

from langchain_core.language_models import BaseChatModel

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.agent import TAU_BENCH_FILE, AgentResult, run_agent_workload
from langchain_histcompress.workbench.bench_config import QUICK_AGENT_TRAJECTORIES, BenchConfig
from langchain_histcompress.workbench.bench_result import (
    BenchResult,
    StrategyRun,
    merge_priced_runs,
)
from langchain_histcompress.workbench.costs import REPORTED_PRICINGS, CostMeter, RequestEncoder
from langchain_histcompress.workbench.face_drivers import FACES
from langchain_histcompress.workbench.faces import FaceOverhead, measure_faces
from langchain_histcompress.workbench.locomo import (
    LocomoConversation,
    find_locomo_files,
    load_locomo,
)
from langchain_histcompress.workbench.metrics import (
    OverheadFigure,
    UsageLedger,
    extended_history,
    measure_overhead,
)
from langchain_histcompress.workbench.progress import ProgressBar
from langchain_histcompress.workbench.replay import ReplayChatModel
from langchain_histcompress.workbench.strategies import build_strategy, is_priced
from langchain_histcompress.workbench.strategy import StrategyEnv
from langchain_histcompress.workbench.strategy_replay import replay_strategy

__all__ = [
    "make_chat_model",
    "run_benchmark",
]

logger = logging.getLogger(__name__)


def make_chat_model(spec: str) -> BaseChatModel:
    """Build a real chat model from ``provider:name`` (see `models.chat_model_from_spec`).

    Raises:
        ConfigurationError: The spec is malformed, the provider is unknown, its package or
            API key is missing, or the model cannot be created.

    Example:
        >>> from langchain_histcompress.core.errors import ConfigurationError
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
