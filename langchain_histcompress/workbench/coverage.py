"""Answer coverage: does the context built for a question contain its gold answer?

A LoCoMo question (categories 1-4) is *covered* when its normalized gold answer appears, as
whole words, in the normalized text of the context built for it (the question itself left
out). Unlike evidence recall it credits summaries; it is an upper bound on what a reader could
answer, reported beside evidence recall (docs/design/workbench.md).
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
        >>> from langchain_core.messages import HumanMessage, SystemMessage
        >>> context = [SystemMessage("Summary: Ann moved to Oslo in May."), HumanMessage("Where?")]
        >>> answer_covered("oslo", context, question="Where?")
        True
        >>> answer_covered("Bergen", context, question="Where?")
        False
    """
    wanted = normalize_answer(answer or "")
    if not wanted:
        return None
    texts = [t for m in messages if (t := message_text(m)) != question]
    haystack = f" {normalize_answer(' '.join(texts))} "
    return f" {wanted} " in haystack
