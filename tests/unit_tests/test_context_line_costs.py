"""Retrieved-message lines counted as messages reach `ContextBuilder` (no timing).

With evidence retrieval of raw turns, a `TiktokenCounter` and compact lines, the builder
counts each message's line when the message first reaches it (the whole history on a first
call, the new messages on later ones), so ranking only looks costs up. The outputs are
those of counting lines as they are first considered; a turn's encoding and rendering work
does not grow with the history.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.context import _data_costs
from langchain_histcompress.context import data as context_data
from langchain_histcompress.context._data_costs import DataCosts, LineCosts
from langchain_histcompress.context.builder import BuiltContext, ContextBuilder
from langchain_histcompress.core.facts import Fact, facts_to_state
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.recall.retrieval import EvidenceRetriever

pytest.importorskip("numpy")

_TOPICS = [
    "adopted a kitten from the shelter",
    "painted the lake at sunrise",
    "hiking trip in the mountains",
    "pottery class with wet clay",
    "a recipe for tomato soup",
]
TURNS = 8
_TURN_LINE = re.compile(r"\[\w*[ha]\d+ (user|assistant)\] ")
"""The start of a retrieved message's line (fact lines start ``[h1] ``)."""


def turn_lines(encoded: list[str]) -> list[str]:
    """The message lines among encoded texts (not a line encoded with its line break)."""
    return [t for t in encoded if _TURN_LINE.match(t) and not t.endswith("\n")]


def grown(size: int, tag: str = "") -> list[BaseMessage]:
    """A history of about ``size`` messages whose lines end in varied ways."""
    history: list[BaseMessage] = [SystemMessage("Be brief.", id=f"{tag}sys")]
    endings = ["!", ".", "", " :-)", "\n", "...", "?!", " 42"]
    for i in range(size // 2 + TURNS + 1):
        topic = _TOPICS[i % len(_TOPICS)]
        end = endings[i % len(endings)]
        history.append(HumanMessage(f"Tell me about the {topic}, code{i}{end}", id=f"{tag}h{i}"))
        history.append(AIMessage(f"Sure: the {topic} (round {i}){end}", id=f"{tag}a{i}"))
    return history


def turn_ends(size: int) -> Iterator[int]:
    return (size + 2 * t + 2 for t in range(TURNS))


def facts(tag: str = "") -> dict[str, Any]:
    return facts_to_state(
        [
            Fact(id=f"{tag}f-{n}", content=f"The user {_TOPICS[n % 5]}.", source_ids=(f"h{n}",))
            for n in range(24)
        ]
    )


def builder(counter: TiktokenCounter, *, eager: bool = True, **kwargs: Any) -> ContextBuilder:
    made = ContextBuilder(
        max_context_tokens=1_500,
        token_counter=counter,
        top_k_facts=1_000,
        raw_turn_retrieval=1_000,
        data_budget_ratio=0.9,
        evidence_retriever=EvidenceRetriever(max_term_postings=60),
        **kwargs,
    )
    made._eager = eager and made._eager
    return made


def report(built: BuiltContext) -> tuple[Any, ...]:
    return (built.messages, built.tokens, built.retrieved_ids, built.fact_ids)


def question(turn: int) -> str:
    return f"kitten code{turn * 7} soup" if turn % 2 else "tomato pottery"


@pytest.mark.parametrize("layout", ["data_first", "cache_stable"])
def test_lines_counted_ahead_give_the_same_contexts(layout: str) -> None:
    """Counting every line ahead changes nothing: same messages, tokens and retrieved ids."""
    history = grown(600)
    state = facts()
    counter = TiktokenCounter()
    ahead = builder(counter, layout=layout)
    assert ahead._eager
    lazy = builder(TiktokenCounter(), eager=False, layout=layout)
    for made in (ahead, lazy):
        made.assemble(history[:400], facts=state, query="kitten")
    for turn, end in enumerate(range(402, 602, 2)):
        query = question(turn)
        got = ahead.assemble(history[:end], facts=state, query=query)
        expected = lazy.assemble(history[:end], facts=state, query=query)
        assert report(got) == report(expected), end
        assert got.tokens == counter(got.messages)
        # a fresh builder (cold, every line counted at once) agrees too
        if turn % 25 == 0:
            fresh = builder(TiktokenCounter(), layout=layout)
            assert report(fresh.assemble(history[:end], facts=state, query=query)) == report(got)


def test_a_builder_shared_by_two_conversations_keeps_both() -> None:
    """Alternating histories: the contexts of counting lazily, and no line counted twice."""
    first, second = grown(300, "x"), grown(300, "y")
    shared_counter = TiktokenCounter()
    shared = builder(shared_counter)
    lazy = builder(TiktokenCounter(), eager=False)
    encoded: list[str] = []
    encode = shared_counter._encode

    def counting(text: str) -> list[int]:
        encoded.append(text)
        return encode(text)

    shared_counter._encode = counting  # type: ignore[method-assign]
    states = [facts(), facts()]
    for n, history in enumerate((first, second)):
        for made in (shared, lazy):
            made.assemble(history[:200], facts=states[n], query="kitten")
    for end in range(202, 240, 2):
        for n, history in enumerate((first, second)):
            encoded.clear()
            got = shared.assemble(history[:end], facts=states[n], query="soup")
            expected = lazy.assemble(history[:end], facts=states[n], query="soup")
            assert report(got) == report(expected)
            # only the messages new to the shared builder, nothing of the other history
            new = {context_data._turn_line(m) for m in history[end - 2 : end]}
            assert set(turn_lines(encoded)) <= new, encoded


def work_per_turn(
    size: int, monkeypatch: pytest.MonkeyPatch, *, eager: bool = True
) -> list[tuple[int, int]]:
    rendered: list[str] = []
    render = context_data._render_turn_line

    def counting_render(message: BaseMessage) -> str:
        rendered.append(str(message.id))
        return render(message)

    monkeypatch.setattr(context_data, "_render_turn_line", counting_render)
    monkeypatch.setattr(_data_costs, "_render_turn_line", counting_render)
    counter = TiktokenCounter(cache_size=100_000)
    encoded: list[str] = []
    encode = counter._encode

    def counting(text: str) -> list[int]:
        encoded.append(text)
        return encode(text)

    counter._encode = counting  # type: ignore[method-assign]
    made = builder(counter, eager=eager)
    history = grown(size)
    state = facts()
    made.assemble(history[:size], facts=state, query="kitten")
    body = size - 1  # the system message is not a candidate
    lines = turn_lines(encoded)
    assert len(lines) == len(set(lines)) == (body if eager else len(lines))  # once a line
    seen = []
    for turn, end in enumerate(turn_ends(size)):
        encoded.clear()
        rendered.clear()
        built = made.assemble(history[:end], facts=state, query=question(turn))
        assert built.retrieved_ids
        assert len(set(rendered)) == len(rendered)  # a line is rendered once a turn
        seen.append((len(encoded), len(rendered)))
    return seen


def test_a_turn_encodes_and_renders_the_same_on_a_grown_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for size in (400, 8_000):
        for encoded, rendered in work_per_turn(size, monkeypatch):
            # the new round's two messages (their lines, and their counts in the window)
            # and a few odd line endings
            assert encoded <= 8, size
            # the two new lines, and the lines shown (bounded by the budget: the 1,500
            # tokens hold fewer than 100 message lines), most already rendered last turn
            assert rendered <= 2 + 100, size


def test_line_costs_stay_bounded() -> None:
    counter = TiktokenCounter()
    costs = DataCosts(counter, "compact")
    costs.turn_costs = LineCosts(8)
    history = grown(20)[1:]
    assert costs.prime_turns(history[:6], cold=True) == 6
    # a history that does not fit in the room left is counted as its lines are needed
    assert costs.prime_turns(history[:12], cold=True) == 0
    # new messages of a growing history are counted, the oldest lines dropped when full
    assert costs.prime_turns(history[6:10], cold=False) == 4
    assert len(costs.turn_costs.entries) <= 8
    assert costs.turn_costs.get(history[9]) == counter.count_text(
        context_data._turn_line(history[9])
    )
    assert costs.turn_costs.get(history[0]) is None
