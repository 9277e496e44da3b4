"""Where a reducer may cut: preamble, round starts, indivisible units, orphan repair.

Every helper here looks at the end of the history and walks back only as far as it must, so a
reducer's per-turn work depends on what it keeps, not on how long the history is.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import repair_history, split_units

Unit = tuple[BaseMessage, ...]
"""An indivisible run of messages: a tool call with its results, or one other message."""


class ConfigEquality:
    """Equality and hashing by configuration: same class and equal ``_config()``."""

    def _config(self) -> tuple[Hashable, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        """Equal to a reducer of the same class with the same configuration."""
        if type(other) is not type(self):
            return NotImplemented
        return self._config() == other._config()

    def __hash__(self) -> int:
        """Hash of the class and the configuration."""
        return hash((type(self), *self._config()))


def check_count(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` if it is a real integer >= ``minimum``, else raise a precise error.

    ``True`` and ``2.0`` are refused: a count given as a bool or a float is a mistake.

    Raises:
        ConfigurationError: ``value`` is not an ``int`` (bools excluded) or is too small.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})"
        raise ConfigurationError(msg)
    if value < minimum:
        msg = f"{name} must be >= {minimum}, got {value}"
        raise ConfigurationError(msg)
    return value


def preamble_length(messages: Sequence[BaseMessage]) -> int:
    """How many leading system messages the history has."""
    count = 0
    while count < len(messages) and isinstance(messages[count], SystemMessage):
        count += 1
    return count


def last_human(messages: Sequence[BaseMessage], floor: int, *, until: int | None = None) -> int:
    """Index of the latest user message at or after ``floor`` (``-1`` when there is none).

    With ``until``, the walk stops at that index: any user message at or after it is
    reported as ``until`` (callers only need to know it is not older).
    """
    index = len(messages) - 1
    while index >= floor:
        if until is not None and index < until:
            until = None
        if isinstance(messages[index], HumanMessage):
            return index if until is None else until
        index -= 1
    return -1


def round_start(messages: Sequence[BaseMessage], floor: int, index: int) -> int:
    """Start of the round holding ``index`` (a user message, or ``floor`` for the head round)."""
    index = max(index, floor)
    while index > floor and not isinstance(messages[index], HumanMessage):
        index -= 1
    return index


def is_orphan(unit: Unit) -> bool:
    """Whether ``unit`` is a stray tool result (answering no call of its step).

    `split_units` pairs every result positionally with the calls, valid or invalid, of the
    AI message right before it, so a unit that starts with a tool result is a stray.
    """
    return unit[0].type == "tool"


def answered_units(units: Iterable[Unit]) -> tuple[list[Unit], int]:
    """``units`` without stray tool results, and how many were left out."""
    every = list(units)
    kept = [unit for unit in every if not is_orphan(unit)]
    return kept, len(every) - len(kept)


def provider_valid(messages: list[BaseMessage]) -> list[BaseMessage]:
    """``messages`` as a provider accepts them (`rounds.repair_history`, logged).

    Stray tool results are left out and calls left unanswered before the last step get a
    placeholder result; a valid list comes back with the same objects.
    """
    return repair_history(messages).messages


def unchanged(out: Sequence[BaseMessage], messages: Sequence[BaseMessage]) -> bool:
    """Whether ``out`` holds exactly the objects of ``messages`` (callers keep both small)."""
    return len(out) == len(messages) and all(a is b for a, b in zip(out, messages, strict=True))


def flatten(units: Iterable[Unit]) -> list[BaseMessage]:
    """The messages of ``units`` in order."""
    return [message for unit in units for message in unit]


def newest_units(
    messages: Sequence[BaseMessage], floor: int, target: int, *, start_on_human: bool
) -> tuple[int, list[Unit]]:
    """Choose the kept tail: roughly the last ``target`` messages after ``floor``.

    The kept part starts on a unit boundary (on a user message when ``start_on_human`` and
    there is one), always includes the latest user message, and holds no orphan tool result.
    Only the rounds that may be kept are read.

    Returns:
        The index in ``messages`` where the kept part starts, and its units.
    """
    anchor = max(len(messages) - target, floor)
    human = last_human(messages, floor, until=anchor)
    if human >= 0:
        anchor = min(anchor, human)
    window = round_start(messages, floor, anchor)
    units = split_units(messages[window:])
    start, kept = len(units), 0
    while start > 0 and kept + len(units[start - 1]) <= target:
        start -= 1
        kept += len(units[start])
    latest = next((i for i in range(len(units) - 1, -1, -1) if _is_human(units[i])), None)
    while start < len(units) and (
        is_orphan(units[start])
        or (start_on_human and latest is not None and not _is_human(units[start]))
    ):
        start += 1
    if latest is not None:
        start = min(start, latest)
    index = window + sum(len(unit) for unit in units[:start])
    return index, units[start:]


def _is_human(unit: Unit) -> bool:
    return isinstance(unit[0], HumanMessage)
