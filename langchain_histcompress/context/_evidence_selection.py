"""Filling the data budget from a fused ranking of facts and older messages.

`ContextBuilder` (in `context`) with an
`~langchain_histcompress.recall.retrieval.EvidenceRetriever` takes ranked items in order while its
data estimate stays under the ceiling (`select_evidence`), then fills up with the most
recently updated facts. Costs come from the builder's `DataCosts`.

Example:
    >>> from langchain_histcompress.core.facts import Fact
    >>> old = Fact(id="a", content="x", updated_at="2024-01-01T00:00:00Z")
    >>> new = Fact(id="b", content="y", updated_at="2024-06-01T00:00:00Z")
    >>> [f.id for f in by_recency([old, new])]
    ['b', 'a']
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence

from langchain_histcompress.context._data_costs import DataCosts
from langchain_histcompress.context.data import _Data
from langchain_histcompress.context.window import _Estimate
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall.retrieval import RankedEvidence

PATIENCE = 32
"""Ranked items in a row that may fail to fit before the evidence scan stops."""
SMALLEST_ITEM = 4
"""Data room (tokens) below which no fact or message line can fit."""
_RECENCY = operator.attrgetter("updated_at", "id")


def by_recency(facts: Iterable[Fact]) -> list[Fact]:
    """``facts``, most recently updated first (ties: greater id first)."""
    return sorted(facts, key=_RECENCY, reverse=True)


def _rooms(estimate: _Estimate, ceiling: int) -> tuple[int, int, int]:
    """Room under ``ceiling`` for one more fact's line, one more turn's, and in all."""
    return (
        ceiling - estimate.with_fact(0),
        ceiling - estimate.with_turn(0),
        ceiling - estimate.total,
    )


def select_evidence(
    ranking: Iterable[RankedEvidence],
    costs: DataCosts,
    data: _Data,
    estimate: _Estimate,
    ceiling: int,
    shown: set[str],
    recent: Sequence[Fact],
    *,
    top_k: int,
    turn_limit: int,
    fill_with_recent: bool,
) -> None:
    """Fill ``data`` (and ``estimate``) from ``ranking``, then with ``recent`` facts.

    Items are taken in ranked order while the estimate stays within ``ceiling``; the scan
    stops once the data budget is nearly spent or after `PATIENCE` items in a row did not
    fit. A fact whose source messages are all shown (``shown``, updated in place with what
    is chosen) is skipped, and so is a message already shown or that a chosen fact was
    extracted from. At most ``top_k`` facts and ``turn_limit`` messages are taken; with
    ``fill_with_recent``, the facts of ``recent`` (the pool, most recently updated first,
    see `by_recency`) not taken yet fill up the room left.
    """
    # the hot loop: room for one more fact / turn kept in locals, cached costs looked up
    # inline (most ranked items were costed on an earlier turn or as they arrived)
    fact_costs = costs.fact_costs
    turn_costs = costs.turn_costs.entries
    facts, turns = data.facts, data.turns
    chosen: set[str] = set()
    covered = shown.issuperset
    fact_room, turn_room, left = _rooms(estimate, ceiling)
    misses = 0
    for entry in ranking:
        if misses >= PATIENCE or left < SMALLEST_ITEM:
            break
        item = entry.item
        if isinstance(item, Fact):
            sources = item.source_ids
            if len(facts) >= top_k or (sources and covered(sources)):
                continue
            hit = fact_costs.get(item.id)
            cost = hit[1] if hit is not None and hit[0] is item else costs.fact_cost(item)
            if cost > fact_room:
                misses += 1
                continue
            facts.append(item)
            estimate.add_fact(cost)
            chosen.add(item.id)
            shown.update(sources)
        else:
            key = str(item.id)
            if len(turns) >= turn_limit or key in shown:
                continue
            known = turn_costs.get(id(item))
            if known is not None and known[0] is item:
                fitting: int | None = known[1]
            else:
                fitting = costs.fitting_turn_cost(item, estimate, ceiling)
            if fitting is None or fitting > turn_room:
                misses += 1
                continue
            turns.append((entry.position, item))
            estimate.add_turn(fitting)
            shown.add(key)
        fact_room, turn_room, left = _rooms(estimate, ceiling)
        misses = 0
    if fill_with_recent and len(facts) < top_k:
        for fact in recent:
            if len(facts) >= top_k or left < 1:
                break
            sources = fact.source_ids
            if fact.id in chosen or (sources and covered(sources)):
                continue
            hit = fact_costs.get(fact.id)
            cost = hit[1] if hit is not None and hit[0] is fact else costs.fact_cost(fact)
            if cost <= fact_room:
                facts.append(fact)
                estimate.add_fact(cost)
                fact_room, turn_room, left = _rooms(estimate, ceiling)
