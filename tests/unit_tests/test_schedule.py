from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.pricing import PRICING_MODELS
from langchain_histcompress.core.schedule import FoldSchedule, RoundLoad, round_loads
from langchain_histcompress.edge.compressor import RoundCompressor
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
    return RoundCompressor(model, trigger=("cost", pricing), max_summary_tokens=128)


def test_unknown_pricing_name_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="unknown pricing 'openai-99'"):
        RoundCompressor(ScriptedSummarizer(), trigger=("cost", "openai-99"))


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


def test_a_warm_cache_is_rewritten_only_once_the_rent_pays_for_it() -> None:
    schedule = FoldSchedule(pricing=OPENAI_90, summary_tokens=128)
    state: dict[str, Any] = {"fixed_tokens": 60, "summary_tokens": 128, "rounds_so_far": 200}
    assert schedule.decide(rounds=[RoundLoad(tokens=300)] * 12, **state).rounds == 0
    decision = schedule.decide(rounds=[RoundLoad(tokens=300)] * 40, **state)
    assert decision.reason == "rent"
    assert decision.rent >= decision.overhead


def test_the_rent_pays_for_the_overhead_the_folded_rounds_read_is_paid_by_any_fold() -> None:
    schedule = FoldSchedule(pricing=PRICING_MODELS["none"], summary_tokens=128, retain_rounds=3)
    state: dict[str, Any] = {"fixed_tokens": 60, "summary_tokens": 128, "rounds_so_far": 300}
    loads = [RoundLoad(tokens=60)] * 9
    assert schedule.decide(rounds=loads[:-1], **state).rounds == 0  # rent below the overhead
    decision = schedule.decide(rounds=loads, **state)
    assert decision.rounds == 6  # every round but the retained ones
    folded = 6 * 60
    assert decision.overhead == pytest.approx(decision.cost - folded)
    assert decision.overhead <= decision.rent < decision.cost  # the read is not rent's to repay
    # the payback still counts the whole cost: a short chat does not fold the same rounds
    young = schedule.decide(rounds=loads, fixed_tokens=60, summary_tokens=128, rounds_so_far=9)
    assert young.rounds == 0


def test_without_caching_a_long_history_is_folded() -> None:
    compressor = _compressor(_short(), "none")
    history = [SystemMessage("You help."), *_stamped(30)]
    assert compressor.compress(history).calls == 1


def test_the_default_folds_by_cost_and_round_count_is_opt_in() -> None:
    history = [SystemMessage("You help."), *_stamped(6)]
    by_cost = RoundCompressor(_short(), max_summary_tokens=128)
    assert by_cost.target.schedule is not None
    assert by_cost.target.schedule.pricing.name == "openai-50"
    assert by_cost.plan(history).chunks == ()
    by_rounds = RoundCompressor(_short(), max_summary_tokens=128, trigger=("rounds", 5))
    assert by_rounds.target.schedule is None
    assert by_rounds.plan(history).reasons == ("rounds",)
    either = RoundCompressor(_short(), max_summary_tokens=128, trigger=["cost", ("rounds", 5)])
    assert either.target.schedule is not None
    assert either.plan(history).reasons == ("rounds",)  # the cost does not pay yet


@settings(max_examples=60, deadline=None)
@given(
    pricing=st.sampled_from(list(PRICING_MODELS.values())),
    rounds=st.lists(
        st.tuples(st.integers(1, 3000), st.integers(1, 5), st.booleans()), min_size=1, max_size=30
    ),
    summary=st.integers(0, 128),
    so_far=st.integers(0, 500),
)
def test_a_chosen_fold_has_paid_its_rent_and_repays_itself_within_retention(
    pricing: Any, rounds: list[tuple[int, int, bool]], summary: int, so_far: int
) -> None:
    schedule = FoldSchedule(pricing=pricing, summary_tokens=128, retain_rounds=2)
    loads = [RoundLoad(tokens=t, requests=n, cold=c) for t, n, c in rounds]
    decision = schedule.decide(
        fixed_tokens=50, summary_tokens=summary, rounds=loads, rounds_so_far=so_far
    )
    assert 0 <= decision.rounds <= max(0, len(rounds) - 2)
    if decision.rounds:
        assert decision.net_saving > 0
        assert decision.rent >= decision.overhead
        assert decision.overhead <= decision.cost
    else:
        assert decision.reason == "none"


def test_the_floor_is_kept_only_when_a_cached_view_is_cheaper() -> None:
    loads = [RoundLoad(tokens=70)] * 300
    state: dict[str, Any] = {"fixed_tokens": 60, "summary_tokens": 128, "rounds_so_far": 300}
    at_90 = FoldSchedule(pricing=OPENAI_90, summary_tokens=128, retain_rounds=3)
    at_50 = FoldSchedule(pricing=PRICING_MODELS["openai-50"], summary_tokens=128, retain_rounds=3)
    kept_90 = 300 - at_90.decide(rounds=loads, **state).rounds
    kept_50 = 300 - at_50.decide(rounds=loads, **state).rounds
    # preamble, summary and kept rounds stay cacheable: 10% of 1,024 < 3 rounds in full
    assert 60 + 128 + 70 * kept_90 >= OPENAI_90.min_cached_tokens
    assert kept_50 == 3  # 50% of 1,024 costs more than sending 3 short rounds in full


def test_round_loads_count_requests_and_cold_starts() -> None:
    day = timedelta(days=1)
    first = _stamped(1)
    second = _stamped(1, start=T0 + day, prefix="x")
    tool_step = AIMessage("checking", id="t1")
    loads = round_loads(
        [[*first], [*second, tool_step]],
        [10, 20],
        timestamp=lambda m: (
            datetime.fromisoformat(m.additional_kwargs["timestamp"])
            if "timestamp" in m.additional_kwargs
            else None
        ),
        lifetime=300,
    )
    assert [(r.tokens, r.requests, r.cold) for r in loads] == [(10, 1, False), (20, 3, True)]


def test_a_fold_that_the_rent_pays_for_still_waits_for_a_likely_future() -> None:
    schedule = FoldSchedule(pricing=PRICING_MODELS["none"], summary_tokens=128, retain_rounds=1)
    loads = [RoundLoad(tokens=3000, requests=3)] * 5
    young = schedule.decide(fixed_tokens=50, summary_tokens=0, rounds=loads, rounds_so_far=5)
    old = schedule.decide(fixed_tokens=50, summary_tokens=0, rounds=loads, rounds_so_far=200)
    assert young.rounds == 0  # five rounds in: the fold may never be repaid
    assert old.rounds == 4 and old.rent >= old.overhead  # the same rounds deep into a long chat


def test_an_appending_call_reads_only_the_folded_rounds_and_writes_its_share() -> None:
    from langchain_histcompress.core.pricing import PRICING_MODELS as MODELS

    rewrite = FoldSchedule(pricing=MODELS["none"], summary_tokens=4000, instruction_tokens=10)
    append = dataclasses.replace(rewrite, append_ratio=0.25)
    rounds = [RoundLoad(tokens=400)] * 30
    decision = append.decide(fixed_tokens=50, summary_tokens=3000, rounds=rounds)
    assert decision.rounds > 0
    # a rewrite reads the 3,000-token summary and writes the new one: it costs more
    assert rewrite.decide(fixed_tokens=50, summary_tokens=3000, rounds=rounds).cost > decision.cost
    folded = 400 * decision.rounds
    out = MODELS["none"].output_price / MODELS["none"].input_price
    assert decision.cost == pytest.approx(10 + folded + out * 0.25 * folded)
    with pytest.raises(ConfigurationError, match="append_ratio"):
        FoldSchedule(append_ratio=-1.0)


def test_tokens_a_fold_adds_to_every_later_request_count_against_it() -> None:
    from langchain_histcompress.core.pricing import PRICING_MODELS as MODELS

    schedule = FoldSchedule(pricing=MODELS["none"], summary_tokens=128, instruction_tokens=10)
    rounds = [RoundLoad(tokens=400)] * 30
    plain = schedule.decide(fixed_tokens=50, summary_tokens=0, rounds=rounds)
    assert plain.rounds > 0
    burdened = schedule.decide(fixed_tokens=50, summary_tokens=0, rounds=rounds, added_tokens=300)
    assert burdened.net_saving < plain.net_saving
    # data as large as everything a fold could remove never pays
    assert (
        schedule.decide(
            fixed_tokens=50, summary_tokens=0, rounds=rounds, added_tokens=30 * 400
        ).rounds
        == 0
    )


def test_a_terser_memory_removes_more_and_folds_no_later() -> None:
    from langchain_histcompress.core.pricing import PRICING_MODELS as MODELS

    verbose = FoldSchedule(pricing=MODELS["openai-50"], summary_tokens=8000, append_ratio=0.7)
    terse = dataclasses.replace(verbose, memory_ratio=0.2)
    rounds = [RoundLoad(tokens=400, requests=3)] * 40
    state = {"fixed_tokens": 50, "summary_tokens": 0, "rounds": rounds, "rounds_so_far": 400}
    loose, tight = terse.decide(**state), verbose.decide(**state)
    assert loose.net_saving > tight.net_saving
    assert loose.cost <= tight.cost  # the same call; a smaller rewrite of the cached view
    with pytest.raises(ConfigurationError, match="memory_ratio"):
        FoldSchedule(memory_ratio=-1.0)
