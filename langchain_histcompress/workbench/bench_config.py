"""What a benchmark run measures: `BenchConfig`, validated on construction.

`BASELINE` (``full``) is always run: savings are measured against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.workbench.strategies import DEFAULT_STRATEGIES, available_strategies

__all__ = [
    "BASELINE",
    "FULL_SIZES",
    "QUICK_AGENT_TRAJECTORIES",
    "QUICK_SIZES",
    "BenchConfig",
]


BASELINE = "full"
"""The strategy savings are measured against; always run."""

FULL_SIZES: tuple[int, ...] = (1_000, 10_000, 100_000)
"""History sizes of the overhead figure."""
QUICK_SIZES: tuple[int, ...] = (1_000,)
"""History sizes of the overhead figure in a quick run."""
QUICK_AGENT_TRAJECTORIES = 20
"""Agent trajectories replayed in a quick run (unless ``agent_limit`` says otherwise)."""


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
