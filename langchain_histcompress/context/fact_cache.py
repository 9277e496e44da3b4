"""Facts read from graph state, parsed once per fact dict.

`FactStateCache` keeps the `Fact` parsed from each ``{id: fact dict}`` entry of graph state
and matches entries by identity, so a call validates only the entries that are new objects.
Like every LangGraph reducer output, state values are treated as immutable: write a new dict
to change a fact (`merge_facts` always does). A new dict equal to the one it replaces (a state
loaded again from a checkpoint) or made by `Fact.to_state` keeps its fact without a
validation. A list of the very `Fact` objects of the last call (frozen: the same facts) is
not read again either.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from langchain_histcompress.core.facts import Fact, facts_from_state, state_snapshot


@dataclass(frozen=True)
class _Read:
    """One call's entries (never changed once published)."""

    keys: list[str]
    """The keys, in state order."""
    raws: list[object]
    """The entries, in state order."""
    raw_of: dict[str, object]
    """Key -> entry."""
    snapshot_of: dict[str, object]
    """Key -> `state_snapshot` of the entry (``None`` for `Fact` entries)."""
    fact_of: dict[str, Fact]
    """Key -> fact (the key is the fact's id)."""
    cached: bool
    """Whether every entry was a dict (a state with `Fact` entries is never a whole hit)."""
    expiring: frozenset[str]
    """Keys whose fact has an expiry time (``expires_at``)."""


@dataclass(frozen=True)
class _FactList:
    """One call's list of `Fact` objects (never changed once published)."""

    facts: list[object]
    """The list's entries, in order."""
    fact_of: dict[str, Fact]
    """Id -> fact."""
    expiring: bool
    """Whether any of the facts has an expiry time (``expires_at``)."""


class FactStateCache:
    """`facts_from_state` that reuses the facts parsed before for the same entries.

    Safe to share between threads: each call reads the previous call's entries and
    publishes its own at the end.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._last: _Read | _FactList | None = None
        """The last call's entries (a state dict's or a list of facts), to match the next's."""
        self.generation = 0
        """Bumped by every call that does not return the same facts as the last one did."""
        self.parsed = 0
        """Entries validated so far (for tests that count the work)."""
        self._lock = threading.Lock()

    def read(self, value: object) -> dict[str, Fact]:
        """The facts of ``value`` (any form `facts_from_state` accepts), by id.

        Raises:
            ConfigurationError: An entry is not a valid fact.

        Example:
            >>> cache = FactStateCache()
            >>> state = {"f-1": {"id": "f-1", "content": "Lives in Oslo"}}
            >>> first = cache.read(state)["f-1"]
            >>> cache.read(state)["f-1"] is first
            True
            >>> cache.read({"f-1": {"id": "f-1", "content": "Lives in Oslo"}})["f-1"] is first
            True
            >>> state = {"f-1": {**state["f-1"], "content": "Lives in Bergen"}}
            >>> cache.read(state)["f-1"].content
            'Lives in Bergen'
        """
        return self.read_expiring(value)[0]

    def read_expiring(self, value: object) -> tuple[dict[str, Fact], bool]:
        """`read`, and whether any of the facts has an expiry time.

        The answer is kept up to date from the new entries only, so a caller that drops
        expired facts need not look at every fact to learn that none can expire.

        Raises:
            ConfigurationError: An entry is not a valid fact.
        """
        if not isinstance(value, Mapping):
            return self._read_facts(value)
        keys, raws = list(value), list(value.values())
        with self._lock:
            last = self._last if isinstance(self._last, _Read) else None
            if (
                last is not None
                and last.cached
                and len(raws) == len(last.raws)
                and all(map(operator.is_, raws, last.raws))
                and keys == last.keys
            ):
                return dict(last.fact_of), bool(last.expiring)
            self.generation += 1
            self._last = None  # until this read is published: no later call may match the old
        if not all(map(isinstance, keys, itertools.repeat(str))):
            # ids are the keys as strings: rare, not cached
            return _with_expiring(facts_from_state(value))
        read = self._read(keys, raws, last)
        with self._lock:
            self._last = read
        return dict(read.fact_of), bool(read.expiring)

    def _read_facts(self, value: object) -> tuple[dict[str, Fact], bool]:
        """`read_expiring` of a list: the last answer again for the very same `Fact` objects.

        Facts are frozen, so the same objects are the same facts; a list holding fact dicts
        (which may change in place) is read again every call.
        """
        entries = list(value) if isinstance(value, list | tuple) else None
        with self._lock:
            last = self._last
            if (
                isinstance(last, _FactList)
                and entries is not None
                and len(entries) == len(last.facts)
                and all(map(operator.is_, entries, last.facts))
            ):
                return dict(last.fact_of), last.expiring
            self.generation += 1
            self._last = None
        fact_of, expiring = _with_expiring(facts_from_state(value))
        if entries is not None and all(map(isinstance, entries, itertools.repeat(Fact))):
            with self._lock:
                self._last = _FactList(entries, fact_of, expiring)
        return dict(fact_of), expiring

    def _read(self, keys: list[str], raws: list[object], last: _Read | None) -> _Read:
        """Match the entries to the last call's by key and identity; parse only new ones."""
        raw_of = dict(zip(keys, raws, strict=True))
        if last is None:
            misses: list[int] = list(range(len(keys)))
            fact_of: dict[str, Fact] = {}
            snapshot_of: dict[str, object] = {}
        else:
            # all at C speed: only the entries that are new objects are looked at
            seen = map(last.raw_of.get, keys)
            misses = list(itertools.compress(itertools.count(), map(operator.is_not, raws, seen)))
            if not misses and keys == last.keys:
                fact_of, snapshot_of = last.fact_of, last.snapshot_of
            else:  # in state order, without the entries that left it
                fact_of = dict(zip(keys, map(last.fact_of.get, keys), strict=True))  # type: ignore[arg-type]
                snapshot_of = dict(zip(keys, map(last.snapshot_of.get, keys), strict=True))
        if last is not None and last.cached:
            # an entry that is not new is the last call's dict: only new ones can be facts
            cached = not any(isinstance(raws[index], Fact) for index in misses)
        else:
            cached = not any(map(isinstance, raws, itertools.repeat(Fact)))
        for index in misses:
            key, raw = keys[index], raws[index]
            if isinstance(raw, Fact):
                if raw.id != key:  # let facts_from_state raise its error
                    facts_from_state({key: raw})
                fact_of[key], snapshot_of[key] = raw, None
                continue
            previous = snapshot_of.get(key)
            if previous is not None and previous == raw:  # the same fields: the same fact
                continue
            fact = next(iter(facts_from_state({key: raw}).values()))
            self.parsed += 1
            fact_of[key], snapshot_of[key] = fact, state_snapshot(raw)
        # an entry that is not new keeps its fact, so only new entries change the answer
        candidates = [key for key in last.expiring if key in raw_of] if last is not None else []
        candidates.extend(keys[index] for index in misses)
        expiring = frozenset(key for key in candidates if fact_of[key].expires_at is not None)
        return _Read(keys, raws, raw_of, snapshot_of, fact_of, cached, expiring)


def _with_expiring(facts: dict[str, Fact]) -> tuple[dict[str, Fact], bool]:
    return facts, any(fact.expires_at is not None for fact in facts.values())
