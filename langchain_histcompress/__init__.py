"""langchain-histcompress: keep long conversations inside the context window, cut their cost.

The names most applications need; everything else is public in its module (see the API
reference). The ``create_agent`` middleware needs the ``agents`` extra (``langchain``), so it
is imported on first access only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import (
    BudgetError,
    ConfigurationError,
    HistCompressError,
    InvalidHistoryError,
    SummarizationError,
)
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.edge.thread_summary import thread_summarizer
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.faces.memory import FactExtractionNode, FactsState
from langchain_histcompress.faces.nodes import (
    HistCompressState,
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
)
from langchain_histcompress.faces.recall_tool import HistoryRecall
from langchain_histcompress.faces.reducers import (
    MaxTokensReducer,
    SummarizationReducer,
    TruncationReducer,
    with_history_reducer,
)
from langchain_histcompress.faces.rephrase import (
    HistoryRephraseNode,
    create_compact_history_retriever,
    create_conversational_rag_chain,
    create_history_rephraser,
)

if TYPE_CHECKING:
    from langchain_histcompress.faces.middleware import RoundCompressionMiddleware

_LAZY = {"RoundCompressionMiddleware": "langchain_histcompress.faces.middleware"}


def __getattr__(name: str) -> Any:
    """Import the optional ``create_agent`` middleware on first access."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "BudgetError",
    "CompressingChatMessageHistory",
    "ConfigurationError",
    "ContextBuilder",
    "Fact",
    "FactExtractionNode",
    "FactsState",
    "HistCompressError",
    "HistCompressState",
    "HistoryRecall",
    "HistoryRephraseNode",
    "InvalidHistoryError",
    "MaxTokensReducer",
    "RoundCompressionMiddleware",
    "RoundCompressionNode",
    "RoundCompressor",
    "RunningSummary",
    "SummarizationError",
    "SummarizationReducer",
    "TiktokenCounter",
    "TruncationReducer",
    "build_model_input",
    "create_compact_history_retriever",
    "create_conversational_rag_chain",
    "create_history_rephraser",
    "summary_from_state",
    "thread_summarizer",
    "with_history_reducer",
]
