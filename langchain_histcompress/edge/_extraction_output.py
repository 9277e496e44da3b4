"""Parsing of a fact extractor's answer into validated operations.

The answer holds operations one per line (the `fact_lines` format) or a JSON array of them;
each is checked against the facts and messages the prompt showed (`parse_extraction_output`).

Example:
    >>> ops, rejected = parse_extraction_output(
    ...     "ADD preference 0.9 m1 | Likes tea", shown_fact_ids=[], message_ids=["m1"])
    >>> ops[0].fields["content"], rejected
    ('Likes tea', [])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from langchain_histcompress.core.answer_text import (
    json_fenced_blocks,
    json_values,
    output_text,
    strip_think,
)
from langchain_histcompress.core.fact_lines import parse_fact_lines
from langchain_histcompress.core.facts import (
    DEFAULT_CONFIDENCE,
    OP_ALIASES,
    FactOp,
    aware_utc,
    fact_label,
    parse_datetime,
    utcnow,
)

__all__ = ["RejectedOp", "parse_extraction_output"]

_NOOP_NAMES = frozenset({"NOOP", "NONE", "SKIP", "KEEP"})


class _MalformedOutputError(ValueError):
    """The model output holds no operation lines and no JSON list of operations."""


@dataclass(frozen=True)
class RejectedOp:
    """An operation from the model that was not applied."""

    index: int
    """Position of the operation in the model's list."""
    op: str | None
    """The operation name as given (upper-cased), when there was one."""
    fact_id: str | None
    """The id the operation targeted, when it had one."""
    reason: str
    """``unknown_id``, ``missing_content``, ``content_too_long``, ``unknown_op``,
    ``not_an_object``, ``invalid_fields`` or ``too_many_ops``."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"index": self.index, "op": self.op, "id": self.fact_id, "reason": self.reason}


def _output_text(output: object) -> str:
    text = output_text(output, separator="\n")
    if text is None:
        msg = f"model output of type {type(output).__name__} has no text"
        raise _MalformedOutputError(msg)
    return text


def _ops_shape(value: object) -> list[object] | None:
    if isinstance(value, list):
        if not value or any(isinstance(item, Mapping) for item in value):
            return value
        return None
    if isinstance(value, Mapping):
        for key in ("operations", "ops", "facts", "actions", "updates"):
            inner = value.get(key)
            if isinstance(inner, list):
                return inner
        if "op" in value:
            return [value]
    return None


def _scan_json(text: str) -> list[object] | None:
    try:
        for value in json_values(text, strict=True):
            ops = _ops_shape(value)
            if ops is not None:
                return ops
    except ValueError as exc:
        raise _MalformedOutputError(str(exc)) from exc
    return None


def _find_ops(raw: str) -> list[object]:
    # reasoning opens the answer; think tags later on are data (a line's, or a JSON string's)
    text = strip_think(raw, leading_only=True).strip()
    if not text:
        msg = "empty model output"
        raise _MalformedOutputError(msg)
    fenced = json_fenced_blocks(text)
    # a JSON answer is JSON even when a content says "ADD"
    if text[0] not in "[{" and not any(b.lstrip()[:1] in ("[", "{") for b in fenced):
        lines = parse_fact_lines(text)
        if lines is not None:
            return list(lines)
    for block in fenced:
        found = _scan_json(block)
        if found is not None:
            return found
    found = _scan_json(text)
    if found is None:
        msg = "no operation lines and no JSON list of operations in the model output"
        raise _MalformedOutputError(msg)
    return found


def _coerce_confidence(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip().rstrip("%")
        try:
            number = float(text)
        except ValueError:
            return None
        if value.strip().endswith("%"):
            number /= 100
    elif isinstance(value, int | float):
        number = float(value)
    else:
        return None
    if not math.isfinite(number):
        return None
    if 1 < number <= 100:
        number /= 100
    return min(max(number, 0.0), 1.0)


def _coerce_sources(value: object, allowed: frozenset[str]) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    return [str(item) for item in value if isinstance(item, str | int) and str(item) in allowed]


@dataclass(frozen=True)
class _Parsed:
    ops: tuple[FactOp, ...]
    rejected: tuple[RejectedOp, ...]
    total: int


def _coerce_item(
    index: int,
    item: object,
    *,
    shown_ids: frozenset[str],
    source_ids: frozenset[str],
    max_content_chars: int,
    ttl_by_type: Mapping[str, timedelta],
    now: datetime,
) -> FactOp | RejectedOp | None:
    if not isinstance(item, Mapping):
        return RejectedOp(index, None, None, "not_an_object")
    raw_op = str(item.get("op") or item.get("action") or item.get("operation") or "")
    name = raw_op.strip().upper()
    if name in _NOOP_NAMES:
        return None
    op = OP_ALIASES.get(name)
    raw_id = item.get("id")
    fid = str(raw_id) if isinstance(raw_id, str | int) and str(raw_id) else None
    if op is None:
        return RejectedOp(index, name or None, fid, "unknown_op")
    if op != "ADD" and (fid is None or fid not in shown_ids):
        return RejectedOp(index, op, fid, "unknown_id")
    if op == "DELETE":
        return FactOp(op="DELETE", id=fid)
    fields: dict[str, Any] = {}
    content = item.get("content", item.get("fact", item.get("text")))
    if content is not None:
        if not isinstance(content, str) or not content.strip():
            return RejectedOp(index, op, fid, "missing_content")
        if len(content.strip()) > max_content_chars:
            return RejectedOp(index, op, fid, "content_too_long")
        fields["content"] = content.strip()
    elif op == "ADD":
        return RejectedOp(index, op, None, "missing_content")
    if isinstance(item.get("type"), str):
        fields["type"] = item["type"]
    if "confidence" in item:
        confidence = _coerce_confidence(item["confidence"])
        if confidence is not None:
            fields["confidence"] = confidence
    if isinstance(item.get("status"), str):
        fields["status"] = item["status"]
    if "source_ids" in item:
        fields["source_ids"] = _coerce_sources(item["source_ids"], source_ids)
    expires = parse_datetime(item.get("expires_at"))
    if expires is not None:
        fields["expires_at"] = expires
    if op == "ADD":
        fields.setdefault("confidence", DEFAULT_CONFIDENCE)
        fields.setdefault("source_ids", [])
        ttl = None
        if ttl_by_type and "expires_at" not in fields:
            ttl = ttl_by_type.get(fact_label(str(fields.get("type") or ""), default="other"))
        if ttl is not None:
            fields["expires_at"] = now + ttl
        return FactOp(op="ADD", fields=fields)
    if not fields or fields == {"source_ids": []}:
        return RejectedOp(index, op, fid, "invalid_fields")
    return FactOp(op="UPDATE", id=fid, fields=fields)


def parse_extraction_output(
    output: object,
    *,
    shown_fact_ids: Iterable[str],
    message_ids: Iterable[str],
    max_ops: int = 50,
    max_content_chars: int = 500,
    ttl_by_type: Mapping[str, timedelta] | None = None,
    now: datetime | None = None,
) -> tuple[list[FactOp], list[RejectedOp]]:
    r"""Turn an extraction model's output into validated operations.

    Accepts operations one per line (the `fact_lines` format), or a JSON array of
    operations, possibly fenced or surrounded by text, in a string, a message or a list of
    content blocks. Ids proposed for ``ADD`` are ignored;
    ``UPDATE`` / ``DELETE`` must name a fact that was shown; ``source_ids`` are kept only
    when they name a message that was shown.

    Args:
        output: The model output (``AIMessage``, string or content blocks).
        shown_fact_ids: Ids of the facts shown in the prompt.
        message_ids: Ids of the messages shown in the prompt.
        max_ops: Operations beyond this count are rejected (``too_many_ops``).
        max_content_chars: Longer contents are rejected (``content_too_long``).
        ttl_by_type: Default lifetime of new facts per type.
        now: Base time for ``ttl_by_type``.

    Returns:
        The valid operations and the rejected ones.

    Raises:
        ValueError: The output holds neither operation lines nor a JSON list of operations
            (malformed, truncated, empty or a refusal).

    Example:
        >>> ops, rejected = parse_extraction_output(
        ...     'Sure:\n```json\n[{"op": "ADD", "id": "x", "content": "Lives in Oslo",'
        ...     ' "source_ids": ["m1", "m9"]}, {"op": "DELETE", "id": "f-zz"}]\n```',
        ...     shown_fact_ids=[], message_ids=["m1"])
        >>> ops[0].id, ops[0].fields["source_ids"], rejected[0].reason
        (None, ['m1'], 'unknown_id')
        >>> ops, rejected = parse_extraction_output(
        ...     "ADD todo 0.6? m1 | Call Bo | today\nUPDATE f-1 0.9 | x",
        ...     shown_fact_ids=[], message_ids=["m1"])
        >>> ops[0].fields["content"], ops[0].fields["status"], rejected[0].reason
        ('Call Bo | today', 'uncertain', 'unknown_id')
    """
    items = _find_ops(_output_text(output))
    shown = frozenset(shown_fact_ids)
    sources = frozenset(message_ids)
    when = aware_utc(now) if now is not None else utcnow()
    ops: list[FactOp] = []
    rejected: list[RejectedOp] = []
    for index, item in enumerate(items):
        if index >= max_ops:
            rejected.append(RejectedOp(index, None, None, "too_many_ops"))
            continue
        try:
            result = _coerce_item(
                index,
                item,
                shown_ids=shown,
                source_ids=sources,
                max_content_chars=max_content_chars,
                ttl_by_type=ttl_by_type or {},
                now=when,
            )
        except ValueError:
            name = str(item.get("op", "")).upper() if isinstance(item, Mapping) else None
            result = RejectedOp(index, name or None, None, "invalid_fields")
        if isinstance(result, FactOp):
            ops.append(result)
        elif result is not None:
            rejected.append(result)
    return ops, rejected
