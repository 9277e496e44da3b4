"""Benchmark of incremental token counting on a long, growing history.

Example:
    >>> figures = measure_incremental_counting(200, appended=2)
    >>> sorted(figures)
    ['first_count_s', 'messages', 'ratio', 'recount_s']
"""

from __future__ import annotations

import gc
import random
import time

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_histcompress.core.encodings import get_encoding
from langchain_histcompress.core.tokens import TiktokenCounter

__all__ = ["measure_incremental_counting", "synthetic_history"]

_VOCABULARY = (
    "the a an of to in for on with order invoice refund shipping customer account password "
    "reset error timeout database query index latency budget summary report weather city "
    "flight hotel booking meeting schedule 2024 42 3.14 café naïve 東京 данные 🙂 def return "
    "import json {} [] () -> == != <= >= null true false"
)
_WORDS = _VOCABULARY.split()


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))


def synthetic_history(n_messages: int, *, seed: int = 0) -> list[BaseMessage]:
    """Build a deterministic history of ``n_messages`` messages, all with ids.

    Rounds cycle through a question, an AI tool call, its tool result and an AI answer; the
    last round is cut wherever ``n_messages`` falls.

    Example:
        >>> [m.type for m in synthetic_history(5)]
        ['human', 'ai', 'tool', 'ai', 'human']
    """
    rng = random.Random(seed)
    messages: list[BaseMessage] = []
    while len(messages) < n_messages:
        i = len(messages)
        call_id = f"call_{i:08d}"
        messages.append(HumanMessage(_text(rng, 5, 40), id=f"m{i}"))
        messages.append(
            AIMessage(
                "",
                id=f"m{i + 1}",
                tool_calls=[
                    {
                        "name": "search",
                        "args": {"query": _text(rng, 2, 8), "limit": rng.randint(1, 20)},
                        "id": call_id,
                        "type": "tool_call",
                    }
                ],
            )
        )
        messages.append(ToolMessage(_text(rng, 20, 120), tool_call_id=call_id, id=f"m{i + 2}"))
        messages.append(AIMessage(_text(rng, 10, 80), id=f"m{i + 3}"))
    return messages[:n_messages]


def measure_incremental_counting(n_messages: int = 100_000, appended: int = 2) -> dict[str, float]:
    """Time a first full count, then a recount after ``appended`` new messages.

    The encoding is loaded first and garbage is collected before each timed phase. The first
    count uses a fresh `TiktokenCounter` whose cache can hold the whole history.

    Args:
        n_messages: Size of the history counted first.
        appended: Messages appended before the recount.

    Returns:
        ``messages`` (history size), ``first_count_s`` and ``recount_s`` (seconds), and
        ``ratio`` = recount_s / first_count_s.
    """
    history = synthetic_history(n_messages + appended)
    get_encoding("o200k_base")
    counter = TiktokenCounter("gpt-4o-mini", cache_size=max(262_144, 2 * len(history)))
    gc.collect()
    start = time.perf_counter()
    counter(history[:n_messages])
    first = time.perf_counter() - start
    gc.collect()
    start = time.perf_counter()
    counter(history)
    recount = time.perf_counter() - start
    return {
        "messages": float(n_messages),
        "first_count_s": first,
        "recount_s": recount,
        "ratio": recount / first if first > 0 else 0.0,
    }
