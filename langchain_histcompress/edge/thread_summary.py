"""Thread summarization: every finished exchange folded into the running summary.

A `RoundCompressor` preset that retains no round (`thread_summarizer`), and the helpers that
fold the exchange just answered after the reply, on a worker thread
(`compress_in_background`) or as an ``asyncio`` task (`acompress_in_background`), so the
next call already finds it in the summary.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig

from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.edge._timeouts import submit_to_worker
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import RoundCompressor

__all__ = ["acompress_in_background", "compress_in_background", "thread_summarizer"]


def thread_summarizer(model: Runnable[Any, Any], **kwargs: Any) -> RoundCompressor:
    """A `RoundCompressor` preset for thread summarization: every finished exchange is folded.

    ``trigger=("rounds", 1), keep=("rounds", 0)``; any keyword overrides. The summary is its
    own message right after the unchanged system preamble (``placement="system_message"``),
    so the preamble stays a cacheable prefix; pass ``placement="append_to_system"`` to write
    it into the system prompt instead (which rewrites the system text at every fold). The
    latest round stays verbatim before the reply (a round is folded once a newer one exists);
    after the reply, ``compress(..., after_reply=True)`` (what `compress_in_background` does)
    folds the exchange just answered too.

    To answer first and summarize after, build the view with ``compressor.view(history,
    summary)`` (no model call), reply, then fold in the background with
    `compress_in_background` / `acompress_in_background` and use the finished result's
    summary on the next turn: after the reply they fold the exchange just answered, so the
    next call already has it in its summary.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> model = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user greeted the assistant."}')]))
        >>> compressor = thread_summarizer(model, token_counter="approximate")
        >>> history = [SystemMessage("Be brief."), HumanMessage("hi", id="h1"),
        ...            AIMessage("hello", id="a1"), HumanMessage("how are you?", id="h2")]
        >>> result = compressor.compress(history)
        >>> [m.type for m in result.messages], result.calls
        (['system', 'system', 'human'], 1)
    """
    options: dict[str, Any] = {"trigger": ("rounds", 1), "keep": ("rounds", 0), **kwargs}
    return RoundCompressor(model, **options)


def compress_in_background(
    compressor: RoundCompressor,
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None = None,
    *,
    config: RunnableConfig | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> concurrent.futures.Future[CompressionResult]:
    """Start ``compressor.compress`` in the background and return its future at once.

    Meant for after the reply: a compressor that keeps no round (`thread_summarizer`) folds
    the exchange just answered, so the next call finds it in the summary.

    The history is snapshotted (a new list) before returning, so the caller may keep appending
    to its own list. Runs on ``executor`` when given, else on a daemon thread (context
    variables, e.g. tracing callbacks, are copied). ``future.result()`` returns the
    `CompressionResult` or raises what ``compress`` raised.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> model = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user said hi."}')]))
        >>> history = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")]  # answered
        >>> future = compress_in_background(
        ...     thread_summarizer(model, token_counter="approximate"), history)
        >>> sorted(future.result(timeout=30).summary.covered_ids)
        ['a1', 'h1']
    """
    snapshot = list(messages)
    if executor is not None:
        return executor.submit(
            compressor.compress, snapshot, summary, config=config, after_reply=True
        )
    return submit_to_worker(
        lambda: compressor.compress(snapshot, summary, config=config, after_reply=True)
    )


def acompress_in_background(
    compressor: RoundCompressor,
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None = None,
    *,
    config: RunnableConfig | None = None,
) -> asyncio.Task[CompressionResult]:
    """Schedule ``compressor.acompress`` as an ``asyncio.Task`` on the running loop.

    Call it from a coroutine after the reply was sent; keep a reference to the task and await
    it (or check ``task.done()``) before the next turn. The history is snapshotted first.

    Raises:
        RuntimeError: No event loop is running.

    Example:
        >>> import asyncio
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> model = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user said hi."}')]))
        >>> compressor = thread_summarizer(model, token_counter="approximate")
        >>> history = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")]
        >>> async def turn():
        ...     task = acompress_in_background(compressor, history)
        ...     # ... the reply has already been returned to the user here ...
        ...     return (await task).summary.text
        >>> asyncio.run(turn())
        'The user said hi.'
    """
    snapshot = list(messages)
    loop = asyncio.get_running_loop()
    return loop.create_task(
        compressor.acompress(snapshot, summary, config=config, after_reply=True),
        name="histcompress-compress",
    )
