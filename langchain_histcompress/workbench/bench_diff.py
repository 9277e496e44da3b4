"""Compare two benchmark JSON files figure by figure, wall-time and memory figures aside.

A change that only moves code must leave every token, cost, call and recall figure of
``histcompress bench`` as it was; timings and allocations move with the machine and the run's
own stamps (when, from which path) differ every time. `figure_differences` lists what changed;
``histcompress bench-diff BEFORE AFTER`` prints it and exits 1 when anything did.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["figure_differences", "flat_figures", "is_run_dependent"]

_RUN_DEPENDENT = re.compile(
    r"(^|\.)("
    r"overhead(_ms[^.\[]*)?|ms_per_turn|samples_ms|seconds|pass_means_ms|[a-z_]*_ms(_mean)?"
    r"|[a-z_]*alloc[a-z_]*|[a-z_]*_kib|[a-z_]*_s|generated_at|data"
    r")($|\.|\[)"
)
"""Keys whose values depend on the machine or the run, not on what the package computed."""


def is_run_dependent(path: str) -> bool:
    """Whether a figure's dotted path names a timing, an allocation or a run stamp.

    Example:
        >>> is_run_dependent("totals.full.overhead_ms.1000"), is_run_dependent("totals.full.calls")
        (True, False)
    """
    return bool(_RUN_DEPENDENT.search(path))


def flat_figures(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a JSON value with its dotted path (list items as ``[i]``).

    Example:
        >>> dict(flat_figures({"a": {"b": [1, 2]}}))
        {'a.b[0]': 1, 'a.b[1]': 2}
    """
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from flat_figures(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from flat_figures(item, f"{path}[{index}]")
    else:
        yield path, value


def figure_differences(before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    """``(path, before, after)`` for every figure that differs, run-dependent ones aside.

    A figure present on one side only is reported with ``None`` on the other.

    Example:
        >>> figure_differences({"calls": 3, "ms_per_turn": 1.0}, {"calls": 4, "ms_per_turn": 2.0})
        [('calls', 3, 4)]
    """
    old, new = dict(flat_figures(before)), dict(flat_figures(after))
    return [
        (path, old.get(path), new.get(path))
        for path in sorted(old.keys() | new.keys())
        if not is_run_dependent(path) and old.get(path) != new.get(path)
    ]
