"""When a message was sent, read from its metadata.

Times come from ``additional_kwargs`` or ``response_metadata`` (``"timestamp"`` then
``"created_at"``), as a ``datetime``, epoch seconds or milliseconds, or ISO 8601 text;
naive times are taken as UTC and unreadable ones as unknown (``None``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from langchain_core.messages import BaseMessage

__all__ = ["message_timestamp", "to_datetime"]

_TIMESTAMP_KEYS = ("timestamp", "created_at")


def to_datetime(value: object) -> datetime | None:
    """``value`` as an aware ``datetime`` (see the module), or ``None`` when unreadable.

    Example:
        >>> to_datetime(0)
        datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)
    """
    parsed: datetime | None = None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) / 1000 if value > 1e11 else float(value)
        try:
            parsed = datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if ":" not in text:  # no number is written with a colon: ISO times skip the attempt
            try:
                return to_datetime(float(text))
            except ValueError:
                pass
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def message_timestamp(message: BaseMessage) -> datetime | None:
    """When a message was sent, from ``additional_kwargs`` or ``response_metadata``.

    Looks for the keys ``"timestamp"`` then ``"created_at"``; accepts a ``datetime``, epoch
    seconds (or milliseconds) and ISO 8601 strings. Naive times are taken as UTC.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> message_timestamp(
        ...     HumanMessage("hi", additional_kwargs={"timestamp": "2024-05-01T10:00:00Z"}))
        datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.timezone.utc)
    """
    for source in (message.additional_kwargs, message.response_metadata):
        for key in _TIMESTAMP_KEYS:
            if key in source:
                found = to_datetime(source[key])
                if found is not None:
                    return found
    return None
