"""Library overhead of every face against history size, folding and non-folding turns apart.

Each face of `face_drivers.FACES` catches up on one long history (untimed), then handles a
fixed number of turns, each timed with the internal model's time subtracted; a few more turns
run under `tracemalloc` for the memory a turn allocates. Turns that fold are averaged apart
from the others. The method is described in docs/design/workbench.md.

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
import logging
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.face_drivers import FACES, Face, FaceEnv
from langchain_histcompress.workbench.metrics import extended_history
from langchain_histcompress.workbench.model_clock import ModelClock
from langchain_histcompress.workbench.strategy import StrategyEnv

__all__ = [
    "FaceOverhead",
    "measure_face",
    "measure_faces",
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


def _without_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m if m.type == "system" else m.model_copy(update={"id": None}) for m in messages]


def measure_face(
    face: Face,
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
    face: Face, history: Sequence[BaseMessage], positions: Sequence[int], clock: ModelClock
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
    shared = FaceEnv(counter, timed, StrategyEnv(counter=counter, model=timed), clock)
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
