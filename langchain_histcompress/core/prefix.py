"""Whether a message list still holds messages seen before, checked at pointer speed.

Faces that keep work between calls (a compressor's covered prefix, a context window's
messages) must prove that the history they are given still starts with the messages they
worked on. The proof reads the new list once and never the messages themselves: lists of
equal length compare identical references as pointers at C speed, so the recorded list is
completed with the rest of the new one, compared whole and cut back (no slice of the new
list, which would touch every message object it holds).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage


def holds(
    messages: Sequence[BaseMessage],
    recorded: list[BaseMessage],
    stop: int,
    *,
    start: int = 0,
    by_value: bool = False,
) -> bool:
    """Whether ``messages[start:stop]`` are ``recorded[start:stop]`` (same objects, or equal).

    Unless ``by_value``, the ends must be the very recorded objects: equal but distinct
    messages (a history rebuilt from a checkpoint) fail at once, so callers check those
    another way; with it, equal messages are accepted anywhere (each one that is not the
    same object is compared by value). When ``recorded`` ends at ``stop`` and ``messages``
    is a list, ``recorded[:start]`` are scratch slots (overwritten with
    ``messages[:start]``) and ``recorded`` is cut back to ``stop`` items afterwards; callers
    sharing ``recorded`` between threads hold their lock. A list subclass is compared as a
    plain list: its own ``__eq__`` (which may read every message) is never called.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> a, b, c = HumanMessage("a"), HumanMessage("b"), HumanMessage("c")
        >>> seen = [a, b]
        >>> holds([a, b, c], seen, 2), holds([c, b, a], seen, 2), seen == [a, b]
        (True, False, True)
        >>> holds([c, b], [a, b], 2, start=1)  # only messages[1:2] is checked
        True
        >>> holds([HumanMessage("a"), b], seen, 2), holds([HumanMessage("a"), b], seen, 2,
        ...                                               by_value=True)
        (False, True)
    """
    if stop <= start:
        return True
    if len(messages) < stop or len(recorded) < stop:
        return False
    if not by_value and (
        messages[start] is not recorded[start] or messages[stop - 1] is not recorded[stop - 1]
    ):
        return False
    if isinstance(messages, list):
        shared = len(recorded) == stop
        mine = recorded if shared else recorded[:stop]  # an older record: one copy
        mine[:start] = messages[:start]
        mine.extend(messages[stop:])
        try:
            return bool(list.__eq__(mine, messages))
        finally:
            if shared:
                del mine[stop:]
    part = messages[start:stop]
    return (part if type(part) is list else list(part)) == recorded[start:stop]


def extends(messages: Sequence[BaseMessage], previous: list[BaseMessage]) -> bool:
    """Whether ``messages`` begins with ``previous`` (same objects, or equal values).

    `holds` over the whole of ``previous``, which is left as it was.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> a, b = HumanMessage("a"), HumanMessage("b")
        >>> extends([a, b], [a]), extends([b, a], [a]), extends([a], [])
        (True, False, True)
    """
    return holds(messages, previous, len(previous))
