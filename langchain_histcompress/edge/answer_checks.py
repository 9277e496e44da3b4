"""Reading a model's answer: cut-off, refused and malformed answers as typed errors.

`check_answer` turns a cut-off (``finish_reason="length"``) or refused (OpenAI ``refusal``,
``content_filter``) answer into an `UnusableAnswerError`, which callers retry like any other
unusable answer; `_unusable_from` does the same for the client errors that stand for one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from langchain_core.messages import BaseMessage

__all__ = [
    "MalformedAnswerError",
    "RefusedAnswerError",
    "TruncatedAnswerError",
    "UnusableAnswerError",
    "check_answer",
]


class UnusableAnswerError(Exception):
    """The model answered, but the answer cannot be used (retried like garbage output).

    Attributes:
        reason: A short machine-readable reason (``truncated``, ``refusal``, ``malformed``).
    """

    reason = "unusable"

    def __init__(self, message: str) -> None:
        """Record the message."""
        super().__init__(message)


class TruncatedAnswerError(UnusableAnswerError):
    """The answer was cut off by the output limit (``finish_reason="length"``)."""

    reason = "truncated"


class RefusedAnswerError(UnusableAnswerError):
    """The provider reported a refusal (OpenAI ``refusal`` field, ``content_filter``)."""

    reason = "refusal"


class MalformedAnswerError(UnusableAnswerError):
    """The provider's response body could not be read (not JSON, cut off)."""

    reason = "malformed"


_LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length"})
_REFUSAL_REASONS = frozenset({"content_filter", "refusal", "safety"})


def _finish_reason(message: BaseMessage) -> str | None:
    metadata = message.response_metadata or {}
    for key in ("finish_reason", "stop_reason"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value.lower()
    return None


def _refusal_text(message: BaseMessage) -> str | None:
    refusal = (message.additional_kwargs or {}).get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return refusal
    if isinstance(message.content, list):
        for block in message.content:
            if isinstance(block, Mapping) and block.get("type") == "refusal":
                return str(block.get("refusal") or "refused")
    return None


def check_answer(output: object) -> None:
    """Raise when a model answer was cut off or refused by the provider.

    Looks at the message's ``finish_reason`` / ``stop_reason`` (``length``, ``max_tokens``:
    cut off; ``content_filter``: refused) and at OpenAI's ``refusal`` field (in
    ``additional_kwargs`` or as a ``refusal`` content block). Anything that is not a
    message passes.

    Raises:
        TruncatedAnswerError: The answer stopped at the output limit.
        RefusedAnswerError: The provider delivered a refusal instead of an answer.

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> check_answer(AIMessage("fine", response_metadata={"finish_reason": "stop"}))
        >>> try:
        ...     check_answer(AIMessage("And how much does a",
        ...                            response_metadata={"finish_reason": "length"}))
        ... except TruncatedAnswerError as exc:
        ...     print(exc.reason)
        truncated
    """
    if not isinstance(output, BaseMessage):
        return
    refusal = _refusal_text(output)
    if refusal is not None:
        msg = "the model refused (refusal field)"
        raise RefusedAnswerError(msg)
    reason = _finish_reason(output)
    if reason in _LENGTH_REASONS:
        msg = f"the answer was cut off at the output limit (finish_reason={reason!r})"
        raise TruncatedAnswerError(msg)
    if reason in _REFUSAL_REASONS:
        msg = f"the provider withheld the answer (finish_reason={reason!r})"
        raise RefusedAnswerError(msg)


def _unusable_from(exc: Exception) -> UnusableAnswerError | None:
    """The unusable-answer error an exception of a model call stands for, if any."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "LengthFinishReasonError" in names:
        return TruncatedAnswerError("the answer was cut off at the output limit")
    if names & {"ContentFilterFinishReasonError", "OpenAIRefusalError"}:
        return RefusedAnswerError("the provider refused or filtered the answer")
    if isinstance(exc, json.JSONDecodeError) or "APIResponseValidationError" in names:
        return MalformedAnswerError(f"the response body could not be read ({type(exc).__name__})")
    return None
