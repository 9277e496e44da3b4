"""Private caches attached to frozen records by object identity (in-package API).

A `RunningSummary` is frozen and compared, serialized and copied by value, so what the package
derives from one (a history cursor, the tail state of a compressor, sorted covered ids, its
rendered message) is kept beside it instead: a dict per live object, keyed by its identity,
that dies with it (`memo`, `existing_memo`). Every entry is a cache: a reader checks what it
reads against the record itself.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["existing_memo", "memo"]

_MEMOS: dict[int, tuple[weakref.ref[Any], dict[str, Any]]] = {}


def existing_memo(owner: object) -> dict[str, Any] | None:
    """The cache dict of ``owner``, if it has one."""
    entry = _MEMOS.get(id(owner))
    if entry is not None and entry[0]() is owner:
        return entry[1]
    return None


def memo(owner: object) -> dict[str, Any]:
    """The cache dict of ``owner`` (created on first use; ``owner`` must be weakly referable).

    Example:
        >>> class Record:
        ...     pass
        >>> record = Record()
        >>> existing_memo(record) is None
        True
        >>> memo(record)["seen"] = 1
        >>> existing_memo(record)
        {'seen': 1}
    """
    found = existing_memo(owner)
    if found is not None:
        return found
    key = id(owner)
    data: dict[str, Any] = {}

    def forget(ref: weakref.ref[Any], key: int = key) -> None:
        current = _MEMOS.get(key)
        if current is not None and current[0] is ref:
            _MEMOS.pop(key, None)

    _MEMOS[key] = (weakref.ref(owner, forget), data)
    return data
