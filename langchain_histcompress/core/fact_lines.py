r"""The line format of fact operations: one operation per line, a fraction of JSON's tokens.

The default extraction prompt asks for one operation per line::

    ADD <type> <confidence>[?] <source ids> | <content>
    UPDATE <fact id> <confidence>[?] <source ids> | <content>
    DELETE <fact id>
    NONE

``?`` after the confidence marks the fact ``uncertain``; source ids are comma-separated; the
content is everything after the first ``|``, with a line break written ``\n``. Only
upper-case keywords at the start of a line count, so prose or a code fence around the
operations does no harm. `format_fact_lines` writes operations, `parse_fact_lines` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_histcompress.core.facts import OP_ALIASES, Fact

__all__ = ["fact_line_body", "format_current_fact", "format_fact_lines", "parse_fact_lines"]

_KEYWORDS = "ADD|UPDATE|DELETE|NONE"  # only the prompt's own: prose may open with "NEW", "KEEP"
_OP_LINE = re.compile(rf"^(?:[-*\u2022]\s+|\d{{1,3}}[.)]\s+)?({_KEYWORDS})(?=\s|\||$)(.*)$")
_CONFIDENCE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(%?)(\??)$")
_UNESCAPE = re.compile(r"\\([\\nr])")
_UNESCAPED = {"\\": "\\", "n": "\n", "r": "\r"}
_NEEDS_ESCAPE = re.compile(r"\\(?=[\\nr\n\r])|[\n\r]")
_ESCAPED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_ID_JUNK = "[]\"'`"


def _escape(content: str) -> str:
    return _NEEDS_ESCAPE.sub(lambda m: _ESCAPED[m.group(0)], content)


def _unescape(content: str) -> str:
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], content)


def _number(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value).strip()
    return f"{round(float(value), 3):g}"


def _token(value: object) -> str:
    return "_".join(str(value).split()) or "-"


def _format_one(op: Mapping[str, Any]) -> str:
    name = str(op.get("op", "")).strip().upper()
    name = OP_ALIASES.get(name, name)
    if name == "DELETE":
        return f"DELETE {_token(op.get('id', ''))}"
    head = [name, _token(op.get("type") or "other" if name == "ADD" else op.get("id", ""))]
    uncertain = str(op.get("status", "")).lower() == "uncertain"
    if op.get("confidence") is not None:
        head.append(_number(op["confidence"]) + ("?" if uncertain else ""))
    elif uncertain:
        head.append("?")
    sources = [str(s) for s in op.get("source_ids") or ()]
    if sources:
        head.append(",".join(sources))
    content = op.get("content")
    if content is None:
        return " ".join(head)
    return f"{' '.join(head)} | {_escape(str(content))}"


def format_current_fact(fact: Fact) -> str:
    r"""A current fact as the extraction prompt shows it: ``<id> <type> <confidence> | <content>``.

    The same shape as an ``UPDATE`` line, so the model reads what it writes; ``?`` marks an
    uncertain fact, another status that is not ``confirmed`` is shown in brackets.

    Example:
        >>> format_current_fact(Fact(id="f1", type="todo", content="Call Bo\nat 5",
        ...                          confidence=0.6, status="uncertain"))
        'f1 todo 0.6? | Call Bo\\nat 5'
    """
    return f"{fact.id} {fact_line_body(fact)}"


def fact_line_body(fact: Fact) -> str:
    r"""`format_current_fact` without the leading id: ``<type> <confidence> | <content>``.

    Example:
        >>> fact_line_body(Fact(id="f1", type="todo", content="Call Bo", confidence=0.6))
        'todo 0.6 | Call Bo'
    """
    mark = {"confirmed": "", "uncertain": "?"}.get(fact.status, f" [{fact.status}]")
    return f"{_token(fact.type)} {_number(fact.confidence)}{mark} | {_escape(fact.content)}"


def format_fact_lines(operations: Sequence[Mapping[str, Any]]) -> str:
    r"""Operations (JSON-schema dicts: ``op``, ``type``, ``content``...) as lines.

    Example:
        >>> print(format_fact_lines([{"op": "UPDATE", "id": "f-1", "confidence": 1,
        ...                           "content": "Lives in\nOslo"},
        ...                          {"op": "DELETE", "id": "f-2"}]))
        UPDATE f-1 1 | Lives in\nOslo
        DELETE f-2
        >>> format_fact_lines([])
        'NONE'
        >>> text = format_fact_lines([{"op": "ADD", "type": "todo", "content": "Call Bo | today",
        ...                           "confidence": 0.6, "status": "uncertain",
        ...                           "source_ids": ["m1", "m2"]}])
        >>> print(text)
        ADD todo 0.6? m1,m2 | Call Bo | today
        >>> parse_fact_lines(text)[0] == {"op": "ADD", "type": "todo", "content": "Call Bo | today",
        ...                               "confidence": 0.6, "status": "uncertain",
        ...                               "source_ids": ["m1", "m2"]}
        True
    """
    return "\n".join(_format_one(op) for op in operations) or "NONE"


def _read_head(name: str, tokens: list[str]) -> dict[str, Any]:
    item: dict[str, Any] = {"op": name}
    if name == "NONE":
        return item
    first_is_confidence = bool(tokens) and _CONFIDENCE.match(tokens[0]) is not None
    if tokens and not (name == "ADD" and first_is_confidence):
        item["type" if name == "ADD" else "id"] = tokens.pop(0)
    if tokens and (found := _CONFIDENCE.match(tokens[0])):
        tokens.pop(0)
        item["confidence"] = float(found.group(1)) / (100 if found.group(2) else 1)
        item["status"] = "uncertain" if found.group(3) else "confirmed"
    if "?" in tokens:
        item["status"] = "uncertain"
    sources = [s.strip(_ID_JUNK) for t in tokens if t != "?" for s in t.split(",")]
    if any(sources):
        item["source_ids"] = [s for s in sources if s]
    return item


def parse_fact_lines(text: str) -> list[dict[str, Any]] | None:
    r"""The operations written as lines in ``text``, or ``None`` when it holds no such line.

    Each operation line becomes a dict in the JSON operation schema (values still to be
    validated by the extractor, like a JSON item); lines that are not operations are
    skipped.

    Example:
        >>> delete, update = parse_fact_lines("Here:\n- DELETE f-9\nUPDATE f-1 0.8 m3 | A|B")
        >>> delete
        {'op': 'DELETE', 'id': 'f-9'}
        >>> update["id"], update["confidence"], update["source_ids"], update["content"]
        ('f-1', 0.8, ['m3'], 'A|B')
        >>> parse_fact_lines("NONE"), parse_fact_lines("I added nothing.")
        ([], None)
    """
    items: list[dict[str, Any]] = []
    found = False
    for line in text.split("\n"):  # not splitlines: contents may hold U+2028 etc.
        match = _OP_LINE.match(line.strip())
        if match is None:
            continue
        found = True
        name, rest = match.group(1), match.group(2)
        head, bar, content = rest.partition("|")
        item = _read_head(name, head.split())
        if name == "NONE":
            continue
        if bar and name != "DELETE":
            item["content"] = _unescape(content.strip())
        items.append(item)
    return items if found else None
