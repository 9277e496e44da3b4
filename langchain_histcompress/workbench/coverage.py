"""Answer coverage: does the context built for a question contain its gold answer?

Evidence recall (``bench.recall``) never credits a summary, so summarizing strategies score
about 0 whatever their summaries keep. Answer coverage does: a LoCoMo question (categories
1-4, the ones evidence recall scores) is *covered* when its normalized gold answer appears in
the normalized text of the context built for it (summary, facts, retrieved and verbatim
turns; the question itself left out). Normalizing lower-cases, undoes HTML and JSON escapes,
drops punctuation and the articles *a*, *an*, *the*, and collapses whitespace; the answer must
appear as whole words.

It is an upper bound on what a reader could answer (an answer's words may appear for another
reason) and misses answers a reader would infer ("yesterday" for a date); it is reported
beside evidence recall, not instead of it.

Example:
    >>> from langchain_core.messages import HumanMessage, SystemMessage
    >>> context = [SystemMessage("Summary: Ann moved to Oslo in May."), HumanMessage("Where?")]
    >>> answer_covered("oslo", context, question="Where?")
    True
    >>> answer_covered("Bergen", context, question="Where?")
    False
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.render import message_text

__all__ = ["answer_covered", "normalize_answer"]

_JSON_UNICODE = re.compile(r"\\u([0-9a-fA-F]{4})")
_WORD = re.compile(r"\w+")
_ARTICLES = frozenset({"a", "an", "the"})


def normalize_answer(text: str) -> str:
    r"""Lower-cased words without punctuation or articles, single spaces.

    Example:
        >>> normalize_answer("The  Louvre, &amp; a \u00e9t\u00e9 café!")
        'louvre été café'
    """
    text = html.unescape(text)
    text = _JSON_UNICODE.sub(lambda m: chr(int(m.group(1), 16)), text)
    for escape in ("\\n", "\\t", "\\r", '\\"'):
        text = text.replace(escape, " ")
    words = [w for w in _WORD.findall(text.lower()) if w not in _ARTICLES]
    return " ".join(words)


def answer_covered(
    answer: str | None, messages: Sequence[BaseMessage], *, question: str = ""
) -> bool | None:
    """Whether the normalized ``answer`` appears in ``messages`` (``None``: nothing to find).

    Messages whose text is exactly ``question`` are left out.

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> answer_covered("", [AIMessage("anything")]) is None
        True
    """
    wanted = normalize_answer(answer or "")
    if not wanted:
        return None
    texts = [t for m in messages if (t := message_text(m)) != question]
    haystack = f" {normalize_answer(' '.join(texts))} "
    return f" {wanted} " in haystack
