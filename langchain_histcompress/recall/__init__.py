"""Recall: BM25 ranking of conversation messages and facts, and the evidence retrievers."""
