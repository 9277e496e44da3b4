"""Time and memory of an internal model's calls, to leave them out of a face's overhead.

Example:
    >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
    >>> clock = ModelClock()
    >>> model = clock.timed(FakeListChatModel(responses=["hi"]))
    >>> _ = model.invoke("hello")
    >>> clock.calls, clock.seconds > 0
    (1, True)
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from typing import Any

from langchain_core.language_models import BaseChatModel

__all__ = [
    "ModelClock",
]


class ModelClock:
    """Time spent inside an internal model's ``invoke`` / ``ainvoke``.

    LangChain's own call machinery is included, so a face's overhead excludes all of it.
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
