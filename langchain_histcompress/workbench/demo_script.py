"""The demo's conversation file: its dataclasses, its checks and its loader.

The file (``demo_data/conversation.json``) holds the user's turns, the scripted replies and
what every internal model call of the demo app answers: fact operations, standalone questions
and the running summary, scripted per round so that it can be asked for wherever the
compressor folds (docs/design/workbench.md).
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_histcompress.core.errors import ConfigurationError

__all__ = [
    "COUNTER_MODEL",
    "FACT_BATCH_ROUNDS",
    "MAX_CONTEXT_TOKENS",
    "MAX_PROMPT_FACTS",
    "REPHRASE_HISTORY_MESSAGES",
    "SCRIPT_FORMAT",
    "TOP_K_FACTS",
    "DemoScript",
    "ScriptedSession",
    "ScriptedTurn",
    "check_script",
    "load_script",
]

SCRIPT_FORMAT = "langchain-histcompress-demo/2"
"""Value of the ``format`` key of a demo conversation file."""

FACT_BATCH_ROUNDS = 4
"""Completed rounds sent to the fact extractor per call."""
REPHRASE_HISTORY_MESSAGES = 4
"""History messages the rephrasing call sees."""
TOP_K_FACTS = 8
"""Facts shown to the answering model per turn."""
MAX_PROMPT_FACTS = 16
"""Current facts shown to the fact extractor at most (the most relevant first)."""
MAX_CONTEXT_TOKENS = 8000
"""Tokens the app's context builder sends the answering model at most per turn (its own limit,
well inside the model's window)."""
COUNTER_MODEL = "gpt-4o-mini"
"""Model whose tiktoken encoding counts every token of the report."""

_ID_FORMAT = re.compile(r"^[A-Za-z0-9_.:-]+$")
_OPS = ("ADD", "UPDATE", "DELETE")


@dataclass(frozen=True)
class ScriptedTurn:
    """One round of the shipped conversation: the user's message and the scripted reply."""

    number: int
    """1-based position in the conversation."""
    session: int
    """Number of the session the turn belongs to."""
    user_id: str
    """Message id of the user's message."""
    user_text: str
    """What the user writes."""
    user_at: datetime
    """When the user writes it (timezone-aware)."""
    reply_id: str
    """Message id of the assistant's reply."""
    reply_text: str
    """The scripted reply (what the offline answering model says)."""
    reply_at: datetime
    """When the reply is sent."""
    standalone_question: str | None = None
    """For a follow-up question: the scripted standalone rephrasing; ``None`` otherwise."""


@dataclass(frozen=True)
class ScriptedSession:
    """A sitting of the conversation (the user comes back days later)."""

    number: int
    """1-based session number."""
    title: str
    """Short description of what the session is about."""
    start: datetime
    """When its first message is written."""


@dataclass(frozen=True)
class DemoScript:
    """The shipped conversation and the scripted answers of every internal model call."""

    title: str
    """What the conversation is about."""
    system_prompt: str
    """The application's system prompt."""
    sessions: tuple[ScriptedSession, ...]
    """The sessions, in order."""
    turns: tuple[ScriptedTurn, ...]
    """Every round, in order."""
    summaries: Mapping[str, Mapping[str, Any]]
    """Summarizer answer (``{"ConversationSummary": ..., "Variables": [...]}``) by the id of the
    newest message it covers: one for every message after the first round's (a summary through
    a user's message is the one through the round before it)."""
    fact_batches: Mapping[str, tuple[Mapping[str, Any], ...]]
    """Scripted fact operations by the id of the newest message of the extraction batch; an
    ``UPDATE`` / ``DELETE`` names its fact by the script ``key`` of the fact's ``ADD``."""
    key_contents: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Every content a fact key ever has in the script (to find its id in a prompt)."""

    def turn_by_user_id(self) -> dict[str, ScriptedTurn]:
        """The turns by the id of their user message."""
        return {t.user_id: t for t in self.turns}

    def standalone_by_question(self) -> dict[str, str]:
        """Scripted standalone questions by the exact follow-up text."""
        return {
            t.user_text.strip(): t.standalone_question
            for t in self.turns
            if t.standalone_question is not None
        }


def _parse_time(value: object, where: str, problems: list[str]) -> datetime | None:
    if not isinstance(value, str):
        problems.append(f"{where}: 'at' must be an ISO 8601 string")
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        problems.append(f"{where}: 'at' is not ISO 8601: {value!r}")
        return None
    if parsed.tzinfo is None:
        problems.append(f"{where}: 'at' has no timezone: {value!r}")
        return None
    return parsed


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _check_message(
    raw: object, where: str, seen: set[str], problems: list[str]
) -> tuple[str, datetime] | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{where} must be an object with id, at and text")
        return None
    message_id = raw.get("id")
    if not isinstance(message_id, str) or not _ID_FORMAT.match(message_id):
        problems.append(f"{where}: invalid id {message_id!r}")
        return None
    if message_id in seen:
        problems.append(f"{where}: id {message_id!r} repeats")
    seen.add(message_id)
    if not _text(raw.get("text")):
        problems.append(f"{where} ({message_id}): empty text")
    at = _parse_time(raw.get("at"), f"{where} ({message_id})", problems)
    return (message_id, at) if at is not None else None


def _check_turns(data: Mapping[str, Any], problems: list[str]) -> list[tuple[str, str]]:
    """Check sessions and turns; return (user id, reply id) per turn."""
    sessions = data.get("sessions")
    if not isinstance(sessions, list) or not sessions:
        problems.append("'sessions' must be a non-empty list")
        return []
    seen: set[str] = set()
    rounds: list[tuple[str, str]] = []
    follow_ups: set[str] = set()
    last: datetime | None = None
    for s_index, session in enumerate(sessions, 1):
        if not isinstance(session, Mapping) or not isinstance(session.get("turns"), list):
            problems.append(f"session {s_index}: must be an object with a 'turns' list")
            continue
        if session.get("number") != s_index:
            problems.append(f"session {s_index}: 'number' must be {s_index}")
        if not _text(session.get("title")):
            problems.append(f"session {s_index}: empty title")
        if not session["turns"]:
            problems.append(f"session {s_index}: no turns")
        for turn in session["turns"]:
            where = f"session {s_index} turn {len(rounds) + 1}"
            if not isinstance(turn, Mapping):
                problems.append(f"{where}: must be an object")
                continue
            user = _check_message(turn.get("user"), f"{where} user", seen, problems)
            reply = _check_message(turn.get("assistant"), f"{where} assistant", seen, problems)
            if user is None or reply is None:
                continue
            for label, at in (("user", user[1]), ("assistant", reply[1])):
                if last is not None and at <= last:
                    problems.append(f"{where}: {label} time is not after the previous message")
                last = at
            standalone = turn.get("standalone_question")
            if standalone is not None:
                question = str(turn["user"]["text"]).strip()
                if not _text(standalone) or "\n" in standalone or len(standalone) > 300:
                    problems.append(f"{where}: standalone_question must be one short line")
                if question in follow_ups:
                    problems.append(f"{where}: the follow-up text repeats an earlier one")
                follow_ups.add(question)
            rounds.append((user[0], reply[0]))
    return rounds


def _batch_ends(rounds: Sequence[tuple[str, str]], size: int, count: int) -> list[str]:
    return [rounds[size * (i + 1) - 1][1] for i in range(count)]


def _check_variables(raw: object, where: str, problems: list[str]) -> None:
    if not isinstance(raw, list) or not all(
        isinstance(v, Mapping) and all(_text(v.get(k)) for k in ("name", "type", "description"))
        for v in raw
    ):
        problems.append(f"{where}: variables must be objects with name, type, description")


def _check_turn_sections(
    turn: Mapping[str, Any], where: str, layout: Sequence[str], shown: set[str], problems: list[str]
) -> None:
    sections = turn.get("summary_sections", {})
    if not isinstance(sections, Mapping):
        problems.append(f"{where}: summary_sections must be an object")
        sections = {}
    for name, text in sections.items():
        if name not in layout:
            problems.append(f"{where}: summary section {name!r} is not in summary_layout")
        elif text is None:
            if name not in shown:
                problems.append(f"{where}: drops summary section {name!r}, which is not set")
            shown.discard(name)
        elif not _text(text):
            problems.append(f"{where}: summary section {name!r} must be non-empty text")
        else:
            shown.add(name)
    if "variables" in turn:
        _check_variables(turn["variables"], where, problems)
    if not shown:
        problems.append(f"{where}: the summary through this round would be empty")


def _check_summary_sections(data: Mapping[str, Any], problems: list[str]) -> None:
    """Check the layout, every round's sections and variables, and that no summary is empty."""
    layout = data.get("summary_layout")
    if (
        not isinstance(layout, list)
        or not layout
        or not all(_text(name) for name in layout)
        or len(set(layout)) != len(layout)
    ):
        problems.append("'summary_layout' must be a non-empty list of distinct section names")
        return
    shown: set[str] = set()
    turns = [
        turn
        for session in data.get("sessions") or ()
        if isinstance(session, Mapping)
        for turn in session.get("turns") or ()
    ]
    for number, turn in enumerate(turns, 1):
        if isinstance(turn, Mapping):
            _check_turn_sections(turn, f"turn {number}", layout, shown, problems)


def _composed_summaries(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The summarizer's answer through every message of a checked file, by message id."""
    layout: list[str] = list(data["summary_layout"])
    sections: dict[str, str] = {}
    variables: dict[str, dict[str, str]] = {}
    out: dict[str, dict[str, Any]] = {}
    previous: dict[str, Any] | None = None
    for session in data["sessions"]:
        for turn in session["turns"]:
            if previous is not None:
                out[turn["user"]["id"]] = previous
            for name, text in (turn.get("summary_sections") or {}).items():
                if text is None:
                    sections.pop(name, None)
                else:
                    sections[name] = text
            for variable in turn.get("variables") or ():
                variables[variable["name"]] = {
                    k: str(variable[k]) for k in ("name", "type", "description")
                }
            previous = {
                "ConversationSummary": "\n\n".join(
                    sections[name] for name in layout if name in sections
                ),
                "Variables": [dict(v) for v in variables.values()],
            }
            out[turn["assistant"]["id"]] = previous
    return out


def _check_op(
    op: object,
    where: str,
    batch_ids: set[str],
    alive: set[str],
    added: set[str],
    batch_added: set[str],
    problems: list[str],
) -> None:
    if not isinstance(op, Mapping) or op.get("op") not in _OPS:
        problems.append(f"{where}: op must be one of {list(_OPS)}")
        return
    key = op.get("key")
    if not _text(key):
        problems.append(f"{where}: every operation needs a script 'key'")
        return
    assert isinstance(key, str)
    name = op["op"]
    if name == "ADD":
        if key in added:
            problems.append(f"{where}: key {key!r} is added twice")
        added.add(key)
        alive.add(key)
        batch_added.add(key)
        if not _text(op.get("type")):
            problems.append(f"{where}: ADD needs a type")
        confidence = op.get("confidence")
        if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
            problems.append(f"{where}: confidence must be a number from 0 to 1")
    elif key not in alive:
        problems.append(f"{where}: {name} of key {key!r}, which is not a current fact")
        return
    elif key in batch_added:
        problems.append(
            f"{where}: {name} of key {key!r}, added in the same batch (the extractor cannot "
            "see that fact yet; put the final content in the ADD)"
        )
    if name == "DELETE":
        alive.discard(key)
        return
    if not _text(op.get("content")):
        problems.append(f"{where}: {name} needs a content")
    sources = op.get("source_ids")
    if not isinstance(sources, list) or not sources:
        problems.append(f"{where}: {name} needs source_ids")
        return
    for source in sources:
        if source not in batch_ids:
            problems.append(f"{where}: source id {source!r} is not a message of its batch")


def _check_fact_batches(
    data: Mapping[str, Any], rounds: Sequence[tuple[str, str]], problems: list[str]
) -> None:
    batches = data.get("fact_batches")
    if not isinstance(batches, list):
        problems.append("'fact_batches' must be a list")
        return
    expected = max(0, (len(rounds) - 1) // FACT_BATCH_ROUNDS)
    ends = _batch_ends(rounds, FACT_BATCH_ROUNDS, expected)
    throughs = [b.get("through") if isinstance(b, Mapping) else None for b in batches]
    if throughs != ends:
        problems.append(
            f"fact_batches must cover every {FACT_BATCH_ROUNDS} rounds in order, through "
            f"{ends[:3]}... ({expected} in all); got {throughs[:3]}... ({len(throughs)})"
        )
        return
    alive: set[str] = set()
    added: set[str] = set()
    for index, batch in enumerate(batches):
        first = index * FACT_BATCH_ROUNDS
        batch_ids = {i for r in rounds[first : first + FACT_BATCH_ROUNDS] for i in r}
        operations = batch.get("operations")
        if not isinstance(operations, list):
            problems.append(f"fact batch {index + 1}: 'operations' must be a list")
            continue
        batch_added: set[str] = set()
        for o_index, op in enumerate(operations):
            where = f"fact batch {index + 1} op {o_index + 1}"
            _check_op(op, where, batch_ids, alive, added, batch_added, problems)


def check_script(data: Mapping[str, Any]) -> list[str]:
    """Check a demo conversation file's JSON and return every problem found (empty: valid).

    Checks the format marker; unique, well-formed message ids; increasing timestamps; that the
    summary sections are those of ``summary_layout`` and leave no round with an empty summary,
    and that the variables are well formed; that the fact batches line up with the points where
    the demo app calls the extractor (every `FACT_BATCH_ROUNDS` completed rounds); that every
    id the script names exists (fact sources inside their own batch); and that ``UPDATE`` /
    ``DELETE`` name a current fact.

    Example:
        >>> check_script({"format": "nope"})[0]
        "'format' must be 'langchain-histcompress-demo/2'"
    """
    problems: list[str] = []
    if data.get("format") != SCRIPT_FORMAT:
        problems.append(f"'format' must be {SCRIPT_FORMAT!r}")
    for key in ("title", "system_prompt"):
        if not _text(data.get(key)):
            problems.append(f"{key!r} must be a non-empty string")
    rounds = _check_turns(data, problems)
    if rounds:
        _check_summary_sections(data, problems)
        _check_fact_batches(data, rounds, problems)
    return problems


def _script_from_json(data: Mapping[str, Any]) -> DemoScript:
    sessions: list[ScriptedSession] = []
    turns: list[ScriptedTurn] = []
    for session in data["sessions"]:
        number = int(session["number"])
        first = session["turns"][0]["user"]["at"]
        sessions.append(
            ScriptedSession(number, str(session["title"]), datetime.fromisoformat(first))
        )
        for turn in session["turns"]:
            user, reply = turn["user"], turn["assistant"]
            turns.append(
                ScriptedTurn(
                    number=len(turns) + 1,
                    session=number,
                    user_id=user["id"],
                    user_text=user["text"],
                    user_at=datetime.fromisoformat(user["at"]),
                    reply_id=reply["id"],
                    reply_text=reply["text"],
                    reply_at=datetime.fromisoformat(reply["at"]),
                    standalone_question=turn.get("standalone_question"),
                )
            )
    contents: dict[str, list[str]] = {}
    for batch in data["fact_batches"]:
        for op in batch["operations"]:
            if op.get("content"):
                contents.setdefault(op["key"], []).append(op["content"])
    return DemoScript(
        title=str(data["title"]),
        system_prompt=str(data["system_prompt"]),
        sessions=tuple(sessions),
        turns=tuple(turns),
        summaries=_composed_summaries(data),
        fact_batches={
            b["through"]: tuple(dict(op) for op in b["operations"]) for b in data["fact_batches"]
        },
        key_contents={k: tuple(v) for k, v in contents.items()},
    )


def load_script(path: str | os.PathLike[str] | None = None) -> DemoScript:
    """Load and check a demo conversation (default: the one shipped with the package).

    Raises:
        ConfigurationError: The file is missing, not JSON, or fails `check_script`.

    Example:
        >>> script = load_script()
        >>> len(script.turns), len(script.sessions), script.turns[0].user_id
        (64, 10, 'u01')
        >>> script = load_script()
        >>> script.turns[0].session, script.sessions[0].number
        (1, 1)
    """
    try:
        if path is None:
            resource = importlib.resources.files("langchain_histcompress.workbench").joinpath(
                "demo_data/conversation.json"
            )
            raw = resource.read_text(encoding="utf-8")
            where = "the packaged demo conversation"
        else:
            raw = Path(path).read_text(encoding="utf-8")
            where = str(path)
    except OSError as exc:
        msg = f"cannot read the demo conversation: {exc.strerror or exc}"
        raise ConfigurationError(msg) from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        msg = f"{where} is not valid JSON (line {exc.lineno}: {exc.msg})"
        raise ConfigurationError(msg) from None
    if not isinstance(data, Mapping):
        msg = f"{where} must hold a JSON object"
        raise ConfigurationError(msg)
    problems = check_script(data)
    if problems:
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        msg = f"{where} is not a valid demo script: {'; '.join(problems[:5])}{more}"
        raise ConfigurationError(msg)
    return _script_from_json(data)
