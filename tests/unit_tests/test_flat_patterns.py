"""Two common usage patterns do per-turn work in proportion to what is new, not to the history.

1. A `SummarizationReducer` in front of the model (``target_count=40``, no threshold: every
   turn folds the new round), fed the full history each turn, or its own output back (kept
   as it is, or read back from storage as new objects), with ids or without; also through
   `with_history_reducer` serving two conversations that share their first messages.
2. A `ContextBuilder` with a running summary (every message but the last 3 rounds), 200
   facts each sourced from one user message and retrieved raw turns, on a history that grows
   by one round per turn, with ids or without, the summary the same object or read back
   from storage every turn.

Each pattern runs a few turns on a short and on a long history, the history growing by one
round (a question, a tool call, its result, an answer) per turn, each turn a new list. Per
turn it counts the caller's messages whose fields are read, the messages given a derived
id (copied), and the bytes allocated (the `tracemalloc` peak above what was in use when the
turn started). None of them may grow with the history. No timing: speed is measured by
``histcompress bench --faces``.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
    messages_from_dict,
    messages_to_dict,
)

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core import identified as _identified
from langchain_histcompress.core.coverage import CoveredIds
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.faces.reducers import SummarizationReducer, with_history_reducer
from tests.fakes import ScriptedChatModel, numbered, summary_json
from tests.read_counting import LOG, ReadAI, ReadHuman, ReadTool

SHORT, LONG = 50, 1_000  # rounds of 4 messages: 200 and 4,000 messages
TURNS = 6

# --------------------------------------------------------------------------- what a turn does

_ORIGINALS: set[int] = set()


def _round(n: int, *, ids: bool, tag: str = "") -> list[BaseMessage]:
    """Round ``n``: a question, a tool call, its result and an answer (the caller's objects)."""

    def given(kind: str) -> str | None:
        return f"{tag}{kind}{n}" if ids else None

    call = f"{tag}call{n}"
    return _originals(
        [
            # the question names the answer of round n - 45 (out of the verbatim window): what
            # a retriever finds, with as many matches on any history
            ReadHuman(f"q{n} p{n - 45}", id=given("h")),
            ReadAI(
                "",
                id=given("c"),
                tool_calls=[{"name": "search", "args": {"q": f"s{n}"}, "id": call}],
            ),
            ReadTool(f"r{n} {n * 13}", tool_call_id=call, id=given("t")),
            ReadAI(f"a{n} p{n}", id=given("a")),
        ]
    )


_KINDS: dict[str, type[BaseMessage]] = {"human": ReadHuman, "ai": ReadAI, "tool": ReadTool}


def _originals(messages: list[BaseMessage]) -> list[BaseMessage]:
    _ORIGINALS.update(id(m) for m in messages)
    return messages


def _reloaded(messages: list[BaseMessage]) -> list[BaseMessage]:
    """``messages`` written to storage and read back: new objects, equal values."""
    return _originals(
        [
            _KINDS[m.type].model_validate(m.model_dump()) if m.type in _KINDS else m
            for m in messages_from_dict(messages_to_dict(messages))
        ]
    )


@dataclass
class _Turns:
    """What the turns did, one entry per turn."""

    read: list[int]
    copied: list[int]
    allocated: list[int]


class _Copies:
    """Counts the messages given a derived id (`_identified.identified` on an id-less message)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = _identified.identified

        def counted(message: BaseMessage, index: int, namespace: str = "") -> BaseMessage:
            if message.id is None:
                self.count += 1
            return original(message, index, namespace)

        # every module that took the function by name
        for module in list(sys.modules.values()):
            if (getattr(module, "__name__", "") or "").startswith("langchain_histcompress") and (
                getattr(module, "identified", None) is original
            ):
                monkeypatch.setattr(module, "identified", counted)


def _measure(turns: Iterator[Callable[[], Any]], copies: _Copies) -> _Turns:
    """Run each turn (its input made beforehand): fields read, ids copied, bytes allocated.

    A turn's inputs stay alive until the next turn is measured: memory that a turn stops
    using (the previous turn's summary a cache lets go) is freed between turns, not inside
    one, where it would hide what the turn allocates.
    """
    out = _Turns([], [], [])
    previous: Callable[[], Any] | None = None
    # what was alive before is left out of the collections between turns (they then walk
    # only what the pattern made), and the warm-up that makes the first turn runs before
    # tracing starts: tracing the allocations of a long history's first fold measures no turn
    gc.collect()
    gc.freeze()
    try:
        first = next(turns, None)
    except BaseException:
        gc.unfreeze()
        raise
    tracemalloc.start()
    try:
        with LOG.watching(_ORIGINALS) as read:
            for turn in itertools.chain([first] if first is not None else [], turns):
                gc.collect()
                read.clear()
                copies.count = 0
                tracemalloc.reset_peak()
                before, _ = tracemalloc.get_traced_memory()
                turn()
                _, peak = tracemalloc.get_traced_memory()
                out.allocated.append(peak - before)
                out.read.append(len(read))
                out.copied.append(copies.count)
                previous = turn
    finally:
        tracemalloc.stop()
        gc.unfreeze()
    del previous
    return out


def _check_flat(short: _Turns, long: _Turns) -> None:
    assert max(short.read) > 0  # the counting works
    assert max(long.read) <= max(short.read) + 4, (short.read, long.read)
    assert max(long.copied) <= max(short.copied), (short.copied, long.copied)
    # a list of the long history's references alone is 32 KB: any copy or index shows
    small, large = statistics.median(short.allocated), statistics.median(long.allocated)
    assert large <= 1.25 * small + 4_096, (short.allocated, long.allocated)


# --------------------------------------------------------------------------- 1. the reducer

_SYSTEM = SystemMessage("Answer briefly.", id="system")
_GREETING = AIMessage("Hello! What can I do for you?", id="greeting")


def _summarizer() -> ScriptedChatModel:
    return ScriptedChatModel(default=numbered(lambda n: summary_json(f"summary #{n}")))


def _reducer() -> SummarizationReducer:
    return SummarizationReducer(
        _summarizer(), target_count=40, token_counter="gpt-4o-mini", max_summary_tokens=100_000
    )


def _reducer_turns(variant: str, rounds: int, *, ids: bool) -> Iterator[Callable[[], Any]]:
    """The turns of one variant of the reducer pattern, after a warm-up on ``rounds`` rounds."""
    reducer = _reducer()
    if variant in ("full", "fed_back", "fed_back_reloaded"):
        history: list[BaseMessage] = [_SYSTEM]
        for n in range(rounds):
            history += _round(n, ids=ids)
        reduced = reducer.reduce(history)
        kept = reduced if variant != "full" and reduced is not None else history
        for n in range(rounds, rounds + TURNS):
            new = _round(n, ids=ids)
            if variant == "full":
                kept = kept + new
            elif variant == "fed_back":
                kept = [*kept, *new]
            else:  # kept as stored: every message read back as a new object
                kept = _reloaded([*kept, *new])

            def turn(given: list[BaseMessage] = kept) -> None:
                nonlocal kept
                out = reducer.reduce(given)
                assert out is not None and len(out) <= 46  # a fold on every turn
                if variant != "full":
                    kept = out

            yield turn
        return
    # two conversations with the same first messages (a fixed prompt and greeting), through
    # one reducer (``shared_greeting``) or one wrapped model (``wrapped``)
    model = FakeListChatModel(responses=["ok"])
    run: Callable[[list[BaseMessage]], Any] = reducer.reduce
    if variant == "wrapped":
        run = with_history_reducer(model, reducer).invoke
    pair: list[list[BaseMessage]] = []
    for tag in ("x", "y"):
        history = [_SYSTEM, _GREETING]
        for n in range(rounds):
            history += _round(n, ids=ids, tag=tag)
        run(history)
        pair.append(history)
    for n in range(rounds, rounds + TURNS):
        pair = [
            history + _round(n, ids=ids, tag=tag) for history, tag in zip(pair, "xy", strict=True)
        ]

        def both(given: list[list[BaseMessage]] = pair) -> None:
            for history in given:
                run(history)

        yield both


@pytest.mark.parametrize(
    ("variant", "ids"),
    [
        ("full", True),
        ("full", False),
        ("fed_back", True),
        ("fed_back", False),
        ("fed_back_reloaded", True),
        ("shared_greeting", True),
        ("wrapped", True),
    ],
)
def test_reducer_in_front_of_the_model_does_flat_work_per_turn(
    monkeypatch: pytest.MonkeyPatch, variant: str, ids: bool
) -> None:
    copies = _Copies(monkeypatch)
    short = _measure(_reducer_turns(variant, SHORT, ids=ids), copies)
    long = _measure(_reducer_turns(variant, LONG, ids=ids), copies)
    _check_flat(short, long)
    if not ids:
        assert max(long.copied) <= 4  # the folded round, at most


# --------------------------------------------------------------------------- 2. the builder


def _builder_turns(rounds: int, *, ids: bool, reloaded: bool) -> Iterator[Callable[[], Any]]:
    builder = ContextBuilder(
        max_context_tokens=2000, token_counter="gpt-4o-mini", raw_turn_retrieval=4
    )
    history: list[BaseMessage] = [_SYSTEM]
    for n in range(rounds):
        history += _round(n, ids=ids)
    ided = ensure_ids(history)  # the ids the builder gives messages without one
    summary = RunningSummary(
        content="The user asked about many topics.",
        text="The user asked about many topics.",
        covered_ids=CoveredIds([str(m.id) for m in ided[1:-12]]),
    )
    stored = summary.model_dump_json()
    humans = [m for m in ided if m.type == "human"]
    facts = [
        Fact(id=f"f{k}", content=f"note {k}", source_ids=(str(m.id),))
        for k, m in enumerate(humans[:: max(1, len(humans) // 200)][:200])
    ]
    builder.build(history, summary=summary, facts=facts)
    for n in range(rounds, rounds + TURNS):
        history = history + _round(n, ids=ids)
        given = RunningSummary.model_validate_json(stored) if reloaded else summary

        def turn(messages: list[BaseMessage] = history, known: RunningSummary = given) -> None:
            built = builder.assemble(messages, summary=known, facts=facts)
            assert built.summary_included and built.retrieved_ids

        yield turn


@pytest.mark.parametrize(
    ("ids", "reloaded"), [(True, False), (False, False), (True, True), (False, True)]
)
def test_context_builder_does_flat_work_per_turn(
    monkeypatch: pytest.MonkeyPatch, ids: bool, reloaded: bool
) -> None:
    copies = _Copies(monkeypatch)
    short = _measure(_builder_turns(SHORT, ids=ids, reloaded=reloaded), copies)
    long = _measure(_builder_turns(LONG, ids=ids, reloaded=reloaded), copies)
    _check_flat(short, long)
    if not ids:
        assert max(long.copied) <= 4  # the new round


def test_context_builder_lets_go_of_the_callers_summary() -> None:
    """A summary read back each turn is freed with the caller's reference, not in a later call
    (freeing one that covers a long history is work in proportion to it)."""
    import weakref

    builder = ContextBuilder(max_context_tokens=500, token_counter="gpt-4o-mini")
    history: list[BaseMessage] = [_SYSTEM]
    for n in range(30):
        history += _round(n, ids=True)
    summary = RunningSummary(
        content="earlier", text="earlier", covered_ids=[str(m.id) for m in history[1:-12]]
    )
    assert builder.assemble(history, summary=summary).summary_included
    gone = weakref.ref(summary)
    del summary
    gc.collect()
    assert gone() is None
