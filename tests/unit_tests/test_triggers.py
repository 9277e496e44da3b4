"""SummarizationMiddleware-style triggers and keep settings on RoundCompressor."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress import RoundCompressor
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.core.triggers import CompressionTrigger
from langchain_histcompress.edge.models import chat_model_from_spec
from tests.fakes import ScriptedSummarizer, prompt_ids


def per_message(messages: Any) -> int:
    """Ten tokens a message: sizes easy to reason about."""
    return 10 * len(messages)


def chat(rounds: int, *, system: bool = True) -> list[BaseMessage]:
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")] if system else []
    for n in range(rounds):
        history += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
    return history


def compressor(trigger: Any, **kw: Any) -> tuple[RoundCompressor, Any]:
    model = ScriptedSummarizer(profile=kw.pop("profile", None))
    return RoundCompressor(model, token_counter=per_message, trigger=trigger, **kw), model


def kept_ids(result_messages: list[BaseMessage]) -> list[str | None]:
    return [m.id for m in result_messages if not isinstance(m, SystemMessage)]


@pytest.mark.parametrize("window", ["tokens", "model"])
def test_fraction_of_the_window_triggers_and_keep_tokens_keeps_whole_rounds(window: str) -> None:
    answering = ScriptedSummarizer(profile={"max_input_tokens": 200})
    comp, model = compressor(
        ("fraction", 0.5),
        keep=("tokens", 45),
        context_window=200 if window == "tokens" else answering,
    )
    # 4 rounds: 10 (system) + 80 = 90 tokens < 100: nothing due.
    assert comp.plan(chat(4)).chunks == ()
    # 5 rounds: 110 tokens >= half of 200: fold, keeping the newest rounds within 45 tokens.
    result = comp.compress(chat(5))
    assert result.calls == 1 and model.calls == 1
    assert kept_ids(result.messages) == ["h3", "a3", "h4", "a4"]
    assert sorted(result.summary.covered_ids) == sorted(["h0", "a0", "h1", "a1", "h2", "a2"])


def test_the_fraction_is_of_the_answering_models_window_not_the_summarizers() -> None:
    comp, _ = compressor(("fraction", 0.5), profile={"max_input_tokens": 200})
    assert comp.plan(chat(5)).chunks == ()  # half of the default window, not of 200
    assert comp.plan(chat(5), context_window=200).reasons == ("fraction",)  # given per call
    wide, _ = compressor(("fraction", 0.5), context_window=1000)
    assert wide.plan(chat(5)).chunks == ()
    assert wide.plan(chat(5), context_window=200).chunks != ()


def test_clauses_of_a_dict_must_all_hold_and_list_items_are_alternatives() -> None:
    both = CompressionTrigger({"tokens": 50, "messages": 20})
    assert both.fires(both.measure(chat(3), counter=per_message), window=1000) is False  # 70, 7
    assert both.fires(both.measure(chat(10), counter=per_message), window=1000) is True  # 210
    either = CompressionTrigger([("messages", 20), {"tokens": 50, "rounds": 3}])
    assert either.fires(either.measure(chat(3), counter=per_message), window=1000) is True
    assert either.fires(either.measure(chat(2), counter=per_message), window=1000) is False
    plan = compressor({"tokens": 50, "messages": 20}, keep=("rounds", 1))[0].plan(chat(10))
    assert plan.reasons == ("threshold",)


USAGE = {"input_tokens": 9000, "output_tokens": 500, "total_tokens": 9500}


def reported_by(provider: str | None) -> list[BaseMessage]:
    """Three rounds whose last answer reports 9,500 tokens, tagged with ``provider``."""
    history = chat(3)
    metadata = {} if provider is None else {"model_provider": provider}
    history[-1] = AIMessage("a2", id="a2", usage_metadata=USAGE, response_metadata=metadata)
    history.append(HumanMessage("q3", id="h3"))
    return history


def test_provider_usage_metadata_of_the_last_ai_message_drives_the_token_trigger() -> None:
    history = reported_by("scriptedsummarizer")  # the summarizer's ls_provider
    counted = CompressionTrigger(("tokens", 5000))
    reported = CompressionTrigger(("tokens", 5000), use_usage_metadata=True)
    size = reported.measure(history, counter=per_message, provider="scriptedsummarizer")
    assert (size.tokens, size.source) == (9510, "usage_metadata")
    assert compressor(counted, keep=("rounds", 1))[0].plan(history).chunks == ()
    plan = compressor(reported, keep=("rounds", 1))[0].plan(history)
    assert plan.reasons == ("tokens",)
    assert [m.id for m in plan.chunks[0].messages] == ["h0", "a0", "h1", "a1", "h2", "a2"]


@pytest.mark.parametrize("provider", ["anthropic", None])
def test_usage_reported_by_another_provider_is_ignored(provider: str | None) -> None:
    """As SummarizationMiddleware does: another provider's count is of another request."""
    history = reported_by(provider)
    trigger = CompressionTrigger(("tokens", 5000), use_usage_metadata=True)
    size = trigger.measure(history, counter=per_message, provider="scriptedsummarizer")
    assert (size.tokens, size.source) == (80, "counted")
    assert compressor(trigger, keep=("rounds", 1))[0].plan(history).chunks == ()


def test_usage_is_trusted_from_the_answering_model_and_its_aliases() -> None:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    answering = FakeMessagesListChatModel(responses=[], profile={"max_input_tokens": 20_000})
    trigger = CompressionTrigger(("fraction", 0.4), use_usage_metadata=True)
    comp, _ = compressor(trigger, keep=("rounds", 1), context_window=answering)
    assert comp.target.provider == "fakemessageslistchatmodel"
    assert comp.plan(reported_by("fakemessageslistchatmodel")).reasons == ("fraction",)
    assert comp.plan(reported_by("openai")).chunks == ()
    aliased = trigger.measure(
        reported_by("bedrock_converse"), counter=per_message, provider="amazon_bedrock"
    )
    assert aliased.tokens == 9510


def test_the_summarizer_window_splits_the_fold_and_every_sent_message_is_covered() -> None:
    # 230 tokens of window, a 20-token summary: one call reads at most 50 tokens of rounds
    comp, model = compressor(
        ("rounds", 6),
        keep=("rounds", 1),
        profile={"max_input_tokens": 230},
        max_summary_tokens=20,
    )
    history = chat(7)
    result = comp.compress(history)
    sent = [prompt_ids(p) for p in model.prompts]
    assert [len(ids) for ids in sent] == [4, 4, 4]  # two rounds (40 tokens) per call
    assert sorted(i for ids in sent for i in ids) == sorted(result.summary.covered_ids)
    assert kept_ids(result.messages) == ["h6", "a6"]
    assert validate_history(result.messages) == []


def test_keep_messages_never_splits_a_round_and_always_keeps_the_latest() -> None:
    plan = compressor(("messages", 3), keep=("messages", 3))[0].plan(chat(4))
    folded = [m.id for c in plan.chunks for m in c.messages]
    assert folded == ["h0", "a0", "h1", "a1", "h2", "a2"]  # 3 messages would split a round
    tiny = compressor(("messages", 1), keep=("tokens", 1))[0]
    assert [m.id for m in tiny.plan(chat(2)).chunks[0].messages] == ["h0", "a0"]


def test_a_list_of_triggers_fires_on_any_and_none_never_fires_within_the_budget() -> None:
    assert compressor(("tokens", 10**6))[0].plan(chat(9)).chunks == ()
    either = compressor([("tokens", 10**6), ("rounds", 5)], keep=("rounds", 3))[0]
    plan = either.plan(chat(9))
    assert [len(c.messages) for c in plan.chunks] == [12]  # down to the 3 kept rounds
    assert compressor(None)[0].plan(chat(9)).chunks == ()
    assert compressor(CompressionTrigger(None))[0].plan(chat(9)).reasons == ()


@pytest.mark.parametrize(
    ("trigger", "match"),
    [
        (("fraction", 1.5), r"fraction must be a number in \(0, 1\]"),
        (("tokens", -1), "tokens must be an integer >= 0"),
        (("rounds", 2.5), "rounds must be an integer >= 0"),
        (("bytes", 3), "unit one of"),
        ({"tokens": 5, "pages": 2}, "unit one of"),
        ({}, "must not be an empty dict"),
        ([], "empty list"),
        ([("tokens", 5), "sometimes"], r"trigger\[1\] must be 'cost'"),
        (("idle", -5), "idle gap must be a positive"),
        (("cost", "openai-99"), "openai-99"),
    ],
)
def test_malformed_triggers_are_named(trigger: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        CompressionTrigger(trigger)
    with pytest.raises(ConfigurationError, match=match):
        RoundCompressor(ScriptedSummarizer(), trigger=trigger)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keep": {"tokens": 5}}, "keep must be a"),
        ({"keep": ("fraction", 0)}, r"fraction must be a number in \(0, 1\]"),
        ({"context_window": 0}, "context_window must be"),
        ({"context_window": -100}, "context_window must be"),
    ],
)
def test_malformed_compressor_settings_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RoundCompressor(ScriptedSummarizer(), **kwargs)


def test_usage_metadata_flag_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="use_usage_metadata"):
        CompressionTrigger(("tokens", 5), use_usage_metadata="yes")  # type: ignore[arg-type]


def test_a_model_without_a_profile_gets_the_default_window() -> None:
    comp = RoundCompressor(ScriptedSummarizer(), context_window=ScriptedSummarizer())
    assert comp.target.budget.window == 128_000
    assert "has no profile" in comp.target.budget.source


def test_a_compression_trigger_is_taken_as_is_and_never_nested() -> None:
    trigger = CompressionTrigger(("tokens", 5), use_usage_metadata=True)
    assert RoundCompressor(ScriptedSummarizer(), trigger=trigger).trigger is trigger
    with pytest.raises(ConfigurationError, match="not one inside another"):
        CompressionTrigger(trigger)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="trigger must be 'cost'"):
        RoundCompressor(ScriptedSummarizer(), trigger=3)  # type: ignore[arg-type]


def test_models_as_provider_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    comp = RoundCompressor("openai:gpt-4o-mini")
    assert comp.summarizer.model_name == "gpt-4o-mini"
    with pytest.raises(ConfigurationError, match="unknown model provider 'nosuch'"):
        RoundCompressor("nosuch:x")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigurationError, match="needs an API key: set OPENAI_API_KEY"):
        chat_model_from_spec("openai:gpt-4o-mini", option="--model")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "langchain_ollama" else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigurationError, match=r"needs its package \(pip install langchain-ol"):
        chat_model_from_spec("ollama:llama3")


def test_middleware_folds_when_the_provider_reports_a_large_request() -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    from langchain_histcompress import RoundCompressionMiddleware

    usage = {"input_tokens": 7000, "output_tokens": 100, "total_tokens": 7100}
    tag = {"model_provider": "fakemessageslistchatmodel"}  # as a real provider tags answers
    answers = [
        AIMessage(f"answer {n}", usage_metadata=usage, response_metadata=tag) for n in range(4)
    ]
    trigger = CompressionTrigger(("fraction", 0.5), use_usage_metadata=True)
    summarizer = ScriptedSummarizer()
    middleware = RoundCompressionMiddleware(
        RoundCompressor(summarizer, token_counter=per_message, trigger=trigger, keep=("rounds", 1))
    )
    # the fraction is of the answering model's window, read from its profile per request
    answering = FakeMessagesListChatModel(responses=answers, profile={"max_input_tokens": 10_000})
    agent = create_agent(answering, middleware=[middleware])
    state: dict[str, Any] = {"messages": []}
    for n in range(3):
        messages = [*state["messages"], HumanMessage(f"q{n}")]
        state = agent.invoke(
            {"messages": messages, "running_summary": state.get("running_summary")}
        )
    # Counted, three short rounds are tiny; the provider said 7,100 of 10,000 tokens: fold.
    assert summarizer.calls == 2
    assert state["running_summary"]["version"] == 2
