"""The package's error hierarchy: one base class, a few precise subclasses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_histcompress.core.rounds import HistoryViolation

__all__ = [
    "BudgetError",
    "CompressionConflictError",
    "ConfigurationError",
    "HistCompressError",
    "InvalidHistoryError",
    "RecallError",
    "StorageError",
    "SummarizationError",
    "TokenizerError",
]


class HistCompressError(Exception):
    """Base class of every error raised by langchain-histcompress."""


class ConfigurationError(HistCompressError, ValueError):
    """A parameter, model name, URL or schema is invalid; raised before anything runs."""


class InvalidHistoryError(HistCompressError, ValueError):
    """A message list breaks the chat-provider shape (orphan tool result, unanswered call...).

    Attributes:
        violations: Every violation found, in message order.
    """

    def __init__(self, violations: Sequence[HistoryViolation], *, hint: str = "") -> None:
        """Build the error from the violations found, plus what to do about them."""
        self.violations = tuple(violations)
        details = "; ".join(str(v) for v in self.violations[:5])
        more = len(self.violations) - 5
        suffix = f" (+{more} more)" if more > 0 else ""
        advice = f" ({hint})" if hint else ""
        super().__init__(f"invalid history: {details}{suffix}{advice}")


class BudgetError(HistCompressError, ValueError):
    """A token budget cannot hold what must always be kept (system preamble + latest question)."""


class TokenizerError(HistCompressError):
    """An offline encoding file is missing or does not match its official checksum."""


class SummarizationError(HistCompressError):
    """The summarizer / extractor model failed or returned unusable output after retries.

    Stored state is untouched when this is raised.
    """


class StorageError(HistCompressError):
    """The storage backend failed; the operation was rolled back."""


class CompressionConflictError(StorageError):
    """Another writer committed a summary for the same session first (version check failed)."""


class RecallError(HistCompressError, ValueError):
    """A recall request cannot be answered: an invalid argument or an unknown conversation.

    The recall tools turn it into an error tool message for the model (never an exception
    that ends the agent's run).
    """
