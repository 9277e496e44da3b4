"""Step generators: an operation written once, run synchronously or asynchronously.

An operation is a generator that yields effects (`ModelCall`, `Pause`, `Twin`) and receives
their results (exceptions are thrown in at the ``yield``). `run_steps` performs the effects
synchronously (``invoke``, ``time.sleep``), `arun_steps` asynchronously (``await ainvoke``,
``asyncio.sleep``): the two faces of an operation differ only in the driver they hand it to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Protocol, TypeAlias, TypeVar, cast

__all__ = ["Effect", "Pause", "Steps", "Twin", "arun_steps", "run_steps"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
P = ParamSpec("P")


class Effect(Protocol[T_co]):
    """Something a step generator asks its driver to do, with a sync and an async way."""

    def run(self) -> T_co:
        """Do it synchronously."""
        ...

    async def arun(self) -> T_co:
        """Do it asynchronously."""
        ...


@dataclass(frozen=True)
class Pause:
    """Effect: wait before the next attempt."""

    seconds: float
    """How long to wait."""
    sleep: Callable[[float], None] = time.sleep
    """Sync sleep function."""
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """Async sleep function."""

    def run(self) -> None:
        """Sleep."""
        self.sleep(self.seconds)

    async def arun(self) -> None:
        """Sleep without blocking the event loop."""
        await self.async_sleep(self.seconds)


class Twin(Generic[P, T]):
    """Effect: call the sync or the async one of two twin callables with the same arguments.

    Example:
        >>> from langchain_core.runnables import RunnableLambda
        >>> double = RunnableLambda(lambda x: 2 * x)
        >>> def steps():
        ...     return (yield Twin(double.invoke, double.ainvoke, 21))
        >>> run_steps(steps()), asyncio.run(arun_steps(steps()))
        (42, 42)
    """

    def __init__(
        self,
        sync: Callable[P, T],
        asynchronous: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> None:
        """Remember both callables and the arguments."""
        self._sync = sync
        self._async = asynchronous
        self._args = args
        self._kwargs = kwargs

    def run(self) -> T:
        """Call the sync twin."""
        return self._sync(*self._args, **self._kwargs)

    async def arun(self) -> T:
        """Await the async twin."""
        return await self._async(*self._args, **self._kwargs)


Steps: TypeAlias = Generator[Effect[Any], Any, T]
"""A step generator: yields effects, receives their results, returns the outcome."""


@dataclass(frozen=True)
class _Finished(Generic[T]):
    value: T


def _advance(
    steps: Steps[T], value: Any = None, error: Exception | None = None
) -> Effect[Any] | _Finished[T]:
    """Resume ``steps`` with the last effect's result (or its error): the next effect."""
    try:
        return steps.throw(error) if error is not None else steps.send(value)
    except StopIteration as stop:
        return _Finished(cast(T, stop.value))


def _outcome(effect: Effect[Any]) -> tuple[Any, Exception | None]:
    try:
        return effect.run(), None
    except Exception as exc:
        return None, exc


async def _aoutcome(effect: Effect[Any]) -> tuple[Any, Exception | None]:
    try:
        return await effect.arun(), None
    except Exception as exc:
        return None, exc


def run_steps(steps: Steps[T]) -> T:
    """Drive a step generator synchronously and return its result.

    Each effect's result is sent back into the generator; an ``Exception`` it raises is
    thrown in at the ``yield`` (anything else, e.g. ``KeyboardInterrupt``, propagates and
    closes the generator).

    Example:
        >>> def steps():
        ...     yield Pause(0)
        ...     return "done"
        >>> run_steps(steps())
        'done'
    """
    with closing(steps):
        step = _advance(steps)
        while not isinstance(step, _Finished):
            step = _advance(steps, *_outcome(step))
        return step.value


async def arun_steps(steps: Steps[T]) -> T:
    """Async `run_steps`: effects are awaited; cancellation propagates unchanged.

    Example:
        >>> def steps():
        ...     yield Pause(0)
        ...     return "done"
        >>> asyncio.run(arun_steps(steps()))
        'done'
    """
    with closing(steps):
        step = _advance(steps)
        while not isinstance(step, _Finished):
            step = _advance(steps, *await _aoutcome(step))
        return step.value
