"""Dense work arrays for spreading evidence scores to neighbouring messages.

`EvidenceRetriever` keeps the best-matching messages, spreads their scores to the messages
around them and ranks the result, with arrays indexed by turn. The arrays are all zero
between calls: a call writes only the entries it touches and clears exactly those before
returning. Every sum adds the same values in the same order as the pure-Python path, so the
scores are identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def nth(np: Any, values: Any, k: int) -> Any:
    """The ``k``-th smallest of ``values`` (from 0), which must be non-empty.

    Selected for two positions at once (``k`` and the last); the value found is the one a
    single-position selection finds.

    Example:
        >>> import numpy as np
        >>> float(nth(np, np.array([5.0, 1.0, 4.0, 2.0]), 1))
        2.0
    """
    last = len(values) - 1
    if k == last:
        return values.max()
    selected = values.copy()
    selected.partition((k, last))
    return selected[k]


def distinct(np: Any, owner: Any, values: Any) -> Any:
    """The distinct ``values`` (non-negative ints below ``len(owner)``), in no fixed order.

    ``owner`` is scratch space (ints or floats: indexes stay exact): after
    ``owner[values] = range``, exactly one occurrence of each value finds its own index
    there, whichever of the repeated writes won.
    """
    order = np.arange(len(values))
    owner[values] = order
    return values[owner[values] == order]


def sum_by_row(np: Any, work: WorkArrays, rows: Any, values: Any) -> tuple[Any, Any]:
    """Distinct ``rows`` (in no fixed order) and the sum of each one's ``values``.

    The values are added to ``work.score`` in array order (``ufunc.at`` is unbuffered), so
    a row's values are added in array order from 0.0, as a Python loop would (and as
    `_sum_by_slot` does, without sorting: numpy's sorts are slow next to one scattered
    pass). ``work.score`` is left zero.
    """
    total = work.score
    np.add.at(total, rows, values)
    found = distinct(np, work.owner, rows)
    sums = total[found]
    total[found] = 0.0
    return found, sums


def largest(np: Any, values: Any, counts: Sequence[int]) -> list[Any]:
    """For each ``n`` of ``counts``, the ``n``-th largest of ``values``, found in one pass.

    ``None`` for an ``n`` that needs no cut (``n <= 0`` or ``n >= len(values)``). One
    selection places every wanted position at once, always with the last one among them
    (see `nth`).

    Example:
        >>> import numpy as np
        >>> cuts = largest(np, np.array([5.0, 1.0, 4.0, 2.0, 3.0]), [2, 4, 9])
        >>> [None if cut is None else float(cut) for cut in cuts]
        [4.0, 2.0, None]
    """
    size = len(values)
    positions = sorted({size - n for n in counts if 0 < n < size})
    if not positions:
        return [None] * len(counts)
    last = size - 1
    if positions == [last]:
        found = {last: values.max()}
    else:
        selected = values.copy()
        selected.partition(positions if positions[-1] == last else [*positions, last])
        found = {k: selected[k] for k in positions}
    return [found[size - n] if 0 < n < size else None for n in counts]


def best_n(np: Any, scores: Any, n: int, rank: Any, cut: Any = None) -> Any:
    """Indexes (ascending) of the ``n`` best ``scores``, ties at the cut by lowest ``rank``.

    ``rank`` holds distinct values, one per score. ``None`` when every entry is kept.
    ``cut``, when known, is the ``n``-th largest score (see `largest`).
    """
    size = len(scores)
    if size <= n:
        return None
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if cut is None:
        cut = nth(np, scores, size - n)
    keep = scores > cut
    need = n - int(np.count_nonzero(keep))
    if need:
        tied = (scores == cut).nonzero()[0]
        if need < len(tied):
            ranks = rank[tied]
            tied = tied[ranks <= nth(np, ranks, need - 1)]
        keep[tied] = True
    return keep.nonzero()[0]


class WorkArrays:
    """Zeroed scratch arrays by padded turn index, one row of three per turn.

    Turn ``t`` is row ``t + pad``, so that neighbours past either end of the history land
    in the padding instead of needing a bounds check before they are written. A turn's
    score, summed neighbour scores and `distinct` owner share a row (one cache line), since
    they are read and written together at scattered turns of a long history.
    """

    def __init__(self, np: Any, pad: int) -> None:
        self.pad = pad
        self.offsets = np.array([d for d in range(-pad, pad + 1) if d], dtype=np.int64)
        """Neighbour offsets: ``-pad .. pad`` without 0."""
        self._allocate(np, 0)

    def _allocate(self, np: Any, size: int) -> None:
        self.rows = np.zeros((size, 3))
        self.score = self.rows[:, 0]
        """Per row: the raw score of a kept match, then plus its neighbour share; else 0."""
        self.best = self.rows[:, 1]
        """Per row: the summed scores of the neighbours spreading to it; else 0."""
        self.owner = self.rows[:, 2]
        """Scratch for `distinct` (never cleared: only entries just written are read)."""

    def ensure(self, np: Any, turns: int) -> None:
        """Room for ``turns`` turns (grown geometrically, still zero)."""
        if turns + 2 * self.pad > len(self.rows):
            self._allocate(np, max(turns + turns // 2, 2 * len(self.rows)) + 2 * self.pad + 64)
