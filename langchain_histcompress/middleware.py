"""Round compression as a LangChain v1 agent middleware for ``langchain.agents.create_agent``.

`RoundCompressionMiddleware` keeps every message in the agent's state and compresses only
what the model sees:

* ``before_model`` / ``abefore_model`` let a `RoundCompressor` fold the rounds that are due
  (one summarizer call per chunk, sync or async) and write the new running summary to the
  ``running_summary`` state key, as plain JSON;
* ``wrap_model_call`` / ``awrap_model_call`` replace the request's messages with the compressed
  view: the system prompt untouched, the summary rendered as data, the uncompressed rounds
  verbatim. No model call happens there.

Both hooks read only the uncovered tail of the state's messages (the covered prefix is skipped
with the summary's cursor, see `~langchain_histcompress.compressor`), so their work does not
grow with the conversation.

Cuts fall only between rounds (or between whole tool groups of one oversized round), so an
``AIMessage`` with tool calls always travels with all its ``ToolMessage`` results, parallel calls
included. The previous summary is passed to the summarizer once, as data, and the summary
message itself never re-enters the conversation, so there is no summary of a summary. Opt-in
``destructive=True`` also removes the covered messages from state, one ``RemoveMessage(id=...)``
per covered id.

Every history ``create_agent`` produces is accepted (tool call ids reused across steps, invalid
tool calls answered by tool messages, system messages injected mid-conversation: see
`~langchain_histcompress.rounds`), and the request the model receives always obeys the provider
rules: a broken history is repaired in the request (logged), never in state. With
``on_error="skip"`` no package error stops the agent: the model answers with the stored summary.
When none of the messages the summary covers is in state any more (the thread was cleared with
``RemoveMessage(id=REMOVE_ALL_MESSAGES)``), the non-destructive middleware drops the summary.

Example:
    >>> from langchain.agents import create_agent
    >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> from langchain_histcompress.compressor import RoundCompressor
    >>> summarizer = GenericFakeChatModel(messages=iter(
    ...     [AIMessage('{"ConversationSummary": "The user said hello twice."}')]))
    >>> middleware = RoundCompressionMiddleware(RoundCompressor(
    ...     summarizer, rounds_to_compress=2, rounds_to_retain=1, token_counter="approximate",
    ...     compress_on_rounds=True))
    >>> agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage("Hi again!")])),
    ...                      middleware=[middleware])
    >>> history = [HumanMessage("hello"), AIMessage("hi"), HumanMessage("hello"),
    ...            AIMessage("hi"), HumanMessage("anyone?")]
    >>> state = agent.invoke({"messages": history})
    >>> len(state["messages"]), state["running_summary"]["version"]
    (6, 1)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ModelCallResult,
        ModelRequest,
        ModelResponse,
    )
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised with langchain hidden
    if (_missing.name or "").split(".")[0] != "langchain":
        raise
    _msg = (
        "RoundCompressionMiddleware needs LangChain v1's create_agent (the langchain package): "
        "pip install 'langchain-histcompress[agents]'"
    )
    raise ImportError(_msg, name=__name__) from _missing
from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from typing_extensions import NotRequired

from langchain_histcompress._identified import IdentifiedLists
from langchain_histcompress._tail import _keep_copies
from langchain_histcompress.compressor import (
    CompressionResult,
    RoundCompressor,
    _locate,
    _summary_detached,
    _view,
    _with_ids,
)
from langchain_histcompress.context import ContextBuilder
from langchain_histcompress.errors import ConfigurationError, HistCompressError
from langchain_histcompress.nodes import (
    OnError,
    summary_from_state,
    summary_to_state,
)
from langchain_histcompress.rounds import repair_history
from langchain_histcompress.summary import RunningSummary

try:  # langchain >= 1.3: keep internal model calls out of the agent's v2 message stream
    from langchain.agents.middleware.internal_call_transformer import (
        InternalCallTransformer,
        internal_call_metadata,
    )
except ImportError:  # pragma: no cover - older langchain 1.x
    InternalCallTransformer = None  # type: ignore[assignment,misc]
    internal_call_metadata = None  # type: ignore[assignment]

__all__ = ["RoundCompressionMiddleware", "RoundCompressionState"]

logger = logging.getLogger(__name__)

SUMMARY_KEY = "running_summary"

_IDENTIFIED = IdentifiedLists()
"""The histories handed to context builders, one list per conversation (matched by object)."""
"""Agent state key of the running summary (JSON dict form)."""


class RoundCompressionState(AgentState[Any]):
    """Agent state with the running summary kept by `RoundCompressionMiddleware`."""

    running_summary: NotRequired[dict[str, Any] | None]
    """The running summary as ``RunningSummary.model_dump(mode="json")`` (absent or ``None``
    before the first compression)."""


def _internal_config() -> RunnableConfig | None:
    if internal_call_metadata is None:  # pragma: no cover - older langchain 1.x
        return None
    return {"metadata": internal_call_metadata()}


class RoundCompressionMiddleware(AgentMiddleware[RoundCompressionState, Any, Any]):
    """Compress an agent's history by rounds; non-destructive, tool-pair safe, no re-summary.

    Args:
        compressor: The `RoundCompressor` deciding what to fold and calling the summarizer.
        destructive: Also remove the covered messages from state (``RemoveMessage`` per
            covered id; the remove-all sentinel is never used).
        on_error: ``"raise"`` (default): a package error (`HistCompressError`, e.g.
            `SummarizationError`) propagates and no state changes. ``"skip"``: log a
            warning and answer with the stored summary (without it when it cannot be read).
        context_builder: Assemble the request under a token budget instead of sending the
            plain view (the system prompt counts against the budget; tool schemas do not).

    Raises:
        ConfigurationError: A parameter is invalid.

    Example:
        >>> from langchain.agents import create_agent
        >>> from langchain_core.language_models.fake_chat_models import (
        ...     FakeMessagesListChatModel)
        >>> from langchain_core.messages import AIMessage
        >>> from langchain_histcompress import RoundCompressor
        >>> summarizer = FakeMessagesListChatModel(
        ...     responses=[AIMessage('{"ConversationSummary": "Earlier tasks."}')])
        >>> agent = create_agent(
        ...     FakeMessagesListChatModel(responses=[AIMessage(f"done {i}") for i in range(9)]),
        ...     tools=[],
        ...     middleware=[RoundCompressionMiddleware(
        ...         RoundCompressor(summarizer, compress_on_rounds=True))])
        >>> state = {"messages": []}
        >>> for turn in range(5):
        ...     state = agent.invoke({"messages": [*state["messages"], ("user", f"task {turn}")]})
        >>> len(state["messages"]), state["running_summary"]["version"]
        (10, 1)
    """

    state_schema = RoundCompressionState
    transformers = (InternalCallTransformer,) if InternalCallTransformer is not None else ()

    def __init__(
        self,
        compressor: RoundCompressor,
        *,
        destructive: bool = False,
        on_error: OnError = "raise",
        context_builder: ContextBuilder | None = None,
    ) -> None:
        """Validate and store the configuration (see the class docstring)."""
        super().__init__()
        if not isinstance(compressor, RoundCompressor):
            msg = f"compressor must be a RoundCompressor, not {type(compressor).__name__}"
            raise ConfigurationError(msg)
        if not isinstance(destructive, bool):
            msg = f"destructive must be a bool, got {destructive!r}"
            raise ConfigurationError(msg)
        if on_error not in ("raise", "skip"):
            msg = f"on_error must be one of ['raise', 'skip'], got {on_error!r}"
            raise ConfigurationError(msg)
        if context_builder is not None and not isinstance(context_builder, ContextBuilder):
            msg = f"context_builder must be a ContextBuilder, not {type(context_builder).__name__}"
            raise ConfigurationError(msg)
        self.compressor = compressor
        self.destructive = destructive
        self.on_error: OnError = on_error
        self.context_builder = context_builder
        self.tools = []

    def __repr__(self) -> str:
        """Show the configuration (never message content)."""
        return (
            f"{type(self).__name__}({self.compressor!r}, destructive={self.destructive}, "
            f"on_error={self.on_error!r})"
        )

    # -- before_model: the only place the summarizer runs ------------------------------

    def _inputs(
        self, state: RoundCompressionState
    ) -> tuple[Sequence[BaseMessage], Sequence[BaseMessage], RunningSummary | None, bool]:
        originals: Sequence[BaseMessage] = state["messages"]
        summary = summary_from_state(state, SUMMARY_KEY)
        messages = _with_ids(originals, summary)
        if not self.destructive and _summary_detached(messages, summary):
            logger.info("none of the summarized messages is in state; starting a new summary")
            return originals, messages, None, True
        return originals, messages, summary, False

    def _update(
        self, originals: Sequence[BaseMessage], result: CompressionResult, dropped: bool
    ) -> dict[str, Any] | None:
        update: dict[str, Any] = {SUMMARY_KEY: None} if dropped else {}
        if result.compressed and result.summary is not None:
            update[SUMMARY_KEY] = summary_to_state(result.summary)
        if self.destructive and result.summary is not None:
            covered = result.summary.covered_ids
            removals = [
                RemoveMessage(id=m.id) for m in originals if m.id is not None and m.id in covered
            ]
            if removals:
                update["messages"] = removals
        return update or None

    def _skipped(self, error: HistCompressError) -> None:
        if self.on_error == "raise":
            raise error
        logger.warning(
            "round compression failed (%s); answering with the stored summary",
            type(error).__name__,
        )

    def before_model(
        self, state: RoundCompressionState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Fold due rounds into the running summary (sync summarizer call).

        Returns:
            ``{"running_summary": ...}`` when something was folded (plus ``RemoveMessage``
            objects in destructive mode), else ``None``.

        Raises:
            HistCompressError: The summarizer failed (`SummarizationError`) or the stored
                summary cannot be read, and ``on_error="raise"``.
        """
        try:
            originals, messages, summary, dropped = self._inputs(state)
            result = self.compressor.compress(messages, summary, config=_internal_config())
            _keep_copies(messages, result.summary)
        except HistCompressError as error:
            self._skipped(error)
            return None
        return self._update(originals, result, dropped)

    async def abefore_model(
        self, state: RoundCompressionState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async `before_model` (the summarizer is awaited)."""
        try:
            originals, messages, summary, dropped = self._inputs(state)
            result = await self.compressor.acompress(messages, summary, config=_internal_config())
            _keep_copies(messages, result.summary)
        except HistCompressError as error:
            self._skipped(error)
            return None
        return self._update(originals, result, dropped)

    # -- wrap_model_call: the model sees the compressed view ---------------------------

    def compressed_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with its messages replaced by the compressed view (no model call).

        The system message stays byte-identical unless the compressor's placement is
        ``"append_to_system"`` (then a copy carries the summary). Without a summary and a
        context builder the request is returned unchanged, or with its messages repaired
        when they break the provider rules (see `rounds.repair_history`).

        Raises:
            HistCompressError: The stored summary cannot be read, or the context builder
                cannot fit the request, and ``on_error="raise"`` (with ``"skip"`` the
                request goes out without the summary, repaired if needed).
        """
        try:
            return self._compressed_request(request)
        except HistCompressError as error:
            self._skipped(error)
            fixed = repair_history(request.messages)
            if not fixed.repaired:
                return request
            return request.override(messages=cast("list[AnyMessage]", fixed.messages))

    def _compressed_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        summary = summary_from_state(request.state, SUMMARY_KEY)
        if (
            summary is not None
            and not self.destructive
            and _summary_detached(_with_ids(request.messages, summary), summary)
        ):
            summary = None
        if summary is None and self.context_builder is None:
            fixed = repair_history(request.messages)
            if not fixed.repaired:
                return request
            return request.override(messages=cast("list[AnyMessage]", fixed.messages))
        system = request.system_message
        lead: list[BaseMessage] = [system] if system is not None else []
        if self.context_builder is not None:
            # ids derived as `ensure_ids` would, once per message: the conversation's own list,
            # grown as it grows, so the builder only prepares what is new
            full = _IDENTIFIED.get(lead, request.messages)
            built = self.context_builder.build(full, summary=summary)
        else:
            assert summary is not None
            messages = _with_ids(request.messages, summary)
            built = _view(_locate(messages, summary), summary, self.compressor.placement, lead)
        if system is None:
            return request.override(messages=cast("list[AnyMessage]", built))
        head = built[0]
        if not isinstance(head, SystemMessage):  # pragma: no cover - views keep the preamble
            msg = "the compressed view lost the system message"
            raise ConfigurationError(msg)
        return request.override(system_message=head, messages=cast("list[AnyMessage]", built[1:]))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Send the compressed view to the model."""
        return handler(self.compressed_request(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Async `wrap_model_call`."""
        return await handler(self.compressed_request(request))
