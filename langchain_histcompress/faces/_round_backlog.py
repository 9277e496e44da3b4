"""Where the rounds after a cursor start, remembered between runs of a node.

A node that processes the rounds after a cursor (the id of the last message it processed)
finds them by scanning the messages after the cursor. `RoundScans` remembers, per cursor,
where the cursor sits and where the rounds scanned so far start, and scans only the messages
added since. A remembered scan is reused only when the cursor message and the last scanned
message are the very same objects at the same positions (an append-only list, as a node sees
between runs of one process); anything else (a rewritten list, messages re-created from a
checkpoint) is scanned afresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

__all__ = ["RoundScans"]


@dataclass
class _Scan:
    anchor: object
    """The message before ``begin`` (the cursor), or ``None`` when ``begin`` is 0."""
    begin: int
    """Index of the first message after the cursor."""
    last: object
    """The last message scanned."""
    end: int
    """Index after the last message scanned."""
    starts: list[int]
    """Indices of the round starts after ``begin`` (leading system messages skipped)."""


class RoundScans:
    """Round starts after each cursor, extended with the new messages on every call.

    Safe to share between threads; at most ``max_entries`` cursors are remembered (the
    least recently used are forgotten).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> history = [HumanMessage("a", id="h1"), AIMessage("b", id="a1"),
        ...            HumanMessage("c", id="h2"), AIMessage("d", id="a2")]
        >>> scans = RoundScans()
        >>> scans.round_starts(history, 0, "")
        ([0, 2], 2)
        >>> history.append(HumanMessage("e", id="h3"))
        >>> scans.round_starts(history, 0, ""), scans.scanned
        (([0, 2, 4], 3), 5)
    """

    def __init__(self, *, max_entries: int = 64) -> None:
        """Start empty."""
        self.max_entries = max_entries
        self.scanned = 0
        """Messages scanned so far (for tests that count the work)."""
        self._scans: OrderedDict[str, _Scan] = OrderedDict()
        self._lock = threading.Lock()

    def begin_after(self, messages: Sequence[object], cursor: str) -> int | None:
        """The index after ``cursor`` as remembered, when the list still holds it there."""
        with self._lock:
            scan = self._scans.get(cursor)
            if scan is None or not 0 < scan.begin <= len(messages):
                return None
            if messages[scan.begin - 1] is not scan.anchor:
                return None
            return scan.begin

    def round_starts(
        self, messages: Sequence[BaseMessage], begin: int, cursor: str
    ) -> tuple[list[int], int] | None:
        """Where the rounds of ``messages[begin:]`` start, as `rounds.split_rounds` splits them.

        Leading system messages are skipped (they are no round); every other message
        opens a round when it comes first or is a human message. Returns the start indices
        and how many of them belong to ``messages`` (the list is shared: read it, never
        change it; later calls only append to it), or ``None`` when a new message is not a
        message or has no id (the caller then derives ids for the whole list).
        """
        anchor = messages[begin - 1] if begin else None
        end = len(messages)
        with self._lock:
            scan = self._scans.get(cursor)
            if not (
                scan is not None
                and scan.begin == begin
                and scan.anchor is anchor
                and begin < scan.end <= end
                and messages[scan.end - 1] is scan.last
            ):
                scan = _Scan(anchor, begin, anchor, begin, [])
            starts = scan.starts
            known = len(starts)
            index = scan.end
            while not starts and index < end:  # leading system messages open no round
                message = messages[index]
                if not isinstance(message, BaseMessage) or not message.id:
                    del starts[known:]
                    return None
                if not isinstance(message, SystemMessage):
                    starts.append(index)
                index += 1
            for position in range(index, end):
                message = messages[position]
                if not isinstance(message, BaseMessage) or not message.id:
                    del starts[known:]
                    return None
                if isinstance(message, HumanMessage):
                    starts.append(position)
            self.scanned += end - scan.end
            if end > begin:
                scan.last, scan.end = messages[end - 1], end
                self._scans[cursor] = scan
                self._scans.move_to_end(cursor)
                while len(self._scans) > self.max_entries:
                    self._scans.popitem(last=False)
            return starts, len(starts)
