"""Deterministic message ids, given where a message is read (in-package API).

`identified` gives a message without an id the id `rounds.ensure_ids` gives it (derived from
its position, type, content and tool call id). `IdentifiedMessages` is ``ensure_ids`` of a
history computed lazily: a face that reads only the uncovered tail of a long history gives
ids to those messages only, and the copies it made can be handed to the next turn's view
(`IdentifiedMessages.adopt`) so a grown history derives ids only for its new messages.

Example:
    >>> from langchain_core.messages import HumanMessage, SystemMessage
    >>> view = IdentifiedMessages([SystemMessage("s"), HumanMessage("hi")], lead_end=1)
    >>> view[0].id is None, view[1].id.startswith("hc-"), view[1] is view[1]
    (True, True, True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import overload

from langchain_core.messages import BaseMessage

__all__ = ["IdentifiedMessages", "MessageView", "identified", "originals"]


def identified(message: BaseMessage, index: int, namespace: str = "") -> BaseMessage:
    """``message`` itself when it has an id, else a copy with the id `ensure_ids` gives it."""
    if message.id:  # an empty-string id counts as no id
        return message
    digest = hashlib.sha256(
        f"{namespace}\x00{index}\x00{message.type}\x00{message.content!r}\x00"
        f"{getattr(message, 'tool_call_id', '')}".encode()
    ).hexdigest()[:24]
    return message.model_copy(update={"id": f"hc-{digest}"})


class MessageView(Sequence[BaseMessage]):
    """A read-only message sequence that makes each message when it is first read."""

    def __len__(self) -> int:
        raise NotImplementedError

    def _at(self, index: int) -> BaseMessage:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> BaseMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[BaseMessage]: ...

    def __getitem__(self, index: int | slice) -> BaseMessage | list[BaseMessage]:
        size = len(self)
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(size))]
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            msg = "message index out of range"
            raise IndexError(msg)
        return self._at(position)


class IdentifiedMessages(MessageView):
    """``ensure_ids(messages)`` with the preamble kept as given, computed where it is read.

    Reading the last few messages of a long history gives ids to those only, so a face that
    reads the uncovered tail does work proportional to the tail. Each message is identified
    once per view (reads return the same copy).
    """

    def __init__(self, messages: Sequence[BaseMessage], lead_end: int, namespace: str = "") -> None:
        self._messages = messages
        self._lead_end = lead_end
        self._namespace = namespace
        self._copies: dict[int, BaseMessage] = {}

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def originals(self) -> Sequence[BaseMessage]:
        """The messages as given, before any id was derived."""
        return self._messages

    @property
    def copies(self) -> Mapping[int, BaseMessage]:
        """The id-bearing copies made so far, by index (read-only)."""
        return self._copies

    def adopt(self, index: int, copy: BaseMessage) -> None:
        """Use ``copy`` as the message at ``index``.

        ``copy`` is one an earlier view made of the same original: it carries the id this
        view would derive.
        """
        self._copies[index] = copy

    def _at(self, index: int) -> BaseMessage:
        found = self._copies.get(index)
        if found is None:
            message = self._messages[index]
            if index < self._lead_end or not isinstance(message, BaseMessage):
                return message  # the preamble as given; a non-message is reported by its reader
            found = self._copies[index] = identified(message, index, self._namespace)
        return found


def originals(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
    """The caller's own objects behind ``messages`` (ids given lazily are derived from them).

    The same original object at the same position always gets the same derived id, so a
    prefix of identical originals proves an identical prefix without identifying it.
    """
    return messages.originals if isinstance(messages, IdentifiedMessages) else messages
