"""A plain text progress bar for long benchmark runs.

Example:
    >>> import io
    >>> bar = ProgressBar(4, io.StringIO(), width=8, interactive=False)
    >>> bar.advance(2, "halfway")
    >>> print(bar.stream.getvalue().strip())
    [####....]  50% halfway
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = [
    "ProgressBar",
]


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
