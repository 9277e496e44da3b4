"""The demo app: a LangGraph ``StateGraph`` (facts -> compress -> [rephrase] -> model).

Example:
    >>> "follow_up" in DemoState.__annotations__
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.memory import FactExtractionNode
from langchain_histcompress.faces.nodes import (
    HistCompressState,
    RoundCompressionNode,
    summary_from_state,
)
from langchain_histcompress.faces.rephrase import HistoryRephraseNode
from langchain_histcompress.workbench.demo_script import (
    FACT_BATCH_ROUNDS,
    MAX_CONTEXT_TOKENS,
    MAX_PROMPT_FACTS,
    REPHRASE_HISTORY_MESSAGES,
    TOP_K_FACTS,
)

__all__ = ["DemoState", "build_demo_graph"]


class DemoState(HistCompressState, total=False):
    """Graph state of the demo app: `HistCompressState` plus the per-turn inputs."""

    follow_up: bool
    """The latest question is a follow-up: rephrase it before answering."""
    standalone_question: str | None
    """The rephrased follow-up (``None`` when the turn is not a follow-up)."""
    rephrase_report: dict[str, Any] | None
    """What the rephrasing node did this turn."""
    reply_id: str
    """Message id the reply of this turn gets."""
    reply_at: str
    """ISO time stamp of the reply."""


def _route(state: Mapping[str, Any]) -> str:
    return "rephrase" if state.get("follow_up") else "model"


def build_demo_graph(
    model: BaseChatModel,
    *,
    counter: TiktokenCounter,
    checkpointer: BaseCheckpointSaver[Any],
    clock: Callable[[], datetime] | None = None,
    offline: bool = True,
) -> tuple[CompiledStateGraph[Any, Any, Any, Any], RoundCompressor]:
    """Build the demo app: facts -> compress -> (rephrase) -> model, with a checkpointer.

    The compressor runs with the package defaults, as an app would set it up: no trigger and
    no keep argument (it folds when folding pays under the answering model's pricing and keeps
    the newest 3 rounds verbatim), and the answering model as ``context_window`` (its profile
    gives the window, its provider and name the pricing; without them the defaults apply).

    Args:
        model: The chat model for every role (scripted or real).
        counter: Token counter of the compressor and the context builder.
        checkpointer: Where the graph stores its state (SQLite in the demo).
        clock: Time stamp of summaries and facts (default: wall time).
        offline: Scripted model: no retries and no timeouts (a mismatch should fail at once).

    Returns:
        The compiled graph and its `RoundCompressor` (to plan what a turn will fold).

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> from langchain_histcompress.workbench.demo_model import ScriptedChatModel
        >>> from langchain_histcompress.workbench.demo_script import load_script
        >>> graph, compressor = build_demo_graph(ScriptedChatModel(script=load_script()),
        ...     counter=TiktokenCounter(), checkpointer=InMemorySaver())
        >>> sorted(graph.nodes)
        ['__start__', 'compress', 'extract_facts', 'model', 'rephrase']
    """
    retries = 0 if offline else 2
    compressor = RoundCompressor(
        model,
        context_window=model,
        profile="code",
        token_counter=counter,
        max_retries=retries,
        timeout=None if offline else 120.0,
        retry_backoff=0.0 if offline else 1.0,
        clock=clock,
    )
    facts = FactExtractionNode(
        model,
        batch_rounds=FACT_BATCH_ROUNDS,
        use_runtime_store=False,
        max_retries=retries,
        retry_backoff=0.0 if offline else 0.5,
        max_prompt_facts=MAX_PROMPT_FACTS,
        now=clock,
        name="extract_facts",
    )
    rephrase = HistoryRephraseNode(
        model,
        history_message_count=REPHRASE_HISTORY_MESSAGES,
        summary_key="running_summary",
        metadata_key="rephrase_report",
        timeout=None if offline else 60.0,
    )
    builder = ContextBuilder(
        max_context_tokens=MAX_CONTEXT_TOKENS, token_counter=counter, top_k_facts=TOP_K_FACTS
    )
    compress = RoundCompressionNode(compressor)

    def answer(state: DemoState, config: RunnableConfig) -> dict[str, Any]:
        view = compress.model_input(state)
        context = builder.build(
            view,
            summary=summary_from_state(state),
            facts=state.get("facts"),
            query=state.get("standalone_question") or None,
        )
        reply = model.invoke(context, config)
        message = AIMessage(
            content=reply.content,
            id=state.get("reply_id"),
            additional_kwargs={"timestamp": state.get("reply_at")},
        )
        return {"messages": [message]}

    graph = StateGraph(DemoState)
    graph.add_node("extract_facts", facts)
    graph.add_node("compress", compress)
    graph.add_node("rephrase", rephrase)
    graph.add_node("model", answer)
    graph.add_edge(START, "extract_facts")
    graph.add_edge("extract_facts", "compress")
    graph.add_conditional_edges("compress", _route, {"rephrase": "rephrase", "model": "model"})
    graph.add_edge("rephrase", "model")
    graph.add_edge("model", END)
    return graph.compile(checkpointer=checkpointer), compressor
