"""Benchmark figures: metered model calls, per-turn records, savings and library overhead.

**Prompt tokens per call** count what the answering model receives at each assistant turn;
**billed tokens** add the completions and the strategy's internal calls; **savings** are
``1 - billed(strategy) / billed(full)``; **library overhead** is the strategy's own wall time
per turn, the internal model's time subtracted. The definitions are in
docs/design/workbench.md.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.strategy import Strategy

__all__ = [
    "ModelCall",
    "OverheadFigure",
    "ReplayFigures",
    "TurnRecord",
    "UsageLedger",
    "extended_history",
    "measure_overhead",
    "percentile",
    "replay_figures",
]


def percentile(values: Sequence[int | float], q: float) -> int | float:
    """Nearest-rank percentile ``q`` (0-100) of ``values`` (0 when empty).

    Example:
        >>> percentile([1, 2, 3, 4, 100], 95)
        100
        >>> percentile([], 95)
        0
    """
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class ModelCall:
    """One metered call of an internal model."""

    prompt_tokens: int
    """Input tokens (reported usage, else counted)."""
    completion_tokens: int
    """Output tokens (reported usage, else counted)."""
    seconds: float
    """Wall time from the call's start to its end or error."""
    failed: bool = False
    """The call raised."""
    reported: bool = False
    """The token figures are the provider's own (``usage_metadata``), not counted."""
    cached_tokens: int = 0
    """Input tokens the provider served from its prompt cache
    (``usage_metadata["input_token_details"]["cache_read"]``)."""
    estimated_prompt_tokens: int | None = None
    """tiktoken count of the prompt, beside a reported figure (ledgers with ``estimate``)."""
    estimated_completion_tokens: int | None = None
    """tiktoken count of the answer, beside a reported figure (ledgers with ``estimate``)."""
    prompt: tuple[BaseMessage, ...] = field(default=(), repr=False, compare=False)
    """The messages sent (to price the call under prompt caching, ``bench.costs``)."""

    @property
    def billed(self) -> int:
        """Prompt + completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class UsageLedger(BaseCallbackHandler):
    """Callback handler recording every chat-model call it sees, with tokens and time.

    Attach it to the internal model (``model.model_copy(update={"callbacks": [ledger]})``)
    so calls made deep inside a strategy are metered without touching the strategy.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
        >>> from langchain_core.messages import HumanMessage
        >>> ledger = UsageLedger(TiktokenCounter())
        >>> model = FakeListChatModel(responses=["hello there"], callbacks=[ledger])
        >>> _ = model.invoke([HumanMessage("hi")])
        >>> [(c.prompt_tokens, c.completion_tokens) for c in ledger.since(0)]
        [(8, 2)]
    """

    run_inline = True

    def __init__(self, counter: TiktokenCounter, *, estimate: bool = False) -> None:
        """Meter with ``counter`` when a model reports no usage.

        With ``estimate`` every call is also counted with ``counter`` when the model does
        report usage (to show the provider's figures beside the estimate; it costs time).
        """
        self.counter = counter
        self.estimate = estimate
        self._lock = threading.Lock()
        self._open: dict[UUID, tuple[float, list[BaseMessage]]] = {}
        self._calls: list[ModelCall] = []

    def mark(self) -> int:
        """A position in the ledger, for `since`."""
        with self._lock:
            return len(self._calls)

    def since(self, mark: int) -> list[ModelCall]:
        """Calls recorded after ``mark``."""
        with self._lock:
            return list(self._calls[mark:])

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        """Remember when the call started and its prompt."""
        with self._lock:
            self._open[run_id] = (time.perf_counter(), messages[0] if messages else [])

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Record the call's usage and duration.

        The ledger's own counting is timed as part of the call, so metering never shows as
        library overhead.
        """
        with self._lock:
            start, prompt = self._open.pop(run_id, (time.perf_counter(), []))
        prompt_tokens = completion_tokens = -1
        cached = 0
        texts: list[str] = []
        for generations in response.generations:
            for generation in generations:
                texts.append(generation.text)
                if isinstance(generation, ChatGeneration) and isinstance(
                    generation.message, AIMessage
                ):
                    usage = generation.message.usage_metadata
                    if usage:
                        prompt_tokens = max(prompt_tokens, 0) + usage.get("input_tokens", 0)
                        completion_tokens = max(completion_tokens, 0) + usage.get(
                            "output_tokens", 0
                        )
                        details = usage.get("input_token_details") or {}
                        cached += int(details.get("cache_read", 0) or 0)
        reported = prompt_tokens >= 0
        estimated_prompt = estimated_completion = None
        if self.estimate or prompt_tokens < 0:
            estimated_prompt = self.counter.count_messages(prompt)
            estimated_completion = sum(self.counter.count_text(t) for t in texts)
        if prompt_tokens < 0:
            prompt_tokens = estimated_prompt or 0
        if completion_tokens < 0:
            completion_tokens = estimated_completion or 0
        call = ModelCall(
            prompt_tokens,
            completion_tokens,
            time.perf_counter() - start,
            reported=reported,
            cached_tokens=cached,
            prompt=tuple(prompt),
            estimated_prompt_tokens=estimated_prompt if reported else None,
            estimated_completion_tokens=estimated_completion if reported else None,
        )
        with self._lock:
            self._calls.append(call)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a failed call (its time still counts as model time)."""
        end = time.perf_counter()
        with self._lock:
            start, _ = self._open.pop(run_id, (end, []))
            self._calls.append(ModelCall(0, 0, end - start, failed=True))


@dataclass(frozen=True)
class TurnRecord:
    """What happened at one assistant turn of a replay."""

    message_id: str
    """Id of the assistant turn being answered."""
    prompt_tokens: int
    """Tokens of the answering model's input."""
    completion_tokens: int
    """Tokens of the answer (the recorded assistant turn)."""
    input_messages: int
    """Messages in the answering model's input."""
    internal_calls: tuple[ModelCall, ...]
    """Internal model calls made by the strategy for this turn."""
    overhead_s: float
    """Strategy wall time minus internal model time."""

    @property
    def internal_billed(self) -> int:
        """Billed tokens of the internal calls."""
        return sum(c.billed for c in self.internal_calls)


@dataclass(frozen=True)
class ReplayFigures:
    """Per-strategy figures of one replayed conversation (or of several, aggregated)."""

    calls: int
    """Answering-model calls (assistant turns)."""
    internal_calls: int
    """Internal model calls (summarize / extract)."""
    prompt_mean: float
    """Mean prompt tokens per answering call."""
    prompt_p95: int
    """95th percentile of prompt tokens per answering call."""
    prompt_last: float
    """Prompt tokens of the last answering call (mean over conversations when aggregated)."""
    prompt_max: int
    """Largest prompt."""
    answer_billed: int
    """Billed tokens of the answering calls."""
    internal_billed: int
    """Billed tokens of the internal calls."""
    overhead_ms_mean: float
    """Mean library overhead per turn, in ms."""
    savings: float | None = None
    """``1 - billed / billed(full)``; ``None`` without the full baseline."""

    @property
    def billed(self) -> int:
        """All billed tokens."""
        return self.answer_billed + self.internal_billed


def replay_figures(
    turn_sets: Sequence[Sequence[TurnRecord]], *, baseline_billed: int | None = None
) -> ReplayFigures:
    """Compute figures over one or more replays (one list of turns per conversation).

    Example:
        >>> t = TurnRecord("a", 100, 10, 3, (ModelCall(50, 5, 0.1),), 0.001)
        >>> f = replay_figures([[t, t]], baseline_billed=330)
        >>> f.billed, f.internal_calls, round(f.savings, 3)
        (330, 2, 0.0)
    """
    turns = [t for ts in turn_sets for t in ts]
    prompts = [t.prompt_tokens for t in turns]
    lasts = [ts[-1].prompt_tokens for ts in turn_sets if ts]
    answer = sum(t.prompt_tokens + t.completion_tokens for t in turns)
    internal = sum(t.internal_billed for t in turns)
    savings = None
    if baseline_billed:
        savings = 1 - (answer + internal) / baseline_billed
    return ReplayFigures(
        calls=len(turns),
        internal_calls=sum(len(t.internal_calls) for t in turns),
        prompt_mean=statistics.fmean(prompts) if prompts else 0.0,
        prompt_p95=int(percentile(prompts, 95)),
        prompt_last=statistics.fmean(lasts) if lasts else 0.0,
        prompt_max=max(prompts, default=0),
        answer_billed=answer,
        internal_billed=internal,
        overhead_ms_mean=(statistics.fmean(t.overhead_s for t in turns) * 1000 if turns else 0.0),
        savings=savings,
    )


def extended_history(messages: Sequence[BaseMessage], n_messages: int) -> list[BaseMessage]:
    """Repeat ``messages`` until ``n_messages`` long, giving every repetition fresh ids.

    Copy ``k`` (from 1) gets ids ``"<id>#k"``; the first copy keeps the original ids. Leading
    system messages are kept once, at the start, and not repeated.

    Example:
        >>> from langchain_core.messages import HumanMessage, AIMessage
        >>> [m.id for m in extended_history([HumanMessage("q", id="a"), AIMessage("r", id="b")], 5)]
        ['a', 'b', 'a#1', 'b#1', 'a#2']
    """
    cut = 0
    while cut < len(messages) and messages[cut].type == "system":
        cut += 1
    preamble, body = list(messages[:cut]), list(messages[cut:])
    if not body:
        return preamble[:n_messages]
    out = preamble[:]
    copy = 0
    while len(out) < n_messages:
        for message in body:
            if len(out) >= n_messages:
                break
            out.append(
                message if copy == 0 else message.model_copy(update={"id": f"{message.id}#{copy}"})
            )
        copy += 1
    return out


@dataclass(frozen=True)
class OverheadFigure:
    """Library overhead of one strategy at one history size."""

    strategy: str
    """Strategy name."""
    messages: int
    """History size when measuring."""
    ms_per_turn: float | None
    """Median overhead per turn in ms (``None`` when the strategy failed)."""
    turns: int
    """Turns measured."""
    error: str | None = None
    """Why the measurement failed, if it did."""
    samples_ms: tuple[float, ...] = field(default_factory=tuple)
    """Every measured turn, in ms."""


def measure_overhead(
    strategy: Strategy,
    history: Sequence[BaseMessage],
    size: int,
    *,
    ledger: UsageLedger,
    turns: int = 5,
) -> OverheadFigure:
    """Time ``strategy``'s own work per turn once the history holds ``size`` messages.

    The strategy first processes the first ``size`` messages (untimed warm-up: this builds
    whatever state it keeps, e.g. a running summary); then it is timed on the next ``turns``
    assistant turns, internal model time subtracted.

    Args:
        strategy: A fresh or reset strategy.
        history: A long history (see `extended_history`), longer than ``size``.
        size: History size at which to measure.
        ledger: The internal model's ledger (to subtract model time).
        turns: Assistant turns to time.
    """
    strategy.reset()
    positions = [i for i in range(size, len(history)) if history[i].type == "ai"]
    if not positions:
        msg = f"history of {len(history)} messages has no assistant turn after {size}"
        raise ValueError(msg)
    strategy.warm_start(history[: positions[0]])
    samples: list[float] = []
    for position in positions[1 : turns + 1]:
        prefix = history[:position]
        mark = ledger.mark()
        start = time.perf_counter()
        strategy.model_input(prefix)
        elapsed = time.perf_counter() - start
        model_time = sum(c.seconds for c in ledger.since(mark))
        samples.append(max(0.0, elapsed - model_time) * 1000)
    return OverheadFigure(
        strategy=strategy.name,
        messages=size,
        ms_per_turn=statistics.median(samples) if samples else None,
        turns=len(samples),
        samples_ms=tuple(samples),
    )
