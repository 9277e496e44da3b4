"""Compact-history query rephrasing for retrieval-augmented generation.

`create_history_rephraser` turns a follow-up question (*"what about its population?"*) and
the newest history messages into a standalone question with one model call. In ``compact``
mode (default) retrieval uses that question, and the answering model receives only the system
prompt with the documents and the standalone question; in ``none`` mode nothing is rephrased
and the answering model receives the last ``history_message_count`` messages, then the question.

Rules: the conversation reaches the rephrasing model as quoted, escaped data, never as
instructions. Rephrasing fails *open*: a model error, a timeout or an unusable answer yields
the original question, and the reason is reported and logged. It costs one request at most
(no retry) and its tokens never stream to the end user. This module also offers every public
name of the pieces: `~langchain_histcompress.edge.rephrase_prompts`,
`~langchain_histcompress.core.history_window`, `~langchain_histcompress.faces.rag` and
`~langchain_histcompress.faces.rephrase_node`.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from langchain_core.language_models import LanguageModelLike
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable

from langchain_histcompress.core.history_window import newest_window as newest_window
from langchain_histcompress.core.history_window import select_history_window
from langchain_histcompress.core.history_window import window_of as window_of
from langchain_histcompress.edge.rephrase_prompts import (
    STANDALONE_QUESTION_PROMPT,
    SUMMARY_AND_QUESTION_PROMPT,
    FallbackReason,
    RephraseStyle,
)
from langchain_histcompress.edge.rephraser import (
    DEFAULT_MAX_MESSAGE_CHARS,
    DEFAULT_REPHRASE_TIMEOUT,
    REPHRASE_TAGS,
    CompactHistoryMode,
    InputKeys,
    RephraseOutput,
    Rephraser,
    question_runnable,
    rephraser_runnable,
)
from langchain_histcompress.faces.rag import (
    DEFAULT_RAG_SYSTEM_PROMPT,
    CompactRetrievalOutput,
    ConversationalRagOutput,
    build_answer_messages,
    create_compact_history_retriever,
    create_conversational_rag_chain,
    render_context,
)
from langchain_histcompress.faces.rephrase_node import HistoryRephraseNode

__all__ = [
    "DEFAULT_RAG_SYSTEM_PROMPT",
    "DEFAULT_REPHRASE_TIMEOUT",
    "REPHRASE_TAGS",
    "STANDALONE_QUESTION_PROMPT",
    "SUMMARY_AND_QUESTION_PROMPT",
    "CompactHistoryMode",
    "CompactRetrievalOutput",
    "ConversationalRagOutput",
    "FallbackReason",
    "HistoryRephraseNode",
    "RephraseOutput",
    "RephraseStyle",
    "build_answer_messages",
    "create_compact_history_retriever",
    "create_conversational_rag_chain",
    "create_history_rephraser",
    "render_context",
    "select_history_window",
]


@overload
def create_history_rephraser(
    llm: LanguageModelLike,
    *,
    mode: CompactHistoryMode = ...,
    history_message_count: int = ...,
    prompt: ChatPromptTemplate | str | None = ...,
    style: RephraseStyle = ...,
    max_output_chars: int | None = ...,
    return_metadata: Literal[False] = ...,
    input_key: str = ...,
    history_key: str = ...,
    summary_key: str | None = ...,
    timeout: float | None = ...,
    include_tool_messages: bool = ...,
    max_message_chars: int | None = ...,
) -> Runnable[dict[str, Any], str]: ...


@overload
def create_history_rephraser(
    llm: LanguageModelLike,
    *,
    mode: CompactHistoryMode = ...,
    history_message_count: int = ...,
    prompt: ChatPromptTemplate | str | None = ...,
    style: RephraseStyle = ...,
    max_output_chars: int | None = ...,
    return_metadata: Literal[True],
    input_key: str = ...,
    history_key: str = ...,
    summary_key: str | None = ...,
    timeout: float | None = ...,
    include_tool_messages: bool = ...,
    max_message_chars: int | None = ...,
) -> Runnable[dict[str, Any], RephraseOutput]: ...


def create_history_rephraser(
    llm: LanguageModelLike,
    *,
    mode: CompactHistoryMode = "compact",
    history_message_count: int = 6,
    prompt: ChatPromptTemplate | str | None = None,
    style: RephraseStyle = "standalone_question",
    max_output_chars: int | None = None,
    return_metadata: bool = False,
    input_key: str = "input",
    history_key: str = "chat_history",
    summary_key: str | None = "summary",
    timeout: float | None = DEFAULT_REPHRASE_TIMEOUT,
    include_tool_messages: bool = False,
    max_message_chars: int | None = DEFAULT_MAX_MESSAGE_CHARS,
) -> Runnable[dict[str, Any], str] | Runnable[dict[str, Any], RephraseOutput]:
    """A Runnable that turns chat history + a follow-up question into a standalone question.

    The input is a dict: ``{"input": str, "chat_history": [messages], "summary": ...}``
    (keys configurable; history accepts anything `convert_to_messages` does; ``summary`` is
    optional: a ``RunningSummary``, a str, or a package summary message). Without history
    (and without a summary) the question is returned as is and no model is called. Otherwise
    exactly one call sees the last ``history_message_count`` messages (see
    `select_history_window`) rendered as quoted data.

    Fails open: on a model error, a timeout, or empty, whitespace, over-long, refused or
    garbled output, the original question is returned and the reason is reported in
    `RephraseOutput.fallback_reason` (with ``return_metadata=True``) and logged.

    Args:
        llm: The rephrasing model (a cheap one is fine).
        mode: ``"compact"`` rephrases; ``"none"`` returns the question unchanged.
        history_message_count: How many history messages the model sees at most.
        prompt: A replacement prompt using ``{history}`` and ``{question}`` and optionally
            ``{summary}`` (all pre-rendered, escaped data). A str becomes one human message.
            Without ``{summary}`` a summary is put before the transcript.
        style: Built-in prompt when ``prompt`` is ``None``: ``"standalone_question"`` or
            ``"summary_and_question"`` (a very brief summary followed by the question).
        max_output_chars: Longest accepted rephrasing. Default: ``max(300, 4 * len(question))``
            for standalone questions, ``max(800, 4 * len(question) + 600)`` for
            summary-and-question.
        return_metadata: Return a `RephraseOutput` dict instead of the bare question.
        input_key: Input key of the follow-up question.
        history_key: Input key of the history (messages before the question).
        summary_key: Input key of an optional running summary (``None``: never read).
        timeout: Seconds to wait for the model before falling back (``None``: no limit);
            default `DEFAULT_REPHRASE_TIMEOUT`.
        include_tool_messages: Show answered tool groups instead of dropping tool plumbing.
        max_message_chars: Per-message character cap in the rendered transcript.

    Returns:
        A Runnable producing the question (str), or a `RephraseOutput` when
        ``return_metadata`` is true.

    Raises:
        ConfigurationError: An invalid setting (raised here), or an input missing the
            question key (raised when invoked).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> llm = GenericFakeChatModel(messages=iter([AIMessage("What is Lisbon's population?")]))
        >>> rephraser = create_history_rephraser(llm)
        >>> rephraser.invoke({
        ...     "input": "what about its population?",
        ...     "chat_history": [HumanMessage("Tell me about Lisbon"),
        ...                      AIMessage("Lisbon is the capital of Portugal.")],
        ... })
        "What is Lisbon's population?"

        An unusable answer falls back to the question, and says why:

        >>> llm = GenericFakeChatModel(messages=iter([AIMessage("")]))
        >>> rephraser = create_history_rephraser(llm, return_metadata=True)
        >>> out = rephraser.invoke({"input": "and then?", "chat_history": [("human", "hi")]})
        >>> out["question"], out["rephrased"], out["fallback_reason"]
        ('and then?', False, 'empty')
    """
    engine = Rephraser.build(
        llm,
        mode=mode,
        history_message_count=history_message_count,
        prompt=prompt,
        style=style,
        max_output_chars=max_output_chars,
        timeout=timeout,
        include_tool_messages=include_tool_messages,
        max_message_chars=max_message_chars,
    )
    keys = InputKeys.build(input_key, history_key, summary_key)
    if return_metadata:
        return rephraser_runnable(engine, keys)
    return question_runnable(engine, keys)
