"""Chat messages that note when one of their fields is read, for tests counting a turn's work.

`LOG` collects the ids of the messages read; `LOG.watching(ids)` counts only those messages
(the caller's own objects, not copies made of them). Comparing object identities reads no
field, so it is not counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

FIELDS = frozenset(
    {
        "content",
        "id",
        "name",
        "tool_calls",
        "invalid_tool_calls",
        "additional_kwargs",
        "response_metadata",
        "tool_call_id",
        "__dict__",
        "model_dump",
        "model_copy",
    }
)
"""The attributes whose reading counts as reading the message."""


class ReadLog:
    """Ids of the messages read since ``read`` was last cleared."""

    def __init__(self) -> None:
        """Start empty, counting every message."""
        self.read: set[int] = set()
        self.watched: set[int] | None = None

    def note(self, message: object, name: str) -> None:
        """Record that ``message``'s attribute ``name`` was read."""
        if name in FIELDS and (self.watched is None or id(message) in self.watched):
            self.read.add(id(message))

    @contextmanager
    def watching(self, ids: set[int] | None) -> Iterator[set[int]]:
        """Count only the messages whose ids are in ``ids`` (every message: ``None``)."""
        before = self.watched
        self.watched = ids
        self.read.clear()
        try:
            yield self.read
        finally:
            self.watched = before


LOG = ReadLog()


class ReadHuman(HumanMessage):
    """A human message that notes its reads in `LOG`."""

    def __getattribute__(self, name: str) -> Any:
        LOG.note(self, name)
        return super().__getattribute__(name)


class ReadAI(AIMessage):
    """An AI message that notes its reads in `LOG`."""

    def __getattribute__(self, name: str) -> Any:
        LOG.note(self, name)
        return super().__getattribute__(name)


class ReadTool(ToolMessage):
    """A tool message that notes its reads in `LOG`."""

    def __getattribute__(self, name: str) -> Any:
        LOG.note(self, name)
        return super().__getattribute__(name)
