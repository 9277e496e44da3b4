"""A running summary as graph state: a JSON dict whose per-fold write does not grow.

`summary_to_state` turns a `RunningSummary` into the plain dict the LangGraph faces store
(strings, numbers, lists and dicts only); `summary_from_state` reads it back. The dict is
``RunningSummary.model_dump(mode="json")`` except for ``covered_ids``, stored as *runs*: a list
of lists of ids, in covering order, whose concatenation is the coverage. A grown summary reuses
the runs of the state value it grew from and adds one, so a fold writes its new ids, not the
whole coverage. Runs are shared between consecutive state values: treat them as read-only
(replace a run, never edit one). Reading also accepts a flat list of ids (the shape earlier
versions wrote, or one written by hand) and a mix of both.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from langchain_histcompress.core.coverage import as_covered_ids
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.running_summary import (
    RunningSummary,
    _ancestors,
    _existing_memo,
    _memo,
    _seed_sorted_ids,
)

__all__ = ["summary_from_state", "summary_to_state"]

# The JSON dict a face wrote (or read) last, per thread, with the summary it stands for, so the
# next turn gets the same `RunningSummary` object back (and its cached history cursor) without
# re-validating every covered id. Entries hold the dict itself, so ids are never reused.
_CACHE_SIZE = 32
_SCALAR_KEYS = ("text", "sha256", "version", "rounds_covered", "model", "prompt_version")
_RUNS_KEY = "state_runs"


@dataclass(frozen=True)
class _Cached:
    """A state value already turned into a summary."""

    raw: Mapping[str, Any]
    """The state value (kept alive so its id is not reused)."""
    ids: object
    """``raw["covered_ids"]`` when cached (identity-checked)."""
    shape: object
    """Its `_shape` when cached."""
    scalars: tuple[object, ...]
    """``raw``'s values under `_SCALAR_KEYS` and ``created_at`` when cached."""
    summary: RunningSummary
    """The summary ``raw`` stands for."""


_cache: OrderedDict[int, _Cached] = OrderedDict()
_cache_lock = threading.Lock()


def _shape(ids: Sequence[Any]) -> object:
    """What tells a covered-id value from an edited one: O(runs), not O(ids), for runs."""
    if not ids or isinstance(ids[0], str):
        return len(ids)  # a flat list of ids
    return tuple(len(run) if isinstance(run, list | tuple) else -1 for run in ids)


def _scalars(raw: Mapping[str, Any]) -> tuple[object, ...]:
    return (*(raw.get(k) for k in _SCALAR_KEYS), raw.get("created_at"))


def _record(summary: RunningSummary) -> tuple[object, ...]:
    """What tells one version of a summary record from another (cheap)."""
    return (summary.version, summary.sha256, summary.created_at, len(summary.covered_ids))


def _remember(raw: Mapping[str, Any], summary: RunningSummary) -> None:
    ids = raw.get("covered_ids")
    if not isinstance(ids, list | tuple):
        return
    entry = _Cached(raw, ids, _shape(ids), _scalars(raw), summary)
    # Entries this one supersedes (older versions of the same thread's summary, or other
    # copies of the same record) go, so the cache holds about one entry per thread.
    superseded = {_record(s) for s in (summary, *_ancestors(summary))}
    with _cache_lock:
        for key, cached in list(_cache.items()):
            if _record(cached.summary) in superseded:
                del _cache[key]
        _cache[id(raw)] = entry
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)


def _recall(raw: Mapping[str, Any]) -> RunningSummary | None:
    """The summary cached for this very state value, if the value is unchanged since."""
    with _cache_lock:
        entry = _cache.get(id(raw))
    if entry is None or entry.raw is not raw:
        return None
    ids = raw.get("covered_ids")
    if ids is not entry.ids or _shape(ids) != entry.shape:  # type: ignore[arg-type]
        return None
    if _scalars(raw) != entry.scalars or raw.get("content") != entry.summary.content:
        return None
    return entry.summary


def summary_from_state(
    state: Mapping[str, Any] | Any, key: str = "running_summary"
) -> RunningSummary | None:
    """Read the running summary stored under ``key`` of a graph state.

    Accepts the JSON dict form written by the package faces (covered ids as runs, or as a
    flat list), a `RunningSummary`, or nothing. Reading back a dict the package wrote or read
    before (unchanged: same covered-id list and run lengths, same fields) returns the same
    summary object without validating it again.

    Args:
        state: A state mapping (or an object with the key as attribute, e.g. a pydantic state).
        key: The state key.

    Returns:
        The summary, or ``None`` when the key is absent or empty.

    Raises:
        ConfigurationError: The value is not a valid summary record (wrong key, or a record
            whose ``sha256`` no longer matches its text).

    Example:
        >>> s = RunningSummary(content="x", text="x", covered_ids=frozenset({"m1"}))
        >>> summary_from_state({"running_summary": summary_to_state(s)}) == s
        True
        >>> summary_from_state({"messages": []}) is None
        True
        >>> old_shape = {**summary_to_state(s), "covered_ids": ["m1"]}  # a flat list
        >>> summary_from_state({"running_summary": old_shape}).covered_ids == {"m1"}
        True
    """
    raw = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if raw is None:
        return None
    if isinstance(raw, RunningSummary):
        return raw
    if not isinstance(raw, Mapping):
        msg = f"state[{key!r}] must be a running summary dict, got {type(raw).__name__}"
        raise ConfigurationError(msg)
    cached = _recall(raw)
    if cached is not None:
        return cached
    ids = raw.get("covered_ids")
    try:
        summary = RunningSummary.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'record'}: {err['msg']}"
            for err in exc.errors()[:3]
        )
        msg = f"state[{key!r}] is not a valid running summary record ({problems})"
        raise ConfigurationError(msg) from None
    if isinstance(ids, list):
        if not ids or isinstance(ids[0], str):  # flat: the sorted list earlier versions wrote
            _seed_sorted_ids(summary, ids)
            _memo(summary)[_RUNS_KEY] = [list(ids)] if ids else []  # read once: copy it
        elif all(isinstance(run, list) for run in ids):
            _memo(summary)[_RUNS_KEY] = ids
    _remember(raw, summary)
    return summary


_RUN_CAP = 4096


def _push(runs: list[list[str]], added: list[str]) -> list[list[str]]:
    """``runs`` plus a run of ``added`` (a new outer list; no run is changed in place).

    The last two runs are merged while the older one is not longer than the newer one and
    the merged run stays within `_RUN_CAP` ids: a fold copies at most that many ids, and a
    value of n ids holds about n / `_RUN_CAP` + log2(`_RUN_CAP`) runs.
    """
    out = list(runs)
    if added:
        out.append(added)
    while (
        len(out) >= 2 and len(out[-2]) <= len(out[-1]) and len(out[-2]) + len(out[-1]) <= _RUN_CAP
    ):
        last = out.pop()
        out[-1] = [*out[-1], *last]
    return out


def _runs(summary: RunningSummary) -> list[list[str]]:
    """The runs of ``summary``'s coverage, grown from the nearest ancestor's when known."""
    memo = _memo(summary)
    found: list[list[str]] | None = memo.get(_RUNS_KEY)
    if found is not None:
        return found
    covered = as_covered_ids(summary.covered_ids)
    for ancestor in _ancestors(summary):
        ancestor_memo = _existing_memo(ancestor)
        base = ancestor_memo.get(_RUNS_KEY) if ancestor_memo is not None else None
        if base is None:
            continue
        added = covered.added_since(as_covered_ids(ancestor.covered_ids))
        if added is not None:
            found = _push(base, added)
        break
    if found is None:
        found = [covered.to_list()] if len(covered) else []
    memo[_RUNS_KEY] = found
    return found


def summary_to_state(summary: RunningSummary) -> dict[str, Any]:
    """The JSON dict form of ``summary`` stored in graph state (round-trips exactly).

    ``covered_ids`` holds runs of ids (see the module docstring); the other keys are those of
    ``summary.model_dump(mode="json")``.

    Example:
        >>> s = RunningSummary(content="x", text="x", covered_ids=frozenset({"b", "a"}))
        >>> summary_to_state(s)["covered_ids"]
        [['a', 'b']]
        >>> from langchain_histcompress.core.running_summary import extended_summary
        >>> grown = extended_summary(s, ["c"], content="y", text="y", version=2)
        >>> summary_to_state(grown)["covered_ids"]
        [['a', 'b'], ['c']]
    """
    rest = summary.model_dump(mode="json", exclude={"covered_ids"})
    runs = list(_runs(summary))
    data = {
        name: runs if name == "covered_ids" else rest[name] for name in RunningSummary.model_fields
    }
    _remember(data, summary)
    return data
