"""CacheStableContext: a growing cached prefix, question-dependent data at the tail."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.context.builder import ContextBuilder, is_context_message
from langchain_histcompress.context.cache_stable import CacheStableContext, cache_cold
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.faces.memory import FactExtractionNode

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
WORDS = ["apple", "river", "violin", "garden", "castle", "rocket", "desert", "piano"]


def _at(seconds: float) -> dict[str, str]:
    return {"timestamp": (T0 + timedelta(seconds=seconds)).isoformat()}


def _conversation(sessions: int, rounds: int) -> list[BaseMessage]:
    """Sessions a day apart, turns 30 s apart, each round naming its own topic word."""
    out: list[BaseMessage] = [SystemMessage("You are helpful.", id="sys")]
    for s in range(sessions):
        for r in range(rounds):
            at = s * 86_400 + r * 60
            word = WORDS[(s * rounds + r) % len(WORDS)]
            text = f"session {s} round {r}: let us talk about the {word} " + "detail " * 20
            out.append(HumanMessage(text, id=f"h{s}-{r}", additional_kwargs=_at(at)))
            out.append(AIMessage(f"ok {word}", id=f"a{s}-{r}", additional_kwargs=_at(at + 30)))
    return out


def _builder(tokens: int = 300) -> ContextBuilder:
    return ContextBuilder(
        max_context_tokens=tokens,
        token_counter=count_tokens_approximately,
        raw_turn_retrieval=50,
        data_budget_ratio=1.0,
        layout="cache_stable",
    )


def _question(text: str, seconds: float) -> HumanMessage:
    return HumanMessage(text, id=f"q{seconds}", additional_kwargs=_at(seconds))


def _data_index(messages: list[BaseMessage]) -> int:
    return next(i for i, m in enumerate(messages) if is_context_message(m) and m.type == "human")


def test_cache_cold_reads_the_pause_before_the_newest_message() -> None:
    old = AIMessage("a", additional_kwargs=_at(0))
    new = HumanMessage("b", additional_kwargs=_at(301))
    untimed = HumanMessage("c")
    assert cache_cold([old, new], lifetime=300)
    assert not cache_cold([old, new], lifetime=301)
    assert not cache_cold([old, new, untimed], lifetime=1)
    assert not cache_cold([old, untimed, new], lifetime=1)
    assert not cache_cold([new], lifetime=1)

    class Counting:
        reads = 0

        def __call__(self, message: BaseMessage) -> datetime | None:
            Counting.reads += 1
            return None

    cache_cold([untimed] * 1_000, lifetime=1, timestamp_getter=Counting())
    assert Counting.reads <= 2  # the rest of the history is not read


def test_question_data_comes_after_the_stable_prefix_and_the_prefix_only_grows() -> None:
    history = _conversation(3, 6)
    context = CacheStableContext(
        _builder(150), pricing="openai-90", by_cost=False, verbatim_floor_tokens=100
    )
    start = 2 * 86_400  # third session: the first question comes when the cache is cold
    previous: list[BaseMessage] | None = None
    for r in range(6):
        # history up to round r of the third session, then a question on an old topic
        end = history.index(next(m for m in history if m.id == f"h2-{r}"))
        asked = [*history[:end], _question(f"what about the {WORDS[r % 4]}?", start + r * 60)]
        built = context.assemble(asked)
        out = built.messages
        data = _data_index(out)
        # everything before the data message is preamble / facts / verbatim rounds, in order
        assert all(not is_context_message(m) for m in out[1:data])
        assert out[-1] is asked[-1]
        assert data == len(out) - 2  # the data message sits right before the question
        if previous is not None:
            stable = previous[: _data_index(previous)]
            assert out[: len(stable)] == stable  # the previous prefix is kept as is
        previous = out
        assert context.anchor is not None
        assert context.folded is (r == 0)


def test_fold_happens_when_the_cache_is_cold_and_keeps_the_floor() -> None:
    history = _conversation(2, 4)
    context = CacheStableContext(
        _builder(), pricing="openai-90", by_cost=False, verbatim_floor_tokens=60
    )
    first = next(i for i, m in enumerate(history) if m.id == "h0-2")
    context.assemble(history[: first + 1])
    assert context.folded is False and context.anchor is None  # warm, small: no fold
    second = next(i for i, m in enumerate(history) if m.id == "h1-0")
    assert context.fold_due(history[: second + 1])
    built = context.assemble(history[: second + 1])
    assert context.folded is True
    # the fewest newest rounds reaching the floor: the last round of the first session
    assert context.anchor == "h0-3"
    assert built.verbatim_ids[:2] == ("h0-3", "a0-3")
    again = context.assemble(history[: second + 3])
    assert context.folded is False and context.anchor == "h0-3"
    assert again.verbatim_ids[:4] == ("h0-3", "a0-3", "h1-0", "a1-0")


def test_fold_when_the_verbatim_rounds_pass_their_cap_even_when_warm() -> None:
    history = _conversation(1, 8)
    context = CacheStableContext(
        _builder(), pricing="openai-90", max_verbatim_tokens=150, verbatim_floor_tokens=0
    )
    folds = 0
    for r in range(1, 8):
        end = history.index(next(m for m in history if m.id == f"h0-{r}"))
        context.assemble(history[: end + 1])
        folds += context.folded
    assert folds >= 2


def test_read_only_assembly_keeps_the_anchor() -> None:
    history = _conversation(2, 3)
    context = CacheStableContext(
        _builder(), pricing="openai-90", by_cost=False, verbatim_floor_tokens=0
    )
    context.assemble(history[:-1])
    anchor = context.anchor
    late = _question("and the apple?", 10 * 86_400)
    context.assemble([*history, late], advance=False)
    assert context.anchor == anchor


def _facts() -> dict[str, Fact]:
    return {
        f"f-{i}": Fact(
            id=f"f-{i}",
            content=f"the user likes the {word}",
            source_ids=(f"h0-{i}",),
            created_at=T0 + timedelta(seconds=i),
            updated_at=T0 + timedelta(seconds=i),
        )
        for i, word in enumerate(WORDS[:4])
    }


def test_prefix_facts_are_frozen_at_the_fold_and_reported_exactly() -> None:
    history = _conversation(2, 4)
    facts = _facts()
    context = CacheStableContext(
        _builder(),
        pricing="openai-90",
        by_cost=False,
        verbatim_floor_tokens=0,
        prefix_fact_tokens=60,
    )
    second = next(i for i, m in enumerate(history) if m.id == "h1-0")
    built = context.assemble(history[: second + 1], facts=facts)
    digest = built.messages[1]
    assert is_context_message(digest) and digest.type == "system"
    shown = digest.additional_kwargs["fact_ids"]
    assert shown and len(shown) < len(facts)  # the newest facts within the cap
    assert shown == sorted(shown, key=lambda fid: facts[fid].created_at)
    assert shown[-1] == "f-3"
    # every fact shown, in the prefix or the tail, is reported with exactly its sources
    tail_ids = [fid for fid in built.fact_ids if fid not in shown]
    assert set(built.fact_ids) == set(shown) | set(tail_ids)
    assert set(built.fact_source_ids) == {
        s for fid in built.fact_ids for s in facts[fid].source_ids
    }
    # a fact added between folds does not change the prefix
    more = {**facts, "f-9": Fact(id="f-9", content="the user owns a boat", source_ids=("h1-0",))}
    later = context.assemble(history[: second + 3], facts=more)
    assert later.messages[1] == digest


def test_invalid_configuration_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="builder"):
        CacheStableContext(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="cache_stable"):
        CacheStableContext(ContextBuilder(max_context_tokens=100))
    with pytest.raises(ConfigurationError, match="pricing"):
        CacheStableContext(_builder(), pricing="nope")
    with pytest.raises(ConfigurationError, match="max_verbatim_tokens"):
        CacheStableContext(_builder(), max_verbatim_tokens=-1)
    with pytest.raises(ConfigurationError, match="prefix_fact_tokens"):
        CacheStableContext(_builder(), prefix_fact_tokens=True)


def test_extraction_node_takes_the_whole_backlog_in_one_call() -> None:
    reply = AIMessage(
        '[{"op": "ADD", "type": "preference", "content": "Likes apples",'
        ' "confidence": 0.9, "source_ids": ["h0-0"]}]'
    )
    model = FakeMessagesListChatModel(responses=[reply, reply])
    node = FactExtractionNode(model, batch_rounds=None, use_runtime_store=False)
    history = _conversation(1, 5)
    update = node.invoke({"messages": [*history, HumanMessage("next", id="next")]})
    report = update["facts_extraction"]
    assert report["calls"] == 1 and report["batches"] == 1
    assert report["pending_rounds"] == 0
    assert update["facts_processed_through"] == "a0-4"
    with pytest.raises(ConfigurationError, match="batch_rounds"):
        FactExtractionNode(model, batch_rounds=0)


def test_builder_does_not_repeat_what_the_caller_shows() -> None:
    history: list[BaseMessage] = [SystemMessage("s", id="s")]
    for n, word in enumerate(WORDS):
        history += [
            HumanMessage(f"I like the {word} " * 3, id=f"h{n}"),
            AIMessage("ok", id=f"a{n}"),
        ]
    asked = [*history, HumanMessage("the river and the violin?", id="q")]
    builder = _builder(90)
    plain = builder.assemble(asked)
    assert "h1" in plain.retrieved_ids
    hidden = builder.assemble(asked, shown_ids={"h1"})
    assert "h1" not in hidden.retrieved_ids
    assert "h1" not in hidden.verbatim_ids  # treated as shown, not sent


def test_messages_without_ids_get_stable_derived_ids() -> None:
    history = [
        m.model_copy(update={"id": None}) if m.type != "system" else m for m in _conversation(2, 4)
    ]
    context = CacheStableContext(
        _builder(), pricing="openai-90", by_cost=False, verbatim_floor_tokens=60
    )
    second = next(i for i, m in enumerate(history) if m.content.startswith("session 1 round 0"))
    built = context.assemble(history[: second + 1])
    assert context.folded and context.anchor is not None
    assert len(set(built.verbatim_ids)) == len(built.verbatim_ids)  # distinct, not "None"
    anchor = context.anchor
    again = context.assemble(history[: second + 3])
    assert not context.folded and context.anchor == anchor  # the derived ids are stable
    assert anchor in again.verbatim_ids


def test_the_current_round_is_sent_whole_after_the_data() -> None:
    history = _conversation(2, 4)
    second = next(i for i, m in enumerate(history) if m.id == "h1-0")
    steps = [
        AIMessage("", id="call", tool_calls=[{"name": "look", "args": {}, "id": "t1"}]),
        ToolMessage("x " * 400, tool_call_id="t1", id="result"),
    ]
    big = "a long question " * 200
    asked = [*history[:second], HumanMessage(big, id="q", additional_kwargs=_at(86_400)), *steps]
    context = CacheStableContext(
        _builder(150), pricing="openai-90", by_cost=False, verbatim_floor_tokens=60
    )
    built = context.assemble(asked)
    # the question is over the tail budget: no data, but nothing of the round is dropped
    assert [m.id for m in built.messages[-3:]] == ["q", "call", "result"]
    assert built.retrieved_ids == ()
    assert validate_history(built.messages) == []
    small = [*history[:second], HumanMessage("the apple?", id="q2", additional_kwargs=_at(86_400))]
    context = CacheStableContext(
        _builder(80), pricing="openai-90", by_cost=False, verbatim_floor_tokens=60
    )
    first = context.assemble(small).messages  # the first request after the pause folds
    out = context.assemble([*small, *steps]).messages  # the next step of the same round
    assert [m.id for m in out[-3:]] == ["q2", "call", "result"]
    assert is_context_message(out[-4])  # the data sits right before the question
    assert out[: len(first)] == first  # unchanged within the round: the step extends it


def test_by_cost_a_short_conversation_never_folds_even_when_the_cache_goes_cold() -> None:
    history = _conversation(3, 3)
    context = CacheStableContext(_builder(), pricing="openai-90", verbatim_floor_tokens=0)
    for index, message in enumerate(history):
        if isinstance(message, HumanMessage):
            assert not context.fold_due(history[: index + 1])  # an extraction it cannot repay
            context.assemble(history[: index + 1])
            assert not context.folded
    assert context.anchor is None


def test_by_cost_a_long_conversation_without_caching_folds_and_keeps_the_latest_round() -> None:
    history = _conversation(1, 40)
    context = CacheStableContext(_builder(), pricing="none", extraction_overhead_tokens=50)
    folds = 0
    for index, message in enumerate(history):
        if isinstance(message, HumanMessage):
            built = context.assemble(history[: index + 1])
            folds += context.folded
            assert message.id in built.verbatim_ids
    assert folds >= 1
    assert context.anchor is not None


def test_a_cheaper_extraction_folds_sooner() -> None:
    history = _conversation(1, 40)

    def first_fold(ratio: float) -> int:
        context = CacheStableContext(_builder(), pricing="none", extraction_ratio=ratio)
        for index, message in enumerate(history):
            if isinstance(message, HumanMessage) and context.fold_due(history[: index + 1]):
                return index
        return len(history)

    assert first_fold(0.1) < first_fold(2.0)


def test_the_data_the_first_fold_starts_sending_counts_against_it() -> None:
    history = _conversation(1, 40)

    def first_fold(tail: int) -> int:
        context = CacheStableContext(_builder(tail), pricing="none")
        for index, message in enumerate(history):
            if isinstance(message, HumanMessage) and context.fold_due(history[: index + 1]):
                return index
        return len(history)

    assert first_fold(100) < first_fold(3000)


def test_observed_extraction_costs_replace_the_prior() -> None:
    history = _conversation(1, 40)

    def first_fold(context: CacheStableContext) -> int:
        for index, message in enumerate(history):
            if isinstance(message, HumanMessage) and context.fold_due(history[: index + 1]):
                return index
        return len(history)

    prior = CacheStableContext(_builder(), pricing="none", extraction_ratio=0.1)
    verbose = CacheStableContext(_builder(), pricing="none", extraction_ratio=0.1)
    verbose.record_extraction(read_tokens=1000, written_tokens=2000)
    assert verbose.schedule.append_ratio == 2.0
    assert first_fold(prior) < first_fold(verbose)
    verbose.reset()  # a new conversation starts from the prior again
    assert verbose.schedule.append_ratio == 0.1
    with pytest.raises(ConfigurationError, match="token counts"):
        verbose.record_extraction(read_tokens=-1, written_tokens=0)
    with pytest.raises(ConfigurationError, match="extraction_ratio"):
        CacheStableContext(_builder(), extraction_ratio=-0.5)
