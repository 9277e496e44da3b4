"""The per-conversation message index behind the BM25 retrievers of `evidence`.

A `_TurnIndex` holds one conversation's messages in a `BM25Index`, tokenized once each, and
grows with the history: a call whose messages extend the previous call's reads only the new
ones. `turn_retriever.BM25TurnRetriever` and `evidence.EvidenceRetriever` keep one per
conversation (see `_conversations`).
"""

from __future__ import annotations

from array import array
from collections.abc import Container, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.prefix import extends, holds
from langchain_histcompress.core.render import message_text
from langchain_histcompress.recall.bm25 import BM25Index, date_terms, speaker_terms

_TIME_KEYS = ("timestamp", "created_at")


def _time_value(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value  # milliseconds past 5138
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def message_date_terms(message: BaseMessage) -> tuple[str, ...]:
    """The `date_terms` of when ``message`` was sent, or ``()`` when it carries no time.

    The time is read as the compressor reads it: ``"timestamp"`` then ``"created_at"`` in
    ``additional_kwargs``, then in ``response_metadata``; a ``datetime``, epoch seconds (or
    milliseconds) or an ISO 8601 string.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> message_date_terms(
        ...     HumanMessage("hi", additional_kwargs={"timestamp": "2023-06-27T13:56:00Z"}))
        ('@june', '@2023')
        >>> message_date_terms(HumanMessage("hi"))
        ()
    """
    for source in (message.additional_kwargs, message.response_metadata):
        for key in _TIME_KEYS:
            if key in source:
                found = _time_value(source[key])
                if found is not None:
                    return date_terms(found)
    return ()


class _TurnIndex:
    """An incremental BM25 index over one conversation's messages, kept across calls.

    A message is keyed by its id and tokenized once: a later call passing the same message
    object costs one dictionary lookup; an equal-id message with another text is
    re-indexed. When a call's messages start with the previous call's messages (a growing
    history), only the new tail is looked at: the prefix is confirmed by one comparison of
    references at C speed (see `extends`). Messages without an id are keyed by position and
    dropped when the history changes. Ids are only unique within a conversation, so each
    conversation has its own index (see `Conversations`).
    """

    def __init__(
        self,
        *,
        k1: float,
        b: float,
        max_cached: int,
        include_tool_results: bool,
        speaker_names: Mapping[str, str],
    ) -> None:
        self.k1 = k1
        self.b = b
        self.max_cached = max_cached
        self.include_tool_results = include_tool_results
        self.speaker_names = dict(speaker_names)
        self.index = BM25Index(k1=k1, b=b)
        self.name_terms: set[str] = {
            t for n in self.speaker_names.values() for t in speaker_terms(n)
        }
        """The `speaker_terms` indexed with the messages: a question's speaker name ranks
        the messages that speaker wrote but retrieves none (``modifiers`` of
        `BM25Index.scores`)."""
        self._seen: dict[str, tuple[BaseMessage, str, tuple[str, ...]]] = {}
        self._previous: list[BaseMessage] = []
        self.keys: list[str] = []
        self.order: dict[str, int] = {}
        self.position: dict[str, int] = {}
        self.by_key: dict[str, BaseMessage] = {}
        self._anonymous: list[str] = []
        self._names: set[str] = set()
        self.turn_slots: array[int] = array("q")
        """Index in ``keys`` -> the key's `BM25Index` slot."""
        self.slot_turns: array[int] = array("q")
        """`BM25Index` slot -> index in ``keys``, or -1 (a text this call does not hold)."""
        self.turn_positions: array[int] = array("q")
        """Index in ``keys`` -> the message's index in the call's messages."""
        self.identity = True
        """Whether every key's slot equals its index in ``keys`` (a fresh index)."""
        self.trusted = True
        """Whether the caller's previous call synced (so a ``known_prefix`` refers to it)."""
        self._source: Sequence[BaseMessage] | None = None
        # the list object the previous call indexed: a ``known_prefix`` is honoured only for
        # that same list, so a call by another caller in between cannot be vouched for
        self._extended: Sequence[BaseMessage] | None = None
        # the list `continues` found to extend ``_previous``: `sync` does not compare it again

    def rebuilt(self, messages: Sequence[BaseMessage]) -> bool:
        """Whether ``messages`` begin with copies of this index's messages (equal values).

        Read only when no conversation continues by reference: the first messages are
        compared first, so another conversation costs one comparison.
        """
        previous = self._previous
        return (
            bool(previous)
            and len(messages) >= len(previous)
            and messages[0] == previous[0]
            and holds(messages, previous, len(previous), by_value=True)
        )

    def indexed(self, messages: Sequence[BaseMessage]) -> bool:
        """Whether ``messages`` is the list object the latest `sync` indexed."""
        return self._source is messages

    @property
    def pristine(self) -> bool:
        """Whether nothing was ever indexed (any conversation may start here)."""
        return not self._previous and not len(self.index)

    def continues(self, messages: Sequence[BaseMessage], known_prefix: int = 0) -> bool:
        """Whether ``messages`` extend this index's messages (a later call of its conversation).

        The first messages are compared before anything else, so telling conversations
        apart costs a pointer comparison each; the answer is kept for the `sync` that
        follows, which then does not compare the messages again.
        """
        previous, self._extended = self._previous, None
        if not previous or not messages or messages[0] is not previous[0]:
            return False
        if len(messages) >= len(previous) and self._grew(
            messages, known_prefix if self.trusted else 0
        ):
            self._extended = messages
            return True
        return False

    def eligible(self, message: BaseMessage) -> bool:
        if message.type == "system":
            return False
        return self.include_tool_results or message.type != "tool"

    def terms(self, message: BaseMessage) -> tuple[str, ...]:
        """The terms ``message`` is indexed by besides its words: its time and speaker.

        The speaker is indexed as `speaker_terms`, apart from the words: a name the text
        mentions (a greeting, "Thanks, Ann!") is not who speaks.
        """
        name = message.name or self.speaker_names.get(message.type)
        if not name:
            return message_date_terms(message)
        if message.name and message.name not in self._names:
            self._names.add(message.name)
            self.name_terms.update(speaker_terms(message.name))
        return (*message_date_terms(message), *speaker_terms(name))

    def _restart(self) -> None:
        for key in self._anonymous:
            self.index.remove(key)
        self._anonymous = []
        self._previous = []
        self.keys = []
        self.order = {}
        self.position = {}
        self.by_key = {}
        if len(self._seen) > self.max_cached:
            self.index = BM25Index(k1=self.k1, b=self.b)
            self._seen.clear()
        self.turn_slots = array("q")
        self.turn_positions = array("q")
        self.identity = True
        self.slot_turns = array("q", [-1]) * self.index.slots

    def allowed(self) -> Container[str] | None:
        """The keys to score: ``by_key``, or ``None`` when the index holds nothing else.

        Every key of ``by_key`` is indexed, so equal sizes mean equal key sets and the
        per-posting membership test can be skipped.
        """
        return None if len(self.index) == len(self.by_key) else self.by_key

    def sync(self, messages: Sequence[BaseMessage], known_prefix: int = 0) -> None:
        """Index ``messages``; afterwards the attributes describe them.

        ``keys``: keys of the eligible messages in order; ``order``: key -> index in
        ``keys``; ``position``: key -> index in ``messages``; ``by_key``: key -> message.
        ``known_prefix``: the caller vouches that the first ``known_prefix`` messages are
        the objects of the previous call, in order, so only the rest of that call's
        messages are compared (see `_grew`).
        """
        known = len(self._previous)
        extended, self._extended = self._extended is messages, None
        if not self.trusted:
            known_prefix, self.trusted = 0, True
        if not (
            known
            and len(messages) >= known
            and (extended or self._grew(messages, known_prefix))
            and len(self._seen) <= self.max_cached
        ):
            self._restart()
            known = 0
        for position in range(known, len(messages)):
            message = messages[position]
            self._previous.append(message)
            if not self.eligible(message):
                continue
            if not message.id:  # an empty-string id counts as no id
                key = f"\x00anon-{position}"
                self.index.add(key, message_text(message), terms=self.terms(message))
                self._anonymous.append(key)
            else:
                key = f"id:{message.id}"
                if key in self.by_key:
                    continue
                cached = self._seen.get(key)
                if cached is None or cached[0] is not message:
                    text, terms = message_text(message), self.terms(message)
                    if cached is None or cached[1] != text or cached[2] != terms:
                        self.index.add(key, text, terms=terms)
                    self._seen[key] = (message, text, terms)
            slot = self.index.slot(key)
            if slot >= len(self.slot_turns):
                self.slot_turns.extend(array("q", [-1]) * (self.index.slots - len(self.slot_turns)))
            if slot != len(self.keys):
                self.identity = False
            self.slot_turns[slot] = len(self.keys)
            self.turn_slots.append(slot)
            self.turn_positions.append(position)
            self.order[key] = len(self.keys)
            self.position[key] = position
            self.keys.append(key)
            self.by_key[key] = message
        self._source = messages

    def _grew(self, messages: Sequence[BaseMessage], known_prefix: int) -> bool:
        """Whether ``messages`` begins with the previous call's messages.

        Only the previous messages past ``known_prefix`` are compared: a caller that
        passes a growing list it keeps appending to knows the rest are unchanged, which
        spares a comparison of every reference of a long history on every call.
        """
        previous = self._previous
        known = len(previous)
        if known_prefix <= 0 or messages is not self._source:
            return extends(messages, previous)
        if known_prefix >= known:
            return True
        tail = previous[known_prefix:]
        return extends(messages[known_prefix:known], tail)

    @staticmethod
    def gather(np: Any, column: array[int], at: Any) -> Any:
        """``column[at]`` as a numpy array (no copy of the whole column)."""
        if not len(at):
            return np.zeros(0, dtype=np.int64)
        view = np.frombuffer(column, dtype=np.int64)
        try:
            return view[at]
        finally:
            del view  # a live view would pin the column's buffer (it must stay growable)
