"""Facts read from graph state, parsed once per fact while its dict stays the same.

Graph state holds facts as ``{id: fact dict}``; validating every fact on every turn costs a
pydantic validation per fact, a cost that grows with the fact set. `FactStateCache` keeps
the `Fact` parsed from each entry and parses an entry again only when its dict is a new
object or its fields changed (an in-place edit), so an unchanged fact costs one field
comparison; a state whose first entries are the same, unchanged dicts as last call (a state
that is unchanged or only grew) is recognised at C speed (comparisons of the key, entry
and snapshot lists) and only its new entries are read.

Example:
    >>> cache = FactStateCache()
    >>> state = {"f-1": {"id": "f-1", "content": "Lives in Oslo"}}
    >>> first = cache.read(state)["f-1"]
    >>> cache.read(state)["f-1"] is first
    True
    >>> state["f-1"]["content"] = "Lives in Bergen"
    >>> cache.read(state)["f-1"].content
    'Lives in Bergen'
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping

from langchain_histcompress.facts import Fact, facts_from_state


def _snapshot(raw: object) -> object:
    """A copy of a fact dict equal to it until it is edited in place (lists copied too)."""
    if not isinstance(raw, Mapping):
        return raw
    return {k: list(v) if isinstance(v, list) else v for k, v in raw.items()}


class FactStateCache:
    """`facts_from_state` that reuses the facts parsed last call for unchanged entries.

    Safe to share between threads: each call reads the previous call's entries and
    publishes its own at the end.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._entries: dict[str, tuple[object, object, Fact]] = {}
        self._last: tuple[list[object], list[object], list[object], dict[str, Fact]] | None = None
        """Keys, entries, snapshots and facts of the last call, when every entry was a dict."""
        self.generation = 0
        """Bumped by every call that does not return the same facts as the last one did."""
        self._lock = threading.Lock()

    def read(self, value: object) -> dict[str, Fact]:
        """The facts of ``value`` (any form `facts_from_state` accepts), by id.

        Raises:
            ConfigurationError: An entry is not a valid fact.
        """
        if not isinstance(value, Mapping):
            with self._lock:
                self.generation += 1
            return facts_from_state(value)
        keys, raws = list(value), list(value.values())
        with self._lock:
            cache, last = self._entries, self._last
            known = len(last[0]) if last is not None else 0
            # entries are added at the end: a state that only grew is read from its new end
            grown = (
                last is not None
                and keys[:known] == last[0]
                and all(map(operator.is_, raws, last[1]))
                and raws[:known] == last[2]
            )
            if grown and known == len(keys):
                return dict(last[3])  # type: ignore[index]
            self.generation += 1
        fresh: dict[str, tuple[object, object, Fact]] = {}
        out: dict[str, Fact] = {}
        entries = zip(keys, raws, strict=True)
        if grown:
            assert last is not None
            fresh, out = dict(cache), dict(last[3])
            entries = zip(keys[known:], raws[known:], strict=True)
        get = cache.get
        for key, raw in entries:
            hit = get(key)
            # the common case first: the same dict as last call, unchanged
            if hit is not None and hit[0] is raw and hit[1] == raw:
                fresh[key] = hit
                out[hit[2].id] = hit[2]
                continue
            if isinstance(raw, Fact):
                fact = raw
                if fact.id != str(key):  # let facts_from_state raise its error
                    facts_from_state({key: raw})
                out[fact.id] = fact
                continue
            fact = next(iter(facts_from_state({key: raw}).values()))
            fresh[key] = (raw, _snapshot(raw), fact)
            out[fact.id] = fact
        complete = None
        if len(fresh) == len(raws):
            snapshots = [fresh[k][1] for k in keys]
            complete = (keys, raws, snapshots, dict(out))
        with self._lock:
            self._entries, self._last = fresh, complete
        return out
