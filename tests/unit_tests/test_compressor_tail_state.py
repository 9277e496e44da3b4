"""Compressing a grown history reads only the new messages, and gives what a full read gives.

Between two folds the compressor keeps what it derived from the summary's uncovered tail
(`langchain_histcompress.core.tail_state`) and only reads the messages appended since. These tests
replay random conversations (tool steps, parallel and in-flight calls, pauses, pinned system
messages, stray results, edits, removals, reused ids) turn by turn and check every result
against the same replay with that shortcut turned off; and they count the messages a turn
validates and counts, which must not grow with the tail.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core import tail as _tail
from langchain_histcompress.core import tail_state as _tail_state
from langchain_histcompress.core.errors import InvalidHistoryError
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.edge import compressor, round_planning
from langchain_histcompress.edge.compressor import RoundCompressor
from tests.fakes import ScriptedSummarizer

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)


def _stamp(seconds: float) -> dict[str, Any]:
    return {"timestamp": (T0 + timedelta(seconds=seconds)).isoformat()}


class _Walk:
    """A random conversation that grows (and now and then changes) turn by turn."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
        self.n = 0
        self.clock = 0.0
        self.open_calls: list[str] = []

    def _id(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def _time(self) -> dict[str, Any]:
        self.clock += 4000.0 if self.rng.random() < 0.1 else 5.0
        return _stamp(self.clock)

    def _text(self) -> str:
        return " ".join(self.rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(9))

    def _calls(self, k: int) -> AIMessage:
        calls = [{"name": "f", "args": {"x": i}, "id": self._id("c")} for i in range(k)]
        self.open_calls = [str(c["id"]) for c in calls]
        return AIMessage("", tool_calls=calls, id=self._id("a"), additional_kwargs=self._time())

    def _results(self, calls: list[str]) -> list[BaseMessage]:
        return [ToolMessage("ok", tool_call_id=c, id=self._id("t")) for c in calls]

    def step(self) -> None:
        """Append a turn's messages, sometimes edit the recent past."""
        rng, out = self.rng, self.history
        if self.open_calls:  # an in-flight call gets its results
            out += self._results(self.open_calls)
            self.open_calls = []
            out.append(AIMessage(self._text(), id=self._id("a"), additional_kwargs=self._time()))
        roll = rng.random()
        if roll < 0.05 and len(out) > 3:  # edit a recent message (same id, new content)
            index = rng.randrange(max(1, len(out) - 6), len(out))
            if not isinstance(out[index], SystemMessage | ToolMessage):
                out[index] = out[index].model_copy(update={"content": "edited"})
        elif roll < 0.08 and len(out) > 3:  # remove a recent plain message
            index = len(out) - 1
            if isinstance(out[index], HumanMessage):
                del out[index]
        elif roll < 0.10:
            out.append(SystemMessage("Reminder: stay polite.", id=self._id("s")))
        elif roll < 0.12:
            out.append(ToolMessage("stray", tool_call_id="nowhere", id=self._id("t")))
        elif roll < 0.13 and len(out) > 2:  # an id reused: both paths must refuse it
            out.append(HumanMessage("again", id=str(out[-1].id), additional_kwargs=self._time()))
            return
        out.append(HumanMessage(self._text(), id=self._id("h"), additional_kwargs=self._time()))
        for _ in range(rng.choice([0, 1, 1, 2])):
            kind = rng.random()
            if kind < 0.3:
                out.append(self._calls(rng.choice([1, 2, 3])))
                if rng.random() < 0.7:
                    results = self._results(self.open_calls)
                    rng.shuffle(results)
                    out += results
                    self.open_calls = []
                else:
                    return  # the calls stay in flight until the next turn
            out.append(AIMessage(self._text(), id=self._id("a"), additional_kwargs=self._time()))


def _compressor(kind: str) -> RoundCompressor:
    options: dict[str, Any] = {
        "token_counter": count_tokens_approximately,
        "timeout": None,
        "clock": lambda: T0,
    }
    if kind == "rounds":
        options["trigger"] = ("rounds", 5)
    elif kind in {"none", "openai-90"}:
        options["trigger"] = ("cost", kind)
    elif kind == "threshold":
        options["trigger"] = ("tokens", 400)
    elif kind == "thread":  # a fold after every answered round
        options.update(trigger=("rounds", 1), keep=("rounds", 0))
    return RoundCompressor(ScriptedSummarizer(), **options)


Outcome = tuple[Any, ...]


def _replay(kind: str, seed: int, turns: int) -> list[Outcome]:
    walk = _Walk(seed)
    subject = _compressor(kind)
    while len(walk.history) < 12 or walk.open_calls:
        walk.step()
    summary: RunningSummary | None = RunningSummary(  # as if compressed before
        content="x", text="x", covered_ids=[str(m.id) for m in walk.history[1:5]]
    )
    out: list[Outcome] = []
    for _ in range(turns):
        walk.step()
        history = list(walk.history)
        try:
            result = subject.compress(history, summary)
        except InvalidHistoryError as exc:
            out.append(("invalid", [v.kind for v in exc.violations]))
            walk.history.pop()  # the caller drops the offending message
            continue
        summary = result.summary
        out.append(
            (
                [(m.type, m.id, m.content) for m in result.messages],
                result.calls,
                None if summary is None else (summary.text, list(summary.covered_ids)),
            )
        )
    return out


@pytest.mark.parametrize("kind", ["none", "openai-90", "rounds", "threshold", "thread"])
def test_grown_tail_gives_what_a_full_read_gives(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: dict[str, list[bool]] = {"grow": [], "carry": []}

    def spy(name: str) -> Callable[..., Any]:
        real = getattr(compressor, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            found = real(*args, **kwargs)
            taken[name].append(found not in (None, False))
            return found

        return call

    for seed in range(6):
        monkeypatch.setattr(compressor, "grow", spy("grow"))
        monkeypatch.setattr(compressor, "carry", spy("carry"))
        fast = _replay(kind, seed, 70)
        monkeypatch.undo()
        monkeypatch.setattr(compressor, "grow", lambda *args, **kwargs: None)
        monkeypatch.setattr(compressor, "carry", lambda *args, **kwargs: False)
        assert fast == _replay(kind, seed, 70), seed
        monkeypatch.undo()
    assert any(taken["grow"]), "the shortcut was never taken"
    assert not all(taken["grow"]), "the full path was never taken"
    if kind in {"rounds", "threshold", "thread"}:  # frequent folds
        assert any(taken["carry"]), f"no fold kept the tail: {taken}"


# --------------------------------------------------------------------------- counting


class _Counting:
    """A token counter that counts the messages it is shown."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        self.seen += len(messages)
        return count_tokens_approximately(messages)


def _per_turn(
    tail_rounds: int, monkeypatch: pytest.MonkeyPatch, *, schedule: bool
) -> list[tuple[int, int, int]]:
    """Messages validated and counted, and checks of the covered prefix, at each of 5 turns
    with ``tail_rounds`` rounds pending."""
    counter = _Counting()
    subject = RoundCompressor(
        ScriptedSummarizer(),
        token_counter=counter,
        timeout=None,
        trigger=("cost", "none") if schedule else None,
        keep=("rounds", 10_000),  # never folds: the tail only grows
    )
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for n in range(10 + tail_rounds + 6):
        history += [
            HumanMessage(f"q{n}", id=f"h{n}", additional_kwargs=_stamp(10 * n)),
            AIMessage(f"a{n}", id=f"a{n}", additional_kwargs=_stamp(10 * n + 5)),
        ]
    summary = RunningSummary(content="x", text="x", covered_ids=[str(m.id) for m in history[1:21]])
    validated: list[int] = []

    def counting(validate: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(messages: Sequence[BaseMessage], **kwargs: Any) -> Any:
            validated.append(len(messages))
            return validate(messages, **kwargs)

        return wrapped

    monkeypatch.setattr(_tail_state, "validate_history", counting(_tail_state.validate_history))
    monkeypatch.setattr(
        round_planning, "validate_history", counting(round_planning.validate_history)
    )
    prefix_checks = 0
    holds = _tail.holds

    def checking(*args: Any, **kwargs: Any) -> bool:
        nonlocal prefix_checks
        prefix_checks += 1
        return holds(*args, **kwargs)

    monkeypatch.setattr(_tail, "holds", checking)
    first = 1 + 2 * (10 + tail_rounds)
    subject.compress(history[:first], summary)  # reads the whole tail once
    out = []
    for turn in range(5):
        validated.clear()
        counter.seen = prefix_checks = 0
        result = subject.compress(history[: first + 2 * (turn + 1)], summary)
        assert not result.compressed
        assert len(result.messages) == 2 + 2 * (tail_rounds + turn + 1)
        out.append((sum(validated), counter.seen, prefix_checks))
    return out


@pytest.mark.parametrize("schedule", [False, True])
def test_a_turn_reads_only_the_new_messages(
    schedule: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = _per_turn(5, monkeypatch, schedule=schedule)
    long = _per_turn(300, monkeypatch, schedule=schedule)
    assert short == long
    # the budget applies to every trigger: only the new messages are counted for it
    assert all(validated <= 4 and counted <= 6 for validated, counted, _ in long)
    # the covered prefix (the only part read in O(history), pointer by pointer) is checked
    # once per call
    assert all(checks == 1 for _, _, checks in long)


def test_a_replaced_tail_message_is_read_again() -> None:
    subject = RoundCompressor(
        ScriptedSummarizer(),
        token_counter=count_tokens_approximately,
        timeout=None,
        trigger=None,
    )
    history: list[BaseMessage] = [SystemMessage("Be brief.", id="sys")]
    for n in range(6):
        history += [HumanMessage(f"q{n}", id=f"h{n}"), AIMessage(f"a{n}", id=f"a{n}")]
    summary = RunningSummary(content="x", text="x", covered_ids=["h0", "a0"])
    subject.compress(history, summary)
    edited = [*history[:-3], AIMessage("changed", id=history[-3].id), *history[-2:]]
    edited.append(HumanMessage("next", id="h9"))
    shown = subject.compress(edited, summary).messages
    assert [m.content for m in shown if m.id == history[-3].id] == ["changed"]
    assert shown[-1].id == "h9"
    broken = [*edited, ToolMessage("stray", tool_call_id="x", id="t1")]
    assert all(m.id != "t1" for m in subject.compress(broken, summary).messages)  # repaired


def test_a_history_without_ids_grows_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids given lazily keep their copies between turns, so the kept tail applies to them."""
    from langchain_histcompress.core.rounds import ensure_ids
    from tests.unit_tests.test_flat_turns import _node_replay, grown

    taken: list[bool] = []
    grow = compressor.grow

    def spy(*args: Any, **kwargs: Any) -> Any:
        found = grow(*args, **kwargs)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(compressor, "grow", spy)
    plain = grown(30, ids=False)
    ends = range(3, len(plain), 2)
    replayed = _node_replay(plain, ends)
    assert taken.count(True) > len(taken) // 2  # most turns grew the kept tail
    assert replayed == _node_replay(ensure_ids(plain), ends)


def test_a_summary_is_counted_as_shown_and_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget and the schedule read a summary's tokens as its message in the view costs
    them, counted once per summary."""
    from langchain_histcompress.core.tokens import TiktokenCounter, message_costs

    counter = TiktokenCounter(cache_size=0)  # every count encodes
    subject = RoundCompressor(
        ScriptedSummarizer(), token_counter=counter, timeout=None, trigger=("cost", "none")
    )
    summary = RunningSummary(content="y", text="y <summary> é", covered_ids=["h0"])
    shown = sum(message_costs(counter, [summary.to_message()]))
    assert subject._summary_tokens(summary) == shown > counter([SystemMessage(summary.text)])
    encoded: list[str] = []
    encode = counter._encode

    def spy(text: str) -> list[int]:
        encoded.append(text)
        return encode(text)

    monkeypatch.setattr(counter, "_encode", spy)
    assert subject._summary_tokens(summary) == shown and encoded == []  # remembered
