"""Library overhead of every face against history size, folding and non-folding turns apart.

Each face (a reducer, a graph node, the compressor, the rephraser, the token counter, the
retrieval-based strategies) is driven through its public API on one long history, extended to
each size (1k / 10k / 100k messages by default). At each size the face first catches up on
the history (untimed warm-up), then handles a fixed number of turns, the history growing by one
round per turn; every turn is timed with the internal model's time subtracted. A few more
turns then run under `tracemalloc`, untimed, for the memory a turn allocates (the peak above
what was in use when it started, the internal model's own memory left out). A turn *folds*
when the face made an internal model call for it (a summary or fact extraction) or reports a
compression; folding and non-folding turns are averaged apart, and together, because whether
a turn folds changes its work and a median over a few turns hides which kind it measured.

`plot_face_overhead` draws mean overhead per turn against history size on log-log axes (a flat
line is constant work per turn; a slope of 1 is work proportional to the history).

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    >>> base = [SystemMessage("s", id="s")]
    >>> for n in range(6):
    ...     base += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
    >>> [f.face for f in measure_faces(base, sizes=(10,), turns=2, faces=["tiktoken_counter"])]
    ['tiktoken_counter']
"""

from __future__ import annotations

import gc
import json
import logging
import statistics
import threading
import time
import tracemalloc
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    messages_from_dict,
    messages_to_dict,
)

from langchain_histcompress.core.coverage import CoveredIds
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.rounds import ensure_ids, split_rounds
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.metrics import extended_history
from langchain_histcompress.workbench.plot_style import strategy_styles
from langchain_histcompress.workbench.strategies import (
    DEFAULT_STRATEGIES,
    StrategyEnv,
    build_strategy,
    kept_verbatim,
)

__all__ = [
    "FACES",
    "RETRIEVAL_FACES",
    "FaceOverhead",
    "ModelClock",
    "face_overhead_table",
    "measure_face",
    "measure_faces",
    "plot_face_overhead",
    "write_face_reports",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FaceOverhead:
    """Library overhead of one face at one history size."""

    face: str
    """Face name (a key of `FACES`)."""
    messages: int
    """History size when measuring."""
    turns: int
    """Turns timed."""
    folds: int
    """Timed turns that folded (made an internal model call or compressed)."""
    mean_ms: float | None
    """Mean overhead over every timed turn, in ms (``None`` when the face failed)."""
    fold_ms: float | None
    """Mean overhead over the folding turns (``None`` without any)."""
    plain_ms: float | None
    """Mean overhead over the non-folding turns (``None`` without any)."""
    error: str | None = None
    """Why the measurement failed, if it did."""
    samples_ms: tuple[float, ...] = field(default_factory=tuple)
    """Every timed turn, in ms."""
    folded: tuple[bool, ...] = field(default_factory=tuple)
    """Whether each timed turn folded."""
    pass_means_ms: tuple[float, ...] = field(default_factory=tuple)
    """The mean of every pass, in the order they ran (the figure is the lowest of them)."""
    alloc_kib: float | None = None
    """Mean memory a turn allocated, in KiB: the `tracemalloc` peak above what was in use
    when the turn started (internal model calls' own memory left out, see
    `ModelClock.traced_peak`), over the traced turns (``None`` when none was traced)."""
    fold_alloc_kib: float | None = None
    """The same over the traced turns that folded (``None`` without any)."""
    plain_alloc_kib: float | None = None
    """The same over the traced turns that did not fold (``None`` without any)."""
    alloc_samples_kib: tuple[float, ...] = field(default_factory=tuple)
    """Every traced turn's allocation, in KiB."""
    alloc_folded: tuple[bool, ...] = field(default_factory=tuple)
    """Whether each traced turn folded."""


class _Face(ABC):
    """One face driven turn by turn on a growing history."""

    def warm(self, history: Sequence[BaseMessage]) -> None:
        """Catch up on ``history`` (untimed)."""
        self.turn(history)

    def prepare(self, history: Sequence[BaseMessage]) -> Any:
        """What the application does before the call (untimed); `turn` gets the result."""
        return history

    @abstractmethod
    def turn(self, history: Any) -> bool:
        """Handle the next turn; return whether it compressed (model calls count anyway)."""


class ModelClock:
    """Time spent inside an internal model's ``invoke`` / ``ainvoke``.

    LangChain's own call machinery is included, so a face's overhead excludes all of it.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
        >>> clock = ModelClock()
        >>> model = clock.timed(FakeListChatModel(responses=["hi"]))
        >>> _ = model.invoke("hello")
        >>> clock.calls, clock.seconds > 0
        (1, True)
    """

    def __init__(self) -> None:
        """Start at zero."""
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()
        self._peaks: list[int] = []

    def _add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds
            self.calls += 1

    def _call_starts(self) -> None:
        """Under `tracemalloc`: keep the peak so far (the model's own peak is not the face's)."""
        if tracemalloc.is_tracing():
            with self._lock:
                self._peaks.append(tracemalloc.get_traced_memory()[1])

    def _call_ends(self) -> None:
        """Under `tracemalloc`: the peak starts again from what the call left in use."""
        if tracemalloc.is_tracing():
            tracemalloc.reset_peak()

    def traced_peak(self) -> int:
        """The `tracemalloc` peak since the last reading, internal model calls left out.

        What a call allocated and freed again is not counted; what it returned (still in
        use when it ended) is.
        """
        with self._lock:
            peaks, self._peaks = self._peaks, []
        return max([tracemalloc.get_traced_memory()[1], *peaks])

    def reading(self) -> tuple[float, int]:
        """Seconds and calls so far."""
        with self._lock:
            return self.seconds, self.calls

    def timed(self, model: BaseChatModel) -> BaseChatModel:
        """A copy of ``model`` whose calls are timed on this clock."""
        clock = self
        base = type(model)

        class Timed(base):  # type: ignore[valid-type,misc]
            def invoke(self, *args: Any, **kwargs: Any) -> Any:
                clock._call_starts()
                start = time.perf_counter()
                try:
                    return super().invoke(*args, **kwargs)
                finally:
                    clock._add(time.perf_counter() - start)
                    clock._call_ends()

            async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
                clock._call_starts()
                start = time.perf_counter()
                try:
                    return await super().ainvoke(*args, **kwargs)
                finally:
                    clock._add(time.perf_counter() - start)
                    clock._call_ends()

        Timed.__name__ = base.__name__
        copy = model.model_copy()
        copy.__class__ = Timed
        return copy


@dataclass(frozen=True)
class _Env:
    counter: TiktokenCounter
    model: BaseChatModel
    strategies: StrategyEnv
    clock: ModelClock


FaceFactory = Callable[[_Env], _Face]


def _warm_summary(compressor: Any, history: Sequence[BaseMessage]) -> RunningSummary | None:
    """A summary covering every round but the retained ones, made with one summarizer call."""
    rounds = split_rounds(history).rounds
    keep = max(1, kept_verbatim(compressor))
    folded = rounds[:-keep]
    if not folded:
        return None
    chunk = [m for r in folded[-2:] for m in r.messages]
    made = compressor.summarizer.summarize(chunk, None, rounds=1).summary
    return RunningSummary(
        content=made.content,
        text=made.text,
        covered_ids=CoveredIds([str(m.id) for r in folded for m in r.messages]),
        rounds_covered=len(folded),
        model=made.model,
        created_at=made.created_at,
    )


def _round_compressor(env: _Env, **options: Any) -> Any:
    from langchain_histcompress.edge.compressor import RoundCompressor

    return RoundCompressor(
        env.model,
        token_counter=env.counter,
        max_summary_tokens=env.strategies.summary_tokens,
        **options,
    )


class _Compressor(_Face):
    def __init__(self, compressor: Any) -> None:
        self.compressor = compressor
        self.summary: RunningSummary | None = None

    def warm(self, history: Sequence[BaseMessage]) -> None:
        self.summary = _warm_summary(self.compressor, history)
        self.turn(history)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        result = self.compressor.compress(history, self.summary)
        self.summary = result.summary
        return bool(result.compressed)


class _Node(_Face):
    """`RoundCompressionNode` on a state dict, its update applied as LangGraph would."""

    def __init__(self, env: _Env) -> None:
        from langchain_histcompress.faces.nodes import RoundCompressionNode

        self.node = RoundCompressionNode(_round_compressor(env))
        self.state: dict[str, Any] = {}

    def warm(self, history: Sequence[BaseMessage]) -> None:
        from langchain_histcompress.faces.nodes import summary_to_state

        # Without ids the node reads the ids `ensure_ids` gives (position and content).
        summary = _warm_summary(self.node.compressor, ensure_ids(history))
        self.state = {"running_summary": summary_to_state(summary) if summary else None}
        self.turn(history)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        update = self.node.invoke({**self.state, "messages": history})
        assert isinstance(update, dict)  # called outside a graph, the node returns a dict
        folded = "running_summary" in update
        if folded:
            self.state["running_summary"] = update["running_summary"]
        return folded


class _Reducer(_Face):
    def __init__(self, env: _Env) -> None:
        from langchain_histcompress.faces.reducers import SummarizationReducer

        self.reducer = SummarizationReducer(
            env.model,
            target_count=env.strategies.keep_messages,
            threshold_count=4,
            token_counter=env.counter,
            max_summary_tokens=env.strategies.summary_tokens,
        )

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        self.reducer.reduce(history)
        return False


class _ReducerInFront(_Face):
    """`SummarizationReducer` in front of the answering model, a fold on every turn.

    ``with_history_reducer``'s pattern: ``target_count=40`` and no threshold, so each turn
    folds its new messages. The application hands it the full history every turn, or, with
    ``fed_back``, keeps the reduced output and appends each turn's new messages to it
    (Semantic Kernel's way); with ``reloaded`` as well, that list goes through storage
    between turns (serialized and read back as new objects, untimed).
    """

    def __init__(self, env: _Env, *, fed_back: bool = False, reloaded: bool = False) -> None:
        from langchain_histcompress.faces.reducers import SummarizationReducer

        self.reducer = SummarizationReducer(
            env.model, target_count=40, token_counter=env.counter, max_summary_tokens=100_000
        )
        self.fed_back = fed_back
        self.reloaded = reloaded
        self.kept: list[BaseMessage] | None = None
        self.seen = 0

    def warm(self, history: Sequence[BaseMessage]) -> None:
        self.turn(self.prepare(history))

    def prepare(self, history: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
        new, self.seen = history[self.seen :], len(history)
        if not self.fed_back or self.kept is None:
            return history
        kept = [*self.kept, *new]
        return messages_from_dict(messages_to_dict(kept)) if self.reloaded else kept

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        reduced = self.reducer.reduce(history)
        if self.fed_back:
            self.kept = list(history) if reduced is None else reduced
        return False


class _Builder(_Face):
    """`ContextBuilder` with a running summary, facts and retrieved raw turns.

    At warm-up it gets a summary covering every message but the last 3 rounds and 200 facts,
    each sourced from one user message (spread over the history; ids as the builder derives
    them for messages without one). Each turn builds the context of the grown history
    (``max_context_tokens=2000``, ``raw_turn_retrieval=4``); with ``reloaded`` the summary is
    read back from its JSON first, a new object as from storage (untimed).
    """

    def __init__(self, env: _Env, *, reloaded: bool = False) -> None:
        from langchain_histcompress.context.builder import ContextBuilder

        self.builder = ContextBuilder(
            max_context_tokens=2000, token_counter=env.counter, raw_turn_retrieval=4
        )
        self.reloaded = reloaded
        self.summary: RunningSummary | None = None
        self.stored = ""
        self.facts: list[Fact] = []

    def warm(self, history: Sequence[BaseMessage]) -> None:
        ided = ensure_ids(history)
        rounds = split_rounds(ided).rounds
        folded = rounds[:-3]
        if folded:
            self.summary = RunningSummary(
                content="The user and the assistant talked about many things.",
                text="The user and the assistant talked about many things.",
                covered_ids=CoveredIds([str(m.id) for r in folded for m in r.messages]),
                rounds_covered=len(folded),
            )
            self.stored = self.summary.model_dump_json()
        humans = [m for m in ided if isinstance(m, HumanMessage)]
        picked = humans[:: max(1, len(humans) // 200)][:200]
        self.facts = [
            Fact(
                id=f"fact-{n}",
                content=message_text(m)[:200].strip() or "(no text)",
                source_ids=(str(m.id),),
            )
            for n, m in enumerate(picked)
        ]
        self.turn(self.prepare(history))

    def prepare(self, history: Sequence[BaseMessage]) -> Any:
        summary = self.summary
        if self.reloaded and summary is not None:
            summary = RunningSummary.model_validate_json(self.stored)
        return history, summary

    def turn(self, history: Any) -> bool:
        messages, summary = history
        self.builder.build(messages, summary=summary, facts=self.facts)
        return False


class _Rephraser(_Face):
    def __init__(self, env: _Env, *, node: bool) -> None:
        from langchain_histcompress.faces.rephrase import (
            HistoryRephraseNode,
            create_history_rephraser,
        )

        # timed like every internal model: its call is model time, not the face's
        model = env.clock.timed(GenericFakeChatModel(messages=_standalone_answers()))
        self.node = HistoryRephraseNode(model) if node else None
        self.chain = None if node else create_history_rephraser(model)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        if self.node is not None:
            self.node.invoke({"messages": history})
        elif self.chain is not None:
            # The history as the application holds it, and a new follow-up question (slicing
            # off the last message would copy the whole history inside the timed turn).
            self.chain.invoke({"input": _FOLLOW_UP, "chat_history": history})
        return False


_FOLLOW_UP = "And what about that?"


def _standalone_answers() -> Any:
    while True:
        yield AIMessage("What did the user ask about last?")


class _Counter(_Face):
    def __init__(self, env: _Env) -> None:
        self.counter = TiktokenCounter(env.counter.model)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        self.counter(history)
        return False


class _Strategy(_Face):
    def __init__(self, env: _Env, name: str) -> None:
        self.strategy = build_strategy(name, env.strategies)

    def warm(self, history: Sequence[BaseMessage]) -> None:
        self.strategy.warm_start(history)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        self.strategy.model_input(history)
        return False


FACES: dict[str, FaceFactory] = {
    "summarization_reducer": _Reducer,
    "summarization_reducer_no_ids": _Reducer,
    "compression_node": _Node,
    "compression_node_no_ids": _Node,
    "round_compression": lambda env: _Compressor(_round_compressor(env)),
    "thread_summary": lambda env: _Compressor(
        _round_compressor(env, trigger=("rounds", 1), keep=("rounds", 0))
    ),
    "rephrase_node": lambda env: _Rephraser(env, node=True),
    "rephrase_chain": lambda env: _Rephraser(env, node=False),
    "tiktoken_counter": _Counter,
    "reducer_full_history": _ReducerInFront,
    "reducer_full_history_no_ids": _ReducerInFront,
    "reducer_fed_back": lambda env: _ReducerInFront(env, fed_back=True),
    "reducer_fed_back_reloaded": lambda env: _ReducerInFront(env, fed_back=True, reloaded=True),
    "context_builder": _Builder,
    "context_builder_no_ids": _Builder,
    "context_builder_reloaded_summary": lambda env: _Builder(env, reloaded=True),
    "facts": lambda env: _Strategy(env, "facts"),
    "hybrid": lambda env: _Strategy(env, "hybrid"),
    "hybrid_retrieval": lambda env: _Strategy(env, "hybrid_retrieval"),
}
"""Face name -> factory. ``*_no_ids`` faces get the history without message ids (a graph
state key reduced by ``operator.add`` instead of ``add_messages``, or a plain list)."""

RETRIEVAL_FACES = frozenset(
    {
        "facts",
        "hybrid",
        "hybrid_retrieval",
        "context_builder",
        "context_builder_no_ids",
        "context_builder_reloaded_summary",
    }
)
"""Faces that rank data for every turn (their targets differ from the others')."""


def _without_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m if m.type == "system" else m.model_copy(update={"id": None}) for m in messages]


def measure_face(
    face: _Face,
    name: str,
    history: Sequence[BaseMessage],
    size: int,
    *,
    clock: ModelClock,
    turns: int,
    begin_at: int | None = None,
    traced_turns: int = 0,
) -> FaceOverhead:
    """Time ``turns`` turns of ``face`` once the history holds ``size`` messages.

    The face first catches up on the history up to the first assistant turn after ``size``
    (untimed); then each timed turn hands it the history up to the next assistant turn (a
    new list, as LangGraph's ``add_messages`` makes; the young garbage-collector generations
    are collected before the clock starts, so walking that list is not timed as the face's).
    ``traced_turns`` more turns then run under `tracemalloc`, untimed: each one's allocation
    is the peak of traced memory above what was in use when it started.

    Args:
        face: A fresh face (from `FACES`).
        name: Its name, for the figure.
        history: A long history (see `extended_history`), longer than ``size``.
        size: History size at which to measure.
        clock: The internal model's clock (its time is subtracted; a call marks a fold).
        turns: Turns to time.
        begin_at: Where the timed turns start instead of ``size`` (at or after it; the figure
            is still reported at ``size``).
        traced_turns: Turns whose allocation is measured after the timed ones.

    Raises:
        ValueError: The history has too few assistant turns after ``size``.
    """
    begin = size if begin_at is None else max(size, begin_at)
    positions = [i for i in range(begin, len(history)) if history[i].type == "ai"]
    needed = turns + traced_turns + 1
    if len(positions) < needed:
        msg = f"history of {len(history)} messages has < {needed} assistant turns after {size}"
        raise ValueError(msg)
    face.warm(history[: positions[0]])
    samples: list[float] = []
    folded: list[bool] = []
    for position in positions[1 : turns + 1]:
        # Copying the whole long history touches every message, evicting the CPU caches as
        # building the turn's list does at the largest size; done at every size, the caches
        # a face starts with are the same whatever the history's length.
        evict = history[:]
        del evict
        prefix = face.prepare(history[:position])
        # The new list is young: the next collection of the young generations walks every
        # message it holds. Building it is the caller's work, so that walk happens here,
        # before the clock starts, instead of in whichever turn allocates next.
        gc.collect(1)
        model_before, calls_before = clock.reading()
        start = time.perf_counter()
        compressed = face.turn(prefix)
        elapsed = time.perf_counter() - start
        model_after, calls_after = clock.reading()
        samples.append(max(0.0, elapsed - (model_after - model_before)) * 1000)
        folded.append(compressed or calls_after > calls_before)
    allocations, alloc_folded = _traced_turns(face, history, positions[turns + 1 : needed], clock)
    fold = [s for s, f in zip(samples, folded, strict=True) if f]
    plain = [s for s, f in zip(samples, folded, strict=True) if not f]
    fold_kib = [a for a, f in zip(allocations, alloc_folded, strict=True) if f]
    plain_kib = [a for a, f in zip(allocations, alloc_folded, strict=True) if not f]
    return FaceOverhead(
        face=name,
        messages=size,
        turns=len(samples),
        folds=len(fold),
        mean_ms=statistics.fmean(samples),
        fold_ms=statistics.fmean(fold) if fold else None,
        plain_ms=statistics.fmean(plain) if plain else None,
        samples_ms=tuple(samples),
        folded=tuple(folded),
        alloc_kib=statistics.fmean(allocations) if allocations else None,
        fold_alloc_kib=statistics.fmean(fold_kib) if fold_kib else None,
        plain_alloc_kib=statistics.fmean(plain_kib) if plain_kib else None,
        alloc_samples_kib=tuple(allocations),
        alloc_folded=tuple(alloc_folded),
    )


def _traced_turns(
    face: _Face, history: Sequence[BaseMessage], positions: Sequence[int], clock: ModelClock
) -> tuple[list[float], list[bool]]:
    """Run a turn up to each of ``positions`` under `tracemalloc`: KiB each allocated, folds.

    A turn's input stays alive until the next turn has run, so what a turn lets go of from
    the previous one (a summary a cache held) is freed between turns, where it cannot hide
    what the turn allocates. What an internal model call allocates and frees again is left
    out, as its time is (what it returns is counted).
    """
    allocations: list[float] = []
    folded: list[bool] = []
    if not positions:
        return allocations, folded
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    held: Any = None
    try:
        for position in positions:
            prefix = face.prepare(history[:position])
            gc.collect(1)
            _, calls_before = clock.reading()
            clock.traced_peak()
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            compressed = face.turn(prefix)
            peak = clock.traced_peak()
            _, calls_after = clock.reading()
            allocations.append(max(0, peak - before) / 1024)
            folded.append(compressed or calls_after > calls_before)
            held = prefix
    finally:
        del held
        if not tracing:
            tracemalloc.stop()
    return allocations, folded


def measure_faces(
    base: Sequence[BaseMessage],
    *,
    sizes: Sequence[int] = (1_000, 10_000, 100_000),
    turns: int = 40,
    faces: Sequence[str] | None = None,
    model: BaseChatModel | None = None,
    counter: TiktokenCounter | None = None,
    on_figure: Callable[[FaceOverhead], None] | None = None,
    passes: int = 1,
    traced_turns: int = 10,
) -> list[FaceOverhead]:
    """Measure every face (or ``faces``) at every size on ``base`` extended to the largest.

    With several ``passes``, every face is measured again from scratch (a fresh face, its
    own warm-up, the same turns) once every face has been measured at every size, and each
    figure is the pass with the lowest mean; every pass's mean is kept in
    ``pass_means_ms``. Other processes on the machine only ever add time to a pass, so the
    lowest mean is the closest to the package's own work (the convention of Python's
    ``timeit``); passes run far apart in time so that a slow spell of the machine does not
    reach every pass of one figure.

    Args:
        base: A conversation (system message first) repeated with fresh ids up to the sizes.
        sizes: History sizes.
        turns: Turns timed per face and size (the same for every face).
        faces: Names of `FACES` to measure (default: all).
        model: The internal model (summarizer / extractor), timed by a `ModelClock`.
            Default: a model answering every call with a fixed summary.
        counter: Token counter shared by the faces (default: ``gpt-4o-mini``'s).
        on_figure: Called with each pass's figure as it is measured (progress).
        passes: Times every figure is measured (>= 1).
        traced_turns: Turns run under `tracemalloc` after the timed ones, for the memory a
            turn allocates (0: none).

    Raises:
        ConfigurationError: An unknown face name, ``passes`` below 1 or ``traced_turns``
            below 0.
    """
    names = list(FACES) if faces is None else list(faces)
    unknown = [n for n in names if n not in FACES]
    if unknown:
        msg = f"unknown faces {unknown}; known: {sorted(FACES)}"
        raise ConfigurationError(msg)
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        msg = f"passes must be an integer >= 1, got {passes!r}"
        raise ConfigurationError(msg)
    if isinstance(traced_turns, bool) or not isinstance(traced_turns, int) or traced_turns < 0:
        msg = f"traced_turns must be an integer >= 0, got {traced_turns!r}"
        raise ConfigurationError(msg)
    counter = counter or TiktokenCounter("gpt-4o-mini", cache_size=1_048_576)
    clock = ModelClock()
    timed = clock.timed(model or GenericFakeChatModel(messages=_fixed_summaries()))
    shared = _Env(counter, timed, StrategyEnv(counter=counter, model=timed), clock)
    extra = 2 * (turns + traced_turns + 2) + 4 * len(base) // 3 + 50
    history = extended_history(base, max(sizes) + extra)
    plain_history: list[BaseMessage] | None = None
    runs: dict[tuple[int, str], list[FaceOverhead]] = {}
    # Every size times the same turns (the start of a repetition of ``base``): what the new
    # messages say changes a face's work, and only the history's length may differ.
    lead = next((i for i, m in enumerate(base) if m.type != "system"), len(base))
    period = len(base) - lead
    for _ in range(passes):
        for size in sizes:
            begin_at = (
                lead + -(-(size - lead) // period) * period if period and size > lead else size
            )
            for name in names:
                grown: Sequence[BaseMessage] = history
                if name.endswith("_no_ids"):
                    plain_history = plain_history or _without_ids(history)
                    grown = plain_history
                try:
                    figure = measure_face(
                        FACES[name](shared),
                        name,
                        grown,
                        size,
                        clock=clock,
                        turns=turns,
                        begin_at=begin_at,
                        traced_turns=traced_turns,
                    )
                except Exception as exc:
                    logger.warning(
                        "overhead of %s at %d failed: %s", name, size, type(exc).__name__
                    )
                    figure = FaceOverhead(
                        name, size, 0, 0, None, None, None, error=f"{type(exc).__name__}: {exc}"
                    )
                runs.setdefault((size, name), []).append(figure)
                if on_figure is not None:
                    on_figure(figure)
    return [_lowest_pass(measured) for measured in runs.values()]


def _lowest_pass(measured: Sequence[FaceOverhead]) -> FaceOverhead:
    """The pass with the lowest mean, carrying every pass's mean (a failed pass fails it)."""
    failed = next((f for f in measured if f.error is not None or f.mean_ms is None), None)
    if failed is not None:
        return failed
    best = min(measured, key=lambda f: f.mean_ms or 0.0)
    return replace(best, pass_means_ms=tuple(f.mean_ms or 0.0 for f in measured))


def _fixed_summaries() -> Any:
    while True:
        yield AIMessage('{"ConversationSummary": "The user and the assistant chatted."}')


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _kib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def face_overhead_table(figures: Sequence[FaceOverhead]) -> str:
    """A Markdown table: per face, time and memory per turn at each size, folding turns apart.

    Time is the mean / folding / non-folding ms per turn of the lowest pass (the last column
    lists every pass's mean); memory the mean / folding / non-folding KiB a traced turn
    allocated.

    Example:
        >>> figure = FaceOverhead("x", 1000, 4, 1, 0.5, 1.1, 0.3, pass_means_ms=(0.61, 0.5),
        ...                       alloc_kib=12.4, plain_alloc_kib=12.4)
        >>> print(face_overhead_table([figure]))  # doctest: +NORMALIZE_WHITESPACE
        | face | messages | turns | folds | mean ms | folding ms | non-folding ms
        | pass means ms | mean KiB | folding KiB | non-folding KiB |
        |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
        | x | 1,000 | 4 | 1 | 0.500 | 1.100 | 0.300 | 0.610 / 0.500 | 12 | - | 12 |
    """
    lines = [
        "| face | messages | turns | folds | mean ms | folding ms | non-folding ms "
        "| pass means ms | mean KiB | folding KiB | non-folding KiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in sorted(figures, key=lambda f: (f.face, f.messages)):
        cells = [
            f.face,
            f"{f.messages:,}",
            str(f.turns),
            str(f.folds),
            _ms(f.mean_ms) if f.error is None else f"failed: {f.error}",
            _ms(f.fold_ms),
            _ms(f.plain_ms),
            " / ".join(map(_ms, f.pass_means_ms)) or "-",
            _kib(f.alloc_kib),
            _kib(f.fold_alloc_kib),
            _kib(f.plain_alloc_kib),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _series(figures: Sequence[FaceOverhead]) -> Mapping[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for f in figures:
        if f.mean_ms is not None and f.mean_ms > 0:
            series.setdefault(f.face, []).append((f.messages, f.mean_ms))
    return {name: sorted(points) for name, points in series.items()}


def plot_face_overhead(figures: Sequence[FaceOverhead], path: Path) -> Path:
    """Draw mean overhead per turn against history size, log-log, one line per face (PNG).

    Raises:
        ImportError: matplotlib is not installed (the ``bench`` extra).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    figure = Figure(figsize=(8, 5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    series = _series(figures)
    styles = strategy_styles(list(series), order=(*DEFAULT_STRATEGIES, *FACES))
    for name, points in series.items():
        style = styles[name]
        axes.plot([p[0] for p in points], [p[1] for p in points], label=name, color=style.colour,
                  linestyle=style.linestyle, **style.marker_kwargs(6))  # fmt: skip
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("history size (messages)")
    axes.set_ylabel("library overhead per turn (ms, mean)")
    axes.set_title("Overhead per turn against history size (flat = constant work)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    return path


def write_face_reports(
    figures: Sequence[FaceOverhead], out_dir: Path, *, plots: bool = True
) -> dict[str, Path]:
    """Write the faces' figures: ``faces.json``, ``faces.md`` and the log-log plot.

    Returns:
        ``{"faces:json": ..., "faces:markdown": ..., "plot:face_overhead": ...}`` (nothing
        when ``figures`` is empty).
    """
    if not figures:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"faces:json": out_dir / "faces.json", "faces:markdown": out_dir / "faces.md"}
    written["faces:json"].write_text(
        json.dumps([asdict(f) for f in figures], indent=1) + "\n", encoding="utf-8"
    )
    text = [
        "# Library overhead per face",
        "",
        "Mean wall time of the package's own work per turn (internal model calls excluded), "
        "over a fixed number of turns at each history size; folding turns (an internal model "
        "call or a compression) and the others are averaged apart. Each figure is measured "
        "in several passes far apart in time (a fresh face and warm-up each) and the pass "
        "with the lowest mean is shown: other processes only add time. Beside the time, the "
        "memory a turn allocates (KiB, the tracemalloc peak above what was in use when the "
        "turn started; an internal model call's own memory left out, what it returns "
        "counted), over a few more turns run under tracemalloc after the timed ones.",
        "",
        face_overhead_table(figures),
        "",
    ]
    if plots:
        written["plot:face_overhead"] = plot_face_overhead(figures, out_dir / "face_overhead.png")
        text += ["![overhead per face](face_overhead.png)", ""]
    written["faces:markdown"].write_text("\n".join(text), encoding="utf-8")
    return written
