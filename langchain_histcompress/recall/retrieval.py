"""Fact and raw-turn retrieval: BM25, any LangChain ``Embeddings``, or a LangGraph store.

Every fact retriever follows the `FactRetriever` protocol, ``retrieve(query, facts, k) ->
list[Fact]`` (best first, at most ``k``, only facts from ``facts`` or, for a store, from its
namespace). `EmbeddingEvidenceRetriever` adds embedding similarity to the rankings of
`EvidenceRetriever`. The turn and evidence retrievers live in `evidence`; every name is
importable from here. Rankings are reproducible: ties are broken by input order.

Example:
    >>> from langchain_histcompress.core.facts import Fact
    >>> facts = [Fact(id="f-1", content="User lives in Oslo"),
    ...          Fact(id="f-2", content="Budget is 12k EUR")]
    >>> [f.id for f in BM25FactRetriever().retrieve("where does the user live?", facts, 1)]
    ['f-1']
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import math
import operator
import threading
from array import array
from collections import OrderedDict
from collections.abc import Container, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.render import message_text
from langchain_histcompress.recall.bm25 import (
    STOPWORDS,
    BM25Index,
    _check_k,
    _numpy,
    stem,
    tokenize,
)
from langchain_histcompress.recall.evidence import EvidenceRetriever, RankedEvidence
from langchain_histcompress.recall.turn_retriever import (
    DEFAULT_MAX_TERM_POSTINGS,
    BM25TurnRetriever,
)

__all__ = [
    "DEFAULT_MAX_TERM_POSTINGS",
    "STOPWORDS",
    "BM25FactRetriever",
    "BM25Index",
    "BM25TurnRetriever",
    "EmbeddingEvidenceRetriever",
    "EmbeddingFactRetriever",
    "EvidenceRetriever",
    "FactRetriever",
    "RankedEvidence",
    "StoreFactRetriever",
    "TurnRetriever",
    "stem",
    "tokenize",
    "validate_namespace",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class FactRetriever(Protocol):
    """Anything that ranks facts for a query."""

    def retrieve(self, query: str, facts: Sequence[Fact], k: int) -> list[Fact]:
        """The at most ``k`` facts most relevant to ``query``, best first."""
        ...


@runtime_checkable
class TurnRetriever(Protocol):
    """Anything that ranks conversation messages for a query."""

    def retrieve(self, query: str, messages: Sequence[BaseMessage], k: int) -> list[BaseMessage]:
        """The at most ``k`` messages most relevant to ``query``, best first."""
        ...


_FACT_ID = operator.attrgetter("id")


def _fact_text(fact: Fact) -> str:
    return f"{fact.content} {fact.type.replace('_', ' ')}"


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _IndexedFacts:
    """A BM25 index over exactly the facts of the latest call, matched to the last call by identity.

    Facts are frozen, so a fact object seen last call is indexed as it is: only facts that are
    new objects have their text built, and only a changed text is tokenized again. Facts
    absent from the call are removed, so scores equal those of a fresh index.
    """

    def __init__(self, *, k1: float, b: float) -> None:
        self.index = BM25Index(k1=k1, b=b)
        self._indexed: dict[str, tuple[Fact, str]] = {}
        self._objects: dict[str, Fact] = {}
        """Fact id -> the fact object indexed (``_indexed`` without the texts)."""
        self._previous: list[Fact] = []
        self._positions: dict[str, int] = {}

    def sync(self, facts: Sequence[Fact]) -> dict[str, int]:
        """Index ``facts``; return fact id -> first position in ``facts``."""
        previous = self._previous
        if len(previous) == len(facts) and all(map(operator.is_, previous, facts)):
            return self._positions  # the same facts in the same order
        ids = list(map(_FACT_ID, facts))
        positions = dict(zip(ids, range(len(ids)), strict=True))
        if len(positions) < len(ids):  # a repeated id: its first position counts
            positions = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1), strict=True))
            positions = {fid: positions[fid] for fid in dict.fromkeys(ids)}
        self._index(ids, facts, positions)
        return positions

    def sync_by_id(self, facts: Mapping[str, Fact]) -> tuple[list[Fact], dict[str, int]]:
        """`sync` for facts keyed by their ids: the facts in order and id -> position.

        The ids are read from the keys, so only the facts that are new objects are
        looked at: an extractor's fact set is mostly the same objects call after call, and
        reading every fact's id would touch each of them.
        """
        values = list(facts.values())
        previous = self._previous
        if len(previous) == len(values) and all(map(operator.is_, previous, values)):
            return values, self._positions  # the same facts in the same order
        ids = list(facts)
        positions = dict(zip(ids, range(len(ids)), strict=True))
        self._index(ids, values, positions)
        return values, positions

    def _index(self, ids: list[str], facts: Sequence[Fact], positions: dict[str, int]) -> None:
        """Bring the index to ``facts`` (``ids[i]`` is ``facts[i].id``; first positions)."""
        index, indexed, objects = self.index, self._indexed, self._objects
        # only the facts that are new objects are visited (found at C speed)
        fresh = itertools.compress(
            itertools.count(), map(operator.is_not, facts, map(objects.get, ids))
        )
        for position in fresh:
            fid = ids[position]
            if positions[fid] != position:
                continue
            fact = facts[position]
            seen = indexed.get(fid)
            text = _fact_text(fact)
            if seen is None or seen[1] != text:
                index.add(fid, text)
            indexed[fid] = (fact, text)
            objects[fid] = fact
        if len(indexed) > len(positions):
            for key in [key for key in indexed if key not in positions]:
                index.remove(key)
                del indexed[key]
                del objects[key]
        self._previous, self._positions = list(facts), positions


class BM25FactRetriever:
    """Rank facts by BM25 over their content and type (facts with no shared word are left out).

    The index is kept between calls and updated incrementally (a fact is tokenized again only
    when its content or type changes); it always holds exactly the facts of the latest call.
    When two facts share an id, the first one counts.

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.

    Example:
        >>> from langchain_histcompress.core.facts import Fact
        >>> facts = [Fact(id="f-1", content="Prefers window seats", type="preference")]
        >>> [f.id for f in BM25FactRetriever().retrieve("seat preference?", facts, 3)]
        ['f-1']
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75) -> None:
        """Validate the BM25 parameters."""
        BM25Index(k1=k1, b=b)
        self.k1 = k1
        self.b = b
        self._facts = _IndexedFacts(k1=k1, b=b)
        self._lock = threading.Lock()

    def retrieve(self, query: str, facts: Sequence[Fact], k: int) -> list[Fact]:
        """The at most ``k`` facts sharing words with ``query``, best first (ties: earliest)."""
        _check_k(k)
        if not k or not facts:
            return []
        with self._lock:
            positions = self._facts.sync(facts)
            scores = self._facts.index.scores(query)
        return _best(scores, positions, facts, k)

    def retrieve_by_id(self, query: str, facts: Mapping[str, Fact], k: int) -> list[Fact]:
        """`retrieve` over facts keyed by their ids (each key must be its fact's ``id``).

        The same facts in the same order as ``retrieve(query, list(facts.values()), k)``,
        with less work on a large set that changes little between calls.

        Example:
            >>> from langchain_histcompress.core.facts import Fact
            >>> fact = Fact(id="f-1", content="Prefers window seats", type="preference")
            >>> [f.id for f in BM25FactRetriever().retrieve_by_id("seats?", {"f-1": fact}, 3)]
            ['f-1']
        """
        _check_k(k)
        if not k or not facts:
            return []
        with self._lock:
            values, positions = self._facts.sync_by_id(facts)
            scores = self._facts.index.scores(query)
        return _best(scores, positions, values, k)


def _best(
    scores: dict[str, float], positions: dict[str, int], facts: Sequence[Fact], k: int
) -> list[Fact]:
    """The ``k`` facts of best score, ties by position: two sorts keyed at C speed (stable)."""
    ranked = sorted(scores, key=positions.__getitem__)
    ranked.sort(key=scores.__getitem__, reverse=True)
    return [facts[positions[key]] for key in ranked[:k]]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if not na or not nb:
        return 0.0
    return dot / (na * nb)


class EmbeddingFactRetriever:
    """Rank facts by cosine similarity of LangChain ``Embeddings`` vectors.

    Fact vectors are cached per (fact id, content hash), so each fact is embedded once
    until its content changes; missing vectors are embedded in one ``embed_documents`` call.

    Args:
        embeddings: Any LangChain ``Embeddings``.
        cache_size: Fact vectors kept (least recently used dropped first).
        min_similarity: Facts below this cosine similarity are left out.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_histcompress.core.facts import Fact
        >>> retriever = EmbeddingFactRetriever(DeterministicFakeEmbedding(size=16))
        >>> facts = [Fact(id="f-1", content="tea"), Fact(id="f-2", content="coffee")]
        >>> [f.id for f in retriever.retrieve("tea", facts, 1)]
        ['f-1']
    """

    def __init__(
        self, embeddings: Embeddings, *, cache_size: int = 10_000, min_similarity: float = -1.0
    ) -> None:
        """Validate and store the configuration."""
        if not isinstance(embeddings, Embeddings):
            msg = f"embeddings must be a LangChain Embeddings, not {type(embeddings).__name__}"
            raise ConfigurationError(msg)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            msg = f"cache_size must be an int >= 1, got {cache_size!r}"
            raise ConfigurationError(msg)
        self.embeddings = embeddings
        self.cache_size = cache_size
        self.min_similarity = min_similarity
        self._cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _vectors(self, facts: Sequence[Fact]) -> list[list[float]]:
        keys = [(f.id, _content_hash(f.content)) for f in facts]
        with self._lock:
            missing = [i for i, key in enumerate(keys) if key not in self._cache]
        if missing:
            vectors = self.embeddings.embed_documents([facts[i].content for i in missing])
            if len(vectors) != len(missing):
                msg = "embeddings returned a different number of vectors than texts"
                raise ConfigurationError(msg)
            with self._lock:
                for i, vector in zip(missing, vectors, strict=True):
                    self._cache[keys[i]] = list(vector)
        out: list[list[float]] = []
        with self._lock:
            for key in keys:
                self._cache.move_to_end(key)
                out.append(self._cache[key])
            while len(self._cache) > max(self.cache_size, len(keys)):
                self._cache.popitem(last=False)
        return out

    def retrieve(self, query: str, facts: Sequence[Fact], k: int) -> list[Fact]:
        """The at most ``k`` facts most similar to ``query``, best first."""
        _check_k(k)
        if not facts or not k or not query.strip():
            return []
        vectors = self._vectors(facts)
        query_vector = self.embeddings.embed_query(query)
        scored = [
            (_cosine(query_vector, vector), position) for position, vector in enumerate(vectors)
        ]
        scored = [item for item in scored if item[0] >= self.min_similarity]
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [facts[position] for _, position in scored[:k]]


def validate_namespace(namespace: Sequence[str]) -> tuple[str, ...]:
    """Check a store namespace: a non-empty tuple of non-empty strings without ``.``.

    Raises:
        ConfigurationError: The namespace is invalid.

    Example:
        >>> validate_namespace(["histcompress", "facts", "acme"])
        ('histcompress', 'facts', 'acme')
    """
    if isinstance(namespace, str) or not isinstance(namespace, Sequence) or not namespace:
        msg = f"namespace must be a non-empty tuple of strings, got {namespace!r}"
        raise ConfigurationError(msg)
    for part in namespace:
        if not isinstance(part, str) or not part.strip():
            msg = f"namespace parts must be non-empty strings, got {part!r} in {namespace!r}"
            raise ConfigurationError(msg)
        if "." in part:
            msg = f"namespace parts must not contain '.', got {part!r}"
            raise ConfigurationError(msg)
    return tuple(namespace)


def _store_fact(value: object) -> Fact | None:
    try:
        return Fact.model_validate(value)
    except ValueError:
        return None


class StoreFactRetriever:
    """Rank facts kept in a LangGraph ``BaseStore`` namespace.

    With a store whose semantic index is configured, the store's vector search ranks the
    facts; otherwise BM25 ranks the namespace's facts. Only items whose namespace equals
    ``namespace`` exactly are considered, so a sibling tenant (``acme`` vs ``acme-corp``) or
    a child namespace never leaks in. When ``facts`` is non-empty, results are restricted to
    the ids in it.

    Args:
        store: The store.
        namespace: Exact namespace of the fact items (item value = fact dict, key = fact id).
        scan_limit: Page size when listing the namespace.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> store = InMemoryStore()
        >>> store.put(("histcompress", "facts", "acme"), "f-1",
        ...           Fact(id="f-1", content="Ships to Oslo").to_state())
        >>> retriever = StoreFactRetriever(store, ("histcompress", "facts", "acme"))
        >>> [f.id for f in retriever.retrieve("oslo", [], 5)]
        ['f-1']
    """

    def __init__(self, store: BaseStore, namespace: Sequence[str], *, scan_limit: int = 500):
        """Validate and store the configuration."""
        if not isinstance(store, BaseStore):
            msg = f"store must be a LangGraph BaseStore, not {type(store).__name__}"
            raise ConfigurationError(msg)
        if isinstance(scan_limit, bool) or not isinstance(scan_limit, int) or scan_limit < 1:
            msg = f"scan_limit must be an int >= 1, got {scan_limit!r}"
            raise ConfigurationError(msg)
        self.store = store
        self.namespace = validate_namespace(namespace)
        self.scan_limit = scan_limit

    @property
    def semantic(self) -> bool:
        """Whether the store has a semantic index configured."""
        return bool(getattr(self.store, "index_config", None))

    def _all(self) -> list[Fact]:
        out: list[Fact] = []
        offset = 0
        while True:
            page = self.store.search(self.namespace, limit=self.scan_limit, offset=offset)
            for item in page:
                if tuple(item.namespace) == self.namespace:
                    fact = _store_fact(item.value)
                    if fact is not None:
                        out.append(fact)
            if len(page) < self.scan_limit:
                return out
            offset += len(page)

    def retrieve(self, query: str, facts: Sequence[Fact], k: int) -> list[Fact]:
        """The at most ``k`` facts of the namespace most relevant to ``query``."""
        _check_k(k)
        if not k:
            return []
        allowed = {f.id for f in facts} if facts else None
        if self.semantic and query.strip():
            limit = k if allowed is None else max(k * 4, k + len(allowed))
            hits = self.store.search(self.namespace, query=query, limit=limit)
            out: list[Fact] = []
            for item in hits:
                if tuple(item.namespace) != self.namespace:
                    continue
                fact = _store_fact(item.value)
                if fact is not None and (allowed is None or fact.id in allowed):
                    out.append(fact)
            return out[:k]
        candidates = [f for f in self._all() if allowed is None or f.id in allowed]
        return BM25FactRetriever().retrieve(query, candidates, k)


# --------------------------------------------------------------------------- embeddings fused


def _dot_all(target: array[float], vectors: Sequence[array[float]]) -> list[float]:
    """Dot product of ``target`` with each vector: one matrix product when numpy is present.

    The pure-Python path gives the same values up to float rounding.
    """
    np = _numpy()
    if np is None or len(vectors) < _VECTORIZE_FROM:
        return [sum(map(operator.mul, target, vector)) for vector in vectors]
    width = len(target)
    if any(len(v) != width for v in vectors):
        msg = "embeddings returned vectors of different sizes"
        raise ConfigurationError(msg)
    matrix = np.frombuffer(b"".join(vectors), dtype=np.float64).reshape(len(vectors), width)
    result: list[float] = (matrix @ np.frombuffer(target, dtype=np.float64)).tolist()
    return result


_VECTORIZE_FROM = 8  # fewer vectors are compared in Python (no array set-up)


def _unit(vector: Sequence[float]) -> array[float]:
    """``vector`` scaled to unit length (all zeros stay zeros), as a compact float array."""
    out = array("d", vector)
    norm = math.sqrt(sum(map(operator.mul, out, out)))
    if norm:
        for i, x in enumerate(out):
            out[i] = x / norm
    return out


class EmbeddingEvidenceRetriever(EvidenceRetriever):
    """An `EvidenceRetriever` whose rankings also use embedding similarity to the question.

    The BM25 ranking of `EvidenceRetriever` is kept, and every fact and every candidate
    message also gets a rank by the cosine similarity of its embedding to the question's.
    Reciprocal rank fusion then scores each item
    ``1 / (rrf_k + bm25_rank) + embedding_weight / (rrf_k + embedding_rank)`` (ranks from 1,
    facts and messages ranked separately in each signal, a missing rank adding nothing), and
    facts and messages are returned together by that score (on equal scores a fact first,
    then input order). So an item that shares no word with the question but means the same
    still ranks, and one found both ways ranks first; with ``embedding_weight=0`` the ranking
    is exactly the BM25 one.

    Facts are embedded by content, messages by text after the speaker's name (``Ann: ...``)
    when one is known (see ``speaker_names``). Vectors are cached per text (least recently
    used dropped first, never below one call's need), so each text is embedded once, in one
    ``embed_documents`` call per query for all new texts; the question goes through
    ``embed_query``.

    Args:
        embeddings: Any LangChain ``Embeddings``.
        embedding_weight: Weight of the embedding rank in the fusion (``0``: BM25 only).
        min_similarity: Items below this cosine similarity get no embedding rank.
        cache_size: Text vectors kept.
        **kwargs: `EvidenceRetriever` settings (``neighbour_window``, ``rrf_k``,
            ``speaker_names``...), which shape the BM25 ranking; ``rrf_k`` and
            ``include_tool_results`` also apply to the embedding rank.

    Raises:
        ConfigurationError: A parameter is invalid.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.core.facts import Fact
        >>> history = [HumanMessage("I adopted a kitten", id="h1"), AIMessage("Cute!", id="a1")]
        >>> facts = [Fact(id="f-1", content="The user adopted a kitten", source_ids=["h1"])]
        >>> bm25 = EvidenceRetriever(neighbour_window=0)
        >>> [str(r.item.id) for r in bm25.rank("kitten", facts, history)]
        ['f-1', 'h1']
        >>> fused = EmbeddingEvidenceRetriever(DeterministicFakeEmbedding(size=8),
        ...                                    neighbour_window=0)
        >>> sorted(str(r.item.id) for r in fused.rank("kitten", facts, history))  # all ranked
        ['a1', 'f-1', 'h1']
    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        embedding_weight: float = 1.0,
        min_similarity: float = -1.0,
        cache_size: int = 20_000,
        **kwargs: Any,
    ) -> None:
        """Validate and store the configuration (see the class docstring)."""
        super().__init__(**kwargs)
        if not isinstance(embeddings, Embeddings):
            msg = f"embeddings must be a LangChain Embeddings, not {type(embeddings).__name__}"
            raise ConfigurationError(msg)
        for name, value, low in (
            ("embedding_weight", embedding_weight, 0.0),
            ("min_similarity", min_similarity, -1.0),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
                msg = f"{name} must be a number >= {low:g}, got {value!r}"
                raise ConfigurationError(msg)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            msg = f"cache_size must be an int >= 1, got {cache_size!r}"
            raise ConfigurationError(msg)
        self.embeddings = embeddings
        self.embedding_weight = float(embedding_weight)
        self.min_similarity = float(min_similarity)
        self.cache_size = cache_size
        self._vectors: OrderedDict[str, array[float]] = OrderedDict()
        self._vector_lock = threading.Lock()

    def _turn_text(self, message: BaseMessage) -> str:
        name = message.name or self._turns.speaker_names.get(message.type)
        text = message_text(message)
        return f"{name}: {text}" if name else text

    def _embed(self, texts: Sequence[str]) -> list[array[float]]:
        """Unit vectors of ``texts``, embedding only the texts not cached."""
        unique = list(dict.fromkeys(texts))
        with self._vector_lock:
            known = {text: self._vectors[text] for text in unique if text in self._vectors}
        missing = [text for text in unique if text not in known]
        if missing:
            vectors = self.embeddings.embed_documents(missing)
            if len(vectors) != len(missing):
                msg = "embeddings returned a different number of vectors than texts"
                raise ConfigurationError(msg)
            known.update((t, _unit(v)) for t, v in zip(missing, vectors, strict=True))
        with self._vector_lock:
            cache = self._vectors
            for text in unique:
                cache[text] = known[text]
                cache.move_to_end(text)
            while len(cache) > max(self.cache_size, len(unique)):
                cache.popitem(last=False)
        return [known[text] for text in texts]

    def _similarities(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine similarity of each text to ``query``."""
        if not texts:
            return []
        vectors = self._embed(texts)
        target = _unit(self.embeddings.embed_query(query))
        return _dot_all(target, vectors)

    def _ranks(self, similarities: Sequence[float]) -> list[int | None]:
        """Rank (from 1, ties by input order) of each similarity; ``None`` below the floor."""
        order = sorted(range(len(similarities)), key=lambda i: (-similarities[i], i))
        ranks: list[int | None] = [None] * len(similarities)
        rank = 0
        for i in order:
            if similarities[i] >= self.min_similarity:
                rank += 1
                ranks[i] = rank
        return ranks

    def _turn_candidates(
        self,
        messages: Sequence[BaseMessage],
        turn_ids: Container[str] | None,
        only_before: int | None,
    ) -> list[int]:
        """Positions of the messages that may be returned (first of each id, eligible)."""
        end = len(messages) if only_before is None else max(0, min(only_before, len(messages)))
        seen: set[str] = set()
        out: list[int] = []
        for position in range(end):
            message = messages[position]
            if message.id:  # an empty-string id counts as no id
                if message.id in seen:
                    continue
                seen.add(message.id)
            if self._turns.eligible(message) and (turn_ids is None or str(message.id) in turn_ids):
                out.append(position)
        return out

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
        """Like `EvidenceRetriever.iter_rank`, with the embedding ranks fused in."""
        lexical = super().iter_rank(
            query,
            facts,
            messages,
            turn_ids=turn_ids,
            only_before=only_before,
            known_prefix=known_prefix,
        )
        if not query.strip() or (not facts and not messages) or not self.embedding_weight:
            return lexical
        first: dict[str, int] = {}
        for position, fact in enumerate(facts):
            first.setdefault(fact.id, position)
        fact_at = list(first.values())
        turn_at = self._turn_candidates(messages, turn_ids, only_before)
        texts = [facts[i].content for i in fact_at]
        texts += [self._turn_text(messages[i]) for i in turn_at]
        similarities = self._similarities(query, texts)
        fused: dict[tuple[bool, int], tuple[float, Fact | BaseMessage]] = {
            (not entry.is_fact, entry.position): (entry.score, entry.item) for entry in lexical
        }
        groups: tuple[tuple[bool, list[int], Sequence[Fact | BaseMessage], list[float]], ...] = (
            (False, fact_at, facts, similarities[: len(fact_at)]),
            (True, turn_at, messages, similarities[len(fact_at) :]),
        )
        for is_turn, positions, items, group in groups:
            for position, rank in zip(positions, self._ranks(group), strict=True):
                if rank is None:
                    continue
                score, item = fused.get((is_turn, position), (0.0, items[position]))
                bonus = self.embedding_weight / (self.rrf_k + rank)
                fused[is_turn, position] = (score + bonus, item)
        heap = [(-score, key[0], key[1], item) for key, (score, item) in fused.items()]
        return self._pop_fused(heap)

    @staticmethod
    def _pop_fused(
        heap: list[tuple[float, bool, int, Fact | BaseMessage]],
    ) -> Iterator[RankedEvidence]:
        heapq.heapify(heap)
        while heap:
            negative, _, position, item = heapq.heappop(heap)
            yield RankedEvidence(item, -negative, position)
