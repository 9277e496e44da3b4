"""Round compression as a LangChain v1 agent middleware for ``langchain.agents.create_agent``.

`RoundCompressionMiddleware` keeps every message in the agent's state and compresses only
what the model sees. Around each model call (``wrap_model_call``, sync or async) a
`RoundCompressor` folds the rounds that are due for the model of that request (its
``max_input_tokens`` is the budget); the request carries the view (the system prompt
untouched, the summary as data, the uncompressed rounds verbatim), and the new running
summary reaches the agent's state with the model's response.

Rules: a failed fold never fails the answer while the unfolded view fits (``on_error="skip"``);
a view that cannot fit raises `BudgetError`. Every history ``create_agent`` produces is
accepted; a broken one is repaired in the request, never in state. ``destructive=True`` also
removes the covered messages from state; ``recall=True`` also registers the
``recall_history`` tool (`~langchain_histcompress.faces.recall_tool.HistoryRecall`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
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
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.types import Command
from typing_extensions import NotRequired

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import BudgetError, ConfigurationError, HistCompressError
from langchain_histcompress.core.identified import IdentifiedLists
from langchain_histcompress.core.rounds import is_summary_message
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tail import keep_copies
from langchain_histcompress.core.tokens import message_costs
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import RoundCompressor, summary_detached, view, with_ids
from langchain_histcompress.faces.nodes import (
    OnError,
    report_fold_failure,
    summary_from_state,
    summary_to_state,
)
from langchain_histcompress.faces.recall_tool import HistoryRecall

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
"""Agent state key of the running summary (JSON dict form)."""

_IDENTIFIED = IdentifiedLists()
"""The histories handed to context builders, one list per conversation (matched by object)."""


class RoundCompressionState(AgentState[Any]):
    """Agent state with the running summary kept by `RoundCompressionMiddleware`."""

    running_summary: NotRequired[dict[str, Any] | None]
    """The running summary as ``RunningSummary.model_dump(mode="json")`` (absent or ``None``
    before the first compression)."""


def _internal_config() -> RunnableConfig | None:
    if internal_call_metadata is None:  # pragma: no cover - older langchain 1.x
        return None
    return {"metadata": internal_call_metadata()}


@dataclass(frozen=True)
class _Prepared:
    """A request made ready for the model, and the state update that goes with it."""

    request: ModelRequest[Any]
    """The request carrying the compressed view."""
    update: dict[str, Any] | None
    """The new summary (and removals in destructive mode), or ``None``."""


@dataclass(frozen=True)
class _FoldInputs:
    """What one fold reads from a request."""

    lead: list[BaseMessage]
    """The system prompt, as a one-message lead (empty without one)."""
    messages: Sequence[BaseMessage]
    """The request's messages, with ids."""
    summary: RunningSummary | None
    """The stored summary (``None`` when there is none or it was dropped)."""
    dropped: bool
    """The stored summary was dropped: none of its messages is in the request any more."""
    overhead: int
    """Tokens the request carries besides the messages (system prompt, tools)."""


class RoundCompressionMiddleware(AgentMiddleware[RoundCompressionState, Any, Any]):
    """Compress an agent's history by rounds; non-destructive, tool-pair safe, no re-summary.

    Args:
        compressor: The `RoundCompressor` deciding what to fold and calling the summarizer
            (its ``context_window`` is replaced, per call, by the request model's).
        destructive: Also remove the covered messages from state (``RemoveMessage`` per
            covered id; the remove-all sentinel is never used).
        on_error: ``"skip"`` (default): a package error (`SummarizationError`, an unreadable
            stored summary...) is logged and reported, and the model answers with the stored
            summary, unless the view then cannot fit the budget (`BudgetError`). ``"raise"``:
            every package error propagates and no state changes.
        context_builder: Assemble the request under a token budget instead of sending the
            plain view (the system prompt counts against the budget; tool schemas do not).
        recall: Also give the model the recall tool (`HistoryRecall.as_tool`: the folded
            messages of this thread's state, ranked for a query) and add its one-line hint to
            the summary. ``True`` for a `HistoryRecall` with the compressor's token counter,
            or your own instance. Needs the originals: not with ``destructive=True``.

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
        ...         RoundCompressor(summarizer, trigger=("rounds", 5)))])
        >>> state = {"messages": []}
        >>> for turn in range(5):
        ...     state = agent.invoke({"messages": [*state["messages"], ("user", f"task {turn}")]})
        >>> len(state["messages"]), state["running_summary"]["version"]
        (10, 1)

        A history given whole in one call is folded as well:

        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import HumanMessage
        >>> summarizer = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user said hello twice."}')]))
        >>> middleware = RoundCompressionMiddleware(RoundCompressor(
        ...     summarizer, trigger=("rounds", 3), keep=("rounds", 1), token_counter="approximate"))
        >>> agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage("Hi again!")])),
        ...                      middleware=[middleware])
        >>> history = [HumanMessage("hello"), AIMessage("hi"), HumanMessage("hello"),
        ...            AIMessage("hi"), HumanMessage("anyone?")]
        >>> state = agent.invoke({"messages": history})
        >>> len(state["messages"]), state["running_summary"]["version"]
        (6, 1)
    """

    state_schema = RoundCompressionState
    transformers = (InternalCallTransformer,) if InternalCallTransformer is not None else ()

    def __init__(
        self,
        compressor: RoundCompressor,
        *,
        destructive: bool = False,
        on_error: OnError = "skip",
        context_builder: ContextBuilder | None = None,
        recall: HistoryRecall | bool = False,
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
        self.recall = _recall(recall, compressor, destructive)
        self.tools = [self.recall.as_tool(summary_key=SUMMARY_KEY)] if self.recall else []
        # The last request prepared, by identity: a retry of the same model call (retry or
        # fallback middleware around this one) reuses it instead of folding again.
        self._last: tuple[object, object, object, _Prepared] | None = None
        # tokens of each system prompt and tool set seen (by identity; no user data)
        self._overheads: dict[tuple[int, tuple[int, ...]], tuple[Any, tuple[Any, ...], int]] = {}

    def __repr__(self) -> str:
        """Show the configuration (never message content)."""
        return (
            f"{type(self).__name__}({self.compressor!r}, destructive={self.destructive}, "
            f"on_error={self.on_error!r})"
        )

    # -- preparing a request: fold what is due, then build the view ---------------------

    def _inputs(
        self, request: ModelRequest[Any]
    ) -> tuple[list[BaseMessage], Sequence[BaseMessage], RunningSummary | None, bool]:
        """The system lead, the request's messages (with ids) and the stored summary.

        The flag says whether the stored summary was dropped because none of its messages is
        in the request any more.
        """
        system = request.system_message
        lead: list[BaseMessage] = [system] if system is not None else []
        summary = summary_from_state(request.state, SUMMARY_KEY)
        messages: Sequence[BaseMessage]
        if self.context_builder is not None:
            # the conversation's own list, ids derived once per message and the system prompt
            # in front, grown as it grows: the builder then prepares only what is new
            messages = _IDENTIFIED.get(lead, request.messages)
        else:
            # the system prompt travels apart from the messages: counted as overhead, never
            # copied in front of a long history
            messages = with_ids(request.messages, summary)
        if not self.destructive and summary_detached(messages, summary):
            logger.info("none of the summarized messages is in state; starting a new summary")
            return lead, messages, None, True
        return lead, messages, summary, False

    def _update(
        self, request: ModelRequest[Any], result: CompressionResult, dropped: bool
    ) -> dict[str, Any] | None:
        update: dict[str, Any] = {SUMMARY_KEY: None} if dropped else {}
        if result.compressed and result.summary is not None:
            update[SUMMARY_KEY] = summary_to_state(result.summary)
        if self.destructive and result.summary is not None:
            covered = result.summary.covered_ids
            removals = [
                RemoveMessage(id=m.id)
                for m in request.messages
                if m.id is not None and m.id in covered
            ]
            if removals:
                update["messages"] = removals
        return update or None

    def _recalled(self, request: ModelRequest[Any]) -> _Prepared | None:
        last = self._last
        if (
            last is not None
            and last[0] is request.state
            and last[1] is request.messages
            and last[2] is request.model
        ):
            return last[3]
        return None

    def _finish(
        self,
        request: ModelRequest[Any],
        lead: list[BaseMessage],
        messages: Sequence[BaseMessage],
        summary: RunningSummary | None,
        shown: list[BaseMessage],
        update: dict[str, Any] | None,
    ) -> _Prepared:
        if self.context_builder is not None:
            full = _IDENTIFIED.get(lead, request.messages)
            shown = self.context_builder.build(full, summary=summary)
        else:
            shown = self._with_lead(lead, shown, summary)
        prepared = _Prepared(self._hinted(self._override(request, lead, shown)), update)
        self._last = (request.state, request.messages, request.model, prepared)
        return prepared

    def _with_lead(
        self, lead: list[BaseMessage], shown: list[BaseMessage], summary: RunningSummary | None
    ) -> list[BaseMessage]:
        """The view with the system prompt in front (carrying the summary when so placed)."""
        if not lead:
            return shown
        if summary is not None and shown and is_summary_message(shown[0]):
            return [*view(lead, summary, placement=self.compressor.placement), *shown[1:]]
        return [*lead, *shown]

    def _overhead(self, request: ModelRequest[Any], messages: Sequence[BaseMessage]) -> int:
        """Tokens of the system prompt and the tool schemas, sent besides ``messages``."""
        system, tools = request.system_message, request.tools
        if system is not None and messages and messages[0] is system:
            system = None  # the messages hold it
        key = (id(system), tuple(map(id, tools)))
        found = self._overheads.get(key)
        if found is not None and found[0] is system and found[1] == tuple(tools):
            return found[2]
        counter = self.compressor.token_counter
        tokens = sum(message_costs(counter, [system])) if system is not None else 0
        if tools:
            text = json.dumps(
                [convert_to_openai_tool(t) for t in tools], ensure_ascii=False, default=str
            )
            tokens += sum(message_costs(counter, [SystemMessage(text)]))
        if len(self._overheads) >= 16:
            self._overheads.pop(next(iter(self._overheads)))
        self._overheads[key] = (system, tuple(tools), tokens)
        return tokens

    def _fallback(
        self,
        error: HistCompressError,
        request: ModelRequest[Any],
        lead: list[BaseMessage],
        messages: Sequence[BaseMessage] | None,
    ) -> tuple[Sequence[BaseMessage], RunningSummary | None, list[BaseMessage]]:
        """The stored summary's view after a failed fold (``on_error="skip"``)."""
        if self.on_error == "raise" or isinstance(error, BudgetError):
            raise error
        try:
            summary = summary_from_state(request.state, SUMMARY_KEY)
        except HistCompressError:
            summary = None
        report_fold_failure(error, _internal_config(), summary)
        if messages is None:
            messages = with_ids(request.messages, summary)
        if summary is not None and not self.destructive and summary_detached(messages, summary):
            summary = None
        try:
            shown = self.compressor.view(
                messages,
                summary,
                context_window=request.model,
                overhead_tokens=self._overhead(request, messages),
            )
        except BudgetError as overflow:
            msg = f"{overflow}; folding failed ({type(error).__name__}: {error})"
            raise BudgetError(msg) from error
        return messages, summary, shown

    def _start(self, request: ModelRequest[Any]) -> _Prepared | _FoldInputs:
        """What the fold needs, or the request already prepared.

        Prepared already: the same request again, or inputs that could not be read (with
        ``on_error="skip"`` the stored summary's view is shown).
        """
        recalled = self._recalled(request)
        if recalled is not None:
            return recalled
        try:
            lead, messages, summary, dropped = self._inputs(request)
        except HistCompressError as error:
            return self._failed(error, request, None)
        overhead = self._overhead(request, messages)
        return _FoldInputs(lead, messages, summary, dropped, overhead)

    def _failed(
        self, error: HistCompressError, request: ModelRequest[Any], inputs: _FoldInputs | None
    ) -> _Prepared:
        lead = inputs.lead if inputs is not None else []
        messages = inputs.messages if inputs is not None else None
        messages, summary, shown = self._fallback(error, request, lead, messages)
        return self._finish(request, lead, messages, summary, shown, None)

    def _done(
        self, request: ModelRequest[Any], inputs: _FoldInputs, result: CompressionResult
    ) -> _Prepared:
        keep_copies(inputs.messages, result.summary)
        update = self._update(request, result, inputs.dropped)
        return self._finish(
            request, inputs.lead, inputs.messages, result.summary, result.messages, update
        )

    def _prepare(self, request: ModelRequest[Any]) -> _Prepared:
        inputs = self._start(request)
        if isinstance(inputs, _Prepared):
            return inputs
        try:
            result = self.compressor.compress(
                inputs.messages,
                inputs.summary,
                config=_internal_config(),
                context_window=request.model,
                overhead_tokens=inputs.overhead,
            )
        except HistCompressError as error:
            return self._failed(error, request, inputs)
        return self._done(request, inputs, result)

    async def _aprepare(self, request: ModelRequest[Any]) -> _Prepared:
        inputs = self._start(request)
        if isinstance(inputs, _Prepared):
            return inputs
        try:
            result = await self.compressor.acompress(
                inputs.messages,
                inputs.summary,
                config=_internal_config(),
                context_window=request.model,
                overhead_tokens=inputs.overhead,
            )
        except HistCompressError as error:
            return self._failed(error, request, inputs)
        return self._done(request, inputs, result)

    @staticmethod
    def _override(
        request: ModelRequest[Any], lead: list[BaseMessage], shown: list[BaseMessage]
    ) -> ModelRequest[Any]:
        if not lead:
            return request.override(messages=cast("list[AnyMessage]", shown))
        head = shown[0]
        if not isinstance(head, SystemMessage):  # pragma: no cover - views keep the preamble
            msg = "the compressed view lost the system message"
            raise ConfigurationError(msg)
        return request.override(system_message=head, messages=cast("list[AnyMessage]", shown[1:]))

    def _hinted(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """``request`` with the recall hint on its summary (when a recall tool is offered)."""
        if self.recall is None:
            return request
        system = request.system_message
        lead: list[BaseMessage] = [system] if system is not None else []
        shown = self.recall.add_hint([*lead, *request.messages])
        if all(a is b for a, b in zip(shown, [*lead, *request.messages], strict=True)):
            return request
        if system is None:
            return request.override(messages=cast("list[AnyMessage]", shown))
        head = cast("SystemMessage", shown[0])
        return request.override(system_message=head, messages=cast("list[AnyMessage]", shown[1:]))

    def compressed_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request as the model will receive it, folding what is due first (sync).

        Raises:
            HistCompressError: With ``on_error="raise"``, any package error; always, a
                `BudgetError` when the view cannot fit the request model's budget.
        """
        return self._prepare(request).request

    @staticmethod
    def _respond(
        response: ModelCallResult[Any], update: dict[str, Any] | None
    ) -> ModelCallResult[Any]:
        if not update:
            return response
        if isinstance(response, ExtendedModelResponse):
            merged = dict(update)
            if response.command is not None and isinstance(response.command.update, dict):
                merged.update(response.command.update)
            return ExtendedModelResponse(response.model_response, Command(update=merged))
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Fold what is due, send the compressed view, return the summary with the answer."""
        prepared = self._prepare(request)
        return self._respond(handler(prepared.request), prepared.update)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Async `wrap_model_call` (the summarizer is awaited)."""
        prepared = await self._aprepare(request)
        return self._respond(await handler(prepared.request), prepared.update)


def _recall(
    recall: HistoryRecall | bool, compressor: RoundCompressor, destructive: bool
) -> HistoryRecall | None:
    """The `HistoryRecall` a ``recall=`` argument asks for (``None``: no recall tool)."""
    if recall is False:
        return None
    if recall is not True and not isinstance(recall, HistoryRecall):
        msg = f"recall must be a bool or a HistoryRecall, not {type(recall).__name__}"
        raise ConfigurationError(msg)
    if destructive:
        msg = "recall needs the folded messages in state: it cannot be used with destructive=True"
        raise ConfigurationError(msg)
    if recall is True:
        return HistoryRecall(token_counter=compressor.token_counter)
    return recall
