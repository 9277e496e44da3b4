r"""Exact tiktoken counts of newline-joined lines, from the counts of the lines.

tiktoken splits text into pieces with a regular expression and encodes each piece on its own,
so text cut where a piece ends is counted exactly as the sum of its parts. For the o200k and
cl100k encodings, `joined_tokens` counts ``"\n".join(lines)`` from the lines' own counts, or
answers ``None`` when a join is not provably a piece boundary (the caller then encodes the
joined text); every rule it uses is checked against the real encoder by a property test.
`word_lower_bound` gives a lower bound of a text's count without encoding it.
"""

from __future__ import annotations

import functools
import itertools
import unicodedata
from collections.abc import Callable, Sequence

from langchain_histcompress.core.tokens import TiktokenCounter

_RUNS_CACHED = 4_096
_run_costs: dict[tuple[str, str], tuple[int, int]] = {}
"""(encoding, run) -> (T(run), T(run + newline)) for trailing punctuation runs."""
_UNSAFE_FOR_BOUND = ("\r", "\n/", "\x1c", "\x1d", "\x1e", "\x1f")
"""Text where a piece can hold parts of two words as ``str.split`` sees them."""


def _kind(char: str) -> str:
    return unicodedata.category(char)[0]


def newline_tokens(
    counter: TiktokenCounter,
    text: str,
    tokens: int,
    count: Callable[[str], int] | None = None,
) -> int:
    r"""``T(text + "\n")`` given ``tokens == T(text)``.

    Encodes (with ``count``, default ``counter.count_text``) only text ending otherwise
    than in a letter, a digit or a punctuation run after one.
    """
    count = count or counter.count_text
    if not text:
        return count("\n")
    end = len(text) - 1
    kind = _kind(text[end])
    if kind in "LN":
        return tokens + 1
    if kind in "PS":
        start = end
        while start > 0 and _kind(text[start - 1]) in "PS":
            start -= 1
        if start == 0 or _kind(text[start - 1]) in "LN":
            run = text[start:]
        elif text[start - 1] == " ":
            run = text[start - 1 :]
        else:
            return count(text + "\n")
        key = (counter.encoding_name, run)
        costs = _run_costs.get(key)
        if costs is None:
            if len(_run_costs) >= _RUNS_CACHED:
                _run_costs.clear()
            costs = _run_costs[key] = (counter.count_text(run), counter.count_text(run + "\n"))
        return tokens - costs[0] + costs[1]
    return count(text + "\n")


def starts_clean(text: str) -> bool:
    """Whether a piece ending in a newline cannot run on into ``text``."""
    return bool(text) and text[0] != "/" and _kind(text[0]) in "LNPS"


JoinedLine = tuple[str, int, int | None, bool]
r"""A line to join: its text, ``T(text)``, ``T(text + "\n")`` when already known (else
``None``), and whether it starts clean (`starts_clean`)."""


def joined_tokens(
    counter: TiktokenCounter,
    lines: Sequence[tuple[str, int]],
    newline: Callable[[str, int], int] | None = None,
) -> int | None:
    r"""``T("\n".join(lines))`` from ``(line, T(line))`` pairs; ``None`` if not provable.

    ``None`` when a line after the first does not start with a letter, digit, punctuation
    or symbol other than ``/`` (the caller then encodes the joined text). ``newline`` gives
    ``T(line + "\n")`` from a pair (default: `newline_tokens`; pass a cached one).

    Example:
        >>> from langchain_histcompress.core.tokens import TiktokenCounter
        >>> counter = TiktokenCounter()
        >>> lines = ["[m1 user] Hi there!", "[m2 assistant] Hello", "</end>"]
        >>> counts = [(line, counter.count_text(line)) for line in lines]
        >>> joined_tokens(counter, counts) == counter.count_text("\n".join(lines))
        True
    """
    parts = [(text, tokens, None, starts_clean(text)) for text, tokens in lines]
    return joined_parts(parts, newline or functools.partial(newline_tokens, counter))


def joined_parts(lines: Sequence[JoinedLine], newline: Callable[[str, int], int]) -> int | None:
    r"""`joined_tokens` of lines whose line-break counts and starts may be known already.

    ``newline`` gives ``T(line + "\n")`` for a line whose count with its break is ``None``.
    """
    if not lines:
        return 0
    total = 0
    for (text, tokens, with_break, _), (_, _, _, clean) in itertools.pairwise(lines):
        if not clean:
            return None
        total += newline(text, tokens) if with_break is None else with_break
    return total + lines[-1][1]


def word_lower_bound(text: str) -> int:
    """At most ``T(text)`` for the o200k and cl100k encodings (0 when not provable).

    Example:
        >>> from langchain_histcompress.core.tokens import TiktokenCounter
        >>> counter = TiktokenCounter()
        >>> word_lower_bound("one two, three") <= counter.count_text("one two, three")
        True
    """
    for unsafe in _UNSAFE_FOR_BOUND:
        if unsafe in text:
            return 0
    return len(text.split())
