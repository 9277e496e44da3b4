"""The one prefix check: `_prefix.holds` (pointer comparison, exact, restores the record)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_histcompress.core.prefix import extends, holds


class _Watched(list[BaseMessage]):
    """A list whose own comparison must never be used (it could read every message)."""

    def __eq__(self, other: object) -> bool:  # pragma: no cover - failing is the point
        raise AssertionError("compared through the list's own __eq__")

    __hash__ = None  # type: ignore[assignment]


def _history(n: int) -> list[BaseMessage]:
    return [(HumanMessage if i % 2 == 0 else AIMessage)(f"m{i}", id=f"m{i}") for i in range(n)]


def test_holds_compares_in_place_and_restores_the_record() -> None:
    history = _history(50)
    recorded = history[:30]
    snapshot = list(recorded)
    grown = _Watched([*history, HumanMessage("new", id="new")])
    assert holds(grown, recorded, 30, start=2)
    assert recorded[2:] == snapshot[2:] and len(recorded) == 30


def test_holds_finds_a_replaced_message_anywhere_in_the_prefix() -> None:
    history = _history(50)
    recorded = history[:40]
    for position in (1, 17, 38):
        edited = list(history)
        edited[position] = HumanMessage("edited", id=history[position].id)
        assert not holds(edited, recorded, 40, start=1)
        assert not holds(edited, recorded, 40, start=1, by_value=True)
    assert holds(list(history), recorded, 40, start=1)
    assert len(recorded) == 40


def test_holds_by_value_accepts_equal_copies_only_when_asked() -> None:
    history = _history(20)
    reloaded: list[Any] = [m.model_copy() for m in history]
    recorded = history[:10]
    assert not holds(reloaded, recorded, 10)
    assert holds(reloaded, recorded, 10, by_value=True)


def test_holds_on_an_older_record_and_on_tuples() -> None:
    history = _history(20)
    longer = history[:15]  # a newer state appended to the record: ``stop`` is older
    assert holds(history, longer, 10) and len(longer) == 15
    assert holds(tuple(history), longer, 10)
    assert not holds(tuple(reversed(history)), longer, 10)
    assert extends(history, history[:5]) and not extends(history[:3], history[:5])
