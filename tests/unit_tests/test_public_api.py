import inspect

import langchain_histcompress

EXPECTED = [
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


def test_all_is_sorted_and_pinned() -> None:
    assert langchain_histcompress.__all__ == sorted(langchain_histcompress.__all__)
    assert langchain_histcompress.__all__ == EXPECTED


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in langchain_histcompress.__all__:
        obj = getattr(langchain_histcompress, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases carry no docstring of their own
        assert getattr(obj, "__doc__", None), f"{name} has no docstring"
