from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.compressor import RoundCompressor
from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.pricing import PRICING_MODELS
from langchain_histcompress.schedule import FoldSchedule, cache_horizon
from tests.fakes import ScriptedSummarizer, summary_json

OPENAI_90 = PRICING_MODELS["openai-90"]
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def _stamped(n: int, *, start: datetime = T0, words: int = 60, prefix: str = "") -> list[Any]:
    """``n`` rounds 30 s apart from ``start``, each about ``2 * words`` tokens."""
    out: list[BaseMessage] = []
    for i in range(n):
        at = {"timestamp": (start + timedelta(seconds=60 * i)).isoformat()}
        out.append(
            HumanMessage(f"q{i} " + "word " * words, id=f"{prefix}h{i}", additional_kwargs=at)
        )
        out.append(AIMessage(f"a{i} " + "word " * words, id=f"{prefix}a{i}", additional_kwargs=at))
    return out


def _short() -> ScriptedSummarizer:
    return ScriptedSummarizer(default=lambda prompt: summary_json("Earlier rounds."))


def _compressor(model: ScriptedSummarizer, pricing: str = "openai-90") -> RoundCompressor:
    return RoundCompressor(model, pricing=pricing, max_summary_tokens=128)


def test_unknown_pricing_name_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="unknown pricing 'openai-99'"):
        RoundCompressor(ScriptedSummarizer(), pricing="openai-99")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("summary_tokens", 0, "summary_tokens must be an integer >= 1"),
        ("instruction_tokens", -1, "instruction_tokens must be an integer >= 0"),
        ("retain_rounds", 0, "retain_rounds must be an integer >= 1"),
        ("verbatim_floor", -5, "verbatim_floor must be None or an integer >= 0"),
        ("payback_factor", 0.5, "payback_factor must be a number >= 1"),
        ("pricing", "openai-90", "pricing must be a PricingModel"),
    ],
)
def test_schedule_rejects_bad_settings(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        dataclasses.replace(FoldSchedule(), **{field: value})


@pytest.mark.parametrize("pricing", [n for n, p in PRICING_MODELS.items() if p.caches])
def test_a_short_conversation_never_calls_the_summarizer(pricing: str) -> None:
    model = _short()
    compressor = _compressor(model, pricing)
    history: list[BaseMessage] = [SystemMessage("You help.")]
    summary = None
    for i in range(8):
        history += _stamped(1, start=T0 + timedelta(seconds=60 * i), prefix=f"r{i}")
        result = compressor.compress(history, summary)
        summary = result.summary
    assert model.calls == 0


def test_a_cold_cache_folds_the_backlog_in_one_call_and_keeps_a_cacheable_view() -> None:
    model = _short()
    compressor = _compressor(model)
    history: list[BaseMessage] = [SystemMessage("You help.")]
    for day in range(6):  # sessions a day apart: the cache is cold when each starts
        history += _stamped(12, start=T0 + timedelta(days=day), prefix=f"d{day}")
    history += _stamped(1, start=T0 + timedelta(days=7), prefix="new")
    result = compressor.compress(history)
    assert result.calls == 1
    assert compressor.plan(history).reasons == ("cost",)
    kept = compressor.token_counter(result.messages)
    assert kept >= OPENAI_90.min_cached_tokens
    assert kept < compressor.token_counter(history) / 4
    assert result.messages[-1].id == "newa0"


def test_a_warm_cache_is_rewritten_only_past_the_payback_threshold() -> None:
    model = _short()
    compressor = _compressor(model)
    assert compressor.compress([SystemMessage("You help."), *_stamped(12)]).calls == 0
    assert model.calls == 0
    long_tail = [SystemMessage("You help."), *_stamped(40)]
    assert compressor.compress(long_tail).calls == 1
    assert compressor.schedule is not None
    assert (
        compressor.schedule.decide(
            fixed_tokens=4,
            summary_tokens=0,
            round_tokens=[125] * 40,
            cold=False,
            horizon=40,
            rounds_so_far=40,
        ).reason
        == "payback"
    )


def test_without_caching_a_long_history_is_folded() -> None:
    compressor = _compressor(_short(), "none")
    history = [SystemMessage("You help."), *_stamped(30)]
    assert compressor.compress(history).calls == 1


@settings(max_examples=60, deadline=None)
@given(
    pricing=st.sampled_from(list(PRICING_MODELS.values())),
    rounds=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
    summary=st.integers(0, 128),
    cold=st.booleans(),
    horizon=st.integers(1, 200),
    so_far=st.integers(0, 500),
)
def test_a_chosen_fold_is_expected_to_pay_and_respects_floor_and_retention(
    pricing: Any, rounds: list[int], summary: int, cold: bool, horizon: int, so_far: int
) -> None:
    schedule = FoldSchedule(pricing=pricing, summary_tokens=128, retain_rounds=2)
    decision = schedule.decide(
        fixed_tokens=50,
        summary_tokens=summary,
        round_tokens=rounds,
        cold=cold,
        horizon=horizon,
        rounds_so_far=so_far,
    )
    assert 0 <= decision.rounds <= max(0, len(rounds) - 2)
    if decision.rounds:
        assert decision.net_saving > 0
        saving = decision.net_saving + decision.cost
        assert saving >= schedule.payback_factor * decision.cost - 1e-6
        assert 50 + sum(rounds[decision.rounds :]) >= schedule.floor
    else:
        assert decision.reason == "none"


def test_horizon_is_the_mean_stretch_between_cold_starts() -> None:
    day = timedelta(days=1)
    times = [T0 + i * timedelta(seconds=30) for i in range(4)]
    times += [T0 + day + i * timedelta(seconds=30) for i in range(8)]
    assert cache_horizon(times, lifetime=300, rounds_so_far=100) == 6
    assert cache_horizon(times[:4], lifetime=300, rounds_so_far=100) == 100
    assert cache_horizon([None, *times[:1]], lifetime=300, rounds_so_far=0) == 1
