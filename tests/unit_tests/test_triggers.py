"""SummarizationMiddleware-style triggers and keep settings on RoundCompressor."""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress import CompressionTrigger, RoundCompressor, chat_model_from_spec
from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.rounds import validate_history
from tests.fakes import ScriptedSummarizer, prompt_ids


def per_message(messages: Any) -> int:
    """Ten tokens a message: sizes easy to reason about."""
    return 10 * len(messages)


def chat(rounds: int, *, system: bool = True) -> list[BaseMessage]:
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")] if system else []
    for n in range(rounds):
        history += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
    return history


def compressor(trigger: CompressionTrigger, **kw: Any) -> tuple[RoundCompressor, Any]:
    model = ScriptedSummarizer(profile=kw.pop("profile", None))
    return RoundCompressor(model, token_counter=per_message, trigger=trigger, **kw), model


def kept_ids(result_messages: list[BaseMessage]) -> list[str | None]:
    return [m.id for m in result_messages if not isinstance(m, SystemMessage)]


def test_fraction_of_the_profile_window_triggers_and_keep_tokens_keeps_whole_rounds() -> None:
    trigger = CompressionTrigger(trigger=("fraction", 0.5), keep=("tokens", 45))
    comp, model = compressor(trigger, profile={"max_input_tokens": 200})
    # 4 rounds: 10 (system) + 80 = 90 tokens < 100: nothing due.
    assert comp.plan(chat(4)).chunks == ()
    # 5 rounds: 110 tokens >= half of 200: fold, keeping the newest rounds within 45 tokens.
    result = comp.compress(chat(5))
    assert result.calls == 1 and model.calls == 1
    assert kept_ids(result.messages) == ["h3", "a3", "h4", "a4"]
    assert sorted(result.summary.covered_ids) == sorted(["h0", "a0", "h1", "a1", "h2", "a2"])


def test_explicit_window_wins_over_the_profile_and_a_missing_one_is_an_error() -> None:
    trigger = CompressionTrigger(trigger=("fraction", 0.5), context_window=1000)
    comp, _ = compressor(trigger, profile={"max_input_tokens": 200})
    assert comp.plan(chat(5)).chunks == ()
    with pytest.raises(ConfigurationError, match="max_input_tokens; pass context_window"):
        compressor(CompressionTrigger(trigger=("tokens", 10), keep=("fraction", 0.1)))


def test_clauses_of_a_dict_must_all_hold_and_list_items_are_alternatives() -> None:
    both = CompressionTrigger(trigger={"tokens": 50, "messages": 20})
    assert both.fires(both.measure(chat(3), counter=per_message)) is False  # 70 tok, 7 msgs
    assert both.fires(both.measure(chat(10), counter=per_message)) is True  # 210, 21
    either = CompressionTrigger(trigger=[("messages", 20), {"tokens": 50, "rounds": 3}])
    assert either.fires(either.measure(chat(3), counter=per_message)) is True
    assert either.fires(either.measure(chat(2), counter=per_message)) is False


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
    counted = CompressionTrigger(trigger=("tokens", 5000), keep=("rounds", 1))
    reported = CompressionTrigger(
        trigger=("tokens", 5000), keep=("rounds", 1), use_usage_metadata=True
    )
    size = reported.bind(ScriptedSummarizer()).measure(history, counter=per_message)
    assert (size.tokens, size.source) == (9510, "usage_metadata")
    assert compressor(counted)[0].plan(history).chunks == ()
    plan = compressor(reported)[0].plan(history)
    assert plan.reasons == ("trigger",)
    assert [m.id for m in plan.chunks[0].messages] == ["h0", "a0", "h1", "a1", "h2", "a2"]


@pytest.mark.parametrize("provider", ["anthropic", None])
def test_usage_reported_by_another_provider_is_ignored(provider: str | None) -> None:
    """As SummarizationMiddleware does: another provider's count is of another request."""
    history = reported_by(provider)
    trigger = CompressionTrigger(
        trigger=("tokens", 5000), keep=("rounds", 1), use_usage_metadata=True
    )
    size = trigger.bind(ScriptedSummarizer()).measure(history, counter=per_message)
    assert (size.tokens, size.source) == (80, "counted")
    assert compressor(trigger)[0].plan(history).chunks == ()


def test_usage_is_trusted_from_the_measured_model_and_its_aliases() -> None:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    answering = FakeMessagesListChatModel(responses=[], profile={"max_input_tokens": 20_000})
    trigger = CompressionTrigger(
        trigger=("fraction", 0.4), context_window=answering, use_usage_metadata=True
    )
    assert trigger.model_provider == "fakemessageslistchatmodel"
    bound = trigger.bind(ScriptedSummarizer())  # a summarizer of another provider
    assert bound.model_provider == "fakemessageslistchatmodel"
    size = bound.measure(reported_by("fakemessageslistchatmodel"), counter=per_message)
    assert size.source == "usage_metadata" and bound.fires(size)
    unbound = CompressionTrigger(trigger=("tokens", 5000), use_usage_metadata=True)
    assert unbound.measure(reported_by("openai"), counter=per_message).source == "counted"
    bedrock = copy.copy(unbound)
    bedrock.model_provider = "amazon_bedrock"
    assert bedrock.measure(reported_by("bedrock_converse"), counter=per_message).tokens == 9510


def test_cap_per_call_splits_the_fold_and_every_sent_message_is_covered() -> None:
    trigger = CompressionTrigger(trigger=("rounds", 6), keep=("rounds", 1), max_tokens_per_call=45)
    comp, model = compressor(trigger)
    history = chat(7)
    result = comp.compress(history)
    sent = [prompt_ids(p) for p in model.prompts]
    assert [len(ids) for ids in sent] == [4, 4, 4]  # two rounds (40 tokens) per call
    assert sorted(i for ids in sent for i in ids) == sorted(result.summary.covered_ids)
    assert kept_ids(result.messages) == ["h6", "a6"]
    validate_history(result.messages)


def test_keep_messages_never_splits_a_round_and_always_keeps_the_latest() -> None:
    trigger = CompressionTrigger(trigger=("messages", 3), keep=("messages", 3))
    plan = compressor(trigger)[0].plan(chat(4))
    folded = [m.id for c in plan.chunks for m in c.messages]
    assert folded == ["h0", "a0", "h1", "a1", "h2", "a2"]  # 3 messages would split a round
    tiny = CompressionTrigger(trigger=("messages", 1), keep=("tokens", 1))
    assert [m.id for m in compressor(tiny)[0].plan(chat(2)).chunks[0].messages] == ["h0", "a0"]


def test_a_given_trigger_replaces_the_round_count_trigger_unless_asked_for() -> None:
    never = CompressionTrigger(trigger=("tokens", 10**6))
    assert compressor(never)[0].plan(chat(9)).chunks == ()
    both, _ = compressor(never, compress_on_rounds=True)
    assert both.plan(chat(9)).reasons == ("rounds",)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"trigger": ("fraction", 1.5)}, r"fraction must be a number in \(0, 1\]"),
        ({"trigger": ("tokens", 0)}, "tokens must be an integer >= 1"),
        ({"trigger": ("bytes", 3)}, "unit one of"),
        ({"trigger": {"tokens": 5, "pages": 2}}, "unknown unit 'pages'"),
        ({"trigger": []}, "empty list"),
        ({"trigger": ("tokens", 5), "keep": {"tokens": 5}}, "keep must be a"),
        ({"trigger": ("tokens", 5), "context_window": 0}, "context_window must be"),
        ({"trigger": ("tokens", 5), "context_window": object()}, "has no profile"),
        ({"trigger": ("tokens", 5), "max_tokens_per_call": 0}, "max_tokens_per_call"),
        ({"trigger": ("tokens", 5), "use_usage_metadata": "yes"}, "use_usage_metadata"),
    ],
)
def test_malformed_settings_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        CompressionTrigger(**kwargs)


def test_trigger_must_be_a_compression_trigger() -> None:
    with pytest.raises(ConfigurationError, match="trigger must be a CompressionTrigger"):
        RoundCompressor(ScriptedSummarizer(), trigger=("tokens", 5))  # type: ignore[arg-type]


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
    tag = {"model_provider": "scriptedsummarizer"}  # as a real provider tags its answers
    answers = [
        AIMessage(f"answer {n}", usage_metadata=usage, response_metadata=tag) for n in range(4)
    ]
    trigger = CompressionTrigger(
        trigger=("fraction", 0.5), keep=("rounds", 1), use_usage_metadata=True
    )
    summarizer = ScriptedSummarizer(profile={"max_input_tokens": 10_000})
    middleware = RoundCompressionMiddleware(
        RoundCompressor(summarizer, token_counter=per_message, trigger=trigger)
    )
    agent = create_agent(FakeMessagesListChatModel(responses=answers), middleware=[middleware])
    state: dict[str, Any] = {"messages": []}
    for n in range(3):
        messages = [*state["messages"], HumanMessage(f"q{n}")]
        state = agent.invoke(
            {"messages": messages, "running_summary": state.get("running_summary")}
        )
    # Counted, three short rounds are tiny; the provider said 7,100 of 10,000 tokens: fold.
    assert summarizer.calls == 2
    assert state["running_summary"]["version"] == 2
