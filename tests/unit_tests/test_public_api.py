import inspect

import langchain_histcompress

EXPECTED = [
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


def test_all_is_sorted_and_pinned() -> None:
    assert langchain_histcompress.__all__ == sorted(langchain_histcompress.__all__)
    assert langchain_histcompress.__all__ == EXPECTED


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in langchain_histcompress.__all__:
        obj = getattr(langchain_histcompress, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases carry no docstring of their own
        assert getattr(obj, "__doc__", None), f"{name} has no docstring"


# Records, protocols and graph-state schemas are shown in their producers' examples;
# MiniLMEmbeddings needs the optional torch extra (tests/integration_tests cover it).
NO_EXAMPLE_NEEDED = {
    "BuiltContext",
    "CompressionResult",
    "FactRetriever",
    "FactsState",
    "HistCompressState",
    "HistoryReducer",
    "HistoryViolation",
    "MiniLMEmbeddings",
    "RepairedHistory",
    "Round",
    "RoundCompressionState",
    "SplitHistory",
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
