from __future__ import annotations

import copy
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import SummarizationError
from langchain_histcompress.core.rounds import is_summary_message, validate_history
from langchain_histcompress.faces.reducers import SummarizationReducer, with_history_reducer
from tests.fakes import ScriptedChatModel, conversation, numbered, prompt_text, summary_json
from tests.histories import history


def _model() -> ScriptedChatModel:
    """A summarizer whose answers are numbered ``summary #1``, ``summary #2``, ..."""
    return ScriptedChatModel(default=numbered(lambda n: summary_json(f"summary #{n}")))


def _chat(n: int) -> list[BaseMessage]:
    return conversation(n, system=SystemMessage("sys", id="sys"))


def test_below_threshold_no_call() -> None:
    model = _model()
    assert SummarizationReducer(model, target_count=4, threshold_count=2).reduce(_chat(3)) is None
    assert model.calls == 0


def test_summarizes_older_part_once_and_tags_summary() -> None:
    model = _model()
    history = _chat(6)
    reduced = SummarizationReducer(model, target_count=4).reduce(history)
    assert reduced is not None
    assert reduced[0] is history[0]
    assert is_summary_message(reduced[1])
    assert "summary #1" in str(reduced[1].content)
    assert reduced[2:] == history[-4:]
    assert validate_history(reduced) == []
    [prompt] = [prompt_text(p) for p in model.prompts]
    assert "[h0 " in prompt and "[a3 " in prompt and "[h4 " not in prompt


def test_extends_previous_summary_from_reduced_input() -> None:
    model = _model()
    reducer = SummarizationReducer(model, target_count=4)
    first = reducer.reduce(_chat(6))
    assert first is not None
    grown = [*first, HumanMessage("question 6", id="h6"), AIMessage("answer 6", id="a6")]
    second = reducer.reduce(grown)
    assert second is not None
    assert model.calls == 2
    new_prompt = prompt_text(model.prompts[1])
    assert "summary #1" in new_prompt  # previous summary passed as input data
    assert "[h0 " not in new_prompt  # already covered messages are not re-sent
    assert "[h4 " in new_prompt and "[a4 " in new_prompt
    assert [m.id for m in second[2:]] == ["h5", "a5", "h6", "a6"]
    assert sum(is_summary_message(m) for m in second) == 1


def test_reduced_output_fed_back_with_nothing_to_fold_is_no_reduction() -> None:
    model = _model()
    reducer = SummarizationReducer(model, target_count=4)
    first = reducer.reduce(_chat(6))
    assert first is not None
    assert reducer.reduce(first) is None
    assert reducer.reduce([*first, HumanMessage("question 6", id="h6")]) is not None  # folds
    assert model.calls == 2


@pytest.mark.parametrize("grow", [0, 2])
async def test_a_failed_fold_of_a_reduced_input_is_no_reduction(grow: int) -> None:
    first = SummarizationReducer(_model(), target_count=4).reduce(_chat(6))
    assert first is not None
    more = [m for i in range(6, 6 + grow) for m in (HumanMessage(f"q{i}"), AIMessage(f"a{i}"))]
    failing = ScriptedChatModel(script=[RuntimeError("503")] * 4)
    lenient = SummarizationReducer(failing, target_count=4, fail_on_error=False, max_retries=0)
    assert lenient.reduce([*first, *more]) is None
    assert await lenient.areduce([*first, *more]) is None
    assert failing.calls == (2 if grow else 0)
    # a full history whose earlier fold is remembered still gets that summary back
    full = _chat(6 + grow)
    remembering = SummarizationReducer(_model(), target_count=4, fail_on_error=False)
    assert remembering.reduce(full) is not None
    remembering.summarizer = lenient.summarizer  # the next fold fails
    calls = failing.calls
    again = remembering.reduce([*full, HumanMessage("q9", id="h9"), AIMessage("a9", id="a9")])
    assert failing.calls == calls + 1
    assert again is not None and is_summary_message(again[1])


def test_full_history_every_turn_only_summarizes_new_messages() -> None:
    model = _model()
    reducer = SummarizationReducer(model, target_count=4)
    reducer.reduce(_chat(6))
    reducer.reduce(_chat(7))
    assert model.calls == 2
    assert "[h0 " not in prompt_text(model.prompts[1])
    assert "[h4 " in prompt_text(model.prompts[1])
    reducer.reduce(_chat(7))  # nothing new: no call
    assert model.calls == 2


def test_failure_raises_typed_error_and_leaves_input() -> None:
    model = _model()
    model.fail_with = RuntimeError("boom")
    history = _chat(6)
    before = copy.deepcopy(history)
    reducer = SummarizationReducer(model, target_count=4, max_retries=0)
    with pytest.raises(SummarizationError):
        reducer.reduce(history)
    assert history == before


async def test_async_matches_sync() -> None:
    sync = SummarizationReducer(_model(), target_count=4).reduce(_chat(6))
    other = await SummarizationReducer(_model(), target_count=4).areduce(_chat(6))
    assert sync is not None and other is not None
    assert [m.id for m in sync[2:]] == [m.id for m in other[2:]]
    assert sync[1].content == other[1].content


def test_in_front_of_a_chat_model() -> None:
    answer = ScriptedChatModel(script=["ok"])
    chat = with_history_reducer(answer, SummarizationReducer(_model(), target_count=2))
    assert chat.invoke(_chat(4)).content == "ok"
    seen = answer.prompts
    assert len(seen[0]) == 4 and is_summary_message(seen[0][1])


_ids = itertools.count()


@settings(max_examples=80, deadline=None)
@given(history(allow_leading_tools=False), st.integers(1, 8))
def test_properties(msgs: list[BaseMessage], target: int) -> None:
    before = copy.deepcopy(msgs)
    out = SummarizationReducer(_model(), target_count=target).reduce(msgs)
    assert msgs == before
    if out is None:
        return
    assert validate_history(out) == []
    if isinstance(msgs[0], SystemMessage):
        assert out[0] is msgs[0]
    humans = [m for m in msgs if isinstance(m, HumanMessage)]
    assert humans[-1] in out
    assert sum(is_summary_message(m) for m in out) == 1


def test_returns_the_callers_objects_even_without_ids() -> None:
    history: list[BaseMessage] = [SystemMessage("sys")]
    for i in range(6):
        history += [HumanMessage(f"q{i}"), AIMessage(f"a{i}")]
    reduced = SummarizationReducer(_model(), target_count=4).reduce(history)
    assert reduced is not None
    assert reduced[0] is history[0]
    assert all(a is b for a, b in zip(reduced[2:], history[-4:], strict=True))
    assert all(m.id is None for m in history)


def _user(tag: str, n: int) -> list[BaseMessage]:
    """Conversation ``tag`` up to exchange ``n``, with ids that restart at "1" for every user."""
    out: list[BaseMessage] = [SystemMessage("sys")]
    for i in range(n):
        out += [
            HumanMessage(f"{tag} question {i}", id=str(2 * i + 1)),
            AIMessage(f"{tag} answer {i}", id=str(2 * i + 2)),
        ]
    return out


@pytest.mark.parametrize("remembered", [64, 1], ids=["remembered", "forgotten"])
@pytest.mark.parametrize("reload", [False, True], ids=["same-objects", "reloaded"])
def test_one_reducer_shared_by_users_whose_ids_collide(reload: bool, remembered: int) -> None:
    summarizer = ScriptedChatModel(default=lambda p: summary_json(prompt_text(p)[-200:]))
    answer = ScriptedChatModel(default=lambda _p: "ok")
    reducer = SummarizationReducer(summarizer, target_count=2, max_conversations=remembered)
    chat = with_history_reducer(answer, reducer)
    histories = {"alpha": _user("alpha", 1), "bravo": _user("bravo", 1)}
    for n in range(2, 7):
        for tag, other in (("alpha", "bravo"), ("bravo", "alpha")):
            grown = _user(tag, n)
            histories[tag] = grown if reload else [*histories[tag], *grown[-2:]]
            before = summarizer.calls
            chat.invoke(histories[tag])
            sent = prompt_text(answer.prompts[-1])
            assert other not in sent
            assert f"{tag} question {n - 1}" in sent
            assert all(other not in prompt_text(p) for p in summarizer.prompts[before:])
    assert summarizer.calls >= 8
    seen = "\n".join(prompt_text(p) for p in summarizer.prompts)
    assert "alpha question 0" in seen and "bravo question 0" in seen


def test_a_mid_conversation_system_message_is_kept_verbatim_not_summarized() -> None:
    model = _model()
    reducer = SummarizationReducer(model, target_count=2)
    reminder = SystemMessage("Reminder: the shop closes at 6pm.", id="reminder")
    history = [*_chat(2), reminder, *conversation(range(2, 4))]
    out = reducer.reduce(history)
    assert out is not None
    assert "closes at 6pm" not in prompt_text(model.prompts[0])
    assert out[0] is history[0] and is_summary_message(out[1])
    assert out[2:] == [reminder, *history[-2:]]
    grown = [*history, *conversation(range(4, 6))]
    again = reducer.reduce(grown)
    assert again is not None and model.calls == 2
    assert [m.content for m in again].count(reminder.content) == 1
    assert all("closes at 6pm" not in prompt_text(p) for p in model.prompts)


@pytest.mark.parametrize("run_async", [False, True])
def test_history_beyond_the_summarizer_window_folds_in_calls_that_fit(run_async: bool) -> None:
    """A first fold larger than the summarizer's window is split between rounds, chained."""
    import asyncio

    from langchain_histcompress.core.tokens import TiktokenCounter, count_request

    model = ScriptedChatModel(
        default=numbered(lambda n: summary_json(f"summary #{n}")),
        profile={"max_input_tokens": 8_000},
    )
    history: list[BaseMessage] = [SystemMessage("sys", id="sys")]
    for i in range(150):
        history += [
            HumanMessage(f"question {i}: " + "tell me about the lake " * 12, id=f"h{i}"),
            AIMessage(f"answer {i}: " + "the lake is calm today " * 12, id=f"a{i}"),
        ]
    reducer = SummarizationReducer(model, target_count=4)
    reduced = asyncio.run(reducer.areduce(history)) if run_async else reducer.reduce(history)
    assert reduced is not None and validate_history(reduced) == []
    assert model.calls >= 3  # about 30k tokens of history through a 8k window
    counter = TiktokenCounter()
    assert all(count_request(counter, prompt) <= 8_000 for prompt in model.prompts)
    assert f"summary #{model.calls}" in str(reduced[1].content)  # one chained summary
    sent = [prompt_text(p) for p in model.prompts]
    for message in history[1:-4]:  # every folded message reaches exactly one call
        assert sum(f"[{message.id} " in text for text in sent) == 1, message.id
    assert [m.id for m in reduced[2:]] == [m.id for m in history[-4:]]
    for earlier, later in itertools.pairwise(model.prompts):
        assert "summary #" in prompt_text(later)  # the previous summary passed as input
        assert prompt_text(earlier) != prompt_text(later)
