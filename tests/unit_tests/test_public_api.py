import inspect

import langchain_histcompress

EXPECTED = [
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


def test_the_front_door_is_small() -> None:
    """A newcomer learns a handful of names; the rest live in their modules."""
    assert len(langchain_histcompress.__all__) <= 30


def test_all_is_sorted_and_pinned() -> None:
    assert langchain_histcompress.__all__ == sorted(langchain_histcompress.__all__)
    assert langchain_histcompress.__all__ == EXPECTED


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in langchain_histcompress.__all__:
        obj = getattr(langchain_histcompress, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases carry no docstring of their own
        assert getattr(obj, "__doc__", None), f"{name} has no docstring"


# Graph-state schemas are shown in their nodes' examples.
NO_EXAMPLE_NEEDED = {
    "FactsState",
    "HistCompressState",
}


def test_public_classes_and_functions_have_runnable_examples() -> None:
    missing = []
    for name in langchain_histcompress.__all__:
        obj = getattr(langchain_histcompress, name)
        if name in NO_EXAMPLE_NEEDED or (inspect.isclass(obj) and issubclass(obj, Exception)):
            continue
        documented = ">>> " in (inspect.getdoc(obj) or "")
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not documented:
            missing.append(name)
    assert missing == []
