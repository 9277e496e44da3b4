"""The window of history a rephrasing (or an answering) call sees, read from the end.

`select_history_window` keeps the last ``history_message_count`` conversation messages
without splitting a tool group. Only the newest messages are read: the window is computed
on a suffix of the history that doubles until the window is settled, so its cost does not
grow with the history, and a history of dicts or tuples is converted to messages only
where it is read (`LazyMessages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)

from langchain_histcompress.core.answer_text import output_text
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import _MessageView, is_summary_message, split_units

__all__ = ["select_history_window"]


def check_count(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        msg = f"{name} must be an integer >= {minimum}, got {value!r}"
        raise ConfigurationError(msg)
    return value


def _strip_tool_calls(message: AIMessage) -> AIMessage | None:
    """A copy of ``message`` holding only its text, or ``None`` when it has no text."""
    text = content_text(message.content).strip()
    if not text:
        return None
    kwargs = {k: v for k, v in message.additional_kwargs.items() if k != "tool_calls"}
    return AIMessage(
        content=text,
        id=message.id,
        name=message.name,
        additional_kwargs=kwargs,
        response_metadata=dict(message.response_metadata),
    )


def content_text(content: str | list[str | dict[str, Any]]) -> str:
    return output_text(content) or ""


def select_history_window(
    messages: Sequence[BaseMessage],
    history_message_count: int,
    *,
    include_tool_messages: bool = False,
) -> list[BaseMessage]:
    """The last ``history_message_count`` conversation messages, never splitting a tool group.

    System messages (the application preamble and package summaries) are not conversation
    and are left out. By default tool plumbing is dropped: tool results go, and an
    ``AIMessage`` with tool calls is kept only for its text (a copy without the calls).
    That keeps the window meaningful for a rephrasing prompt and valid for an answering
    model that has no tools bound. With ``include_tool_messages=True`` answered tool groups
    are kept whole and counted by their message count; a group that does not fit is left
    out with everything before it. A window never starts on a tool result. Messages that
    need no change are returned as the same objects.

    Args:
        messages: The chat history before the current question.
        history_message_count: How many messages to keep at most (6 = three Q/A pairs).
        include_tool_messages: Keep answered tool groups instead of dropping tool plumbing.

    Returns:
        At most ``history_message_count`` messages, in order.

    Raises:
        ConfigurationError: ``history_message_count`` is not an integer >= 0.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = AIMessage("Let me look.", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> history = [HumanMessage("q1"), AIMessage("a1"), HumanMessage("q2"), call,
        ...            ToolMessage("42", tool_call_id="c1"), AIMessage("It is 42.")]
        >>> [m.content for m in select_history_window(history, 3)]
        ['q2', 'Let me look.', 'It is 42.']
    """
    limit = check_count("history_message_count", history_message_count, minimum=0)
    return newest_window(messages, limit, include_tool_messages)[0]


_WINDOW_SPAN = 16  # messages read first; doubled until the window is settled


def newest_window(
    messages: Sequence[BaseMessage], limit: int, include_tool_messages: bool
) -> tuple[list[BaseMessage], int]:
    """`select_history_window` reading from the end only, plus where its reading started.

    The window depends only on the newest units, so it is computed on a suffix that starts
    at a message no earlier unit can reach into (not a tool result, not a system message),
    and the suffix doubles until the window stops before the suffix's first unit or the
    suffix is the whole history: the result is exactly that of the whole history.
    """
    end = len(messages)
    span = max(_WINDOW_SPAN, 2 * limit + 2)
    while True:
        start = max(0, end - span)
        while start > 0 and isinstance(messages[start], ToolMessage | SystemMessage):
            start -= 1
        window, settled = window_of(messages[start:end], limit, include_tool_messages)
        if settled or start == 0:
            return window, start
        span *= 2


def window_of(
    messages: Sequence[BaseMessage], limit: int, include_tool_messages: bool
) -> tuple[list[BaseMessage], bool]:
    """The window of ``messages``, and whether a unit before it was left out (settled)."""
    body = [m for m in messages if not isinstance(m, SystemMessage)]
    units: list[tuple[BaseMessage, ...]] = []
    for unit in split_units(body):
        head = unit[0]
        if isinstance(head, ToolMessage):
            continue  # a result whose call is not in the history
        if isinstance(head, AIMessage) and head.tool_calls:
            called = {str(c.get("id")) for c in head.tool_calls}
            answered = {m.tool_call_id for m in unit[1:] if isinstance(m, ToolMessage)}
            if include_tool_messages and called == answered:
                units.append(unit)
                continue
            text_only = _strip_tool_calls(head)
            if text_only is not None:
                units.append((text_only,))
            continue
        units.append(unit)
    kept: list[tuple[BaseMessage, ...]] = []
    total = 0
    settled = False
    for unit in reversed(units):
        if total + len(unit) > limit:
            settled = True
            break
        kept.append(unit)
        total += len(unit)
    return [m for unit in reversed(kept) for m in unit], settled


def latest_summary_message(history: Sequence[BaseMessage], read_from: int) -> BaseMessage | None:
    """The newest package summary message among ``history[read_from:]`` and the preamble.

    Package summaries sit in the leading system messages of a compressed view; the rest of
    a long history is not read.
    """
    for index in range(len(history) - 1, read_from - 1, -1):
        if is_summary_message(history[index]):
            return history[index]
    lead = 0
    while lead < min(read_from, len(history)) and isinstance(history[lead], SystemMessage):
        lead += 1
    for index in range(lead - 1, -1, -1):
        if is_summary_message(history[index]):
            return history[index]
    return None


class LazyMessages(_MessageView):
    """A chat history converted to messages item by item, only where it is read.

    Conversions are remembered, and views of a prefix share them, so reading the last few
    messages of a long history costs as many conversions as messages read.
    """

    def __init__(
        self,
        raw: Sequence[Any],
        label: str,
        stop: int | None = None,
        cache: dict[int, Any] | None = None,
    ) -> None:
        self._raw = raw
        self._label = label
        self._stop = len(raw) if stop is None else stop
        self._cache: dict[int, BaseMessage] = {} if cache is None else cache

    def __len__(self) -> int:
        return self._stop

    def prefix(self, stop: int) -> LazyMessages:
        """The first ``stop`` messages (a view, nothing converted)."""
        return LazyMessages(self._raw, self._label, min(stop, self._stop), self._cache)

    def _at(self, index: int) -> BaseMessage:
        found = self._cache.get(index)
        if found is None:
            item = self._raw[index]
            if isinstance(item, BaseMessage):
                found = item
            else:
                try:
                    found = convert_to_messages([item])[0]
                except (ValueError, TypeError, NotImplementedError) as exc:
                    msg = f"{self._label} is not a list of chat messages: {exc}"
                    raise ConfigurationError(msg) from exc
            self._cache[index] = found
        return found


def lazy_messages(raw: object, label: str) -> Sequence[BaseMessage]:
    """``raw`` as messages: converted lazily when it is a sequence, else at once."""
    if isinstance(raw, Sequence) and not isinstance(raw, str | bytes):
        return LazyMessages(raw, label)
    try:
        return convert_to_messages(raw)  # type: ignore[arg-type]
    except (ValueError, TypeError, NotImplementedError) as exc:
        msg = f"{label} is not a list of chat messages: {exc}"
        raise ConfigurationError(msg) from exc
