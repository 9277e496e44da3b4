"""BM25 ranking of a growing conversation's messages, for contexts with retrieved raw turns.

`BM25TurnRetriever` keeps its message index between calls and reads only the messages a
growing history added; one retriever serves many conversations, each with an index of its
own. With numpy installed the scores are summed over arrays, with the same result.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> history = [HumanMessage("I adopted a kitten", id="h1"), AIMessage("Cute!", id="a1")]
    >>> [str(m.id) for m in BM25TurnRetriever().retrieve("kitten", history, 3)]
    ['h1']
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_histcompress.recall._evidence_arrays import best_n
from langchain_histcompress.recall._retriever_options import (
    check_bm25,
    check_count,
    check_known_prefix,
    check_names,
    check_postings,
    conversations,
)
from langchain_histcompress.recall._turn_index import _TurnIndex
from langchain_histcompress.recall.bm25 import BM25Index, _check_k, _numpy

__all__ = ["DEFAULT_MAX_TERM_POSTINGS", "BM25TurnRetriever"]


DEFAULT_MAX_TERM_POSTINGS = 2_000
"""Default bound on how many messages or facts a query word may appear in to be scored."""

_BATCH_POSTINGS = 1_024
"""Postings `BM25TurnRetriever` scores in one batch of query terms (bounds what one call
allocates; a term with more is scored on its own)."""


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
        check_bm25(k1, b)
        self.max_term_postings = check_postings(max_term_postings)
        self.max_cached = check_count("max_cached", max_cached)
        self.max_conversations = check_count("max_conversations", max_conversations)
        self.include_tool_results = include_tool_results
        self._conversations = conversations(
            self.max_conversations,
            k1=k1,
            b=b,
            max_cached=self.max_cached,
            include_tool_results=include_tool_results,
            speaker_names=check_names(speaker_names),
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
        check_known_prefix(known_prefix)
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
        at C speed (ties: earliest), once ``k`` are picked only among the messages ranking
        ahead of the ``k``-th best so far: the ``k`` best overall are among them. So a call
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
        best: list[tuple[float, int]] = []  # the k best (-score, order) picked so far
        try:
            for batch in batches:
                scored.append((self._add_scores(np, index, batch, newest, sums), len(batch)))
            for term in terms[retrieving:]:  # speaker names: only where another term matched
                self._add_scores(np, index, [term], newest, sums, matched_only=True)
            for slots, width in scored:
                last = best[-1] if len(best) == k else None
                picked = self._best_slots(np, turns, sums, slots, k * width, last)
                if picked:
                    best = sorted({*best, *picked})[:k]
            for slots, _ in scored:
                sums[slots] = 0.0
        except BaseException:
            self._sums = None  # may hold nonzero entries now
            raise
        finally:
            scored.clear()  # views pin the index's columns, which must stay growable
        positions = turns.turn_positions
        return [messages[positions[at]] for _, at in best]

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
        kinds = (np.int64, np.float64, np.float64)
        slots = tfs = lengths = None
        try:
            if len(batch) == 1:  # views of the term's own columns
                start = -newest if newest else 0
                slots, tfs, lengths = (
                    np.frombuffer(column, dtype=kind)[start:]
                    for column, kind in zip(index._column(batch[0]), kinds, strict=True)
                )
                weight: Any = index._weight(len(index._postings[batch[0]]))
            else:  # joined in one copy, term after term
                columns = [index._column(term, newest) for term in batch]
                slots, tfs, lengths = (
                    np.frombuffer(b"".join([c[part] for c in columns]), dtype=kind)
                    for part, kind in enumerate(kinds)
                )
                counts = [len(c[0]) for c in columns]
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
        np: Any,
        turns: _TurnIndex,
        sums: Any,
        slots: Any,
        n: int,
        last: tuple[float, int] | None,
    ) -> list[tuple[float, int]]:
        """``(-score, order)`` of at least the ``n`` best of ``slots`` (repeats allowed).

        A message is in ``slots`` at most once per term, so the ``n`` best entries of a
        batch of ``n / k`` terms hold its ``k`` best messages. With ``last``, only the
        messages ranking ahead of it count (a higher score, or the same and earlier).
        """
        index = turns.index
        order = None
        try:
            totals = sums[slots]
            if turns.identity and index.slots == len(turns.keys):
                order = slots  # every slot is the message's place among the indexed ones
            else:
                order = turns.gather(np, turns.slot_turns, slots)
            if last is None:
                keep = totals > 0
            else:
                score = -last[0]
                keep = totals > score
                keep |= (totals == score) & (order < last[1])
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
