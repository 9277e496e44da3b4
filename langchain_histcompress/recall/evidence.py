"""Facts and raw turns ranked together for a question about a long conversation (offline).

`EvidenceRetriever` scores facts and turns by BM25, each turn also by its nearest
neighbours (an answer often sits next to the turn that names the topic), each fact by the
turn it was extracted from, and merges the two lists by reciprocal rank fusion. Its
indexes are kept between calls, per conversation; with numpy installed the turns are
scored and ranked over arrays, with the same result.
"""

from __future__ import annotations

import itertools
import threading
from array import array
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall._conversations import Conversation, _SourceSlots
from langchain_histcompress.recall._evidence_arrays import (
    WorkArrays,
    best_n,
    distinct,
    largest,
    nth,
    sum_by_row,
)
from langchain_histcompress.recall._retriever_options import (
    check_bm25,
    check_count,
    check_known_prefix,
    check_names,
    check_postings,
    conversations,
)
from langchain_histcompress.recall._turn_index import _TurnIndex
from langchain_histcompress.recall.bm25 import _check_k, _numpy, _sum_by_slot, _top
from langchain_histcompress.recall.turn_retriever import DEFAULT_MAX_TERM_POSTINGS

__all__ = ["EvidenceRetriever", "RankedEvidence"]


_MATCH_LIMIT = 2_048
"""Best-matching messages kept per query by `EvidenceRetriever` (far more than any context
shows; bounds the work on very long histories)."""
_SPREAD_LIMIT = 512
"""Best-matching messages whose score spreads to their neighbours."""


def _ordered_turns(
    ranked: Sequence[str],
    scores: Mapping[str, float],
    position: Mapping[str, int],
    messages: Sequence[BaseMessage],
    only_before: int | None,
    turn_ids: Container[str] | None,
) -> Iterator[tuple[int, BaseMessage]]:
    """``(position, message)`` of the ``ranked`` keys (best score first), earliest first on ties.

    ``ranked`` holds keys of ``scores``, best first; each run of equal scores is ordered by
    position when first reached, and the restrictions (``only_before``, ``turn_ids``) are
    applied then. ``position`` only ever gains keys while a history grows (a restart binds
    a new dictionary), so reading it lazily sees the values of the call; the messages are
    read from the call's own ``messages``.
    """
    start, end = 0, len(ranked)
    while start < end:
        score = scores[ranked[start]]
        stop = start + 1
        while stop < end and scores[ranked[stop]] == score:
            stop += 1
        group = sorted(
            (position[key], key)
            for key in ranked[start:stop]
            if (only_before is None or position[key] < only_before)
            and (turn_ids is None or str(messages[position[key]].id) in turn_ids)
        )
        for at, _ in group:
            yield at, messages[at]
        start = stop


def _listed_turns(
    np: Any,
    turns: Any,
    chunks: Iterable[Any],
    turn_positions: array[int],
    messages: Sequence[BaseMessage],
    only_before: int | None,
    turn_ids: Container[str] | None,
) -> Iterator[tuple[int, BaseMessage]]:
    """``(position, message)`` of the ranked ``turns`` (indexes in ``keys``), chunk by chunk.

    Each chunk of ``chunks`` indexes ``turns`` in ranked order; it is mapped to positions
    and restricted by ``only_before`` over arrays, by ``turn_ids`` as items are taken (as
    in `_ordered_turns`).
    """
    for chunk in chunks:
        at = _TurnIndex.gather(np, turn_positions, turns[chunk])
        if only_before is not None:
            at = at[at < only_before]
        for position in at.tolist():
            message = messages[position]
            if turn_ids is None or str(message.id) in turn_ids:
                yield position, message


_FIRST_RANKED = 128
"""Ranked messages ordered before the rest are looked at: a context shows a few dozen, so
the other matches (thousands on a long history) are usually never ordered."""


def _ranked_order(np: Any, scores: Any, turns: Any) -> Iterator[Any]:
    """Indexes of ``scores`` by score descending, then turn ascending, in chunks, lazily.

    The best `_FIRST_RANKED` scores (with every index tied at the cut) are sorted first;
    every other index scores strictly less, so sorting the rest afterwards, if the caller
    gets that far, continues the same order as one sort of all of them.
    """
    size = len(scores)
    if size > _FIRST_RANKED:
        cut = nth(np, scores, size - _FIRST_RANKED)
        head = (scores >= cut).nonzero()[0]
        yield head[np.lexsort((turns[head], -scores[head]))]
        rest = (scores < cut).nonzero()[0]
        if len(rest):
            yield rest[np.lexsort((turns[rest], -scores[rest]))]
    elif size:
        yield np.lexsort((turns, -scores))


def _best_sources(
    sources: Mapping[str, Sequence[str]], scores: Mapping[str, float]
) -> list[tuple[str, float]]:
    """``(fact id, best raw score of its source messages)`` for the facts with one > 0."""
    out: list[tuple[str, float]] = []
    if not scores:
        return out
    get = scores.get
    for fact_id, keys in sources.items():
        best = 0.0
        for key in keys:
            score = get(key)
            if score is not None and score > best:
                best = score
        if best:
            out.append((fact_id, best))
    return out


@dataclass(frozen=True)
class RankedEvidence:
    """One item of an `EvidenceRetriever` ranking."""

    item: Fact | BaseMessage
    """The fact or the conversation message."""
    score: float
    """Fused score (reciprocal rank fusion of the fact and turn rankings); higher is better."""
    position: int = 0
    """Index of the item in the ``facts`` or ``messages`` sequence it came from."""

    @property
    def is_fact(self) -> bool:
        """Whether the item is a fact (else a message)."""
        return isinstance(self.item, Fact)


_new = object.__new__


def _ranked(item: Fact | BaseMessage, score: float, position: int) -> RankedEvidence:
    """``RankedEvidence(item, score, position)``, built at a third of the cost.

    A frozen dataclass sets each field through ``object.__setattr__``; filling the new
    instance's ``__dict__`` gives the same object, and a ranking builds one per item taken.
    """
    entry: RankedEvidence = _new(RankedEvidence)
    fields = entry.__dict__
    fields["item"] = item
    fields["score"] = score
    fields["position"] = position
    return entry


class EvidenceRetriever:
    """Rank facts and raw conversation turns together for a question (BM25 family, offline).

    Built for questions about a long conversation, where the answer may sit in a remembered
    fact or only in an old turn, and where the turn that names a topic is often not the turn
    that answers it. Three BM25 signals, then one fused list:

    1. **Turns**: BM25 over every message of the conversation, plus ``neighbour_weight``
       times the sum of the scores of the ``neighbour_window`` messages on either side,
       so the reply to a matching question (and the question before a matching answer)
       ranks too, and a message amid a stretch of matches more than one next to a single
       match. Speaker names, when known, are indexed with the text; they rank the
       messages the question's other words find and retrieve none alone (see
       ``speaker_names`` of `BM25TurnRetriever`). A message's time (``"timestamp"`` or
       ``"created_at"`` in ``additional_kwargs`` or ``response_metadata``, as the
       compressor reads it) is indexed as month and year terms, so a question naming a
       month or a year ("in June", "in 2022") finds the messages written then.
    2. **Facts**: BM25 over fact contents, plus ``source_weight`` times the best score of
       the turns the fact was extracted from (``source_ids``).
    3. **Fusion**: reciprocal rank fusion, ``1 / (rrf_k + rank)`` in each list (a fact
       before a turn on equal scores), so neither list's raw score scale dominates.

    Items sharing no word with the query, directly or through a neighbour or source, are
    left out. Indexes are incremental and kept between calls, one message index and one
    fact index per conversation (see `BM25TurnRetriever`): the facts passed with a
    conversation's messages are indexed with that conversation, so one retriever serves
    many users without one's messages or facts changing another's ranking. On
    very long histories the work per query stays bounded: query words found in more than
    ``max_term_postings`` texts are skipped, the best 2,048 matching messages are kept and
    the best 512 spread their score to neighbours.

    Args:
        neighbour_window: Messages on each side whose score spreads to a message.
        neighbour_weight: Share of the neighbours' summed scores added to a message's score.
        source_weight: Share of the best source turn's score added to a fact's score.
        rrf_k: Reciprocal rank fusion constant.
        speaker_names: Message type -> speaker name, indexed with the messages (they rank
            but do not retrieve, see `BM25TurnRetriever`).
        include_tool_results: Also rank tool results.
        max_cached: Cache bound of a conversation's message index (see `BM25TurnRetriever`).
        max_conversations: Conversations whose indexes (messages, facts) are kept; the least
            recently used is dropped past it (see `BM25TurnRetriever`).
        max_term_postings: Query words found in more texts than this are ignored (see
            `BM25Index.scores`), which bounds the work per query on very long histories;
            ``None`` scores every word.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.core.facts import Fact
        >>> history = [HumanMessage("What did you paint last week?", id="h1"),
        ...            AIMessage("A lake at sunrise.", id="a1"),
        ...            HumanMessage("Nice! I adopted a kitten.", id="h2")]
        >>> facts = [Fact(id="f-1", content="The user adopted a kitten", source_ids=["h2"])]
        >>> retriever = EvidenceRetriever(neighbour_window=1)
        >>> [r.item.id for r in retriever.rank("What was painted?", facts, history)]
        ['h1', 'a1']
        >>> [r.item.id for r in retriever.rank("Any new pets or kittens?", facts, history)]
        ['f-1', 'h2', 'a1']
    """

    def __init__(
        self,
        *,
        neighbour_window: int = 2,
        neighbour_weight: float = 0.6,
        source_weight: float = 0.3,
        rrf_k: float = 60.0,
        speaker_names: Mapping[str, str] | None = None,
        include_tool_results: bool = True,
        max_cached: int = 200_000,
        max_conversations: int = 8,
        max_term_postings: int | None = DEFAULT_MAX_TERM_POSTINGS,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        """Validate and store the configuration (see the class docstring)."""
        check_bm25(k1, b)
        self.max_term_postings = check_postings(max_term_postings)
        if (
            isinstance(neighbour_window, bool)
            or not isinstance(neighbour_window, int)
            or neighbour_window < 0
        ):
            msg = f"neighbour_window must be an int >= 0, got {neighbour_window!r}"
            raise ConfigurationError(msg)
        for name, value in (
            ("neighbour_weight", neighbour_weight),
            ("source_weight", source_weight),
            ("rrf_k", rrf_k),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                msg = f"{name} must be a number >= 0, got {value!r}"
                raise ConfigurationError(msg)
        self.neighbour_window = neighbour_window
        self.neighbour_weight = float(neighbour_weight)
        self.source_weight = float(source_weight)
        self.rrf_k = float(rrf_k)
        self.max_cached = check_count("max_cached", max_cached)
        self.max_conversations = check_count("max_conversations", max_conversations)
        self._conversations = conversations(
            self.max_conversations,
            k1=k1,
            b=b,
            max_cached=self.max_cached,
            include_tool_results=include_tool_results,
            speaker_names=check_names(speaker_names),
        )
        # the state of the call in progress (set under the lock, see `_use`)
        self._turns = self._conversations.states[-1].turns
        self._facts = self._conversations.states[-1].facts
        self._source_slots: _SourceSlots | None = None
        self._work: WorkArrays | None = None
        self._lock = threading.Lock()

    def _turn_scores(
        self,
        query: str,
        messages: Sequence[BaseMessage],
        *,
        spread: bool = True,
        known_prefix: int = 0,
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Raw and neighbour-expanded BM25 scores of the messages (call under the lock).

        With ``spread=False`` (no message is to be returned) the expanded scores are left
        empty: only the raw ones are used, to score facts by their sources. Of the matches
        tied at a limit (`_MATCH_LIMIT`, `_SPREAD_LIMIT`), the earliest indexed are kept.
        """
        turns = self._turns
        turns.sync(messages, known_prefix)
        index = turns.index
        base = index.scores(
            query,
            allowed=turns.allowed(),
            max_postings=self.max_term_postings,
            modifiers=turns.name_terms,
        )
        base = _top(base, _MATCH_LIMIT, index.slot)
        if not spread:
            return base, {}
        expanded = dict(base)
        if self.neighbour_window and self.neighbour_weight and base:
            keys, order, width = turns.keys, turns.order, self.neighbour_window
            near_sum: dict[int, float] = {}
            seeds = [
                (order[key], score) for key, score in _top(base, _SPREAD_LIMIT, index.slot).items()
            ]
            # offset after offset, as `_spread` adds them: the same sums, bit for bit
            for offset in (d for d in range(-width, width + 1) if d):
                for at, score in seeds:
                    near = at + offset
                    if 0 <= near < len(keys):
                        near_sum[near] = near_sum.get(near, 0.0) + score
            for near, score in near_sum.items():
                key = keys[near]
                expanded[key] = expanded.get(key, 0.0) + self.neighbour_weight * score
        return base, expanded

    def _turn_ranking(
        self,
        np: Any,
        query: str,
        messages: Sequence[BaseMessage],
        only_before: int | None,
        turn_ids: Container[str] | None,
        known_prefix: int = 0,
    ) -> tuple[list[tuple[str, float]], Iterator[tuple[int, BaseMessage]]]:
        """`_turn_scores` over numpy arrays: the facts' best sources and the ranked messages.

        Every score is computed with the same floating-point operations as in
        `_turn_scores`, so the ranking is identical: expanded score descending, then
        earliest message. The ranked messages are ordered and listed as the caller takes
        them (see `_ranked_order`); with ``only_before <= 0`` none is (no spreading).
        Call after the facts are synced (their sources are scored here).
        """
        turns = self._turns
        turns.sync(messages, known_prefix)
        work = self._work
        if work is None or work.pad != self.neighbour_window:
            work = self._work = WorkArrays(np, self.neighbour_window)
        work.ensure(np, len(turns.keys))
        try:
            return self._rank_arrays(np, work, query, messages, only_before, turn_ids)
        except BaseException:
            self._work = None  # may hold nonzero entries now
            raise

    def _rank_arrays(
        self,
        np: Any,
        work: WorkArrays,
        query: str,
        messages: Sequence[BaseMessage],
        only_before: int | None,
        turn_ids: Container[str] | None,
    ) -> tuple[list[tuple[str, float]], Iterator[tuple[int, BaseMessage]]]:
        """`_turn_ranking` once the messages are synced and ``work`` is sized."""
        turns, pad = self._turns, work.pad
        at, scores, slots, identity = self._matches(np, work, query)
        # the seeds' cut, taken among the kept matches, is the same taken among them all:
        # both cuts in one selection
        kept_cut, seed_cut = largest(np, scores, (_MATCH_LIMIT, _SPREAD_LIMIT))
        kept = best_n(np, scores, _MATCH_LIMIT, slots, kept_cut)
        if kept is not None:
            at, scores = at[kept], scores[kept]
            slots = at if identity else slots[kept]
        # by padded turn: the raw scores of the kept matches (all > 0), then neighbour shares
        by_turn = work.score
        by_turn[at] = scores
        try:
            best_source = (
                self._best_sources(np, by_turn, pad, identity) if self.source_weight else []
            )
            if only_before is not None and only_before <= 0:  # positions are >= 0
                return best_source, iter(())
            if self.neighbour_window and self.neighbour_weight and len(at):
                at = self._spread(np, work, at, scores, slots, seed_cut)
            scores = by_turn[at]
        finally:
            by_turn[at] = 0.0
        at -= pad
        return best_source, _listed_turns(
            np,
            at,
            _ranked_order(np, scores, at),
            turns.turn_positions,
            messages,
            only_before,
            turn_ids,
        )

    def _matches(self, np: Any, work: WorkArrays, query: str) -> tuple[Any, Any, Any, bool]:
        """``(at, scores, slots, identity)`` of the messages matching ``query`` (scores > 0).

        ``at``: each match's padded turn (in no fixed order); ``slots``: its slot, which
        breaks ties at a limit (the earliest indexed is kept); a turn when ``identity``
        (every slot is the turn of the same index).
        """
        turns, pad = self._turns, work.pad
        index = turns.index
        slots, scores, counts = index._posting_scores(
            np, query, self.max_term_postings, turns.name_terms
        )
        identity = turns.identity and index.slots == len(turns.keys)
        if identity and len(counts) > 1:  # a slot is a turn: sum into the work arrays
            at, scores = sum_by_row(np, work, slots + pad, scores)
            slots = at
        else:
            if len(counts) > 1:
                slots, scores = _sum_by_slot(np, slots, scores)
            if identity:
                at = slots = slots + pad
            else:
                at = turns.gather(np, turns.slot_turns, slots)
                if turns.allowed() is not None:  # texts this call does not hold
                    mine = at >= 0
                    at, scores, slots = at[mine], scores[mine], slots[mine]
                at += pad
        positive = scores > 0
        if not positive.all():
            at, scores = at[positive], scores[positive]
            slots = at if identity else slots[positive]
        return at, scores, slots, identity

    def _spread(
        self, np: Any, work: WorkArrays, at: Any, scores: Any, slots: Any, seed_cut: Any
    ) -> Any:
        """Add the seeds' summed share to each neighbour in ``work.score``; return ``at`` grown.

        The seeds are the `_SPREAD_LIMIT` best of the kept matches ``at`` (raw ``scores``
        already in ``work.score``); the returned turns are ``at`` and then the neighbours
        that were not kept matches.
        """
        pad, size = work.pad, len(self._turns.keys)
        by_turn = work.score
        seeds = best_n(np, scores, _SPREAD_LIMIT, slots, seed_cut)
        seed_at, seed_scores = (at, scores) if seeds is None else (at[seeds], scores[seeds])
        offsets = work.offsets
        best = work.best
        for offset in offsets.tolist():  # seeds are distinct: one add per turn and offset
            best[seed_at + offset] += seed_scores
        near = distinct(np, work.owner, (offsets[:, None] + seed_at).ravel())
        share = best[near]
        best[near] = 0.0
        if seed_at.min() < 2 * pad or seed_at.max() >= size:  # in padding
            inside = (near >= pad) & (near < size + pad)
            near, share = near[inside], share[inside]
        expanded = by_turn[near]
        fresh = near[expanded == 0.0]  # not a kept match
        expanded += self.neighbour_weight * share  # distinct: added once each
        by_turn[near] = expanded
        return np.concatenate([at, fresh])

    def _best_sources(
        self, np: Any, by_turn: Any, pad: int, identity: bool
    ) -> list[tuple[str, float]]:
        """`_best_sources` over arrays: each fact's best source among the raw scores.

        ``by_turn`` holds the raw score of each kept match at its padded turn index, and
        zero elsewhere. With ``identity``, every slot is the turn of the same index.
        """
        sources, index = self._facts.sources, self._turns.index
        if not any(sources.values()):  # no fact names a source message
            return []
        cached = self._source_slots
        if cached is None or not cached.valid(sources, index):
            cached = self._source_slots = _SourceSlots(np, sources, index, cached)
        if not len(cached.slots):
            return []
        if identity:  # max of each fact's run of sources
            best = np.maximum.reduceat(by_turn[cached.slots + pad], cached.starts)
            fact_ids = cached.facts_with_slots
        else:
            at = self._turns.gather(np, self._turns.slot_turns, cached.slots)
            mine = at >= 0
            best = np.zeros(len(cached.fact_ids))
            np.maximum.at(best, cached.owners[mine], by_turn[at[mine] + pad])
            fact_ids = cached.fact_ids
        found = best.nonzero()[0]
        return list(zip([fact_ids[i] for i in found.tolist()], best[found].tolist(), strict=True))

    def iter_rank(
        self,
        query: str,
        facts: Sequence[Fact],
        messages: Sequence[BaseMessage],
        *,
        turn_ids: Container[str] | None = None,
        only_before: int | None = None,
        known_prefix: int = 0,
    ) -> Iterator[RankedEvidence]:
        """Like `rank`, lazily: scoring happens at once, ordering as items are taken.

        With numpy installed, messages are scored and ranked over arrays; without it, by
        one sort of their scores (in C), ties broken as items are taken. Either way the
        ranking is the same, and the restrictions are applied as items are taken, so a
        caller filling a token budget pays in Python for what it looks at, not for every
        match.
        """
        check_known_prefix(known_prefix)
        if not query.strip() or (not facts and not messages):
            with self._lock:  # these messages are not indexed: the next call vouches for them
                self._conversations.untrust(messages)
            return iter(())
        with self._lock:
            state = self._use(messages, known_prefix)
            np = _numpy()
            turns: Iterator[tuple[int, BaseMessage]]
            best_source: list[tuple[str, float]]
            positions = self._facts.sync(facts)
            returned = only_before is None or only_before > 0  # positions are >= 0
            if not returned and not (self.source_weight and any(self._facts.sources.values())):
                # no message is returned and none lends its score to a fact: only index them
                self._turns.sync(messages, known_prefix)
                best_source, turns = [], iter(())
            elif np is not None:
                best_source, turns = self._turn_ranking(
                    np, query, messages, only_before, turn_ids, known_prefix
                )
            else:
                base_keys, turn_scores = self._turn_scores(
                    query, messages, spread=returned, known_prefix=known_prefix
                )
                turns = _ordered_turns(
                    sorted(turn_scores, key=turn_scores.__getitem__, reverse=True),
                    turn_scores,
                    self._turns.position,
                    messages,
                    only_before,
                    turn_ids,
                )
                best_source = (
                    _best_sources(self._facts.sources, base_keys) if self.source_weight else []
                )
            fact_scores = self._facts.index.scores(query, max_postings=self.max_term_postings)
            for fact_id, best in best_source:
                fact_scores[fact_id] = fact_scores.get(fact_id, 0.0) + self.source_weight * best
            state.source_slots = self._source_slots
        # best score first, then earliest (positions are distinct)
        ranked_facts = sorted((-score, positions[key]) for key, score in fact_scores.items())
        return self._fuse([(at, facts[at]) for _, at in ranked_facts], turns)

    def _use(self, messages: Sequence[BaseMessage], known_prefix: int) -> Conversation:
        """Make the state of the conversation of ``messages`` the current one (under the lock)."""
        state = self._conversations.pick(messages, known_prefix)
        self._turns, self._facts, self._source_slots = state.turns, state.facts, state.source_slots
        return state

    def _fuse(
        self,
        ranked_facts: list[tuple[int, Fact]],
        turns: Iterator[tuple[int, BaseMessage]],
    ) -> Iterator[RankedEvidence]:
        # With one weight per list, reciprocal rank fusion interleaves the two rankings:
        # fact 1, turn 1, fact 2, turn 2... (a fact first on equal fused scores).
        # `_ranked` inlined in the loop over messages: it runs once or twice per item taken
        rrf_k, rank, count = self.rrf_k, 0, len(ranked_facts)
        for at, message in turns:
            score = 1.0 / (rrf_k + rank + 1)
            if rank < count:
                fact_at, fact = ranked_facts[rank]
                entry: RankedEvidence = _new(RankedEvidence)
                fields = entry.__dict__
                fields["item"], fields["score"], fields["position"] = fact, score, fact_at
                yield entry
            entry = _new(RankedEvidence)
            fields = entry.__dict__
            fields["item"], fields["score"], fields["position"] = message, score, at
            yield entry
            rank += 1
        for fact_at, fact in ranked_facts[rank:]:
            yield _ranked(fact, 1.0 / (rrf_k + rank + 1), fact_at)
            rank += 1

    def rank(
        self,
        query: str,
        facts: Sequence[Fact],
        messages: Sequence[BaseMessage],
        *,
        turn_ids: Container[str] | None = None,
        only_before: int | None = None,
        k: int | None = None,
        known_prefix: int = 0,
    ) -> list[RankedEvidence]:
        """Facts and messages relevant to ``query``, best first.

        Args:
            query: The question.
            facts: Candidate facts (the caller filters expired or low-confidence ones).
            messages: The conversation, in order: every message is indexed and may lend its
                score to its neighbours and to the facts extracted from it.
            turn_ids: When given, only messages with these ids are returned (e.g. the ones
                not already shown verbatim); the others still score neighbours and facts.
            only_before: When given, only messages at an index below it are returned.
            k: At most this many items (``None``: all that score).
            known_prefix: The caller vouches that ``messages[:known_prefix]`` are the very
                message objects, in order, that began the previous call's ``messages`` (a
                history list the caller only appends to): they are then not compared
                again, which spares a pass over a long history per call. Honoured only
                when ``messages`` is the same list object as in the previous call (so a
                call by another caller in between is never vouched for). ``0`` (the
                default) vouches for nothing; the result is the same either way.

        Returns:
            The ranking; facts and messages are the objects passed in.
        """
        if k is not None:
            _check_k(k)
        ranked = self.iter_rank(
            query,
            facts,
            messages,
            turn_ids=turn_ids,
            only_before=only_before,
            known_prefix=known_prefix,
        )
        return list(ranked if k is None else itertools.islice(ranked, k))
