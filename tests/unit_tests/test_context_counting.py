"""Per-turn tiktoken work of `ContextBuilder` on a grown history, counted (no timing).

Every line of the data message (a fact, a retrieved message) is encoded once (a message's
line when the message arrives, a fact's when first considered); the prompt's total comes
from cached counts of its parts, so the data message is never encoded whole and a turn
encodes its new messages plus the lines it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.context.data import _LEAD
from langchain_histcompress.core.facts import Fact, facts_to_state
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.recall.retrieval import EvidenceRetriever

pytest.importorskip("numpy")

_TOPICS = [
    "adopted a kitten from the shelter",
    "painted the lake at sunrise",
    "hiking trip in the mountains",
    "pottery class with wet clay",
]
TURNS = 6


def grown(size: int) -> list[BaseMessage]:
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for i in range(size // 2 + TURNS + 1):
        topic = _TOPICS[i % len(_TOPICS)]
        history.append(HumanMessage(f"Tell me about the {topic}, code{i}!", id=f"h{i}"))
        history.append(AIMessage(f"Sure: the {topic} (round {i}).", id=f"a{i}"))
    return history


def turn_ends(size: int) -> Iterator[int]:
    return (size + 2 * t + 2 for t in range(TURNS))


def encodes_per_turn(size: int, layout: str) -> list[list[str]]:
    history = grown(size)
    counter = TiktokenCounter(cache_size=100_000)
    facts = [
        Fact(id=f"f-{n}", content=f"The user {_TOPICS[n % 4]}.", source_ids=(f"h{n}",))
        for n in range(24)
    ]
    builder = ContextBuilder(
        max_context_tokens=1_500,
        token_counter=counter,
        top_k_facts=1_000,
        raw_turn_retrieval=1_000,
        data_budget_ratio=0.9,
        layout=layout,  # type: ignore[arg-type]
        evidence_retriever=EvidenceRetriever(max_term_postings=60),
    )
    encoded: list[str] = []
    encode = counter._encode

    def counting(text: str) -> list[int]:
        encoded.append(text)
        return encode(text)

    counter._encode = counting  # type: ignore[method-assign]
    state = facts_to_state(facts)
    builder.build(history[: size + 2], facts=state, query="kitten shelter")
    seen = []
    for end in turn_ends(size):
        encoded.clear()
        built = builder.assemble(history[:end], facts=state, query="kitten shelter")
        assert built.retrieved_ids and built.fact_ids
        assert built.tokens == TiktokenCounter()(built.messages)  # exact from its parts
        seen.append(list(encoded))
    return seen


@pytest.mark.parametrize("layout", ["data_first", "cache_stable"])
def test_a_turn_encodes_its_new_messages_and_nothing_already_counted(layout: str) -> None:
    for size in (400, 8_000):
        for texts in encodes_per_turn(size, layout):
            # The same question ranks mostly the same old lines, already counted: a turn
            # encodes the new round's two messages and the few lines the grown index
            # brings in (the same handful at both sizes), never the data message whole.
            assert len(texts) <= 2 + 8, (size, texts)
            assert not any(_LEAD in text for text in texts)
