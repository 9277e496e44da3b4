"""Where the uncovered tail of a history starts for a running summary, found without rereading.

Round compression only reads the part of a history its summary does not cover yet: the
*tail*, made of whole rounds. `locate_tail` splits a history into its system lead, the covered
prefix it skips and the tail. The first call with a summary scans the covered prefix; the
result is kept as the summary's *cursor* (private, by object identity, see `_memos`), and later
calls on the grown history verify the cursor instead of scanning again. A covered message
removed, inserted, or replaced by an object that is not equal to it always fails the check,
and the prefix is scanned again.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.coverage import covers_all
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.identified import IdentifiedMessages, originals
from langchain_histcompress.core.memos import existing_memo, memo
from langchain_histcompress.core.prefix import holds
from langchain_histcompress.core.rounds import is_pinned, is_summary_message
from langchain_histcompress.core.running_summary import RunningSummary


@dataclass(frozen=True)
class _Objects:
    """The message objects a lineage of cursors skips, append-only (shared, never copied).

    ``items[lead_end:start]`` of a cursor are the objects of its skipped prefix; a newer
    cursor of the same lineage only appends. ``items[:lead_end]`` are scratch slots, filled
    with the history's own lead just before a comparison (the lead is not covered and may
    change freely). ``lock`` guards every use of ``items``.
    """

    items: list[BaseMessage]
    """Scratch lead slots, then the skipped messages of the newest cursor, in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while ``items`` is extended, compared or read."""


@dataclass(frozen=True)
class _Cursor:
    """Where the uncovered tail of one history starts for one summary (a cache, verified).

    `_verified_cursor` says exactly what is checked before it is used.
    """

    covered: AbstractSet[str]
    """The summary's ``covered_ids`` object when recorded (identity-checked)."""
    lead_end: int
    """Number of leading system messages of the history."""
    start: int
    """Index of the tail's first message."""
    start_id: str | None
    """Id of ``messages[start]`` (``None``: the tail was empty, ``start`` was the end)."""
    before_id: str | None
    """Id of ``messages[start - 1]`` (``None`` when the tail starts right after the lead)."""
    tail_covered: frozenset[str]
    """Covered ids found at or after ``start`` (older tool groups folded out of a round)."""
    objects: _Objects
    """The skipped prefix's objects: ``objects.items[lead_end:start]``."""
    system_at: tuple[int, ...] = ()
    """Indexes in the history of the prefix's system messages (never covered)."""


@dataclass(frozen=True)
class TailParts:
    """A history split for compression, located without reading the covered prefix."""

    messages: Sequence[BaseMessage]
    """The history as given (never copied)."""
    lead_end: int
    """Number of leading system messages (earlier summary messages included)."""
    tail_start: int
    """Index in ``messages`` of the first round holding a message that is not covered."""
    tail: list[BaseMessage]
    """``messages[tail_start:]`` without summary messages: where every pending round lives."""
    tail_covered: frozenset[str] | None = None
    """When located with a cursor: the covered ids known to sit in the tail (every other
    covered id belongs to the skipped prefix). ``None`` when the prefix was scanned."""
    system_at: tuple[int, ...] = ()
    """Indexes of the system messages of the skipped prefix ``messages[lead_end:tail_start]``
    (pinned messages, and stale summary messages that the current summary replaces)."""
    cursor: _Cursor | None = None
    """The summary's cursor for ``messages`` (verified or just made), when there is one."""
    grown: bool = False
    """Located by growing the tail recorded on the previous call (`_tail_state.grow`): the
    tail breaks no provider rule and holds no covered id and no system message."""

    @property
    def pinned(self) -> list[BaseMessage]:
        """The pinned messages of the skipped prefix, in order: shown after the summary."""
        return [m for m in map(self.messages.__getitem__, self.system_at) if is_pinned(m)]

    @property
    def lead(self) -> list[BaseMessage]:
        """The leading system messages."""
        return list(self.messages[: self.lead_end])

    @property
    def preamble(self) -> list[BaseMessage]:
        """The caller's own system preamble (summary messages removed)."""
        return [m for m in self.messages[: self.lead_end] if not is_summary_message(m)]


_CURSOR_KEY = "compressor_cursor"


def _message_id(messages: Sequence[BaseMessage], index: int) -> str | None:
    value = getattr(messages[index], "id", None)
    return value if isinstance(value, str) else None


def preamble_end(messages: Sequence[BaseMessage]) -> int:
    """Length of the leading run of system messages (the preamble)."""
    end = 0
    while end < len(messages) and isinstance(messages[end], SystemMessage):
        end += 1
    return end


_SCAN_CHUNK = 512
_get_id = operator.attrgetter("id")


def _check_types(messages: Sequence[BaseMessage], start: int) -> None:
    """Raise `ConfigurationError` naming the first non-message in ``messages[start:]``."""
    if all(issubclass(kind, BaseMessage) for kind in set(map(type, messages[start:]))):
        return
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, BaseMessage):
            msg = f"messages[{index}] is a {type(message).__name__}, not a BaseMessage"
            raise ConfigurationError(msg)


def _first_uncovered(messages: Sequence[BaseMessage], start: int, covered: AbstractSet[str]) -> int:
    """Index of the first message from ``start`` on that is neither covered nor a system message.

    System messages in the conversation are pinned (never covered) and summary messages are
    replaced, so neither starts the tail. Whole chunks of covered messages are skipped at C
    speed (one superset test per chunk); only the chunk holding the answer (or a system
    message) is walked message by message.
    """
    end = len(messages)
    while start < end:
        stop = min(start + _SCAN_CHUNK, end)
        if covers_all(covered, map(_get_id, messages[start:stop])):
            start = stop
            continue
        while start < stop and (
            messages[start].id in covered or isinstance(messages[start], SystemMessage)
        ):
            start += 1
        if start < stop:
            return start
    return end


def _slice(messages: Sequence[BaseMessage], start: int, stop: int) -> list[BaseMessage]:
    """``messages[start:stop]`` as a list (one copy of the pointers, however it is given)."""
    part = messages[start:stop]
    return part if type(part) is list else list(part)


def _cursor(summary: RunningSummary) -> _Cursor | None:
    cache = existing_memo(summary)
    found = cache.get(_CURSOR_KEY) if cache is not None else None
    if isinstance(found, _Cursor) and found.covered is summary.covered_ids:
        return found
    return None


def _same_objects(source: Sequence[BaseMessage], cursor: _Cursor) -> bool:
    """Whether ``source[lead_end:start]`` holds the cursor's objects (or equal ones).

    For a list and the newest cursor of its lineage the shared objects are compared with
    ``source`` in place (`_prefix.holds`: pointers only, no prefix message read or copied);
    else (another sequence type, an older cursor) the prefix is copied and compared.
    """
    objects = cursor.objects
    with objects.lock:
        return holds(source, objects.items, cursor.start, start=cursor.lead_end)


def _verified_cursor(
    messages: Sequence[BaseMessage],
    summary: RunningSummary,
    lead_end: int,
    *,
    spot_check: bool = False,
) -> _Cursor | None:
    """The summary's cursor when it still matches ``messages``, else ``None``.

    Checks the ids at the tail start and just before it, the number of leading system
    messages, and that the skipped prefix holds the recorded objects (or equal ones; when the
    objects differ, that every prefix id is covered). A cursor matched by ids (a copied
    history) is replaced by one holding the new objects. With ``spot_check`` only the ids
    around the tail start and the lead are checked (a hint, not a proof).
    """
    cursor = _cursor(summary)
    if cursor is None or cursor.lead_end != lead_end:
        return None
    start = cursor.start
    if cursor.start_id is None:
        if not lead_end <= start <= len(messages):
            return None
    elif not lead_end <= start < len(messages) or _message_id(messages, start) != cursor.start_id:
        return None
    before = _message_id(messages, start - 1) if start > lead_end else None
    if before != cursor.before_id:
        return None
    if spot_check or start == lead_end:
        return cursor
    source = originals(messages)
    if _same_objects(source, cursor):
        return cursor
    try:
        shown = messages[lead_end:start]
        ids = list(map(_get_id, shown))
    except AttributeError:  # not a message: the scan names it
        return None
    covered = summary.covered_ids
    if cursor.system_at:
        systems = {i - lead_end for i in cursor.system_at}
        matches = all(
            isinstance(shown[i], SystemMessage) if i in systems else ids[i] in covered
            for i in range(len(ids))
        )
    else:
        matches = covers_all(covered, ids)
    if not matches:
        return None
    refreshed = replace(cursor, objects=_Objects(_slice(source, 0, start)))
    memo(summary)[_CURSOR_KEY] = refreshed
    return refreshed


def _remember(
    summary: RunningSummary, parts: TailParts, grown_from: _Cursor | None
) -> _Cursor | None:
    """Record ``summary``'s cursor for ``parts`` (and return it).

    ``grown_from`` is the cursor of the summary ``summary`` extends, verified on the same
    history: its shared objects are extended with the newly skipped messages (O(new)) when it
    is the newest of its lineage; else the prefix is copied once.
    """
    messages, start, lead_end = parts.messages, parts.tail_start, parts.lead_end
    start_id = _message_id(messages, start) if start < len(messages) else None
    if start_id is None and (start < len(messages) or start <= lead_end):
        return None  # no id to check, or an empty tail right after the lead: nothing to skip
    source = originals(messages)
    objects = None
    if grown_from is not None and grown_from.lead_end == lead_end and grown_from.start <= start:
        shared = grown_from.objects
        with shared.lock:
            if len(shared.items) == grown_from.start:
                shared.items.extend(_slice(source, grown_from.start, start))
                objects = shared
    if objects is None:
        objects = _Objects(_slice(source, 0, start))
    covered = summary.covered_ids
    cursor = _Cursor(
        covered=covered,
        lead_end=lead_end,
        start=start,
        start_id=start_id,
        before_id=_message_id(messages, start - 1) if start > lead_end else None,
        tail_covered=frozenset(m.id for m in parts.tail if m.id is not None and m.id in covered),
        objects=objects,
        system_at=parts.system_at,
    )
    memo(summary)[_CURSOR_KEY] = cursor
    return cursor


def _systems_between(
    messages: Sequence[BaseMessage], start: int, stop: int, covered: AbstractSet[str]
) -> tuple[int, ...]:
    """Indexes of the uncovered system messages of ``messages[start:stop]``.

    Pinned messages are covered once a fold takes them (see `RoundCompressor`); whole chunks of
    covered messages are skipped.
    """
    found: list[int] = []
    while start < stop:
        end = min(start + _SCAN_CHUNK, stop)
        if not covers_all(covered, map(_get_id, messages[start:end])):
            found.extend(
                i
                for i in range(start, end)
                if isinstance(messages[i], SystemMessage) and messages[i].id not in covered
            )
        start = end
    return tuple(found)


def locate_tail(
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None,
    *,
    known_start: int | None = None,
    known_systems: tuple[int, ...] = (),
    grown_from: _Cursor | None = None,
) -> TailParts:
    """Split ``messages`` for ``summary``, reading only the lead and the uncovered tail.

    The covered prefix is skipped with the summary's cursor when it still matches, else by a
    scan, from ``known_start`` when given (the tail start of an earlier summary whose
    coverage ``summary`` extends; ``known_systems`` indexes the system messages before it,
    ``grown_from`` is that summary's cursor on ``messages``); the scan's result becomes the
    summary's cursor. Every message read is type-checked first.

    Raises:
        ConfigurationError: A message that is read is not a ``BaseMessage``.
    """
    lead_end = preamble_end(messages)
    covered = summary.covered_ids if summary is not None else frozenset()
    cursor = None
    if summary is not None and covered:
        cursor = _verified_cursor(messages, summary, lead_end)
    systems: tuple[int, ...] = ()
    if cursor is not None:
        start = cursor.start
        systems = cursor.system_at
    else:
        start = lead_end if known_start is None else max(lead_end, known_start)
    _check_types(messages, start)
    if covered and cursor is None:
        # Skip the covered prefix, then step back to the start of its round so the tail is
        # made of whole rounds (and whole tool groups).
        scan_from = start
        start = _first_uncovered(messages, start, covered)
        if start < len(messages):
            while start > lead_end and not isinstance(messages[start], HumanMessage):
                start -= 1
        if start >= scan_from:
            known = tuple(i for i in known_systems if messages[i].id not in covered)
            systems = (*known, *_systems_between(messages, scan_from, start, covered))
        else:  # the tail starts before the known start: collect again
            systems = _systems_between(messages, lead_end, start, covered)
    tail = [m for m in messages[start:] if not is_summary_message(m)]
    parts = TailParts(
        messages,
        lead_end,
        start,
        tail,
        tail_covered=cursor.tail_covered if cursor is not None else None,
        system_at=systems,
        cursor=cursor,
    )
    if summary is not None and covered and cursor is None:
        made = _remember(summary, parts, grown_from)
        if made is not None:
            parts = TailParts(messages, lead_end, start, tail, system_at=systems, cursor=made)
    return parts


def summary_detached(messages: Sequence[BaseMessage], summary: RunningSummary | None) -> bool:
    """Whether ``summary`` covers messages but none of them is in ``messages`` any more.

    That happens when the conversation was replaced (``RemoveMessage(id=REMOVE_ALL_MESSAGES)``
    in LangGraph) while the summary was kept; faces that keep covered messages in place
    (non-destructive) then drop the summary instead of showing it with a new conversation.
    O(1) when the summary's cursor shows a covered message just before the tail.
    """
    if summary is None or not summary.covered_ids:
        return False
    covered = summary.covered_ids
    hint = _verified_cursor(messages, summary, preamble_end(messages), spot_check=True)
    if hint is not None and hint.before_id is not None and hint.before_id in covered:
        return False  # the message before the tail (its id just checked) is covered
    parts = locate_tail(messages, summary)
    if parts.tail_start - parts.lead_end > len(parts.system_at):
        return False  # the skipped prefix holds at least one covered message
    return not any(m.id in covered for m in parts.tail)


def with_ids(
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None,
    *,
    namespace: str = "",
    lead_too: bool = False,
) -> Sequence[BaseMessage]:
    """``messages`` ready for compression, for faces that accept messages without ids.

    Returned as given (no copy) when every message compression will read (the uncovered tail,
    found with the summary's cursor; else every non-preamble message) has an id. Otherwise the
    non-preamble messages get deterministic ids as with `rounds.ensure_ids` (with
    ``namespace``), given lazily to the messages compression reads (copies; the preamble
    stays the caller's own objects unless ``lead_too``: then it is identified as well, as
    ``ensure_ids`` does). A non-message is left for the compressor to report.
    """
    lead_end = preamble_end(messages)
    start = lead_end
    skipped_systems: tuple[int, ...] = ()
    if summary is not None and summary.covered_ids:
        # A hint is enough: the compressor verifies the prefix and names a message without
        # an id that a stale hint made this miss.
        cursor = _verified_cursor(messages, summary, lead_end, spot_check=True)
        if cursor is not None:
            start, skipped_systems = cursor.start, cursor.system_at
    try:
        # A grown history without ids misses one at its end: no need to scan it then.
        # An empty-string id counts as no id.
        complete = bool(messages) and bool(_get_id(messages[-1]))
        complete = complete and all(map(_get_id, messages[start:]))
        # the skipped prefix's system messages are read too (pinned: shown, folded later)
        complete = complete and all(_get_id(messages[i]) for i in skipped_systems)
        if lead_too:
            complete = complete and all(map(_get_id, messages[:lead_end]))
    except AttributeError:  # not a message: the compressor names it
        return messages
    if complete:
        return messages
    identified = IdentifiedMessages(messages, 0 if lead_too else lead_end, namespace)
    if summary is not None and summary.covered_ids:
        _carry_copies(identified, summary)
    return identified


_IDENTIFIED_KEY = "identified_messages"


_TOOL_CALL_ID_FIELDS: dict[type, bool | None] = {}


def _tool_call_id_field(kind: type[BaseMessage]) -> bool | None:
    """Whether ``kind`` has a ``tool_call_id`` field (``None``: one made some other way)."""
    if kind in _TOOL_CALL_ID_FIELDS:
        return _TOOL_CALL_ID_FIELDS[kind]
    found: bool | None = "tool_call_id" in kind.model_fields
    if not found and hasattr(kind, "tool_call_id"):  # a property or the like: not checked
        found = None
    _TOOL_CALL_ID_FIELDS[kind] = found
    return found


def _carry_copies(identified: IdentifiedMessages, summary: RunningSummary) -> None:
    """Give ``identified`` the id-bearing copies `keep_copies` kept for ``summary``.

    A copy is reused only for the very original object at the same index whose fields the
    derived id is made of are still the very objects the copy holds (an id depends on the
    position, the type, the content and the tool call id only) and whose content is a
    string (a list could have been edited in place), so the ids are those `rounds.ensure_ids`
    gives; a grown history then derives ids only for its new messages.
    """
    cache = existing_memo(summary)
    kept = cache.get(_IDENTIFIED_KEY) if cache is not None else None
    if not isinstance(kept, dict):
        return
    now = identified.originals
    size = len(now)
    for index, (original, copy) in list(kept.items()):
        if index >= size or now[index] is not original:
            continue
        content = original.content
        if type(content) is str and copy.content is content and copy.type is original.type:
            field = _tool_call_id_field(type(original))
            if field is None or (
                field and copy.tool_call_id is not original.tool_call_id  # type: ignore[attr-defined]
            ):
                continue
            identified.adopt(index, copy)


def keep_copies(messages: Sequence[BaseMessage], summary: RunningSummary | None) -> None:
    """Keep on ``summary`` the tail copies `with_ids` made, for the next turn's view.

    Only the copies the next turn reads again are kept, with their originals (not the history
    list, which the caller frees), so what is kept is O(uncovered tail).
    """
    if summary is None or not isinstance(messages, IdentifiedMessages):
        return
    cursor = _cursor(summary)
    if cursor is None:
        return
    # the tail, and the two messages the cursor's check reads by id (just before the tail,
    # and the first after the lead)
    start, lead_end, given = cursor.start, cursor.lead_end, messages.originals
    kept = {
        index: (given[index], copy)
        for index, copy in list(messages.copies.items())
        if index >= start - 1 or index == lead_end
    }
    memo(summary)[_IDENTIFIED_KEY] = kept


def covered_prefix_ids(parts: TailParts, summary: RunningSummary | None) -> Callable[[str], bool]:
    """Membership test for the ids of the covered prefix ``messages[lead_end:tail_start]``.

    With a cursor the prefix is not read: its ids are the covered ids not known to sit in
    the tail. Without one, the prefix ids are collected.
    """
    if parts.tail_covered is not None and summary is not None:
        covered, in_tail = summary.covered_ids, parts.tail_covered
        return lambda i: i in covered and i not in in_tail
    return set(map(_get_id, parts.messages[parts.lead_end : parts.tail_start])).__contains__
