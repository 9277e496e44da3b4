"""langchain-histcompress: keep long conversations inside the context window, cut their cost.

Everything public is importable from here. The ``create_agent`` middleware needs the ``agents``
extra (``langchain``), so it is imported on first access only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_histcompress.cached_context import CacheStableContext
from langchain_histcompress.compressor import (
    CompressionResult,
    RoundCompressor,
)
from langchain_histcompress.context import (
    BuiltContext,
    ContextBuilder,
)
from langchain_histcompress.errors import (
    BudgetError,
    CompressionConflictError,
    ConfigurationError,
    HistCompressError,
    InvalidHistoryError,
    RecallError,
    StorageError,
    SummarizationError,
    TokenizerError,
)
from langchain_histcompress.facts import (
    Fact,
    FactExtractor,
    FactOp,
    merge_facts,
)
from langchain_histcompress.history import (
    CompressingChatMessageHistory,
    CompressingHistoryAdapter,
)
from langchain_histcompress.memory import (
    FactExtractionNode,
    FactsState,
)
from langchain_histcompress.models import chat_model_from_spec
from langchain_histcompress.nodes import (
    HistCompressState,
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
)
from langchain_histcompress.pricing import (
    Bill,
    PricingModel,
    PromptCache,
    PromptRequest,
    RequestCost,
    encode_request,
    price_requests,
)
from langchain_histcompress.recall_tool import HistoryRecall
from langchain_histcompress.reducers import (
    HistoryReducer,
    MaxTokensReducer,
    SummarizationReducer,
    TruncationReducer,
    with_history_reducer,
)
from langchain_histcompress.rephrase import (
    HistoryRephraseNode,
    create_compact_history_retriever,
    create_conversational_rag_chain,
    create_history_rephraser,
)
from langchain_histcompress.retrieval import (
    BM25FactRetriever,
    BM25TurnRetriever,
    EmbeddingEvidenceRetriever,
    EmbeddingFactRetriever,
    EvidenceRetriever,
    FactRetriever,
    MiniLMEmbeddings,
    StoreFactRetriever,
)
from langchain_histcompress.rounds import (
    HistoryViolation,
    RepairedHistory,
    Round,
    SplitHistory,
    ensure_ids,
    is_pinned,
    is_summary_message,
    repair_history,
    split_rounds,
    split_units,
    validate_history,
)
from langchain_histcompress.summary import (
    RunningSummary,
    Summarizer,
    SummaryProfile,
)
from langchain_histcompress.thread_summary import (
    acompress_in_background,
    compress_in_background,
    thread_summarizer,
)
from langchain_histcompress.tokens import (
    TiktokenCounter,
    TokenCounter,
)
from langchain_histcompress.triggers import (
    CompressionTrigger,
    ContextSize,
)

if TYPE_CHECKING:
    from langchain_histcompress.middleware import (
        RoundCompressionMiddleware,
        RoundCompressionState,
    )

_LAZY = {
    "RoundCompressionMiddleware": "langchain_histcompress.middleware",
    "RoundCompressionState": "langchain_histcompress.middleware",
}


def __getattr__(name: str) -> Any:
    """Import the optional ``create_agent`` middleware on first access."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "BM25FactRetriever",
    "BM25TurnRetriever",
    "Bill",
    "BudgetError",
    "BuiltContext",
    "CacheStableContext",
    "CompressingChatMessageHistory",
    "CompressingHistoryAdapter",
    "CompressionConflictError",
    "CompressionResult",
    "CompressionTrigger",
    "ConfigurationError",
    "ContextBuilder",
    "ContextSize",
    "EmbeddingEvidenceRetriever",
    "EmbeddingFactRetriever",
    "EvidenceRetriever",
    "Fact",
    "FactExtractionNode",
    "FactExtractor",
    "FactOp",
    "FactRetriever",
    "FactsState",
    "HistCompressError",
    "HistCompressState",
    "HistoryRecall",
    "HistoryReducer",
    "HistoryRephraseNode",
    "HistoryViolation",
    "InvalidHistoryError",
    "MaxTokensReducer",
    "MiniLMEmbeddings",
    "PricingModel",
    "PromptCache",
    "PromptRequest",
    "RecallError",
    "RepairedHistory",
    "RequestCost",
    "Round",
    "RoundCompressionMiddleware",
    "RoundCompressionNode",
    "RoundCompressionState",
    "RoundCompressor",
    "RunningSummary",
    "SplitHistory",
    "StorageError",
    "StoreFactRetriever",
    "SummarizationError",
    "SummarizationReducer",
    "Summarizer",
    "SummaryProfile",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerError",
    "TruncationReducer",
    "acompress_in_background",
    "build_model_input",
    "chat_model_from_spec",
    "compress_in_background",
    "create_compact_history_retriever",
    "create_conversational_rag_chain",
    "create_history_rephraser",
    "encode_request",
    "ensure_ids",
    "is_pinned",
    "is_summary_message",
    "merge_facts",
    "price_requests",
    "repair_history",
    "split_rounds",
    "split_units",
    "summary_from_state",
    "thread_summarizer",
    "validate_history",
    "with_history_reducer",
]
