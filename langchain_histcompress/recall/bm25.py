"""BM25 over keyed texts: the tokenizer, the stemmer and the incremental index.

Deterministic: NFKC, casefold, split on anything that is not a letter or digit, drop English
stopwords and chat filler, light suffix stemming (`stem`). A text may carry the `date_terms`
of when it was written, which a query names with a capitalized month or a year
(`query_terms`), and the `speaker_terms` of who wrote it; a query's *modifier* terms, such
as a speaker's name, rank the texts its other terms match without retrieving any alone.
Ties are broken by insertion order. With numpy, `BM25Index.slot_scores` scores whole
arrays, identically to `BM25Index.scores`.

Example:
    >>> index = BM25Index()
    >>> index.add("a", "She paints lakes")
    >>> index.add("b", "He painted a boat")
    >>> [key for key, _ in index.search("painting", 2)]
    ['a', 'b']
"""

from __future__ import annotations

import bisect
import functools
import importlib
import itertools
import math
import re
import unicodedata
from array import array
from collections.abc import Callable, Container, Iterable, Sequence
from datetime import date
from typing import Any

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact

__all__ = [
    "STOPWORDS",
    "BM25Index",
    "date_terms",
    "query_terms",
    "speaker_terms",
    "stem",
    "tokenize",
]

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


@functools.cache
def _numpy() -> Any:
    """The numpy module, or ``None`` when it is not installed (it is optional).

    Remembered: asked on every ranking, and an import, even of a loaded module, goes
    through the import machinery's locks.
    """
    try:
        return importlib.import_module("numpy")
    except ImportError:  # pragma: no cover - numpy ships with the bench extra
        return None


def _strippable(base: str) -> bool:
    return len(base) >= 3 and any(c in _VOWELS for c in base)


def stem(word: str) -> str:
    """A light, deterministic English suffix stemmer for one lowercase word.

    Plural ``-s`` / ``-ies``, past ``-ed`` / ``-ied`` and ``-ing(s)`` are removed (when a stem
    with a vowel and at least three letters remains), a doubled final consonant left by
    ``-ed`` / ``-ing`` is undoubled, a final ``e`` is dropped and a final ``y`` becomes ``i``,
    so inflections of a word meet: ``hike``, ``hikes``, ``hiked`` and ``hiking`` all become
    ``hik``; ``story`` and ``stories`` both ``stori``. Then, as in Porter's stemmer, the
    derivational suffixes of `_underived` go when enough of the word is left, so a word
    meets the one it was made from (``promotion``, ``promoted``). Words of three letters
    or fewer and words with digits are left alone.

    Example:
        >>> [stem(w) for w in ["painting", "painted", "paints", "running", "activities"]]
        ['paint', 'paint', 'paint', 'run', 'activ']
        >>> [stem(w) for w in ["hike", "hiking", "class", "bus", "2023", "string"]]
        ['hik', 'hik', 'class', 'bus', '2023', 'string']
        >>> [stem(w) for w in ["promotion", "mentorship", "excitement", "passion"]]
        ['promot', 'mentor', 'excit', 'passion']
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
    return _underived(base)


_DERIVED = (("iviti", 2), ("iti", 2), ("ship", 1), ("ment", 2), ("al", 2), ("iv", 2))
"""Derivational suffixes (as `stem` leaves them: ``-ity`` ends ``-iti``, ``-ive`` ``-iv``)
and the least `_measure` of what is left for one to be removed."""


def _measure(base: str) -> int:
    """Porter's measure: the vowel-consonant sequences of ``base`` (``promot``: 2)."""
    pattern = "".join("v" if c in _VOWELS else "c" for c in base)
    return pattern.lstrip("c").count("vc") if "vc" in pattern else 0


def _underived(base: str) -> str:
    """``base`` without derivational suffixes, so a word meets the one it was made from.

    As in Porter's stemmer, a suffix goes only when enough word is left (`_measure`):
    ``promotion`` and ``promote`` meet, ``passion`` and ``pass`` do not. ``-ion`` goes
    after ``t`` or ``s``; suffixes are removed in turn (``relationship``, ``relation``,
    ``relate``).
    """
    while True:
        if base.endswith(("tion", "sion")) and _measure(base[:-3]) >= 2:
            base = base[:-3]
            continue
        for suffix, least in _DERIVED:
            if base.endswith(suffix) and _measure(base[: -len(suffix)]) >= least:
                base = base[: -len(suffix)]
                if base.endswith("e"):  # ``excitement``: as ``excite`` is stemmed
                    base = base[:-1]
                break
        else:
            return base


_stem = functools.lru_cache(maxsize=1 << 16)(stem)
"""`stem`, remembered: a conversation's vocabulary is small next to its word count."""


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
        return [_stem(w) for w in words if w not in stopwords]
    return [w for w in words if w not in stopwords]


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_RE = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b")
_YEAR_RE = re.compile(r"(?<![^\W_])(1[89]\d\d|2[01]\d\d)(?![^\W_])")


def date_terms(when: date) -> tuple[str, str]:
    """The index terms of the month and year a text was written in.

    They are kept apart from the words of texts (no word holds ``@``), so a date never
    matches the verb "may" or a number in a text; a query names them with a capitalized
    month or a year (see `query_terms`).

    Example:
        >>> from datetime import date
        >>> date_terms(date(2023, 5, 8))
        ('@may', '@2023')
    """
    return f"@{_MONTHS[when.month - 1].lower()}", f"@{when.year}"


def speaker_terms(name: str) -> tuple[str, ...]:
    """The index terms of a text's speaker: each word of ``name``, marked ``~``.

    Kept apart from the words of texts (no word holds ``~``), so a name a text mentions
    ("Thanks, Ann!") does not say the text is that person's; a query's speaker words
    (``modifiers`` of `BM25Index.scores`) match them.

    Example:
        >>> speaker_terms("Ann Lee")
        ('~ann', '~lee')
    """
    return tuple(f"~{word}" for word in tokenize(name))


@functools.lru_cache(maxsize=64)
def query_terms(query: str) -> tuple[str, ...]:
    """The distinct terms ``query`` is scored by: its `tokenize` words, then its date terms.

    The date terms (see `date_terms`) are those of each month name written capitalized
    (``"in June"``, not ``"may"``) and each year from 1800 to 2199; they match texts
    indexed with the time they were written (see `BM25Index.add`).
    Remembered: one question is scored against several indexes (messages, facts).

    Example:
        >>> query_terms("What did Ann paint in May 2023? She may paint again")
        ('ann', 'paint', 'may', '2023', '@may', '@2023')
    """
    words = tokenize(query)
    if any(c.isdigit() or c.isupper() for c in query):
        words += [f"@{m.lower()}" for m in _MONTH_RE.findall(query)]
        words += [f"@{y}" for y in _YEAR_RE.findall(query)]
    return tuple(dict.fromkeys(words))


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
        """Key -> slot: the number of texts added before its current one (unique, growing)."""
        self._next = 0
        self._total = 0
        # Column form of the postings, for `slot_scores`: per term, the slot, term frequency
        # and text length of each posting, in posting order (append-only; a term that lost
        # a posting is rebuilt from ``_postings`` when next scored).
        self._slot_keys: list[str] = []
        self._columns: dict[str, tuple[array[int], array[float], array[float]]] = {}
        self._stale: set[str] = set()
        self.removed = 0
        """Texts removed or replaced so far (a key's slot changes only then)."""

    def __len__(self) -> int:
        """Number of indexed texts."""
        return len(self._lengths)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is indexed."""
        return key in self._lengths

    def add(self, key: str, text: str, *, terms: Sequence[str] = ()) -> None:
        """Index ``text`` under ``key`` (replacing an earlier text with that key).

        Args:
            key: The text's key.
            text: The text (tokenized with `tokenize`).
            terms: Further terms of the text that are not among its words, such as the
                `date_terms` of when it was written; they do not count in its length.

        Example:
            >>> from datetime import date
            >>> index = BM25Index()
            >>> index.add("a", "We went camping", terms=date_terms(date(2023, 6, 27)))
            >>> index.add("b", "We went camping", terms=date_terms(date(2023, 8, 1)))
            >>> [key for key, _ in index.search("camping in June", 2)]
            ['a', 'b']
        """
        if key in self._lengths:
            self.remove(key)
        tokens = tokenize(text)
        counts: dict[str, int] = {}
        for token in tokens:
            counts[token] = counts.get(token, 0) + 1
        for token in terms:
            counts[token] = counts.get(token, 0) + 1
        slot, length = self._next, float(len(tokens))
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[key] = tf
            column = self._columns.get(term)
            if column is None:
                column = self._columns[term] = (array("q"), array("d"), array("d"))
            column[0].append(slot)
            column[1].append(tf)
            column[2].append(length)
        self._lengths[key] = len(tokens)
        self._terms[key] = tuple(counts)
        self._order[key] = slot
        self._slot_keys.append(key)
        self._next += 1
        self._total += len(tokens)

    def remove(self, key: str) -> None:
        """Forget ``key`` (no error when absent)."""
        if key not in self._lengths:
            return
        for term in self._terms.pop(key):
            postings = self._postings[term]
            del postings[key]
            if postings:
                self._stale.add(term)
            else:
                del self._postings[term]
                del self._columns[term]
                self._stale.discard(term)
        self._total -= self._lengths.pop(key)
        del self._order[key]
        self.removed += 1

    def keys(self) -> list[str]:
        """The indexed keys, in insertion order of their current text."""
        return sorted(self._lengths, key=self._order.__getitem__)

    def scores(
        self,
        query: str,
        *,
        allowed: Container[str] | None = None,
        max_postings: int | None = None,
        modifiers: Container[str] = (),
    ) -> dict[str, float]:
        """BM25 score of every key sharing a term with ``query`` (only scores > 0).

        Work is proportional to the postings of the query's terms, not to the index size.

        Args:
            query: Free text (tokenized with `tokenize`; see `query_terms`).
            allowed: When given, only these keys are scored.
            max_postings: When given, query terms found in more than this many texts are
                ignored: such words carry little evidence, and skipping them keeps the work
                bounded as the index grows. If every term is that frequent, the rarest one
                is scored in its ``max_postings`` most recently added texts only.
            modifiers: Terms that rank but do not retrieve: they add to the score of a
                text that another query term matches, and match nothing alone (unless no
                other term of the query is indexed at all). For a speaker's name, which says
                whose turn is meant, not what it is about: a query word ``w`` whose speaker
                term ``~w`` (see `speaker_terms`) is a modifier is scored as that term.

        Example:
            >>> index = BM25Index()
            >>> index.add("a", "Ann: hi")
            >>> index.add("b", "Bob: I painted a boat")
            >>> index.add("c", "Ann: I painted a lake")
            >>> sorted(index.scores("what did ann paint", modifiers={"ann"}))
            ['b', 'c']
        """
        n = len(self._lengths)
        if not n:
            return {}
        scores: dict[str, float] = {}
        terms, newest_only, retrieving = self._query_terms(query, max_postings, modifiers)
        lengths = self._lengths
        fixed, scale = self._length_terms()
        for at, term in enumerate(terms):
            postings = self._postings[term]
            weight = self._weight(len(postings))
            items: Iterable[tuple[str, int]] = postings.items()
            if newest_only and max_postings is not None:
                items = itertools.islice(reversed(postings.items()), max_postings)
            if at >= retrieving:  # a modifier: only texts another term matched
                for key, tf in items:
                    if key in scores:
                        scores[key] += weight * tf / (tf + fixed + scale * lengths[key])
                continue
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

    def _query_terms(
        self, query: str, max_postings: int | None, modifiers: Container[str] = ()
    ) -> tuple[list[str], bool, int]:
        """The indexed terms of ``query`` to score, newest postings only?, how many retrieve.

        The retrieving terms come first (in query order), then the ``modifiers`` among the
        terms (see `scores`); when no retrieving term is indexed, every term retrieves.
        See ``max_postings`` in `scores`.
        """
        postings = self._postings
        terms = query_terms(query)
        if modifiers:  # a speaker's name: scored as the speaker's term (`speaker_terms`)
            terms = tuple(f"~{t}" if f"~{t}" in modifiers else t for t in terms)
        found = [t for t in terms if t in postings]
        newest_only = False
        if max_postings is not None and found:
            kept = [t for t in found if len(postings[t]) <= max_postings]
            if kept:
                found = kept
            else:
                found, newest_only = [min(found, key=lambda t: len(postings[t]))], True
        if modifiers and found:
            retrieving = [t for t in found if t not in modifiers]
            if retrieving and len(retrieving) < len(found):
                return (
                    [*retrieving, *(t for t in found if t in modifiers)],
                    newest_only,
                    len(retrieving),
                )
        return found, newest_only, len(found)

    def _length_terms(self) -> tuple[float, float]:
        """``(fixed, scale)``: a posting's score denominator is ``tf + fixed + scale * length``."""
        n = len(self._lengths)
        avg = self._total / n if self._total else 1.0
        return self.k1 * (1 - self.b), self.k1 * self.b / avg

    def _weight(self, df: int) -> float:
        """Inverse document frequency of a term found in ``df`` texts, times ``k1 + 1``."""
        n = len(self._lengths)
        return math.log(1 + (n - df + 0.5) / (df + 0.5)) * (self.k1 + 1)

    def _column(
        self, term: str, newest: int | None = None
    ) -> tuple[array[int], array[float], array[float]]:
        """Slots, term frequencies and text lengths of ``term``'s postings (the ``newest``)."""
        if term in self._stale:
            postings, order, lengths = self._postings[term], self._order, self._lengths
            self._columns[term] = (
                array("q", map(order.__getitem__, postings)),
                array("d", postings.values()),
                array("d", map(lengths.__getitem__, postings)),
            )
            self._stale.discard(term)
        column = self._columns[term]
        if newest is None:
            return column
        return column[0][-newest:], column[1][-newest:], column[2][-newest:]

    def slot_key(self, slot: int) -> str:
        """The key whose text was added in ``slot`` (see `slot_scores`)."""
        return self._slot_keys[slot]

    def slot(self, key: str) -> int:
        """The slot of ``key``'s current text (see `slot_scores`)."""
        return self._order[key]

    def slot_of(self, key: str) -> int | None:
        """The slot of ``key``'s current text, or ``None`` when ``key`` is not indexed."""
        return self._order.get(key)

    @property
    def slots(self) -> int:
        """Slots used so far: every slot is below this."""
        return self._next

    def slot_scores(
        self,
        np: Any,
        query: str,
        *,
        max_postings: int | None = None,
        modifiers: Container[str] = (),
    ) -> Any:
        """`scores` over whole arrays: ``(slots, scores)``, numpy arrays, slots ascending.

        A key's *slot* numbers its current text in insertion order (`slot`, `slot_key`).
        Each posting's score is computed with the same floating-point operations, in the
        same order, as in `scores`, and a key's terms are summed in query order, so the
        scores are identical to those of `scores` (keys with a score > 0 only).

        Args:
            np: The numpy module.
            query: Free text.
            max_postings: See `scores`.
            modifiers: See `scores`.

        Example:
            >>> import numpy as np
            >>> index = BM25Index()
            >>> for key, text in [("a", "red apple pie"), ("b", "green apple"), ("c", "sky")]:
            ...     index.add(key, text)
            >>> slots, scores = index.slot_scores(np, "apple pie")
            >>> [index.slot_key(s) for s in slots.tolist()]
            ['a', 'b']
            >>> scores.tolist() == list(index.scores("apple pie").values())
            True
        """
        slots, scores, counts = self._posting_scores(np, query, max_postings, modifiers)
        if len(counts) > 1:
            slots, scores = _sum_by_slot(np, slots, scores)
        positive = scores > 0
        if not positive.all():
            slots, scores = slots[positive], scores[positive]
        if not slots.flags.writeable:  # a view of the joined columns
            slots = slots.copy()
        return slots, scores

    def _posting_scores(
        self, np: Any, query: str, max_postings: int | None, modifiers: Container[str] = ()
    ) -> tuple[Any, Any, list[int]]:
        """Each scored query term's postings, term after term: slots, BM25 scores, counts.

        Slots are ascending and distinct within a term; summing a slot's scores in this
        order from 0.0 gives `scores` exactly (a modifier's postings are kept only at
        slots an earlier term holds, see `scores`). The terms' columns are joined into one
        copy and the scores computed in one pass over it; ``counts`` holds each term's
        number of postings kept, in scoring order.
        """
        terms, newest_only, retrieving = self._query_terms(query, max_postings, modifiers)
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64), []
        fixed, scale = self._length_terms()
        columns = [self._column(t, max_postings if newest_only else None) for t in terms]
        if retrieving < len(terms):
            columns = self._modified_columns(np, columns, retrieving)
        weights = [self._weight(len(self._postings[t])) for t in terms]
        # one private copy of the columns (a view of the index's own arrays would pin
        # their buffers, which must stay growable), joined at C speed in one allocation,
        # then viewed by numpy
        slots = np.frombuffer(b"".join([c[0] for c in columns]), dtype=np.int64)
        tfs = np.frombuffer(b"".join([c[1] for c in columns]), dtype=np.float64)
        lengths = np.frombuffer(b"".join([c[2] for c in columns]), dtype=np.float64)
        counts = [len(c[0]) for c in columns]
        weight = np.array(weights).repeat(counts) if len(terms) > 1 else weights[0]
        # weight * tf / (tf + fixed + scale * length), in that order
        divisor = tfs + fixed
        divisor += scale * lengths
        scores = weight * tfs
        scores /= divisor
        return slots, scores, counts

    @staticmethod
    def _modified_columns(
        np: Any, columns: list[tuple[Any, Any, Any]], retrieving: int
    ) -> list[tuple[Any, Any, Any]]:
        """``columns`` with the modifiers' postings kept only where a retrieving term has one.

        The columns from ``retrieving`` on are the modifiers' (see `scores`).
        """
        matched = np.frombuffer(b"".join([c[0] for c in columns[:retrieving]]), dtype=np.int64)
        out = list(columns[:retrieving])
        for slots, tfs, lengths in columns[retrieving:]:
            view = np.frombuffer(slots, dtype=np.int64)
            keep = np.isin(view, matched).nonzero()[0]
            out.append(
                (
                    array("q", view[keep].tobytes()),
                    array("d", np.frombuffer(tfs, dtype=np.float64)[keep].tobytes()),
                    array("d", np.frombuffer(lengths, dtype=np.float64)[keep].tobytes()),
                )
            )
            del view
        return out

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


class _FactIndex:
    """A BM25 index over exactly the facts of the latest call, updated incrementally.

    Facts are keyed by id; a fact is re-tokenized only when its indexed text changes, and
    facts absent from the call are removed, so scores equal those of a fresh index.
    """

    def __init__(self, *, k1: float, b: float, text: Callable[[Fact], str]) -> None:
        self.index = BM25Index(k1=k1, b=b)
        self._text = text
        self._texts: dict[str, str] = {}
        self._previous: list[Fact] = []
        self._positions: dict[str, int] = {}
        self.sources: dict[str, tuple[str, ...]] = {}
        """Fact id -> the message keys (``id:<message id>``) of its sources, for the facts
        of the latest call."""

    def sync(self, facts: Sequence[Fact]) -> dict[str, int]:
        """Index ``facts``; return fact id -> first position in ``facts``.

        The same facts as last call (the same objects, or equal ones, in the same order)
        cost one list comparison at C speed; when facts were only appended, only the new
        ones are looked at.
        """
        previous = self._previous
        if previous == facts:  # facts are frozen: equal facts index equally
            return self._positions
        known = len(previous)
        grown = 0 < known < len(facts) and facts[:known] == previous
        positions = dict(self._positions) if grown else {}
        sources = dict(self.sources) if grown else {}
        for position in range(known if grown else 0, len(facts)):
            fact = facts[position]
            if fact.id in positions:
                continue
            positions[fact.id] = position
            sources[fact.id] = tuple(f"id:{s}" for s in fact.source_ids)
            text = self._text(fact)
            if self._texts.get(fact.id) != text:
                self.index.add(fact.id, text)
                self._texts[fact.id] = text
        if len(self._texts) > len(positions):
            for key in [k for k in self._texts if k not in positions]:
                self.index.remove(key)
                del self._texts[key]
        self._previous, self._positions, self.sources = list(facts), positions, sources
        return positions


def _top(
    scores: dict[str, float], n: int, rank: Callable[[str], int] | None = None
) -> dict[str, float]:
    """The ``n`` best-scored entries of ``scores``, in their order.

    Of the entries tied at the cut, the earliest are kept: by ``rank`` (key -> rank) when
    given, else in the order of ``scores``. Without ``order``, the same entries as
    ``heapq.nlargest(n, scores.items(), key=score)``, found with one sort of the bare
    scores: no tuple per entry is kept alive (which, on a long history, would cost more in
    garbage collection than the selection itself).
    """
    if len(scores) <= n:
        return scores
    values = sorted(scores.values())
    cut = values[-n]
    ties = n - (len(values) - bisect.bisect_right(values, cut))
    top = {key: score for key, score in scores.items() if score >= cut}
    if len(top) > n:  # keep only the earliest ``ties`` of the entries scoring ``cut``
        tied = [key for key, score in top.items() if score == cut]
        if rank is not None:
            tied.sort(key=rank)
        for key in tied[ties:]:
            del top[key]
    return top


def _sum_by_slot(np: Any, slots: Any, values: Any) -> tuple[Any, Any]:
    """Distinct ``slots`` (ascending) and the sum of each one's ``values``.

    Each sum adds the values in array order, starting from 0.0, as a Python loop would:
    the sort is stable (and fast on runs already sorted) and ``bincount`` adds in order.
    """
    if not len(slots):
        return slots, values
    order = slots.argsort(kind="stable")
    slots, values = slots[order], values[order]
    first = np.empty(len(slots), dtype=bool)
    first[0] = True
    np.not_equal(slots[1:], slots[:-1], out=first[1:])
    return slots[first], np.bincount(first.cumsum() - 1, weights=values)
