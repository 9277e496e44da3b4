"""A LangGraph node writing a standalone question for the latest user message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelLike
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableConfig

from langchain_histcompress.core.errors import ConfigurationError, HistCompressError
from langchain_histcompress.core.history_window import LazyMessages, content_text, lazy_messages
from langchain_histcompress.edge.rephrase_prompts import RephraseStyle
from langchain_histcompress.edge.rephraser import (
    DEFAULT_MAX_MESSAGE_CHARS,
    DEFAULT_REPHRASE_TIMEOUT,
    RephraseOutput,
    Rephraser,
)
from langchain_histcompress.edge.twin_runnable import TwinRunnable
from langchain_histcompress.faces._graph_node import GraphNode

__all__ = ["HistoryRephraseNode"]


class HistoryRephraseNode(GraphNode):
    """A LangGraph node writing a standalone question for the latest user message.

    Reads ``messages`` from the state, takes the last ``HumanMessage`` as the question and
    the messages before it as history (the last ``history_message_count`` of them, see
    `select_history_window`), and returns ``{"standalone_question": ...}``. A running
    summary is read from ``summary_key`` when present. Without history the question is
    written unchanged with no model call; on model failure it falls back to the question
    (fail open). Works with ``invoke`` and ``ainvoke`` (and so sync and async graphs); the
    model call is tagged ``nostream`` so ``stream_mode="messages"`` never shows it.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> question = "How many people live in Lisbon?"
        >>> node = HistoryRephraseNode(GenericFakeChatModel(messages=iter([AIMessage(question)])))
        >>> node.invoke({"messages": [HumanMessage("Tell me about Lisbon"), AIMessage("Sure."),
        ...                           HumanMessage("How many people live there?")]})
        {'standalone_question': 'How many people live in Lisbon?'}
    """

    def __init__(
        self,
        llm: LanguageModelLike,
        *,
        history_message_count: int = 6,
        prompt: ChatPromptTemplate | str | None = None,
        style: RephraseStyle = "standalone_question",
        max_output_chars: int | None = None,
        messages_key: str = "messages",
        output_key: str = "standalone_question",
        summary_key: str | None = "summary",
        metadata_key: str | None = None,
        timeout: float | None = DEFAULT_REPHRASE_TIMEOUT,
        include_tool_messages: bool = False,
        max_message_chars: int | None = DEFAULT_MAX_MESSAGE_CHARS,
    ) -> None:
        """Validate the configuration.

        Args:
            llm: The rephrasing model.
            history_message_count: History messages the model sees at most.
            prompt: Replacement rephrasing prompt (see `create_history_rephraser`).
            style: Built-in rephrasing prompt style.
            max_output_chars: Longest accepted rephrasing.
            messages_key: State key of the conversation.
            output_key: State key the standalone question is written to.
            summary_key: State key of an optional running summary (``None``: never read).
            metadata_key: When set, the `RephraseOutput` is also written to this key.
            timeout: Seconds to wait for the model before falling back.
            include_tool_messages: Show answered tool groups to the model.
            max_message_chars: Per-message character cap in the rendered transcript.

        Raises:
            ConfigurationError: An invalid setting.
        """
        self._engine = Rephraser.build(
            llm,
            mode="compact",
            history_message_count=history_message_count,
            prompt=prompt,
            style=style,
            max_output_chars=max_output_chars,
            timeout=timeout,
            include_tool_messages=include_tool_messages,
            max_message_chars=max_message_chars,
        )
        for name, value in (("messages_key", messages_key), ("output_key", output_key)):
            if not isinstance(value, str) or not value:
                msg = f"{name} must be a non-empty string, got {value!r}"
                raise ConfigurationError(msg)
        for name, optional in (("summary_key", summary_key), ("metadata_key", metadata_key)):
            if optional is not None and (not isinstance(optional, str) or not optional):
                msg = f"{name} must be a non-empty string or None, got {optional!r}"
                raise ConfigurationError(msg)
        self.messages_key = messages_key
        self.output_key = output_key
        self.summary_key = summary_key
        self.metadata_key = metadata_key
        self._body = TwinRunnable(self._run, self._arun, name="HistoryRephraseNode")

    def _read(self, state: Any) -> tuple[str, Sequence[BaseMessage], object]:
        def get(key: str) -> Any:
            if isinstance(state, Mapping):
                return state.get(key)
            return getattr(state, key, None)

        messages = lazy_messages(get(self.messages_key) or [], f"state[{self.messages_key!r}]")
        for index in range(len(messages) - 1, -1, -1):
            if isinstance(messages[index], HumanMessage):
                question = content_text(messages[index].content)
                summary = get(self.summary_key) if self.summary_key is not None else None
                history = (
                    messages.prefix(index)
                    if isinstance(messages, LazyMessages)
                    else messages[:index]
                )
                return question, history, summary
        msg = f"state[{self.messages_key!r}] holds no HumanMessage to rephrase"
        raise HistCompressError(msg)

    def _update(self, result: RephraseOutput) -> dict[str, Any]:
        update: dict[str, Any] = {self.output_key: result["question"]}
        if self.metadata_key is not None:
            update[self.metadata_key] = result
        return update

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return self._update(self._engine.run(*self._read(state), config))

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return self._update(await self._engine.arun(*self._read(state), config))
