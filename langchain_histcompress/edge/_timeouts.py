"""Per-call timeouts of internal model calls, sync and async.

`call_with_timeout` runs a sync call on a reused daemon worker thread (`submit_to_worker`)
and waits for it at most its timeout (plus a short grace in which a late answer is still
used); `await_with_timeout` bounds an awaitable with ``asyncio.wait_for``. Both raise
`ModelTimeoutError`, which says whether the request was abandoned for good.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

__all__ = [
    "ModelTimeoutError",
    "abandon_grace",
    "await_with_timeout",
    "call_with_timeout",
    "submit_to_worker",
]

T = TypeVar("T")


class ModelTimeoutError(TimeoutError):
    """A model call gave no answer within its timeout.

    Attributes:
        abandoned: The request was given up for good (async: cancelled; sync: its worker
            finished, e.g. the client closed the connection). ``False`` when a sync call is
            still running on its worker thread: it may yet be answered and billed, so it is
            never retried (that would send and bill it twice).
    """

    def __init__(self, message: str, *, abandoned: bool = True) -> None:
        """Record the message and whether the request was abandoned."""
        super().__init__(message)
        self.abandoned = abandoned


class _Workers:
    """Daemon threads reused across timed model calls.

    A worker runs one job at a time; a job that hangs keeps its worker, and the next job
    gets another (idle or new) one. At most ``max_idle`` workers wait for work, each for at
    most ``idle_seconds``. Forked children start with no workers.
    """

    def __init__(self, *, max_idle: int = 4, idle_seconds: float = 60.0) -> None:
        self.max_idle = max_idle
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._generation = 0

    def reset(self) -> None:
        """Forget every worker (after a fork only the forking thread exists)."""
        self._lock = threading.Lock()
        self._idle = []
        self._generation += 1

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on an idle worker, or on a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._serve,
                args=(inbox, self._generation),
                name="histcompress-model-call",
                daemon=True,
            ).start()
        inbox.put(job)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]], generation: int) -> None:
        while True:
            try:
                job = inbox.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if generation != self._generation:  # forgotten by reset
                        return
                    if inbox not in self._idle:  # taken by a caller: its job is on the way
                        continue
                    self._idle.remove(inbox)
                return
            job()  # never raises: jobs report through their future
            del job
            with self._lock:
                if generation != self._generation or len(self._idle) >= self.max_idle:
                    return
                self._idle.append(inbox)


_WORKERS = _Workers()
if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_WORKERS.reset)


def abandon_grace(timeout: float) -> float:
    """Seconds a sync call may take to end after its timeout (at most 1 s)."""
    return min(timeout, 1.0)


def _no_answer(what: str, timeout: float, *, abandoned: bool = True) -> ModelTimeoutError:
    return ModelTimeoutError(f"{what} gave no answer within {timeout} s", abandoned=abandoned)


def submit_to_worker(call: Callable[[], T]) -> concurrent.futures.Future[T]:
    """Start ``call`` on a reused daemon worker thread and return its future at once.

    The call runs in a copy of the caller's context variables (tracing callbacks, configs).
    ``future.result()`` returns what ``call`` returned or raises what it raised.

    Example:
        >>> submit_to_worker(lambda: 6 * 7).result(timeout=5)
        42
    """
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = context.run(call)
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)

    _WORKERS.submit(run)
    return future


def call_with_timeout(call: Callable[[], T], timeout: float | None, *, what: str = "model") -> T:
    """Run ``call`` and wait at most ``timeout`` seconds for it (``None``: no limit).

    With a timeout the call runs on a worker thread (`submit_to_worker`). A thread cannot be
    stopped from outside, so `ModelCall` also gives OpenAI-style clients the same timeout
    (`internal_model`): their own read timeout closes the connection and frees the worker.
    After the timeout the call gets a short grace (at most 1 s) to end: an answer arriving
    then is used; an error ending it means the request was abandoned; a call still running
    after it keeps its worker until it returns (its result is discarded) and the
    `ModelTimeoutError` says so (``abandoned=False``). Exceptions of the call propagate
    unchanged.

    Raises:
        ModelTimeoutError: No answer within ``timeout`` (``what`` names the caller).

    Example:
        >>> call_with_timeout(lambda: 42, 5.0)
        42
    """
    if timeout is None:
        return call()
    # a bare lock instead of a `Future`: one release wakes the caller, no condition variable
    done = threading.Lock()
    done.acquire()
    outcome: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome.append((True, context.run(call)))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            done.release()

    _WORKERS.submit(run)
    if not done.acquire(timeout=max(timeout, 0.0)):
        if not done.acquire(timeout=abandon_grace(max(timeout, 0.0))):
            raise _no_answer(what, timeout, abandoned=False)
        if not outcome[0][0]:  # ended by an error after the timeout: the request was abandoned
            raise _no_answer(what, timeout) from None
        # answered during the grace: billed anyway, so use it
    ok, value = outcome.pop()
    if ok:
        return cast("T", value)
    try:
        raise value
    finally:
        del value  # no cycle through this frame's traceback


async def await_with_timeout(
    awaitable: Awaitable[T], timeout: float | None, *, what: str = "model"
) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds (``None``: no limit).

    On timeout the awaitable is cancelled. Cancellation of the caller propagates unchanged.

    Raises:
        ModelTimeoutError: No answer within ``timeout`` (``what`` names the caller).

    Example:
        >>> asyncio.run(await_with_timeout(asyncio.sleep(0, result="done"), 5.0))
        'done'
    """
    if timeout is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise _no_answer(what, timeout) from None
