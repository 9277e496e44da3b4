"""Deterministic message ids, given where a message is read (in-package API).

`identified` gives a message without an id the id `rounds.ensure_ids` gives it (derived from
its position, type, content and tool call id). `IdentifiedMessages` is ``ensure_ids`` of a
history computed lazily, so a face that reads only the uncovered tail of a long history gives
ids to those messages only. `IdentifiedLists` keeps one such list per conversation, grown in
place, for a component that keeps work between calls (a context builder).

Example:
    >>> from langchain_core.messages import HumanMessage, SystemMessage
    >>> view = IdentifiedMessages([SystemMessage("s"), HumanMessage("hi")], lead_end=1)
    >>> view[0].id is None, view[1].id.startswith("hc-"), view[1] is view[1]
    (True, True, True)
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from typing import overload

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.prefix import holds

__all__ = ["IdentifiedLists", "IdentifiedMessages", "MessageView", "identified", "originals"]


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
        """Number of messages."""
        raise NotImplementedError

    def _at(self, index: int) -> BaseMessage:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> BaseMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[BaseMessage]: ...

    def __getitem__(self, index: int | slice) -> BaseMessage | list[BaseMessage]:
        """The message at ``index`` (made on first read), or a list for a slice."""
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
        """View ``messages``; those from ``lead_end`` on get ids as with ``namespace``."""
        self._messages = messages
        self._lead_end = lead_end
        self._namespace = namespace
        self._copies: dict[int, BaseMessage] = {}

    def __len__(self) -> int:
        """Number of messages."""
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


class _Grown:
    """One conversation of `IdentifiedLists`: its messages as given, and the list handed out."""

    __slots__ = ("given", "lead", "shown")

    def __init__(self, lead: Sequence[BaseMessage]) -> None:
        self.given: list[BaseMessage] = []
        """The messages seen so far, as given (references: their ids cannot be reused)."""
        self.lead = tuple(lead)
        """The messages put before them."""
        self.shown: list[BaseMessage] = list(lead)
        """``[*lead, *ensure_ids(given)]``, grown in place."""


class IdentifiedLists:
    """``[*lead, *ensure_ids(messages, namespace=...)]`` per conversation, grown in place.

    A call whose messages begin with those of a remembered conversation (the same objects,
    compared as pointers at C speed; never by id, which may repeat across users) gives ids
    to its new messages only and returns that conversation's list, extended; any other call
    starts a new one. The list is shared with the next calls of its conversation, which run
    one after the other (a graph thread's steps do), and only ever grows while the lead stays
    the same objects. At most ``max_messages`` messages are remembered over every
    conversation (the least recently used conversations are forgotten first).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> lists = IdentifiedLists()
        >>> lead, history = [SystemMessage("s")], [HumanMessage("hi"), AIMessage("hello")]
        >>> first = lists.get(lead, history)
        >>> grown = lists.get(lead, [*history, HumanMessage("more")])
        >>> grown is first, first[1].id.startswith("hc-"), len(grown)
        (True, True, 4)
    """

    def __init__(self, max_messages: int = 262_144) -> None:
        """Remember at most ``max_messages`` messages."""
        self.max_messages = max_messages
        self._grown: list[_Grown] = []
        """Most recently used last."""
        self._lock = threading.Lock()

    def _find(self, messages: Sequence[BaseMessage]) -> _Grown | None:
        if not isinstance(messages, list) or not messages:
            return None
        first = messages[0]
        for at in range(len(self._grown) - 1, -1, -1):
            grown = self._grown[at]
            given = grown.given
            if given and given[0] is first and holds(messages, given, len(given)):
                self._grown.append(self._grown.pop(at))
                return grown
        return None

    def get(
        self, lead: Sequence[BaseMessage], messages: Sequence[BaseMessage], namespace: str = ""
    ) -> list[BaseMessage]:
        """``[*lead, *ensure_ids(messages, namespace=namespace)]``, the conversation's own list.

        Messages that already have an id are the caller's own objects; the others are the
        copies made when they first arrived (anything not a message is left as it is, for
        the component that reads it to report).
        """
        with self._lock:
            grown = self._find(messages)
            if grown is None:
                grown = _Grown(lead)
                self._grown.append(grown)
            elif len(grown.lead) != len(lead) or any(
                a is not b for a, b in zip(grown.lead, lead, strict=False)
            ):
                # another lead (a system prompt that changed): a new list with the same copies
                grown.shown = [*lead, *grown.shown[len(grown.lead) :]]
                grown.lead = tuple(lead)
            known = len(grown.given)
            new = messages[known:]
            grown.given.extend(new)
            grown.shown.extend(
                [
                    identified(m, index, namespace)
                    if isinstance(m, BaseMessage) and not m.id
                    else m
                    for index, m in enumerate(new, known)
                ]
            )
            self._forget(grown)
            return grown.shown

    def _forget(self, keep: _Grown) -> None:
        total = sum(len(g.given) for g in self._grown)
        while total > self.max_messages and self._grown[0] is not keep:
            total -= len(self._grown.pop(0).given)
