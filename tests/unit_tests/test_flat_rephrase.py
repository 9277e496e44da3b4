"""The rephrasing faces and the token counter do the same work per turn at any history size.

Each test drives a face turn by turn on a short and on a long grown history and counts what
a turn touches: the message references it reads from the history (a list that counts every
item it serves, slices and whole-list comparisons included), the runs it starts, the
messages it fingerprints. The counts must not grow with the history. No timing: speed itself
is measured by ``histcompress bench``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate

from langchain_histcompress.core import tokens
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.rephrase_prompts import _format_prompt
from langchain_histcompress.faces.rephrase import (
    STANDALONE_QUESTION_PROMPT,
    SUMMARY_AND_QUESTION_PROMPT,
    HistoryRephraseNode,
    create_history_rephraser,
)
from tests.fakes import conversation

TURNS = 5


class Reads(list[BaseMessage]):
    """A message list counting the references it serves."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.served = 0

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, slice):
            self.served += len(range(*key.indices(len(self))))
        else:
            self.served += 1
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[BaseMessage]:
        self.served += len(self)
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self.served += len(self)
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]


def grown(messages: int) -> list[BaseMessage]:
    """A system message then rounds: ``messages`` long plus room for the turns."""
    return conversation((messages // 2) + TURNS + 1, system=SystemMessage("Be brief.", id="s"))


def turn_ends(messages: int) -> list[int]:
    """History lengths at each turn: through the question of the next round."""
    return [messages + 2 * t + 2 for t in range(TURNS)]


def _answers() -> Iterator[AIMessage]:
    return itertools.repeat(AIMessage("What did the user ask?"))


class Runs(BaseCallbackHandler):
    """Records every run started: (kind, name, run id, parent run id)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, UUID, UUID | None]] = []

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs.append(("chain", str(kwargs.get("name")), run_id, parent_run_id))

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs.append(("model", str(kwargs.get("name")), run_id, parent_run_id))


# --------------------------------------------------------------------------- rephrasing


@pytest.mark.parametrize("face", ["node", "chain"])
def test_rephrase_turn_reads_the_same_at_1k_and_20k(face: str) -> None:
    served: dict[int, list[int]] = {}
    runs: dict[int, list[int]] = {}
    for size in (1_000, 20_000):
        model = GenericFakeChatModel(messages=_answers())
        node = HistoryRephraseNode(model)
        chain = create_history_rephraser(model)
        history = grown(size)
        served[size], runs[size] = [], []
        for end in turn_ends(size):
            probe = Reads(history[:end])
            recorder = Runs()
            config: Any = {"callbacks": [recorder]}
            if face == "node":
                update = node.invoke({"messages": probe}, config)
                assert update["standalone_question"] == "What did the user ask?"
            else:
                question = chain.invoke({"input": "and then?", "chat_history": probe}, config)
                assert question == "What did the user ask?"
            served[size].append(probe.served)
            runs[size].append(len(recorder.runs))
    assert served[1_000] == served[20_000]
    assert max(served[20_000]) <= 40  # the window of 6 and the lookup of the question
    assert runs[1_000] == runs[20_000] == [2] * TURNS  # one run of the face, one model call


class View(Sequence[BaseMessage]):
    """A read-only history view (not a list) counting the items it serves."""

    def __init__(self, messages: list[BaseMessage]) -> None:
        self._messages = messages
        self.served = 0

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, key: int) -> BaseMessage: ...

    @overload
    def __getitem__(self, key: slice) -> list[BaseMessage]: ...

    def __getitem__(self, key: int | slice) -> BaseMessage | list[BaseMessage]:
        found = self._messages[key]
        self.served += len(found) if isinstance(found, list) else 1
        return found


def test_a_history_view_is_read_only_at_its_end() -> None:
    """Any sequence is read where needed, not converted whole."""
    served = {}
    for size in (1_000, 20_000):
        chain = create_history_rephraser(GenericFakeChatModel(messages=_answers()))
        view = View(grown(size)[:size])
        assert chain.invoke({"input": "and then?", "chat_history": view}) == (
            "What did the user ask?"
        )
        served[size] = view.served
    assert served[1_000] == served[20_000] <= 40


def test_rephrasers_are_one_run_around_the_model_call() -> None:
    """The model call is the child of the face's run: callbacks, tags and metadata reach it."""
    history = grown(20)
    for return_metadata in (False, True):
        recorder = Runs()
        rephraser = create_history_rephraser(
            GenericFakeChatModel(messages=_answers()), return_metadata=return_metadata
        )
        rephraser.invoke(
            {"input": "and then?", "chat_history": history},
            {"callbacks": [recorder], "run_name": "mine"},
        )
        (outer, model) = recorder.runs
        assert outer[:2] == ("chain", "mine")
        assert model[0] == "model" and model[3] == outer[2]


def test_async_rephrasers_are_one_run_around_the_model_call() -> None:
    history = grown(20)
    recorder = Runs()
    node = HistoryRephraseNode(GenericFakeChatModel(messages=_answers()))
    update = asyncio.run(node.ainvoke({"messages": history}, {"callbacks": [recorder]}))
    assert update == {"standalone_question": "What did the user ask?"}
    (outer, model) = recorder.runs
    assert outer[:2] == ("chain", "HistoryRephraseNode")
    assert model[0] == "model" and model[3] == outer[2]


def test_async_failure_ends_the_run_with_the_error() -> None:
    errors: list[BaseException] = []

    class Errors(BaseCallbackHandler):
        def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
            errors.append(error)

    chain = create_history_rephraser(GenericFakeChatModel(messages=_answers()))
    with pytest.raises(Exception, match="no 'input' key"):
        asyncio.run(chain.ainvoke({"question": "x"}, {"callbacks": [Errors()]}))
    assert len(errors) == 1


@pytest.mark.parametrize("template", [STANDALONE_QUESTION_PROMPT, SUMMARY_AND_QUESTION_PROMPT])
def test_built_in_prompts_format_as_their_templates(template: ChatPromptTemplate) -> None:
    values = {"history": "<message>{x}</message>", "question": "q {y}?", "summary": "s\n\n"}
    assert _format_prompt(template, values) == template.format_messages(**values)
    custom = ChatPromptTemplate.from_messages([("human", "{history} // {question}")])
    values.pop("summary")
    assert _format_prompt(custom, values) == custom.format_messages(**values)


# --------------------------------------------------------------------------- token counter


def test_counter_reads_the_same_per_turn_at_5k_and_20k(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the exact-check size, a grown list costs a bounded check plus its new messages."""
    keyed: list[int] = []
    original = TiktokenCounter._key

    def counting_key(message: BaseMessage) -> Any:
        keyed.append(1)
        return original(message)

    monkeypatch.setattr(TiktokenCounter, "_key", staticmethod(counting_key))
    served: dict[int, list[tuple[int, int]]] = {}
    for size in (5_000, 20_000):
        counter, fresh = TiktokenCounter(), TiktokenCounter(cache_size=0)
        history = grown(size)
        counter(history[: turn_ends(size)[0] - 2])
        served[size] = []
        for end in turn_ends(size):
            keyed.clear()
            probe = Reads(history[:end])
            assert counter(probe) == fresh(history[:end])
            served[size].append((probe.served, len(keyed)))
    # the rotating part of the check may wrap early on the shorter list: compare the largest
    assert max(served[20_000]) == max(served[5_000])
    bound = tokens._CHECK_HEAD + tokens._CHECK_TAIL + tokens._CHECK_SWEEP + 8  # + the new ones
    assert all(reads <= bound and keys == 2 for reads, keys in served[20_000])


def _long(n: int) -> list[BaseMessage]:
    return [HumanMessage(f"message number {i}", id=f"m{i}") for i in range(n)]


@pytest.mark.parametrize("where", [0, 5, 3_000, 5_990])
def test_counter_sees_an_insertion_or_removal_at_once(where: int) -> None:
    history = _long(6_000)
    counter, fresh = TiktokenCounter(), TiktokenCounter(cache_size=0)
    counter(history)
    inserted = [*history[:where], HumanMessage("a much longer new message " * 5), *history[where:]]
    assert counter(inserted) == fresh(inserted)
    counter(history)
    removed = [*history[:where], *history[where + 1 :], HumanMessage("next")]
    assert counter(removed) == fresh(removed)


@pytest.mark.parametrize("where", [3, 5_800])
def test_counter_sees_a_replacement_near_either_end_at_once(where: int) -> None:
    history = _long(6_000)
    counter, fresh = TiktokenCounter(), TiktokenCounter(cache_size=0)
    counter(history)
    edited = [*history[:where], HumanMessage("an edited, much longer message " * 4)]
    edited += history[where + 1 :]
    assert counter(edited) == fresh(edited)


def test_counter_sees_a_deep_replacement_within_one_rotation() -> None:
    """A replaced message in the middle of a long list is found by the rotating check."""
    size = 20_000
    history = _long(size)
    counter, fresh = TiktokenCounter(), TiktokenCounter(cache_size=0)
    counter(history)
    edited = [*history[:9_000], HumanMessage("an edited, much longer message " * 4)]
    edited += history[9_001:]
    exact = fresh(edited)
    rotation = -(-size // tokens._CHECK_SWEEP) + 1
    calls = 0
    while counter(edited) != exact:
        calls += 1
        assert calls <= rotation, "the replaced message was never checked"
    assert counter(edited) == exact  # and it stays exact
    assert counter.count_each(edited)[9_000] == fresh.count_message(edited[9_000])


def test_counter_compares_short_lists_whole() -> None:
    """Up to the exact-check size any replaced object is seen on the very next call."""
    history = _long(tokens._FULL_CHECK)
    counter, fresh = TiktokenCounter(), TiktokenCounter(cache_size=0)
    counter(history)
    for where in (1, 700, 1_500):
        edited = [*history[:where], HumanMessage("x " * 50), *history[where + 1 :]]
        assert counter(edited) == fresh(edited)


def test_faces_keep_their_schemas() -> None:
    model = GenericFakeChatModel(messages=_answers())
    question = create_history_rephraser(model)
    metadata = create_history_rephraser(model, return_metadata=True)
    assert question.input_schema.model_json_schema()["type"] == "object"
    assert question.output_schema.model_json_schema()["type"] == "string"
    assert (
        "rephrased"
        in metadata.output_schema.model_json_schema()["$defs"]["RephraseOutput"]["properties"]
    )
    assert question.get_name() == metadata.get_name() == "HistoryRephraser"
