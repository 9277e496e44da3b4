"""Whether a message list grew from an earlier one, checked at pointer speed."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage


def extends(messages: Sequence[BaseMessage], previous: list[BaseMessage]) -> bool:
    """Whether ``messages`` begins with ``previous`` (same objects, or equal values).

    One C-speed comparison of references when the ends match by identity (identical
    objects compare equal without calling ``__eq__``); equal but distinct messages (a
    history rebuilt from a checkpoint) fail the identity check on the ends, so callers
    redo their work from those messages instead. ``previous`` is left as it was.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> a, b = HumanMessage("a"), HumanMessage("b")
        >>> extends([a, b], [a]), extends([b, a], [a]), extends([a], [])
        (True, False, True)
    """
    known = len(previous)
    if not known:
        return True
    if len(messages) < known:
        return False
    if messages[0] is not previous[0] or messages[known - 1] is not previous[-1]:
        return False
    if not isinstance(messages, list):
        return list(messages[:known]) == previous
    # Lists of equal length compare identical references as pointers, without touching the
    # objects (a slice of ``messages`` would touch every one of them).
    previous.extend(messages[known:])
    same = previous == messages
    del previous[known:]
    return same
