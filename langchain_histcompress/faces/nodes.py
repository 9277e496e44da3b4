"""LangGraph faces of round compression: a graph node, a state schema and model-input helpers.

`RoundCompressionNode` runs before the answering model node of any ``StateGraph`` whose state
holds a message list. Each run a `RoundCompressor` folds the rounds that are due and the node
writes the new summary under ``running_summary`` (a JSON dict, `summary_to_state`), only when
something was folded; the model node sends ``node.model_input(state)``: the preamble, the
summary as data and the uncompressed rounds, within the budget.

Rules: the conversation is left alone unless ``destructive=True`` (one ``RemoveMessage`` per
covered id). A failed fold never fails the turn while the unfolded view fits
(``on_error="skip"``: the stored summary stays, a warning is logged, the custom event
``histcompress_fold_failed`` is dispatched); a view that cannot fit raises `BudgetError`. A
non-destructive node drops a summary none of whose messages is in state any more. The summary
never reaches ``stream_mode="messages"``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import add_messages
from langgraph.types import Command
from typing_extensions import NotRequired, Required

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import BudgetError, ConfigurationError, HistCompressError
from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.summary_state import summary_from_state as summary_from_state
from langchain_histcompress.core.summary_state import summary_to_state as summary_to_state
from langchain_histcompress.core.tail import keep_copies
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import RoundCompressor, summary_detached, view, with_ids
from langchain_histcompress.faces._graph_node import GraphNode
from langchain_histcompress.faces.memory import FactsState

__all__ = [
    "HistCompressState",
    "OnError",
    "RoundCompressionNode",
    "build_model_input",
    "summary_from_state",
    "summary_to_state",
]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]
"""What a compression face does when the package raises (the summarizer failed, the stored
summary cannot be read...): re-raise (state untouched), or log a warning and go on with the
stored summary."""

_ON_ERROR: tuple[str, ...] = ("raise", "skip")


class HistCompressState(FactsState):
    """Ready-made graph state for round compression with fact memory.

    Holds the conversation (``messages``, reduced by ``add_messages``), the running summary,
    the compressed model input and the fact-memory keys of `FactsState` (``facts`` with the
    `~langchain_histcompress.core.facts.merge_facts` reducer, the extraction cursor and report).
    Every value is a message list or plain JSON, so any checkpointer stores it as is.
    """

    messages: Required[Annotated[list[AnyMessage], add_messages]]
    """The whole conversation (kept verbatim unless a destructive node removes covered ids)."""
    running_summary: NotRequired[dict[str, Any] | None]
    """The running summary as `summary_to_state` writes it (``None`` before the
    first compression); read it back with `summary_from_state`."""
    model_input: NotRequired[list[AnyMessage]]
    """The compressed view the model node sends: preamble, summary as data, uncompressed
    rounds (written by `RoundCompressionNode` on every run)."""


def _state_messages(
    state: Mapping[str, Any] | Any, key: str, *, check: bool = True
) -> Sequence[BaseMessage]:
    """The state's message list as stored (not copied; never mutated).

    With ``check`` every element is type-checked (O(n)); without it only the container is,
    and the compressor checks the messages it reads.
    """
    raw = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if raw is None:
        return []
    if isinstance(raw, BaseMessage | str | bytes) or not isinstance(raw, Sequence):
        msg = f"state[{key!r}] must be a list of messages, got {type(raw).__name__}"
        raise ConfigurationError(msg)
    if check:
        for index, message in enumerate(raw):
            if not isinstance(message, BaseMessage):
                msg = f"state[{key!r}][{index}] is a {type(message).__name__}, not a message"
                raise ConfigurationError(msg)
    return raw


def build_model_input(
    state: Mapping[str, Any] | Any,
    *,
    context_builder: ContextBuilder | None = None,
    messages_key: str = "messages",
    summary_key: str = "running_summary",
    facts_key: str = "facts",
    placement: Literal["system_message", "append_to_system"] = "system_message",
) -> list[BaseMessage]:
    """Build the model's input from a graph state, without any model call.

    Without ``context_builder``: the compressed view (preamble, summary as data, uncompressed
    rounds), the same list `RoundCompressionNode` writes under ``model_input``. With a
    `~langchain_histcompress.context.builder.ContextBuilder`: the builder's context under its token
    budget, with the summary and the state's facts as data.

    With a ``context_builder`` the view under ``model_input`` is not used (the context is
    built from the messages, the summary and the facts): create the `RoundCompressionNode`
    with ``output_key=None`` so it does not write one to every checkpoint. The first time
    such a view is found here, a debug message says so (once per process).

    Args:
        state: The graph state.
        context_builder: Assembles the context under a token budget (optional).
        messages_key: State key of the conversation.
        summary_key: State key of the running summary.
        facts_key: State key of the facts (used with ``context_builder`` only).
        placement: Where the summary goes in the view (see `compressor.view`).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> s = RunningSummary(content="x", text="x", covered_ids=frozenset({"h1", "a1"}))
        >>> state = {"messages": [HumanMessage("a", id="h1"), AIMessage("b", id="a1"),
        ...                       HumanMessage("c", id="h2")],
        ...          "running_summary": summary_to_state(s)}
        >>> [m.type for m in build_model_input(state)]
        ['system', 'human']

        With a budget the history fits, the builder sends it whole (the summary adds nothing):

        >>> from langchain_histcompress.context.builder import ContextBuilder
        >>> builder = ContextBuilder(max_context_tokens=100, token_counter="approximate")
        >>> [m.id for m in build_model_input(state, context_builder=builder)]
        ['h1', 'a1', 'h2']
    """
    summary = summary_from_state(state, summary_key)
    if context_builder is None:
        raw = _state_messages(state, messages_key, check=False)
        return view(with_ids(raw, summary), summary, placement=placement)
    _hint_unused_view(state)
    messages = ensure_ids(_state_messages(state, messages_key))
    facts = state.get(facts_key) if isinstance(state, Mapping) else getattr(state, facts_key, None)
    return context_builder.build(messages, summary=summary, facts=facts)


_VIEW_KEY = "model_input"
_view_hint = threading.Event()


def _hint_unused_view(state: Mapping[str, Any] | Any) -> None:
    """Say once per process that a view under ``model_input`` is written but not used."""
    if _view_hint.is_set():
        return
    raw = state.get(_VIEW_KEY) if isinstance(state, Mapping) else getattr(state, _VIEW_KEY, None)
    if raw:
        _view_hint.set()
        logger.debug(
            "build_model_input: a ContextBuilder does not read state[%r]; the "
            "RoundCompressionNode that writes it (checkpointed on every run) can be created "
            "with output_key=None",
            _VIEW_KEY,
        )


def _check_key(label: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{label} must be a non-empty string, got {value!r}"
        raise ConfigurationError(msg)
    return value


class RoundCompressionNode(GraphNode[dict[str, Any] | Command[Any]]):
    """LangGraph node that folds due rounds into a running summary kept in graph state.

    Add it with ``graph.add_node("compress", node)`` before the model node; it runs under
    ``graph.invoke`` (sync summarizer call) and ``graph.ainvoke`` (async summarizer call).
    The node is also a valid ``pre_model_hook`` of ``langgraph.prebuilt.create_react_agent``
    through `as_pre_model_hook`.

    Args:
        compressor: The `RoundCompressor` deciding what to fold and calling the summarizer.
        messages_key: State key of the conversation.
        summary_key: State key of the running summary (JSON dict form).
        output_key: State key the compressed view is also written to (``None``, the default:
            none; the model node calls `model_input`, and every checkpoint stays free of a
            second copy of the conversation).
        destructive: Also remove the covered messages from state, one
            ``RemoveMessage(id=...)`` per covered id.
        on_error: ``"skip"`` (default): a package error (`SummarizationError`, an unreadable
            stored summary...) is logged and reported (custom event
            ``histcompress_fold_failed``), the stored summary stays and the turn goes on;
            only a view that cannot fit the budget raises `BudgetError`. ``"raise"``: every
            package error propagates and the graph applies none of the node's writes.
        name: Run name of the node (also its default node name in a graph).

    Raises:
        ConfigurationError: A parameter is invalid.

    Example:
        With a `~langchain_histcompress.context.builder.ContextBuilder` the model node builds its
        own input from the state with `build_model_input`:

        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langgraph.graph import END, START, StateGraph
        >>> from langchain_histcompress.context.builder import ContextBuilder
        >>> summarizer = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user counted to one."}')]))
        >>> compressor = RoundCompressor(summarizer, trigger=("rounds", 3), keep=("rounds", 1),
        ...                              token_counter="approximate")
        >>> builder = ContextBuilder(max_context_tokens=2000, token_counter="approximate")
        >>> def model(state: HistCompressState) -> dict:
        ...     sent = build_model_input(state, context_builder=builder)
        ...     return {"messages": [AIMessage(f"I see {len(sent)} messages")]}
        >>> graph = StateGraph(HistCompressState)
        >>> _ = graph.add_node("compress", RoundCompressionNode(compressor))
        >>> _ = graph.add_node("model", model)
        >>> _ = graph.add_edge(START, "compress")
        >>> _ = graph.add_edge("compress", "model")
        >>> _ = graph.add_edge("model", END)
        >>> history = []
        >>> for n in range(3):
        ...     history += [HumanMessage(f"say {n}"), AIMessage(str(n))]
        >>> state = graph.compile().invoke({"messages": [*history, HumanMessage("say 3")]})
        >>> state["messages"][-1].content, "model_input" in state, "running_summary" in state
        ('I see 7 messages', False, True)

        (The history still fits the builder's budget, so it is sent whole; the summary
        stands in for the oldest rounds once it no longer does.)
    """

    def __init__(
        self,
        compressor: RoundCompressor,
        *,
        messages_key: str = "messages",
        summary_key: str = "running_summary",
        output_key: str | None = None,
        destructive: bool = False,
        on_error: OnError = "skip",
        name: str = "compress_history",
    ) -> None:
        """Validate and store the configuration (see the class docstring)."""
        if not isinstance(compressor, RoundCompressor):
            msg = f"compressor must be a RoundCompressor, not {type(compressor).__name__}"
            raise ConfigurationError(msg)
        keys = {
            "messages_key": _check_key("messages_key", messages_key),
            "summary_key": _check_key("summary_key", summary_key),
        }
        if output_key is not None:
            keys["output_key"] = _check_key("output_key", output_key)
        if len(set(keys.values())) != len(keys):
            msg = f"state keys must be distinct, got {keys}"
            raise ConfigurationError(msg)
        if not isinstance(destructive, bool):
            msg = f"destructive must be a bool, got {destructive!r}"
            raise ConfigurationError(msg)
        if on_error not in _ON_ERROR:
            msg = f"on_error must be one of {list(_ON_ERROR)}, got {on_error!r}"
            raise ConfigurationError(msg)
        self.compressor = compressor
        self.messages_key = messages_key
        self.summary_key = summary_key
        self.output_key = output_key
        self.destructive = destructive
        self.on_error: OnError = on_error
        self.name = _check_key("name", name)
        self._node_name = name
        self._bind_body(name)

    def __repr__(self) -> str:
        """Show the configuration (never message content)."""
        return (
            f"{type(self).__name__}({self.compressor!r}, messages_key={self.messages_key!r}, "
            f"summary_key={self.summary_key!r}, output_key={self.output_key!r}, "
            f"destructive={self.destructive}, on_error={self.on_error!r})"
        )

    # -- runnable faces ----------------------------------------------------------------

    def as_pre_model_hook(self) -> RoundCompressionNode:
        """A copy of this node for ``create_react_agent(..., pre_model_hook=...)``.

        The copy writes the view under ``llm_input_messages``, the key the prebuilt agent
        sends to the model instead of ``messages`` (state keeps every message unless the node
        is destructive). The agent's ``state_schema`` must declare the summary key, or
        LangGraph drops the summary and every turn would summarize again, e.g.::

            class AgentState(TypedDict):
                messages: Annotated[list[AnyMessage], add_messages]
                remaining_steps: NotRequired[RemainingSteps]
                running_summary: NotRequired[dict[str, Any] | None]

        Example:
            >>> from langchain_core.language_models.fake_chat_models import (
            ...     GenericFakeChatModel)
            >>> node = RoundCompressionNode(RoundCompressor(GenericFakeChatModel(
            ...     messages=iter([])), token_counter="approximate"))
            >>> node.as_pre_model_hook().output_key
            'llm_input_messages'
        """
        return RoundCompressionNode(
            self.compressor,
            messages_key=self.messages_key,
            summary_key=self.summary_key,
            output_key="llm_input_messages",
            destructive=self.destructive,
            on_error=self.on_error,
            name=self._node_name,
        )

    def model_input(
        self, state: Any, *, context_window: int | object | None = None
    ) -> list[BaseMessage]:
        """What the model node sends: the compressed view of ``state``, within the budget.

        The system preamble, the stored summary as data, then every message it does not
        cover, verbatim; a message of the latest round too large for the budget on its own
        is shortened (the state keeps it whole). No model call.

        Args:
            state: The graph state (after this node ran).
            context_window: The answering model, when it is not the compressor's.

        Raises:
            BudgetError: The view cannot fit the budget (the message says what does not).

        Example:
            >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
            >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
            >>> from langgraph.graph import END, START, StateGraph
            >>> from langchain_histcompress.edge.compressor import RoundCompressor
            >>> summarizer = GenericFakeChatModel(messages=iter(
            ...     [AIMessage('{"ConversationSummary": "The user counted to one."}')]))
            >>> compressor = RoundCompressor(summarizer, trigger=("rounds", 3), keep=("rounds", 1),
            ...                              token_counter="approximate")
            >>> compress = RoundCompressionNode(compressor)
            >>> def model(state: HistCompressState) -> dict:
            ...     sent = compress.model_input(state)
            ...     return {"messages": [AIMessage(f"I see {len(sent)} messages")]}
            >>> graph = StateGraph(HistCompressState)
            >>> _ = graph.add_node("compress", compress)
            >>> _ = graph.add_node("model", model)
            >>> _ = graph.add_edge(START, "compress")
            >>> _ = graph.add_edge("compress", "model")
            >>> _ = graph.add_edge("model", END)
            >>> app = graph.compile()
            >>> history = [SystemMessage("Be brief.")]
            >>> for n in range(2):
            ...     history += [HumanMessage(f"say {n}"), AIMessage(str(n))]
            >>> state = app.invoke({"messages": [*history, HumanMessage("say 2")]})
            >>> state["messages"][-1].content, len(state["messages"])
            ('I see 3 messages', 7)
            >>> state["running_summary"]["version"], len(summary_from_state(state).covered_ids)
            (1, 4)
        """
        summary = _readable_summary(state, self.summary_key)
        raw = _state_messages(state, self.messages_key, check=False)  # the view reads the tail
        messages = with_ids(raw, summary)
        if not self.destructive and summary_detached(messages, summary):
            summary = None
        return self.compressor.view(messages, summary, context_window=context_window)

    def explain(self, state: Any, *, context_window: int | object | None = None) -> str:
        """What the next run would fold for ``state`` and why, in one line (no model call).

        The budget and the pricing in force are named (see `CompressionPlan.reason`).

        Example:
            >>> from langchain_core.language_models.fake_chat_models import (
            ...     GenericFakeChatModel)
            >>> from langchain_core.messages import AIMessage, HumanMessage
            >>> node = RoundCompressionNode(RoundCompressor(
            ...     GenericFakeChatModel(messages=iter([])), token_counter="approximate"))
            >>> state = {"messages": [HumanMessage("hi", id="h"), AIMessage("hello", id="a"),
            ...                       HumanMessage("and now?", id="h2")]}
            >>> node.explain(state).split(";")[0]
            'no fold: 2 rounds pending, 18 of 108,800 tokens (default window (128,000 tokens))'
        """
        summary = _readable_summary(state, self.summary_key)
        messages = with_ids(_state_messages(state, self.messages_key, check=False), summary)
        if not self.destructive and summary_detached(messages, summary):
            summary = None
        return self.compressor.plan(messages, summary, context_window=context_window).reason

    # -- shared pieces -----------------------------------------------------------------

    def _inputs(
        self, state: Any
    ) -> tuple[Sequence[BaseMessage], Sequence[BaseMessage], RunningSummary | None, bool]:
        """The state's messages (as stored, and with ids) and summary.

        The flag says whether the stored summary was dropped because none of its messages is
        in state any more.
        """
        originals = _state_messages(state, self.messages_key, check=False)
        summary = summary_from_state(state, self.summary_key)
        messages = with_ids(originals, summary)
        if not self.destructive and summary_detached(messages, summary):
            logger.info(
                "none of the %d summarized messages is in state; starting a new summary",
                len(summary.covered_ids) if summary is not None else 0,
            )
            return originals, messages, None, True
        return originals, messages, summary, False

    def _update(
        self,
        originals: Sequence[BaseMessage],
        result: CompressionResult,
        dropped: bool,
    ) -> dict[str, Any]:
        update: dict[str, Any] = {self.summary_key: None} if dropped else {}
        if result.compressed and result.summary is not None:
            update[self.summary_key] = summary_to_state(result.summary)
        if self.output_key is not None:
            update[self.output_key] = result.messages
        if self.destructive and result.summary is not None:
            covered = result.summary.covered_ids
            removals = [
                RemoveMessage(id=m.id) for m in originals if m.id is not None and m.id in covered
            ]
            if removals:
                update[self.messages_key] = removals
        return update

    def _skipped(
        self, error: HistCompressError, state: Any, config: RunnableConfig
    ) -> dict[str, Any]:
        if self.on_error == "raise" or isinstance(error, BudgetError):
            raise error
        summary = _readable_summary(state, self.summary_key)
        report_fold_failure(error, config, summary)
        try:
            shown = self.model_input(state)
        except BudgetError as overflow:  # the turn cannot go on without the fold
            msg = f"{overflow}; folding failed ({type(error).__name__}: {error})"
            raise BudgetError(msg) from error
        except HistCompressError as again:  # the messages themselves are unusable
            logger.warning("no view could be built either (%s)", type(again).__name__)
            return {}
        return {self.output_key: shown} if self.output_key is not None else {}

    @staticmethod
    def _deliver(update: dict[str, Any], config: RunnableConfig) -> dict[str, Any] | Command[Any]:
        """The update as returned to the caller.

        Inside a graph it is a ``Command`` whose update is a list of pairs, so the summary in
        the view never reaches ``stream_mode="messages"``.
        """
        if update and "langgraph_node" in (config.get("metadata") or {}):
            return Command(update=list(update.items()))
        return update

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any] | Command[Any]:
        try:
            originals, messages, summary, dropped = self._inputs(state)
            result = self.compressor.compress(messages, summary, config=config)
            keep_copies(messages, result.summary)
        except HistCompressError as error:
            return self._deliver(self._skipped(error, state, config), config)
        return self._deliver(self._update(originals, result, dropped), config)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any] | Command[Any]:
        try:
            originals, messages, summary, dropped = self._inputs(state)
            result = await self.compressor.acompress(messages, summary, config=config)
            keep_copies(messages, result.summary)
        except HistCompressError as error:
            return self._deliver(self._skipped(error, state, config), config)
        return self._deliver(self._update(originals, result, dropped), config)


def report_fold_failure(
    error: HistCompressError, config: RunnableConfig | None, summary: RunningSummary | None
) -> None:
    """Log a fold that failed and dispatch the ``histcompress_fold_failed`` custom event."""
    logger.warning(
        "round compression failed (%s); the turn goes on with the stored summary (version %s)",
        type(error).__name__,
        summary.version if summary is not None else None,
    )
    # outside a run there is no one to tell but the log
    with contextlib.suppress(RuntimeError):
        dispatch_custom_event(
            "histcompress_fold_failed",
            {"error": type(error).__name__, "message": str(error)},
            config=config,
        )


def _readable_summary(state: Any, key: str) -> RunningSummary | None:
    """The stored summary, or ``None`` when there is none or it cannot be read."""
    try:
        return summary_from_state(state, key)
    except HistCompressError:
        return None
