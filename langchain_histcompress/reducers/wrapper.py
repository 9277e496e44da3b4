"""The reducer protocol and `with_history_reducer`, which puts a reducer in front of a model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage, HumanMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableBinding, RunnableLambda

from langchain_histcompress.errors import ConfigurationError

__all__ = ["HistoryReducer", "with_history_reducer"]


@runtime_checkable
class HistoryReducer(Protocol):
    """What every reducer offers: ``reduce`` and ``areduce``."""

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the reduced history, or ``None`` when it needs no reduction."""

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce`."""


def _as_messages(value: LanguageModelInput) -> list[BaseMessage]:
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, str):
        return [HumanMessage(value)]
    return convert_to_messages(value)


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
        >>> from langchain_histcompress.reducers import TruncationReducer
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

    def reduce(value: LanguageModelInput) -> list[BaseMessage]:
        messages = _as_messages(value)
        reduced = active.reduce(messages)
        return messages if reduced is None else reduced

    async def areduce(value: LanguageModelInput) -> list[BaseMessage]:
        messages = _as_messages(value)
        reduced = await active.areduce(messages)
        return messages if reduced is None else reduced

    step = RunnableLambda(reduce, afunc=areduce, name="histcompress_reduce_history")
    return step | model
