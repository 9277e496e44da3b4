"""The reducer protocol and `with_history_reducer`, which puts a reducer in front of a model."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage, HumanMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableBinding, RunnableLambda

from langchain_histcompress.core.errors import ConfigurationError

__all__ = ["HistoryReducer", "with_history_reducer"]


@runtime_checkable
class HistoryReducer(Protocol):
    """What every reducer offers: ``reduce`` and ``areduce``."""

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the reduced history, or ``None`` when it needs no reduction."""

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce`."""


class _SeenLists:
    """Message lists seen recently, so a grown list is checked only past what was seen.

    A list whose start is, by identity, a list seen before (all messages) is checked only
    from there on, and is passed on as it is instead of going through
    ``convert_to_messages``. The seen lists are private copies holding references, so they never
    change behind our back and an object id in them cannot be reused. One list is kept per
    conversation, the least recently used dropped past ``size``: conversations that share
    their first messages (a fixed system prompt object) keep their own.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._lists: list[list[BaseMessage]] = []
        """Most recently used last."""
        self._lock = threading.Lock()

    def _match(self, value: list[Any]) -> tuple[list[BaseMessage] | None, int]:
        """The seen list ``value`` begins with (moved to the end), and its length.

        Lists whose first two items are not those of ``value`` (by identity) are passed over
        at the cost of two pointer comparisons; another conversation that shares them is
        left at its first different message.
        """
        first, second = value[0], value[1] if len(value) > 1 else None
        lists = self._lists
        for at in range(len(lists) - 1, -1, -1):
            seen = lists[at]
            if (
                seen[0] is not first
                or len(seen) > len(value)
                or (len(seen) > 1 and seen[1] is not second)
            ):
                continue
            try:
                same = seen == value if len(seen) == len(value) else seen < value
            except TypeError:  # two items differ: messages have no ordering
                continue
            if same:
                lists.append(lists.pop(at))
                return seen, len(seen)
        return None, 0

    def __call__(self, value: LanguageModelInput) -> list[BaseMessage]:
        if isinstance(value, PromptValue):
            return value.to_messages()
        if isinstance(value, str):
            return [HumanMessage(value)]
        if not isinstance(value, list) or not value:
            return convert_to_messages(value)
        with self._lock:
            seen, known = self._match(value)
            if not all(isinstance(m, BaseMessage) for m in value[known:]):
                return convert_to_messages(value)
            if seen is not None:
                seen.extend(value[known:])  # the same conversation, grown
            else:
                self._lists.append(list(value))
                if len(self._lists) > self._size:
                    del self._lists[0]
        return value


def _bound_tools(model: Runnable[Any, Any]) -> list[Any]:
    """Tools bound with ``bind_tools`` (possibly under further bindings), else ``[]``."""
    while isinstance(model, RunnableBinding):
        tools = model.kwargs.get("tools")
        if tools:
            return list(tools)
        model = model.bound
    return []


def with_history_reducer(
    model: Runnable[LanguageModelInput, Any], reducer: HistoryReducer
) -> Runnable[LanguageModelInput, Any]:
    """Wrap ``model`` so every call first reduces its message history with ``reducer``.

    The result is a Runnable with ``invoke``, ``ainvoke``, ``stream``, ``astream`` and
    ``batch``; the model's own output (content, tool calls, usage metadata) passes through
    untouched. Bind tools before wrapping: ``with_history_reducer(model.bind_tools(t), r)``;
    a token-budget reducer then counts the bound tools' schemas toward its budget (through
    its ``with_tools``). Whatever list the reducer returns is sent, an empty one included;
    only ``None`` means "send the history as it is".

    Args:
        model: A chat model or any Runnable that takes messages.
        reducer: The reducer to apply before each call.

    Raises:
        ConfigurationError: ``reducer`` has no ``reduce`` / ``areduce``.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.faces.reducers import TruncationReducer
        >>> model = FakeMessagesListChatModel(responses=[AIMessage("ok")])
        >>> chat = with_history_reducer(model, TruncationReducer(target_count=2))
        >>> chat.invoke([HumanMessage("a"), AIMessage("b"), HumanMessage("c")]).content
        'ok'

        Whatever the reducer returns is sent, even an empty list (only ``None`` means
        "unchanged"):

        >>> class Forget:
        ...     def reduce(self, messages): return []
        ...     async def areduce(self, messages): return []
        >>> with_history_reducer(model, Forget()).first.invoke("hi")
        []
    """
    if not isinstance(reducer, HistoryReducer):
        msg = f"reducer must offer reduce() and areduce(), got {type(reducer).__name__}"
        raise ConfigurationError(msg)
    tools = _bound_tools(model)
    with_tools = getattr(reducer, "with_tools", None)
    if tools and callable(with_tools) and not getattr(reducer, "tools", None):
        reducer = with_tools(tools)
    active = reducer
    as_messages = _SeenLists()

    def reduce(value: LanguageModelInput) -> list[BaseMessage]:
        messages = as_messages(value)
        reduced = active.reduce(messages)
        return messages if reduced is None else reduced

    async def areduce(value: LanguageModelInput) -> list[BaseMessage]:
        messages = as_messages(value)
        reduced = await active.areduce(messages)
        return messages if reduced is None else reduced

    step = RunnableLambda(reduce, afunc=areduce, name="histcompress_reduce_history")
    return step | model
