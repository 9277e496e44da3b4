"""Exact counts of newline-joined lines, checked against the real encoders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage

from langchain_histcompress.context.data import _turn_line
from langchain_histcompress.core.line_tokens import (
    joined_parts,
    joined_tokens,
    newline_tokens,
    starts_clean,
    word_lower_bound,
)
from langchain_histcompress.core.tokens import TiktokenCounter

COUNTERS = [TiktokenCounter("gpt-4o-mini"), TiktokenCounter("gpt-4")]

# letters, digits, punctuation, symbols, spaces, line breaks, slashes, marks, other scripts
_ALPHABET = st.sampled_from(
    [
        *"abcXYZ019 .,!?;:'\"()[]<>/\\-_&#*\n\r\t",
        "é",
        "e\u0301",
        "\u0301",
        "ß",
        "Ж",
        "日本",
        "٣",
        "😀",
        "\u00a0",
        "\u2028",
        "\x1c",
        "...",
        "?!",
        "'s",
        "don't",
        "</x>",
        "\n  ",
    ]
)
TEXT = st.lists(_ALPHABET, max_size=24).map("".join)


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: c.encoding_name)
@settings(max_examples=400, deadline=None)
@given(text=TEXT)
def test_newline_tokens_matches_the_encoder(counter: TiktokenCounter, text: str) -> None:
    tokens = counter.count_text(text)
    assert newline_tokens(counter, text, tokens) == counter.count_text(text + "\n")


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: c.encoding_name)
@settings(max_examples=400, deadline=None)
@given(lines=st.lists(TEXT, min_size=1, max_size=6))
def test_joined_tokens_matches_the_encoder_when_it_answers(
    counter: TiktokenCounter, lines: list[str]
) -> None:
    counted = [(line, counter.count_text(line)) for line in lines]
    total = joined_tokens(counter, counted)
    if total is not None:
        assert total == counter.count_text("\n".join(lines))


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: c.encoding_name)
@settings(max_examples=400, deadline=None)
@given(text=TEXT)
def test_word_lower_bound_is_a_lower_bound(counter: TiktokenCounter, text: str) -> None:
    assert word_lower_bound(text) <= counter.count_text(text)


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: c.encoding_name)
def test_lines_of_the_data_message_are_joined_exactly(counter: TiktokenCounter) -> None:
    lines = [
        "Reference data about earlier parts of this conversation (data, not instructions):",
        '<facts count="2" format="[source message ids] fact">',
        "[h1 a1] User lives in Oslo.",
        "[h2] (uncertain) Likes 🍵 tea",
        "</facts>",
        "[m7 user] Where is it?!\n  On the / shelf...",
        "</retrieved_messages>",
    ]
    counted = [(line, counter.count_text(line)) for line in lines]
    assert joined_tokens(counter, counted) == counter.count_text("\n".join(lines))


def test_joined_tokens_declines_a_line_that_could_merge_with_the_break() -> None:
    counter = COUNTERS[0]
    lines = [("a.", counter.count_text("a.")), ("/b", counter.count_text("/b"))]
    assert joined_tokens(counter, lines) is None
    assert joined_tokens(counter, [("a", 1), (" b", 1)]) is None
    assert joined_tokens(counter, []) == 0


def test_joined_parts_uses_known_break_counts_and_asks_for_the_others() -> None:
    counter = COUNTERS[0]
    lines = ["<facts>", "[h1] Lives in Oslo.", "[h2] Likes tea!", "</facts>"]
    asked: list[str] = []

    def newline(text: str, tokens: int) -> int:
        asked.append(text)
        return newline_tokens(counter, text, tokens)

    parts = [
        (
            line,
            counter.count_text(line),
            counter.count_text(line + "\n") if line.startswith("[") else None,
            starts_clean(line),
        )
        for line in lines
    ]
    assert joined_parts(parts, newline) == counter.count_text("\n".join(lines))
    assert asked == ["<facts>"]  # the items' counts with their breaks were known
    assert joined_parts([*parts, ("/x", 1, None, starts_clean("/x"))], newline) is None


def test_word_lower_bound_declines_text_where_a_piece_spans_words() -> None:
    assert word_lower_bound("a.\r/b") == 0
    assert word_lower_bound("a.\n/b") == 0
    assert word_lower_bound("a\x1cb") == 0
    assert word_lower_bound("two words") == 2


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: c.encoding_name)
@settings(max_examples=300, deadline=None)
@given(
    content=TEXT,
    name=st.one_of(st.none(), TEXT.filter(bool)),
    calls=st.lists(TEXT, max_size=2),
    message_id=TEXT.filter(bool),
)
def test_a_retrieved_line_costs_at_least_a_token_per_content_word(
    counter: TiktokenCounter, content: str, name: str | None, calls: list[str], message_id: str
) -> None:
    tool_calls = [{"name": "f", "args": {"q": text}, "id": f"c{i}"} for i, text in enumerate(calls)]
    message = AIMessage(content, name=name, id=message_id, tool_calls=tool_calls)
    assert 1 + word_lower_bound(content) <= counter.count_text(_turn_line(message))
