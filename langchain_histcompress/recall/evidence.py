"""Raw-turn and evidence retrieval over a growing conversation (BM25 family, offline).

`BM25TurnRetriever` ranks conversation messages for the hybrid context (facts + retrieved
raw turns). `EvidenceRetriever` ranks facts and raw turns *together* for a question about a
long conversation: BM25 over facts and over turns, each turn also scored by its nearest
neighbours (an answer often sits next to the turn that names the topic), each fact by the
turn it was extracted from, the two lists merged by reciprocal rank fusion. Both keep their
message index between calls and read only the messages a growing history added; one
retriever serves many conversations, each with indexes of its own.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> history = [HumanMessage("I adopted a kitten", id="h1"), AIMessage("Cute!", id="a1")]
    >>> [str(m.id) for m in BM25TurnRetriever().retrieve("kitten", history, 3)]
    ['h1']
"""

from __future__ import annotations

import heapq
import itertools
import threading
from array import array
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall._conversations import Conversation, Conversations, _SourceSlots
from langchain_histcompress.recall._evidence_arrays import (
    WorkArrays,
    best_n,
    distinct,
    largest,
    nth,
    sum_by_row,
)
from langchain_histcompress.recall._turn_index import _TurnIndex
from langchain_histcompress.recall.bm25 import (
    BM25Index,
    _check_k,
    _FactIndex,
    _numpy,
    _sum_by_slot,
    _top,
)

__all__ = [
    "DEFAULT_MAX_TERM_POSTINGS",
    "BM25TurnRetriever",
    "EvidenceRetriever",
    "RankedEvidence",
]


def _conversations(
    limit: int,
    *,
    k1: float,
    b: float,
    max_cached: int,
    include_tool_results: bool,
    speaker_names: Mapping[str, str],
) -> Conversations:
    def new() -> Conversation:
        turns = _TurnIndex(
            k1=k1,
            b=b,
            max_cached=max_cached,
            include_tool_results=include_tool_results,
            speaker_names=speaker_names,
        )
        return Conversation(turns, _FactIndex(k1=k1, b=b, text=_content_only))

    return Conversations(limit, new)


DEFAULT_MAX_TERM_POSTINGS = 2_000
"""Default bound on how many messages or facts a query word may appear in to be scored."""

_BATCH_POSTINGS = 1_024
"""Postings `BM25TurnRetriever` scores in one batch of query terms (bounds what one call
allocates; a term with more is scored on its own)."""

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


def _check_bm25(k1: float, b: float) -> None:
    BM25Index(k1=k1, b=b)


def _check_postings(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"max_term_postings must be an int >= 1 or None, got {value!r}"
        raise ConfigurationError(msg)
    return value


def _check_known_prefix(known_prefix: object) -> None:
    if isinstance(known_prefix, bool) or not isinstance(known_prefix, int) or known_prefix < 0:
        msg = f"known_prefix must be an int >= 0, got {known_prefix!r}"
        raise ConfigurationError(msg)


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{name} must be an int >= 1, got {value!r}"
        raise ConfigurationError(msg)
    return value


def _check_names(speaker_names: object) -> dict[str, str]:
    if speaker_names is None:
        return {}
    if not isinstance(speaker_names, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in speaker_names.items()
    ):
        msg = (
            "speaker_names must map message types to names, e.g. "
            f"{{'human': 'Ann', 'ai': 'Bot'}}, got {speaker_names!r}"
        )
        raise ConfigurationError(msg)
    return {k: v for k, v in speaker_names.items() if v.strip()}


class BM25TurnRetriever:
    """Rank conversation messages by BM25 (for hybrid contexts with retrieved raw turns).

    The index is incremental and cached across calls: each message is tokenized once (a
    message object seen before costs a dictionary lookup; an edited message with the same id
    is re-indexed), and when a call's messages extend the previous call's (the same objects
    first, checked at C speed) only the new ones are looked at, so repeated calls
    on a growing history cost little. Messages without an id are keyed by position while the
    history only grows.

    One retriever may serve many conversations (users): the index, its BM25 statistics and
    the ids seen are kept per conversation, so a ranking never depends on another
    conversation's messages, whose ids may be the same. A call continues the conversation
    whose last indexed messages its messages begin with (the same objects, or equal copies
    read back from a checkpoint), else it starts a new one (an edited or cut history is
    indexed afresh).

    Args:
        max_cached: When a conversation's cache holds more messages than this, it is rebuilt
            from the messages of the current call.
        max_conversations: Conversations whose index is kept; the least recently used is
            dropped past it (and indexed afresh if it comes back). Each index takes about
            1.3 KB per chat message (13 MB for a conversation of 10,000 messages).
        include_tool_results: Also rank tool results.
        speaker_names: Message type -> speaker name (``{"human": "Ann", "ai": "Bob"}``),
            indexed with each message's text so that, of the messages a question's other
            words find, the named speaker's rank first; a message's own ``name`` takes
            precedence. A name ranks but does not retrieve: a message matching nothing
            but a speaker's name (a greeting, a bare "Thanks, Ann!") is left out, unless
            no other word of the question is found at all.
        max_term_postings: Query words found in more messages than this are ignored (see
            `BM25Index.scores`); ``None`` scores every word.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> history = [HumanMessage("My dog is called Rex", id="m1"), AIMessage("Nice!", id="m2"),
        ...            HumanMessage("I work in Bergen", id="m3")]
        >>> [m.id for m in BM25TurnRetriever().retrieve("what is my dog called", history, 2)]
        ['m1']
    """

    def __init__(
        self,
        *,
        max_cached: int = 200_000,
        max_conversations: int = 8,
        include_tool_results: bool = True,
        speaker_names: Mapping[str, str] | None = None,
        max_term_postings: int | None = DEFAULT_MAX_TERM_POSTINGS,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        """Validate and store the configuration."""
        _check_bm25(k1, b)
        self.max_term_postings = _check_postings(max_term_postings)
        self.max_cached = _check_count("max_cached", max_cached)
        self.max_conversations = _check_count("max_conversations", max_conversations)
        self.include_tool_results = include_tool_results
        self._conversations = _conversations(
            self.max_conversations,
            k1=k1,
            b=b,
            max_cached=self.max_cached,
            include_tool_results=include_tool_results,
            speaker_names=_check_names(speaker_names),
        )
        self._turns = self._conversations.states[-1].turns
        self._lock = threading.Lock()
        self._sums: Any = None
        """Per-slot score sums (numpy), all zero between calls (see `_best_over_arrays`)."""

    def retrieve(
        self, query: str, messages: Sequence[BaseMessage], k: int, *, known_prefix: int = 0
    ) -> list[BaseMessage]:
        """The at most ``k`` messages sharing words with ``query``, best first (ties: earliest).

        ``known_prefix``: the caller vouches that ``messages[:known_prefix]`` are the message
        objects, in order, that began the previous call's ``messages`` (a list it only
        appends to), as in `EvidenceRetriever.rank`: honoured only when ``messages`` is the
        same list object as in the previous call; the result is the same either way.
        """
        _check_k(k)
        _check_known_prefix(known_prefix)
        if not k or not messages:
            return []
        with self._lock:
            turns = self._turns = self._conversations.pick(messages, known_prefix).turns
            turns.sync(messages, known_prefix)
            np = _numpy()
            if np is not None:
                return self._best_over_arrays(np, turns, query, messages, k)
            scores = turns.index.scores(
                query,
                allowed=turns.allowed(),
                max_postings=self.max_term_postings,
                modifiers=turns.name_terms,
            )
            best = heapq.nsmallest(k, scores.items(), key=lambda i: (-i[1], turns.order[i[0]]))
            return [messages[turns.position[key]] for key, _ in best]

    def _best_over_arrays(
        self, np: Any, turns: _TurnIndex, query: str, messages: Sequence[BaseMessage], k: int
    ) -> list[BaseMessage]:
        """`retrieve` with numpy: the same scores and order, found over arrays.

        The query terms' postings are scored with the floating-point operations of
        `BM25Index.scores` and added per message, term after term, into one zeroed array
        kept between calls (so each sum is the one `scores` makes). Terms are taken in
        batches of about `_BATCH_POSTINGS` postings (a term with more is a batch of its own,
        read through views of the index's columns), and the best of each batch are picked
        at C speed (ties: earliest): the ``k`` best overall are among them. So a call
        allocates for one batch at a time, and only the picked messages reach Python.
        """
        index = turns.index
        terms, newest_only, retrieving = index._query_terms(
            query, self.max_term_postings, turns.name_terms
        )
        if not terms:
            return []
        newest = self.max_term_postings if newest_only else None
        sums = self._sums
        if sums is None or len(sums) < index.slots:
            sums = self._sums = np.zeros(max(index.slots + index.slots // 2, 1_024))
        batches: list[list[str]] = [[]]
        size = 0
        for term in terms[:retrieving]:
            count = min(len(index._postings[term]), newest or len(index._postings[term]))
            if batches[-1] and size + count > _BATCH_POSTINGS:
                batches.append([])
                size = 0
            batches[-1].append(term)
            size += count
        scored: list[tuple[Any, int]] = []  # each batch's slots (a view for one term)
        picked: set[tuple[float, int]] = set()
        try:
            for batch in batches:
                scored.append((self._add_scores(np, index, batch, newest, sums), len(batch)))
            for term in terms[retrieving:]:  # speaker names: only where another term matched
                self._add_scores(np, index, [term], newest, sums, matched_only=True)
            for slots, width in scored:
                picked.update(self._best_slots(np, turns, sums, slots, k * width))
            for slots, _ in scored:
                sums[slots] = 0.0
        except BaseException:
            self._sums = None  # may hold nonzero entries now
            raise
        finally:
            scored.clear()  # views pin the index's columns, which must stay growable
        positions = turns.turn_positions
        return [messages[positions[at]] for _, at in sorted(picked)[:k]]

    @staticmethod
    def _add_scores(
        np: Any,
        index: BM25Index,
        batch: list[str],
        newest: int | None,
        sums: Any,
        *,
        matched_only: bool = False,
    ) -> Any:
        """Add each posting's score of the ``batch`` terms to ``sums``; return their slots.

        ``matched_only``: add only to slots whose sum is already positive (a modifier term
        of `BM25Index.scores`, which ranks but does not retrieve).
        """
        start = -newest if newest else 0
        kinds = (np.int64, np.float64, np.float64)
        columns = [index._column(term) for term in batch]
        slots = tfs = lengths = None
        try:
            if len(batch) == 1:  # views of the term's own columns
                slots, tfs, lengths = (
                    np.frombuffer(column, dtype=kind)[start:]
                    for column, kind in zip(columns[0], kinds, strict=True)
                )
                weight: Any = index._weight(len(index._postings[batch[0]]))
            else:  # joined in one copy, term after term
                slots, tfs, lengths = (
                    np.frombuffer(b"".join([c[part][start:] for c in columns]), dtype=kind)
                    for part, kind in enumerate(kinds)
                )
                counts = [min(len(c[0]), newest or len(c[0])) for c in columns]
                weight = np.array([index._weight(len(index._postings[t])) for t in batch])
                weight = weight.repeat(counts)
            fixed, scale = index._length_terms()
            # weight * tf / (tf + fixed + scale * length), in that order
            divisor = tfs + fixed
            scores = lengths * scale
            divisor += scores
            np.multiply(weight, tfs, out=scores)
            scores /= divisor
            if matched_only:
                keep = sums[slots] > 0
                slots, scores = slots[keep], scores[keep]
            np.add.at(sums, slots, scores)  # in array order: a message's terms in query order
            return slots
        except BaseException:
            slots = tfs = lengths = None  # no view outlives the call in a traceback
            raise

    @staticmethod
    def _best_slots(
        np: Any, turns: _TurnIndex, sums: Any, slots: Any, n: int
    ) -> list[tuple[float, int]]:
        """``(-score, order)`` of at least the ``n`` best of ``slots`` (repeats allowed).

        A message is in ``slots`` at most once per term, so the ``n`` best entries of a
        batch of ``n / k`` terms hold its ``k`` best messages.
        """
        index = turns.index
        order = None
        try:
            totals = sums[slots]
            if turns.identity and index.slots == len(turns.keys):
                order = slots  # every slot is the message's place among the indexed ones
            else:
                order = turns.gather(np, turns.slot_turns, slots)
            keep = totals > 0
            if turns.allowed() is not None:  # texts this call does not hold
                keep &= order >= 0
            if not keep.all():
                totals, order = totals[keep], order[keep]
            chosen = best_n(np, totals, n, order)
            if chosen is not None:
                totals, order = totals[chosen], order[chosen]
            return list(zip((-totals).tolist(), order.tolist(), strict=True))
        finally:
            slots = order = None  # no view outlives the call in a traceback


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


def _content_only(fact: Fact) -> str:
    return fact.content


class EvidenceRetriever:
    """Rank facts and raw conversation turns together for a question (BM25 family, offline).

    Built for questions about a long conversation, where the answer may sit in a remembered
    fact or only in an old turn, and where the turn that names a topic is often not the turn
    that answers it. Three BM25 signals, then one fused list:

    1. **Turns**: BM25 over every message of the conversation, plus ``neighbour_weight``
       times the best score among the ``neighbour_window`` messages on either side, so
       the reply to a matching question (and the question before a matching answer)
       ranks too. Speaker names, when known, are indexed with the text; they rank the
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
        neighbour_weight: Share of the best neighbour's score added to a message's score.
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
        _check_bm25(k1, b)
        self.max_term_postings = _check_postings(max_term_postings)
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
        self.max_cached = _check_count("max_cached", max_cached)
        self.max_conversations = _check_count("max_conversations", max_conversations)
        self._conversations = _conversations(
            self.max_conversations,
            k1=k1,
            b=b,
            max_cached=self.max_cached,
            include_tool_results=include_tool_results,
            speaker_names=_check_names(speaker_names),
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
            best: dict[int, float] = {}
            seeds = _top(base, _SPREAD_LIMIT, index.slot).items()
            for key, score in seeds:
                at = order[key]
                for near in range(max(0, at - width), min(len(keys), at + width + 1)):
                    if near != at and score > best.get(near, 0.0):
                        best[near] = score
            for near, score in best.items():
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
        turns, pad = self._turns, work.pad
        index = turns.index
        slots, scores, counts = index._posting_scores(
            np, query, self.max_term_postings, turns.name_terms
        )
        # ``at``: each match's padded turn (in no fixed order); ``slots``: its slot, which
        # breaks ties at a limit (the earliest indexed is kept); a turn when ``identity``
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
                seeds = best_n(np, scores, _SPREAD_LIMIT, slots, seed_cut)
                seed_at, seed_scores = (at, scores) if seeds is None else (at[seeds], scores[seeds])
                offsets = work.offsets
                # offset-major: one row of seeds per offset (few, long broadcast rows)
                near = (offsets[:, None] + seed_at).ravel()
                best = work.best
                np.maximum.at(best, near, np.concatenate([seed_scores] * len(offsets)))
                near = distinct(np, work.owner, near)
                share = best[near]
                best[near] = 0.0
                if seed_at.min() < 2 * pad or seed_at.max() >= len(turns.keys):  # in padding
                    inside = (near >= pad) & (near < len(turns.keys) + pad)
                    near, share = near[inside], share[inside]
                expanded = by_turn[near]
                fresh = near[expanded == 0.0]  # not a kept match
                expanded += self.neighbour_weight * share  # distinct: added once each
                by_turn[near] = expanded
                at = np.concatenate([at, fresh])
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
        _check_known_prefix(known_prefix)
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
