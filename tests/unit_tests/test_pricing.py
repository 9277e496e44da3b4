from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.pricing import (
    PRICING_MODELS,
    Bill,
    PricingModel,
    PromptCache,
    PromptRequest,
    encode_request,
    price_requests,
)
from langchain_histcompress.core.tokens import TiktokenCounter
from tests.histories import history

OPENAI_90 = PRICING_MODELS["openai-90"]
ANTHROPIC = PRICING_MODELS["anthropic"]
NONE = PRICING_MODELS["none"]


def _tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", " ", "name must be a non-empty string"),
        ("family", "gemini", "family must be one of none, openai, anthropic"),
        ("input_price", float("nan"), "input_price must be a finite number >= 0"),
        ("output_price", True, "output_price must be a finite number >= 0"),
        ("cache_read_ratio", -0.1, "cache_read_ratio must be a finite number >= 0"),
        ("min_cached_tokens", 0, "min_cached_tokens must be an integer >= 1"),
        ("cache_step", 1.5, "cache_step must be an integer >= 1"),
        ("cache_lifetime", 0, "cache_lifetime must be a number of seconds > 0"),
    ],
)
def test_pricing_model_rejects_bad_values(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        dataclasses.replace(OPENAI_90, **{field: value})


def test_prompt_cache_needs_a_pricing_model() -> None:
    with pytest.raises(ConfigurationError, match="pricing must be a PricingModel"):
        PromptCache("openai-90")  # type: ignore[arg-type]


def test_requests_must_come_in_time_order() -> None:
    cache = PromptCache(OPENAI_90)
    cache.price(PromptRequest(tokens=[1], at=10.0))
    with pytest.raises(ValueError, match="time order"):
        cache.price(PromptRequest(tokens=[1], at=9.0))


def test_breakpoints_must_lie_within_the_prompt() -> None:
    with pytest.raises(ValueError, match="breakpoints must lie within the prompt"):
        PromptCache(ANTHROPIC).price(PromptRequest(tokens=[1, 2], breakpoints=(3,)))


def test_bills_of_different_pricing_do_not_add() -> None:
    with pytest.raises(ValueError, match="cannot add bills"):
        Bill(NONE) + Bill(OPENAI_90)


# --- OpenAI rules ---------------------------------------------------------------------------


def test_openai_caches_nothing_below_the_minimum() -> None:
    prompt = _tokens(1023)
    bill = price_requests(
        [PromptRequest(tokens=prompt), PromptRequest(tokens=prompt, at=1.0)], OPENAI_90
    )
    assert [r.cached_tokens for r in bill.requests] == [0, 0]


def test_openai_caches_the_shared_prefix_in_128_token_steps() -> None:
    first = _tokens(3000)
    second = [*_tokens(1300), -1, *_tokens(500)]
    bill = price_requests(
        [PromptRequest(tokens=first), PromptRequest(tokens=second, at=1.0)], OPENAI_90
    )
    assert bill.requests[1].cached_tokens == 1280  # 1300 shared, floored to 1024 + 2 * 128


def test_openai_reads_the_longest_prefix_of_any_earlier_request() -> None:
    a = _tokens(5000)
    b = [*_tokens(2000), *_tokens(3000, start=10**6)]
    c = [*_tokens(4100), 7]
    bill = price_requests(
        [PromptRequest(tokens=a), PromptRequest(tokens=b, at=1.0), PromptRequest(tokens=c, at=2.0)],
        OPENAI_90,
    )
    assert [r.cached_tokens for r in bill.requests] == [0, 1920, 4096]


def test_openai_cache_is_cold_after_a_pause_longer_than_its_lifetime() -> None:
    prompt = _tokens(2048)
    lifetime = OPENAI_90.cache_lifetime
    warm = price_requests(
        [PromptRequest(tokens=prompt), PromptRequest(tokens=prompt, at=lifetime)], OPENAI_90
    )
    cold = price_requests(
        [PromptRequest(tokens=prompt), PromptRequest(tokens=prompt, at=lifetime + 0.5)], OPENAI_90
    )
    assert warm.requests[1].cached_tokens == 2048
    assert cold.requests[1].cached_tokens == 0


def test_reading_a_prefix_restarts_its_lifetime() -> None:
    prompt = _tokens(2048)
    step = OPENAI_90.cache_lifetime * 0.75
    requests = [PromptRequest(tokens=prompt, at=i * step) for i in range(4)]
    bill = price_requests(requests, OPENAI_90)
    assert [r.cached_tokens for r in bill.requests] == [0, 2048, 2048, 2048]


def test_openai_cost_splits_cached_and_uncached_input_and_prices_output_apart() -> None:
    prompt = _tokens(2000)
    bill = price_requests(
        [
            PromptRequest(tokens=prompt),
            PromptRequest(tokens=[*prompt, 1, 2], output_tokens=100, at=1.0),
        ],
        OPENAI_90,
    )
    second = bill.requests[1]
    expected = (1920 * 0.125 + (2002 - 1920) * 1.25 + 100 * 10.0) / 1_000_000
    assert second.cost == pytest.approx(expected, rel=1e-12)
    assert second.cache_write_tokens == 0


# --- Anthropic rules ------------------------------------------------------------------------


def test_anthropic_writes_at_the_breakpoint_and_reads_it_back() -> None:
    first = PromptRequest(tokens=_tokens(3000), breakpoints=(1500,))
    second = PromptRequest(tokens=[*_tokens(1500), *_tokens(50, start=10**6)], at=60.0)
    bill = price_requests([first, second], ANTHROPIC)
    one, two = bill.requests
    assert (one.cached_tokens, one.cache_write_tokens) == (0, 1500)
    assert (two.cached_tokens, two.cache_write_tokens) == (1500, 50)
    expected = (1500 * 0.1 + 50 * 1.25) * 3.0 / 1_000_000
    assert two.cost == pytest.approx(expected, rel=1e-12)


def test_anthropic_does_not_cache_a_prefix_shorter_than_the_minimum() -> None:
    short = PromptRequest(tokens=_tokens(1000))
    bill = price_requests([short, dataclasses.replace(short, at=1.0)], ANTHROPIC)
    assert all(r.cached_tokens == r.cache_write_tokens == 0 for r in bill.requests)


def test_anthropic_does_not_read_a_prefix_past_the_last_breakpoint() -> None:
    first = PromptRequest(tokens=_tokens(3000))
    second = PromptRequest(tokens=_tokens(3000), breakpoints=(2000,), at=1.0)
    bill = price_requests([first, second], ANTHROPIC)
    assert bill.requests[1].cached_tokens == 0
    assert bill.requests[1].cache_write_tokens == 2000


def test_no_cache_prices_every_input_token_fully() -> None:
    prompt = _tokens(5000)
    bill = price_requests([PromptRequest(tokens=prompt, at=float(t)) for t in range(3)], NONE)
    assert bill.cached_tokens == 0
    assert bill.cost == pytest.approx(3 * 5000 * 2.5 / 1_000_000)


# --- properties -----------------------------------------------------------------------------


@st.composite
def _conversation(draw: st.DrawFn) -> list[PromptRequest]:
    """Requests built from a few shared stems so that prefixes really overlap."""
    stems = [draw(st.lists(st.integers(0, 3), min_size=0, max_size=3000)) for _ in range(3)]
    requests = []
    at = 0.0
    for _ in range(draw(st.integers(1, 6))):
        stem = stems[draw(st.integers(0, 2))]
        cut = draw(st.integers(0, len(stem)))
        tail = draw(st.lists(st.integers(0, 3), max_size=400))
        at += draw(st.sampled_from([0.0, 30.0, 200.0, 400.0]))
        requests.append(PromptRequest(tokens=[*stem[:cut], *tail], output_tokens=5, at=at))
    return requests


def _reference_openai(requests: list[PromptRequest], pricing: PricingModel) -> list[int]:
    """Longest prefix shared with any earlier request, on the provider's grid (all warm)."""
    cached: list[int] = []
    for i, request in enumerate(requests):
        tokens = list(request.tokens)
        best = max((_lcp(tokens, list(r.tokens)) for r in requests[:i]), default=0)
        step = pricing.cache_step
        cached.append(best // step * step if best >= pricing.min_cached_tokens else 0)
    return cached


@settings(max_examples=40, deadline=None)
@given(_conversation())
def test_openai_cached_part_is_a_warm_shared_prefix(requests: list[PromptRequest]) -> None:
    bill = price_requests(requests, OPENAI_90)
    for i, cost in enumerate(bill.requests):
        tokens = list(requests[i].tokens)
        assert 0 <= cost.cached_tokens <= cost.input_tokens
        assert cost.cached_tokens % OPENAI_90.cache_step == 0
        if cost.cached_tokens:
            assert cost.cached_tokens >= OPENAI_90.min_cached_tokens
            shared = max(_lcp(tokens, list(r.tokens)) for r in requests[:i])
            assert cost.cached_tokens <= shared
        assert cost.cost >= 0
    uncached = dataclasses.replace(OPENAI_90, family="none")
    assert bill.cost <= price_requests(requests, uncached).cost + 1e-12


@settings(max_examples=40, deadline=None)
@given(_conversation())
def test_warm_back_to_back_requests_match_the_reference(requests: list[PromptRequest]) -> None:
    back_to_back = [dataclasses.replace(r, at=float(i)) for i, r in enumerate(requests)]
    bill = price_requests(back_to_back, OPENAI_90)
    assert [r.cached_tokens for r in bill.requests] == _reference_openai(back_to_back, OPENAI_90)


@settings(max_examples=40, deadline=None)
@given(_conversation())
def test_anthropic_parts_never_exceed_the_prompt(requests: list[PromptRequest]) -> None:
    bill = price_requests(requests, ANTHROPIC)
    for request, cost in zip(requests, bill.requests, strict=True):
        assert cost.uncached_tokens >= 0
        if cost.cached_tokens:
            assert cost.cached_tokens >= ANTHROPIC.min_cached_tokens
        if cost.cache_write_tokens:
            assert request.input_tokens >= ANTHROPIC.min_cached_tokens


# --- message encoding -----------------------------------------------------------------------


_COUNTER = TiktokenCounter()


@settings(max_examples=15, deadline=None)
@given(history(max_rounds=4))
def test_encoded_request_is_as_long_as_the_counted_one(messages: list[Any]) -> None:
    counter = _COUNTER
    assert len(encode_request(messages, counter)) == counter.count_messages(messages)
    for message in messages:
        assert len(counter.encode_message(message)) == counter.count_message(message)


def test_encoded_requests_share_exactly_the_prefix_of_shared_messages() -> None:
    counter = TiktokenCounter()
    system = SystemMessage("You are helpful. " * 300, id="s")
    turns = [HumanMessage("hi", id="1"), AIMessage("hello", id="2")]
    grown = [system, *turns, HumanMessage("more", id="3")]
    edited = [system, HumanMessage("ho", id="1")]
    a = encode_request([system, *turns], counter)
    assert encode_request(grown, counter)[: len(a) - 3] == a[:-3]
    prefix = len(encode_request([system], counter)) - 3
    assert _lcp(a, encode_request(edited, counter)) < prefix + 6


def test_tools_text_is_counted_ahead_of_the_messages() -> None:
    counter = TiktokenCounter()
    messages = [HumanMessage("hi")]
    tools = '[{"name": "search"}]'
    ids = encode_request(messages, counter, tools_text=tools)
    assert len(ids) == counter.count_text(tools) + counter.count_messages(messages)


def test_full_history_caches_almost_everything_while_compressed_rewrites_do_not() -> None:
    rng = random.Random(0)
    counter = TiktokenCounter()
    system = SystemMessage("policy " * 1200, id="s")
    history_: list[Any] = [system]
    full, rewritten = [], []
    for turn in range(10):
        history_.append(HumanMessage(" ".join(str(rng.random()) for _ in range(40)), id=f"h{turn}"))
        full.append(PromptRequest(tokens=encode_request(history_, counter), at=turn * 30.0))
        summary = SystemMessage(f"summary version {turn}", id="sum")
        view = [summary, system, history_[-1]]
        rewritten.append(PromptRequest(tokens=encode_request(view, counter), at=turn * 30.0))
        history_.append(AIMessage("ok", id=f"a{turn}"))
    assert price_requests(full, OPENAI_90).cached_share > 0.8
    assert price_requests(rewritten, OPENAI_90).cached_share == 0
