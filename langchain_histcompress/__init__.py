"""langchain-histcompress: keep long conversations inside the context window, cut their cost.

The public API lives here; submodules are implementation detail unless documented.
"""

from langchain_histcompress.errors import (
    BudgetError,
    CompressionConflictError,
    ConfigurationError,
    HistCompressError,
    InvalidHistoryError,
    StorageError,
    SummarizationError,
    TokenizerError,
)
from langchain_histcompress.reducers import (
    HistoryReducer,
    MaxTokensReducer,
    TruncationReducer,
    with_history_reducer,
)
from langchain_histcompress.rounds import (
    HistoryViolation,
    Round,
    SplitHistory,
    ensure_ids,
    is_summary_message,
    split_rounds,
    split_units,
    validate_history,
)
from langchain_histcompress.tokens import TiktokenCounter, TokenCounter

__all__ = [
    "BudgetError",
    "CompressionConflictError",
    "ConfigurationError",
    "HistCompressError",
    "HistoryReducer",
    "HistoryViolation",
    "InvalidHistoryError",
    "MaxTokensReducer",
    "Round",
    "SplitHistory",
    "StorageError",
    "SummarizationError",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerError",
    "TruncationReducer",
    "ensure_ids",
    "is_summary_message",
    "split_rounds",
    "split_units",
    "validate_history",
    "with_history_reducer",
]
