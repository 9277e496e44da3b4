"""Reading model answers: their text, reasoning blocks, JSON inside them, refusals.

`output_text` takes strings, messages and content-block lists; `strip_think` drops
``<think>`` blocks; `json_fenced_blocks`, `json_values` and `find_json_object` find JSON in
free text (fenced or not); `is_refusal` recognizes an answer that declines the task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from langchain_core.messages import BaseMessage

__all__ = [
    "find_json_object",
    "is_refusal",
    "json_fenced_blocks",
    "json_values",
    "output_text",
    "strip_think",
]


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LEADING_THINK = re.compile(r"\A(?:\s*<think>.*?</think>)+", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_JSON_LANGUAGES = frozenset({"", "json", "jsonc", "json5"})
_TEXT_BLOCKS = ("text", "output_text")
_MAX_JSON_FAILURES = 64

_APOLOGY = r"i['’]?m\s+sorry|i\s+am\s+sorry|i\s+apologi[sz]e|as\s+an\s+ai\b"
_REFUSAL = re.compile(
    rf"^\W*(?:{_APOLOGY}|sorry\s*[,.!]|"
    r"i\s+(?:can\s*not|can['’]?t|cannot|won['’]?t|will\s+not|am\s+(?:not\s+able|unable)|"
    r"['’]?m\s+(?:not\s+able|unable)|do\s+not\s+feel\s+comfortable)\b)",
    re.IGNORECASE,
)
_USER_VOICE_REFUSAL = re.compile(
    rf"^\W*(?:{_APOLOGY}|sorry,\s*i\b|i\s+(?:can\s*not|can['’]?t|cannot)\s+help\b)",
    re.IGNORECASE,
)


def output_text(output: object, *, separator: str = "") -> str | None:
    """The text of a model answer: a string, a message, or a list of content blocks.

    Text blocks (``text`` / ``output_text``) and bare strings are joined with
    ``separator``; other blocks (images, reasoning, tool use) are skipped.

    Returns:
        The text, or ``None`` when the answer has no text form (e.g. a dict).

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> output_text(AIMessage([{"type": "reasoning", "reasoning": "hmm"},
        ...                        {"type": "text", "text": "Hi"}, " there"]))
        'Hi there'
        >>> output_text({"a": 1}) is None
        True
    """
    content: object = output.content if isinstance(output, BaseMessage) else output
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") in _TEXT_BLOCKS:
            parts.append(str(block.get("text", "")))
    return separator.join(parts)


def strip_think(text: str, *, leading_only: bool = False) -> str:
    """``text`` without ``<think>...</think>`` reasoning blocks.

    ``leading_only``: remove only the blocks the answer opens with (for a line format,
    where the same tags later on are a line's data).

    Example:
        >>> strip_think("<think>the user wants JSON</think>[]")
        '[]'
        >>> strip_think("<think>x</think>ADD|<think></think>", leading_only=True)
        'ADD|<think></think>'
    """
    return (_LEADING_THINK if leading_only else _THINK).sub("", text)


def json_fenced_blocks(text: str) -> list[str]:
    r"""Contents of the fenced code blocks of ``text`` tagged JSON (or untagged), in order.

    Example:
        >>> json_fenced_blocks('x ```json\n[1]\n``` y ```python\nf()\n``` ```{"a": 1}```')
        ['[1]\n', '{"a": 1}']
    """
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(1).lower() in _JSON_LANGUAGES]


def _next_opener(text: str, openers: str, pos: int) -> int:
    found = [i for i in (text.find(c, pos) for c in openers) if i >= 0]
    return min(found) if found else -1


def json_values(text: str, *, openers: str = "[{", strict: bool = False) -> Iterator[Any]:
    """The JSON values embedded in ``text``, in order, each starting at one of ``openers``.

    After a value, the scan goes on behind it. An opener where no valid JSON value starts
    (prose in brackets, truncated JSON) is skipped, up to 64 times; with ``strict=True``
    it raises instead.

    Raises:
        ValueError: ``strict`` and an opener starts invalid or truncated JSON.

    Example:
        >>> list(json_values('See [1] and {"a": [2]} but {broken'))
        [[1], {'a': [2]}]
    """
    decoder = json.JSONDecoder()
    pos = 0
    failures = 0
    while (start := _next_opener(text, openers, pos)) >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError as exc:
            if strict:
                msg = f"invalid or truncated JSON at character {start}"
                raise ValueError(msg) from exc
            failures += 1
            if failures >= _MAX_JSON_FAILURES:
                return
            pos = start + 1
            continue
        yield value
        pos = end


def find_json_object(text: str) -> dict[str, Any] | None:
    r"""The JSON object of a model answer: bare, in a fenced block, or surrounded by text.

    Tried in order: the whole text, each JSON-fenced block, then the first complete object
    embedded anywhere in the text.

    Returns:
        The object, or ``None`` when the text holds no complete JSON object.

    Example:
        >>> find_json_object('Sure!\n```json\n{"a": 1}\n```')
        {'a': 1}
        >>> find_json_object('Here: {"a": 1} hope it helps'), find_json_object('{"a": ')
        ({'a': 1}, None)
    """
    for candidate in (text.strip(), *json_fenced_blocks(text)):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    for value in json_values(text, openers="{"):
        if isinstance(value, dict):
            return value
    return None


def is_refusal(text: str, *, user_voice: bool = False) -> bool:
    """Whether a model answer opens like a refusal ("I'm sorry", "I can't...", "As an AI").

    Args:
        text: The answer.
        user_voice: The answer speaks as the user (a rephrased question), where "I cannot
            log in" is a legitimate start: only apologies, "As an AI" and "I can't help"
            count then.

    Example:
        >>> is_refusal("I'm sorry, but I can't help with that."), is_refusal("Ada likes tea.")
        (True, False)
        >>> question = "I cannot log in, what now?"
        >>> is_refusal(question), is_refusal(question, user_voice=True)
        (True, False)
    """
    pattern = _USER_VOICE_REFUSAL if user_voice else _REFUSAL
    return pattern.match(text) is not None
