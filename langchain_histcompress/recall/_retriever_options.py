"""Options shared by the BM25 retrievers: their validation and per-conversation indexes.

`BM25TurnRetriever` and `EvidenceRetriever` take the same BM25 parameters, cache bounds and
speaker names; both keep one message index and one fact index per conversation.
"""

from __future__ import annotations

from collections.abc import Mapping

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.recall._conversations import Conversation, Conversations
from langchain_histcompress.recall._turn_index import _TurnIndex
from langchain_histcompress.recall.bm25 import BM25Index, _FactIndex


def conversations(
    limit: int,
    *,
    k1: float,
    b: float,
    max_cached: int,
    include_tool_results: bool,
    speaker_names: Mapping[str, str],
) -> Conversations:
    """Per-conversation indexes of a retriever: a message index and a fact index each."""

    def new() -> Conversation:
        turns = _TurnIndex(
            k1=k1,
            b=b,
            max_cached=max_cached,
            include_tool_results=include_tool_results,
            speaker_names=speaker_names,
        )
        return Conversation(turns, _FactIndex(k1=k1, b=b, text=content_only))

    return Conversations(limit, new)


def content_only(fact: Fact) -> str:
    """The text a fact is indexed by: its content alone."""
    return fact.content


def check_bm25(k1: float, b: float) -> None:
    """Raise `ConfigurationError` on invalid BM25 parameters."""
    BM25Index(k1=k1, b=b)


def check_postings(value: object) -> int | None:
    """``max_term_postings``, validated (an int >= 1 or ``None``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"max_term_postings must be an int >= 1 or None, got {value!r}"
        raise ConfigurationError(msg)
    return value


def check_known_prefix(known_prefix: object) -> None:
    """Raise `ConfigurationError` unless ``known_prefix`` is an int >= 0."""
    if isinstance(known_prefix, bool) or not isinstance(known_prefix, int) or known_prefix < 0:
        msg = f"known_prefix must be an int >= 0, got {known_prefix!r}"
        raise ConfigurationError(msg)


def check_count(name: str, value: object) -> int:
    """``value``, validated as an int >= 1 (``name`` is the parameter's)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{name} must be an int >= 1, got {value!r}"
        raise ConfigurationError(msg)
    return value


def check_names(speaker_names: object) -> dict[str, str]:
    """Speaker names, validated, without blank names (``None``: none)."""
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
