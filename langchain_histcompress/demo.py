"""The ``histcompress demo``: a LangGraph chat app that keeps a 64-turn conversation small.

The app is an ordinary ``StateGraph`` with a SQLite checkpointer::

    START -> extract_facts -> compress -> [rephrase, follow-ups only] -> model -> END

* ``extract_facts`` (`FactExtractionNode`) turns every four completed rounds into fact
  operations (``ADD`` / ``UPDATE`` / ``DELETE``) merged into the ``facts`` state key;
* ``compress`` (`RoundCompressionNode`) folds the oldest rounds into a running summary with
  the ``"code"`` profile (variables of the notebook session are kept), 4 rounds per call,
  the newest 3 rounds verbatim;
* ``rephrase`` (`HistoryRephraseNode`) turns a follow-up such as *"and what about the second
  city?"* into a standalone question, used to pick the facts shown to the model;
* ``model`` answers from the system prompt, the summary and the top facts as data
  (`ContextBuilder`), and the uncompressed rounds.

The conversation ships with the package (``demo_data/conversation.json``): ten sessions over
ten weeks in which Maya plans a trip to Lisbon and Porto (the dates change twice), collects
books and restaurants per city, and analyses last year's spending in pandas. Next to every
turn the file holds what the package's internal model calls answered: the summary JSON of
each compression point, the fact operations of each extraction batch and the standalone
question of each follow-up. `ScriptedChatModel` replays them, keyed on the message ids the
package's prompts show (the ``<message id="...">`` elements of `render.render_transcript`),
so the package's real prompt -> parse -> merge path runs offline, deterministically and
without any key. With ``--model provider:name`` a real chat model does the answering,
summarizing, extracting and rephrasing instead.

Every model call is metered with `TiktokenCounter` (prompt + completion tokens); the report
compares them with sending the full history on every turn. At the end the app is closed and
the thread is reopened from the SQLite file for one more turn: the stored summary and facts
are picked up as they are, with no summarizer call beyond what the new turn itself needs.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> run_demo(["--turns", "8", "--quiet"], writer=out)
    0
    >>> print(out.getvalue())  # doctest: +ELLIPSIS
    resumed from checkpoint: summary v1, 8 facts, 0 extra summarizer calls
    savings: ...% (... vs ... billed tokens, 8 turns)
    <BLANKLINE>
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib.resources
import json
import logging
import os
import re
import sqlite3
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import ConfigDict, InstanceOf, PrivateAttr

from langchain_histcompress.compressor import RoundCompressor
from langchain_histcompress.context import ContextBuilder
from langchain_histcompress.errors import ConfigurationError, HistCompressError
from langchain_histcompress.facts import Fact, facts_from_state, normalize_content
from langchain_histcompress.memory import FactExtractionNode
from langchain_histcompress.nodes import (
    HistCompressState,
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
)
from langchain_histcompress.render import message_text
from langchain_histcompress.rephrase import HistoryRephraseNode
from langchain_histcompress.rounds import ensure_ids
from langchain_histcompress.summary import RunningSummary
from langchain_histcompress.tokens import TiktokenCounter

__all__ = [
    "CallKind",
    "DemoReport",
    "DemoScript",
    "DemoState",
    "ResumeRecord",
    "ScriptedChatModel",
    "ScriptedSession",
    "ScriptedTurn",
    "TurnRecord",
    "UsageMeter",
    "build_demo_graph",
    "check_script",
    "load_script",
    "replay_conversation",
    "run_demo",
]

logger = logging.getLogger(__name__)

SCRIPT_FORMAT = "langchain-histcompress-demo/1"
"""Value of the ``format`` key of a demo conversation file."""

ROUNDS_TO_COMPRESS = 4
"""Rounds folded into the running summary per summarizer call."""
ROUNDS_TO_RETAIN = 3
"""Newest rounds always kept verbatim."""
FACT_BATCH_ROUNDS = 4
"""Completed rounds sent to the fact extractor per call."""
REPHRASE_HISTORY_MESSAGES = 4
"""History messages the rephrasing call sees."""
TOP_K_FACTS = 8
"""Facts shown to the answering model per turn."""
MAX_PROMPT_FACTS = 16
"""Current facts shown to the fact extractor at most (the most relevant first)."""
MAX_CONTEXT_TOKENS = 8000
"""Budget of the answering model's context."""
COUNTER_MODEL = "gpt-4o-mini"
"""Model whose tiktoken encoding counts every token of the report."""

CallKind = str
"""``"answer"``, ``"summarize"``, ``"extract"`` or ``"rephrase"``."""
_KINDS: tuple[str, ...] = ("answer", "summarize", "extract", "rephrase")
_NODE_KINDS = {
    "model": "answer",
    "compress": "summarize",
    "extract_facts": "extract",
    "rephrase": "rephrase",
}
_CALL_KINDS = {"summarize": "summarize", "extract_facts": "extract"}

_PROG = "histcompress demo"
_MESSAGE_ID = re.compile(r'<message\b[^>]*?\bid="([^"]*)"')
_ID_FORMAT = re.compile(r"^[A-Za-z0-9_.:-]+$")
_OPS = ("ADD", "UPDATE", "DELETE")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_KEY_ENV: Mapping[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "azure_openai": ("AZURE_OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google_genai": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
    "mistralai": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "perplexity": ("PPLX_API_KEY",),
}


# --------------------------------------------------------------------------- the script


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
    newest message it covers."""
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


def _check_summaries(
    data: Mapping[str, Any], rounds: Sequence[tuple[str, str]], problems: list[str]
) -> None:
    summaries = data.get("summaries")
    if not isinstance(summaries, list):
        problems.append("'summaries' must be a list")
        return
    expected = max(0, (len(rounds) - max(ROUNDS_TO_RETAIN, 1)) // ROUNDS_TO_COMPRESS)
    ends = _batch_ends(rounds, ROUNDS_TO_COMPRESS, expected)
    throughs = [s.get("through") if isinstance(s, Mapping) else None for s in summaries]
    if throughs != ends:
        problems.append(
            f"summaries must cover every {ROUNDS_TO_COMPRESS} rounds in order, through "
            f"{ends[:3]}... ({expected} in all); got {throughs[:3]}... ({len(throughs)})"
        )
    for index, entry in enumerate(summaries):
        output = entry.get("output") if isinstance(entry, Mapping) else None
        where = f"summary {index + 1}"
        if not isinstance(output, Mapping) or not _text(output.get("ConversationSummary")):
            problems.append(f"{where}: output needs a non-empty ConversationSummary")
            continue
        variables = output.get("Variables", [])
        if not isinstance(variables, list) or not all(
            isinstance(v, Mapping) and all(_text(v.get(k)) for k in ("name", "type", "description"))
            for v in variables
        ):
            problems.append(f"{where}: Variables must be objects with name, type, description")


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
    scripted summaries and fact batches line up with the points where the demo app calls the
    summarizer (every `ROUNDS_TO_COMPRESS` rounds, `ROUNDS_TO_RETAIN` kept) and the extractor
    (every `FACT_BATCH_ROUNDS` completed rounds); that every id the script names exists (fact
    sources inside their own batch); and that ``UPDATE`` / ``DELETE`` name a current fact.

    Example:
        >>> check_script({"format": "nope"})[0]
        "'format' must be 'langchain-histcompress-demo/1'"
    """
    problems: list[str] = []
    if data.get("format") != SCRIPT_FORMAT:
        problems.append(f"'format' must be {SCRIPT_FORMAT!r}")
    for key in ("title", "system_prompt"):
        if not _text(data.get(key)):
            problems.append(f"{key!r} must be a non-empty string")
    rounds = _check_turns(data, problems)
    if rounds:
        _check_summaries(data, rounds, problems)
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
        summaries={s["through"]: dict(s["output"]) for s in data["summaries"]},
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
    """
    try:
        if path is None:
            resource = importlib.resources.files("langchain_histcompress").joinpath(
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


# --------------------------------------------------------------------------- scripted model


def _block(text: str, tag: str) -> str | None:
    start = text.rfind(f"<{tag}")
    if start < 0:
        return None
    open_end = text.find(">", start)
    end = text.find(f"</{tag}>", open_end)
    if open_end < 0 or end < 0:
        return None
    return text[open_end + 1 : end]


class ScriptedChatModel(BaseChatModel):
    """Offline chat model that plays every role of the demo from the shipped script.

    It recognises the prompt in front of it and answers with the scripted output:

    * the answering call (its last message is a scripted user message, by id): the reply;
    * a summarizer prompt (``<conversation>`` + the ``ConversationSummary`` format): the
      summary scripted for the newest ``<message id="...">`` shown;
    * a fact-extraction prompt (``<new_messages>``): the operations scripted for the newest
      message id shown, ``UPDATE`` / ``DELETE`` pointed at the fact ids the prompt's
      ``<current_facts>`` block shows (the package assigns fact ids, the script cannot);
    * a rephrasing prompt (``<question>``): the scripted standalone question.

    Anything else raises `ConfigurationError`, so a prompt that drifts from the script fails
    loudly. Usage metadata counts prompt and reply with the model's `TiktokenCounter`.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> model = ScriptedChatModel(script=load_script())
        >>> print(model.invoke([HumanMessage("How would you split the nights?", id="u03")])
        ...       .content[:32])
        For a relaxed pace I'd do 8 nigh
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: InstanceOf[DemoScript]
    """The conversation and its scripted internal outputs."""
    counter: InstanceOf[TiktokenCounter] | None = None
    """Token counter for the usage metadata (default: the ``gpt-4o-mini`` encoding)."""
    _replies: dict[str, ScriptedTurn] = PrivateAttr(default_factory=dict)
    _standalone: dict[str, str] = PrivateAttr(default_factory=dict)
    _tokens: TiktokenCounter = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Build the lookups."""
        super().model_post_init(context)
        self._replies = self.script.turn_by_user_id()
        self._standalone = self.script.standalone_by_question()
        self._tokens = self.counter or TiktokenCounter(COUNTER_MODEL)

    @property
    def _llm_type(self) -> str:
        return "histcompress-demo-script"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"script": self.script.title}

    def reply_for(self, messages: Sequence[BaseMessage]) -> str:
        """The scripted answer to a prompt (see the class docstring)."""
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage) and last.id in self._replies:
            return self._replies[last.id].reply_text
        text = "\n".join(message_text(m) for m in messages)
        # Conversation text is escaped inside every package prompt, so these tags are the
        # package's own delimiters.
        if "<new_messages>" in text:
            return self._fact_operations(text)
        if "<question>" in text:
            return self._rephrasing(text)
        if "<conversation>" in text and "ConversationSummary" in text:
            return self._summary(text)
        msg = "the demo script has no answer for this prompt (not a scripted turn or call)"
        raise ConfigurationError(msg)

    @staticmethod
    def _newest_id(block: str | None, what: str) -> str:
        ids = [html.unescape(m) for m in _MESSAGE_ID.findall(block or "")]
        if not ids:
            msg = f"the {what} prompt shows no <message id=...> element"
            raise ConfigurationError(msg)
        return ids[-1]

    def _summary(self, text: str) -> str:
        through = self._newest_id(_block(text, "conversation"), "summarizer")
        output = self.script.summaries.get(through)
        if output is None:
            msg = f"the demo script has no summary for messages through {through!r}"
            raise ConfigurationError(msg)
        return json.dumps(output, ensure_ascii=False)

    def _shown_facts(self, text: str) -> dict[str, str]:
        block = _block(text, "current_facts") or ""
        shown: dict[str, str] = {}
        for line in block.splitlines():
            line = html.unescape(line.strip())
            if not line.startswith("{"):
                continue
            fact = json.loads(line)
            shown[normalize_content(str(fact["content"]))] = str(fact["id"])
        return shown

    def _fact_id(self, key: str, shown: Mapping[str, str]) -> str:
        for content in reversed(self.script.key_contents.get(key, ())):
            fact_id = shown.get(normalize_content(content))
            if fact_id is not None:
                return fact_id
        msg = f"the extraction prompt does not show the scripted fact {key!r}"
        raise ConfigurationError(msg)

    def _fact_operations(self, text: str) -> str:
        through = self._newest_id(_block(text, "new_messages"), "extraction")
        operations = self.script.fact_batches.get(through)
        if operations is None:
            msg = f"the demo script has no fact operations for messages through {through!r}"
            raise ConfigurationError(msg)
        shown = self._shown_facts(text)
        out: list[dict[str, Any]] = []
        for op in operations:
            item = {k: v for k, v in op.items() if k != "key"}
            if op["op"] != "ADD":
                item["id"] = self._fact_id(str(op["key"]), shown)
            out.append(item)
        return json.dumps(out, ensure_ascii=False)

    def _rephrasing(self, text: str) -> str:
        question = html.unescape(_block(text, "question") or "").strip()
        standalone = self._standalone.get(question)
        if standalone is None:
            msg = "the demo script has no standalone question for this follow-up"
            raise ConfigurationError(msg)
        return standalone

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self.reply_for(messages)
        counter = self._tokens
        prompt_tokens = counter.count_messages(messages)
        completion_tokens = counter.count_text(reply)
        usage = UsageMetadata(
            input_tokens=prompt_tokens,
            output_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(reply, usage_metadata=usage))]
        )


# --------------------------------------------------------------------------- metering


@dataclass(frozen=True)
class _Call:
    turn: int
    kind: CallKind
    prompt_tokens: int
    completion_tokens: int


class UsageMeter(BaseCallbackHandler):
    """Callback handler that bills every chat-model call of a run, by kind and turn.

    Prompt and completion tokens are counted with one `TiktokenCounter` for every model (the
    same counter measures the full-history baseline). The kind comes from the package's own
    call metadata (``histcompress_call``) or from the graph node that made the call.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> meter = UsageMeter(TiktokenCounter())
        >>> model = ScriptedChatModel(script=load_script())
        >>> _ = model.invoke([HumanMessage("hi", id="u01")], {"callbacks": [meter],
        ...                  "metadata": {"langgraph_node": "model"}})
        >>> [(c.kind, c.prompt_tokens) for c in meter.calls]
        [('answer', 8)]
    """

    def __init__(self, counter: TiktokenCounter) -> None:
        """Meter with ``counter``; `turn` tags the calls that follow."""
        super().__init__()
        self.counter = counter
        self.turn = 0
        self.calls: list[_Call] = []
        self._pending: dict[UUID, tuple[int, str, int]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _kind(metadata: Mapping[str, Any] | None) -> str:
        meta = metadata or {}
        call = _CALL_KINDS.get(str(meta.get("histcompress_call")))
        if call is not None:
            return call
        return _NODE_KINDS.get(str(meta.get("langgraph_node")), "other")

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Count the prompt."""
        prompt = sum(self.counter.count_messages(batch) for batch in messages)
        with self._lock:
            self._pending[run_id] = (self.turn, self._kind(metadata), prompt)

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Count the completion and record the call."""
        with self._lock:
            pending = self._pending.pop(run_id, None)
        if pending is None:
            return
        completion = 0
        for generations in response.generations:
            for generation in generations:
                if isinstance(generation, ChatGeneration):
                    completion += self.counter.count_text(message_text(generation.message))
                else:
                    completion += self.counter.count_text(generation.text)
        turn, kind, prompt = pending
        with self._lock:
            self.calls.append(_Call(turn, kind, prompt, completion))

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Forget a failed call (nothing billed is known)."""
        with self._lock:
            self._pending.pop(run_id, None)

    def for_turn(self, turn: int) -> list[_Call]:
        """The calls recorded while `turn` was ``turn``."""
        with self._lock:
            return [c for c in self.calls if c.turn == turn]


# --------------------------------------------------------------------------- the app


class DemoState(HistCompressState, total=False):
    """Graph state of the demo app: `HistCompressState` plus the per-turn inputs."""

    follow_up: bool
    """The latest question is a follow-up: rephrase it before answering."""
    standalone_question: str | None
    """The rephrased follow-up (``None`` when the turn is not a follow-up)."""
    rephrase_report: dict[str, Any] | None
    """What the rephrasing node did this turn."""
    reply_id: str
    """Message id the reply of this turn gets."""
    reply_at: str
    """ISO time stamp of the reply."""


class _Clock:
    """The conversation's time: internal records are stamped with it, not with wall time."""

    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def _route(state: Mapping[str, Any]) -> str:
    return "rephrase" if state.get("follow_up") else "model"


def build_demo_graph(
    model: BaseChatModel,
    *,
    counter: TiktokenCounter,
    checkpointer: BaseCheckpointSaver[Any],
    clock: Callable[[], datetime] | None = None,
    offline: bool = True,
) -> tuple[CompiledStateGraph[Any, Any, Any, Any], RoundCompressor]:
    """Build the demo app: facts -> compress -> (rephrase) -> model, with a checkpointer.

    Args:
        model: The chat model for every role (scripted or real).
        counter: Token counter of the compressor and the context builder.
        checkpointer: Where the graph stores its state (SQLite in the demo).
        clock: Time stamp of summaries and facts (default: wall time).
        offline: Scripted model: no retries and no timeouts (a mismatch should fail at once).

    Returns:
        The compiled graph and its `RoundCompressor` (to plan what a turn will fold).

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> graph, compressor = build_demo_graph(ScriptedChatModel(script=load_script()),
        ...     counter=TiktokenCounter(), checkpointer=InMemorySaver())
        >>> sorted(graph.nodes)
        ['__start__', 'compress', 'extract_facts', 'model', 'rephrase']
    """
    retries = 0 if offline else 2
    compressor = RoundCompressor(
        model,
        rounds_to_compress=ROUNDS_TO_COMPRESS,
        rounds_to_retain=ROUNDS_TO_RETAIN,
        profile="code",
        token_counter=counter,
        max_retries=retries,
        timeout=None if offline else 120.0,
        retry_backoff=0.0 if offline else 1.0,
        clock=clock,
    )
    facts = FactExtractionNode(
        model,
        batch_rounds=FACT_BATCH_ROUNDS,
        use_runtime_store=False,
        max_retries=retries,
        retry_backoff=0.0 if offline else 0.5,
        max_prompt_facts=MAX_PROMPT_FACTS,
        now=clock,
        name="extract_facts",
    )
    rephrase = HistoryRephraseNode(
        model,
        history_message_count=REPHRASE_HISTORY_MESSAGES,
        summary_key="running_summary",
        metadata_key="rephrase_report",
        timeout=None if offline else 60.0,
    )
    builder = ContextBuilder(
        max_context_tokens=MAX_CONTEXT_TOKENS, token_counter=counter, top_k_facts=TOP_K_FACTS
    )

    def answer(state: DemoState, config: RunnableConfig) -> dict[str, Any]:
        view = state.get("model_input") or build_model_input(state)
        context = builder.build(
            view,
            summary=summary_from_state(state),
            facts=state.get("facts"),
            query=state.get("standalone_question") or None,
        )
        reply = model.invoke(context, config)
        message = AIMessage(
            content=reply.content,
            id=state.get("reply_id"),
            additional_kwargs={"timestamp": state.get("reply_at")},
        )
        return {"messages": [message]}

    graph = StateGraph(DemoState)
    graph.add_node("extract_facts", facts)
    graph.add_node("compress", RoundCompressionNode(compressor))
    graph.add_node("rephrase", rephrase)
    graph.add_node("model", answer)
    graph.add_edge(START, "extract_facts")
    graph.add_edge("extract_facts", "compress")
    graph.add_conditional_edges("compress", _route, {"rephrase": "rephrase", "model": "model"})
    graph.add_edge("rephrase", "model")
    graph.add_edge("model", END)
    return graph.compile(checkpointer=checkpointer), compressor


# --------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class TurnRecord:
    """What one turn cost and changed."""

    number: int
    """Turn number."""
    session: int
    """Session number."""
    sent_tokens: int
    """Prompt tokens of the answering call."""
    full_tokens: int
    """Prompt tokens the full history would have cost (system + every message)."""
    reply_tokens: int
    """Completion tokens of the answer (billed in both cases)."""
    billed: Mapping[str, tuple[int, int]]
    """Calls and tokens (prompt + completion) of this turn, by kind."""
    summary_version: int
    """Running summary version after the turn (0: none yet)."""
    fact_count: int
    """Facts in state after the turn."""
    facts_added: int
    """Facts added by this turn's extraction."""
    facts_updated: int
    """Facts updated (content changed or merged) by this turn's extraction."""
    facts_deleted: int
    """Facts deleted by this turn's extraction."""
    extraction_status: str
    """Status of this turn's extraction (``ok`` / ``empty`` / ``failed`` / ``skipped``)."""
    standalone_question: str | None
    """The standalone question used this turn (follow-ups only)."""
    rephrase_fallback: str | None
    """Why a follow-up kept its original wording (``None`` when rephrased or not a follow-up)."""
    resumed: bool = False
    """The turn ran on the app reopened from the checkpoint."""


@dataclass(frozen=True)
class ResumeRecord:
    """The reopened thread: what was restored and what the next turn cost."""

    thread_id: str
    """The LangGraph thread id."""
    messages: int
    """Messages restored from the checkpoint."""
    summary_version: int
    """Restored summary version (0: none)."""
    rounds_covered: int
    """Rounds the restored summary covers."""
    facts: int
    """Facts restored."""
    matches_before: bool
    """The restored summary and facts equal those in memory before the app was closed."""
    expected_summarizer_calls: int
    """Summarizer calls the new turn needs by itself (planned on the restored summary)."""
    summarizer_calls: int
    """Summarizer calls the new turn made."""

    @property
    def extra_summarizer_calls(self) -> int:
        """Calls beyond what the new turn needed (0 when nothing was summarized again)."""
        return self.summarizer_calls - self.expected_summarizer_calls


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured."""

    offline: bool
    """Scripted replay (``True``) or a real model."""
    model: str
    """The model's name."""
    turns: tuple[TurnRecord, ...]
    """One record per turn, in order."""
    summary: RunningSummary | None
    """The final running summary."""
    facts: dict[str, Fact]
    """The final facts by id."""
    resume: ResumeRecord | None
    """The reopened thread (``None`` when only one turn ran)."""
    db_path: str
    """The SQLite file of the checkpointer."""

    def billed_by_kind(self) -> dict[str, tuple[int, int]]:
        """Calls and billed tokens per kind over the whole run."""
        out: dict[str, tuple[int, int]] = {}
        for turn in self.turns:
            for kind, (calls, tokens) in turn.billed.items():
                before = out.get(kind, (0, 0))
                out[kind] = (before[0] + calls, before[1] + tokens)
        return out

    @property
    def billed_tokens(self) -> int:
        """Prompt + completion tokens of every model call, the package's own included."""
        return sum(tokens for _, tokens in self.billed_by_kind().values())

    @property
    def full_history_tokens(self) -> int:
        """What answering with the full history every turn would have billed."""
        return sum(t.full_tokens + t.reply_tokens for t in self.turns)

    @property
    def savings(self) -> float:
        """``1 - billed / full history``."""
        full = self.full_history_tokens
        return 1 - self.billed_tokens / full if full else 0.0

    @property
    def internal_share(self) -> float:
        """Share of the billed tokens spent on the package's own calls (not answering)."""
        billed = self.billed_tokens
        answer = self.billed_by_kind().get("answer", (0, 0))[1]
        return (billed - answer) / billed if billed else 0.0

    @property
    def updates_applied(self) -> int:
        """Fact updates applied over the run."""
        return sum(t.facts_updated for t in self.turns)


def _known_codec(name: str) -> bool:
    try:
        "".encode(name)
    except LookupError:
        return False
    return True


class _Printer:
    def __init__(self, writer: TextIO, *, quiet: bool) -> None:
        self.writer = writer
        self.quiet = quiet
        encoding = getattr(writer, "encoding", None) or "utf-8"
        try:
            "█░─·→…€–".encode(encoding)
            self.encoding: str | None = None
        except (UnicodeEncodeError, LookupError):
            self.encoding = encoding if _known_codec(encoding) else "ascii"
        self.fancy = self.encoding is None
        self.dot = " · " if self.fancy else " | "

    def line(self, text: str = "", *, always: bool = False) -> None:
        if always or not self.quiet:
            if self.encoding is not None:
                text = text.encode(self.encoding, "replace").decode(self.encoding)
            print(text, file=self.writer)

    def rule(self, text: str) -> None:
        dash = "─" if self.fancy else "-"
        self.line(f"{dash * 2} {text} ".ljust(98, dash))

    def session(self, session: ScriptedSession) -> None:
        dot = self.dot
        self.rule(f"session {session.number}{dot}{_when(session.start)}{dot}{session.title}")

    def bar(self, share: float, width: int = 12) -> str:
        filled = max(0, min(width, round(share * width)))
        full, empty = ("█", "░") if self.fancy else ("#", ".")
        return full * filled + empty * (width - filled)


def _when(moment: datetime) -> str:
    return (
        f"{_DAYS[moment.weekday()]} {moment.day} {_MONTHS[moment.month - 1]} "
        f"{moment.year} {moment:%H:%M}"
    )


def _summary_version(state: Mapping[str, Any]) -> tuple[RunningSummary | None, int]:
    summary = summary_from_state(state)
    return summary, summary.version if summary is not None else 0


def _turn_line(printer: _Printer, record: TurnRecord) -> None:
    share = record.sent_tokens / record.full_tokens if record.full_tokens else 1.0
    version = f"v{record.summary_version}" if record.summary_version else "--"
    events: list[str] = []
    if record.billed.get("summarize", (0, 0))[0]:
        events.append("summarized")
    changes = [
        f"{sign}{count}"
        for sign, count in (
            ("+", record.facts_added),
            ("~", record.facts_updated),
            ("-", record.facts_deleted),
        )
        if count
    ]
    if changes:
        events.append("facts " + " ".join(changes))
    if record.extraction_status == "failed":
        events.append("extraction FAILED")
    if record.standalone_question is not None:
        events.append("rephrased")
    elif record.rephrase_fallback is not None:
        events.append(f"rephrase fell back ({record.rephrase_fallback})")
    printer.line(
        f"turn {record.number:2d}  {record.sent_tokens:5,} / {record.full_tokens:5,} tok  "
        f"{printer.bar(share)} {share:4.0%}  summary {version:>3}  facts {record.fact_count:2d}"
        + (f"  {', '.join(events)}" if events else "")
    )


@dataclass
class _Run:
    script: DemoScript
    model_factory: Callable[[], BaseChatModel]
    offline: bool
    counter: TiktokenCounter
    meter: UsageMeter
    clock: _Clock
    printer: _Printer
    history: list[BaseMessage] = field(default_factory=list)
    records: list[TurnRecord] = field(default_factory=list)

    def turn(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        config: RunnableConfig,
        turn: ScriptedTurn,
        *,
        resumed: bool = False,
    ) -> dict[str, Any]:
        self.meter.turn = turn.number
        self.clock.now = turn.user_at
        question = HumanMessage(
            turn.user_text,
            id=turn.user_id,
            additional_kwargs={"timestamp": turn.user_at.isoformat()},
        )
        if not self.history:
            self.history.append(SystemMessage(self.script.system_prompt, id="system"))
            new: list[BaseMessage] = [self.history[0], question]
        else:
            new = [question]
        full = self.counter.count_messages([*self.history, question])
        inputs: dict[str, Any] = {
            "messages": new,
            "follow_up": turn.standalone_question is not None,
            "standalone_question": None,
            "rephrase_report": None,
            "reply_id": turn.reply_id,
            "reply_at": turn.reply_at.isoformat(),
        }
        state: dict[str, Any] = graph.invoke(inputs, config)
        reply = state["messages"][-1]
        self.history += [question, reply]
        calls = self.meter.for_turn(turn.number)
        billed: dict[str, tuple[int, int]] = {}
        for call in calls:
            before = billed.get(call.kind, (0, 0))
            billed[call.kind] = (
                before[0] + 1,
                before[1] + call.prompt_tokens + call.completion_tokens,
            )
        answers = [c for c in calls if c.kind == "answer"]
        report = state.get("facts_extraction") or {}
        rephrase = state.get("rephrase_report") or {}
        _, version = _summary_version(state)
        record = TurnRecord(
            number=turn.number,
            session=turn.session,
            sent_tokens=sum(c.prompt_tokens for c in answers),
            full_tokens=full,
            reply_tokens=sum(c.completion_tokens for c in answers),
            billed=billed,
            summary_version=version,
            fact_count=len(state.get("facts") or {}),
            facts_added=len(report.get("added", ())),
            facts_updated=len(report.get("updated", ())),
            facts_deleted=len(report.get("deleted", ())),
            extraction_status=str(report.get("status", "skipped")),
            standalone_question=state.get("standalone_question")
            if rephrase.get("rephrased")
            else None,
            rephrase_fallback=rephrase.get("fallback_reason") if rephrase else None,
            resumed=resumed,
        )
        self.records.append(record)
        _turn_line(self.printer, record)
        return state


def _free_thread(saver: BaseCheckpointSaver[Any], base: str) -> str:
    number = 1
    while saver.get_tuple({"configurable": {"thread_id": f"{base}-{number}"}}) is not None:
        number += 1
    return f"{base}-{number}"


def _model_name(model: BaseChatModel) -> str:
    for attribute in ("model_name", "model"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def replay_conversation(
    script: DemoScript,
    *,
    model: BaseChatModel | None = None,
    turns: int | None = None,
    db_path: str | os.PathLike[str] | None = None,
    writer: TextIO | None = None,
    quiet: bool = False,
) -> DemoReport:
    """Replay ``script`` through the demo app, print the progress and return the figures.

    The first ``turns - 1`` turns run on one app instance; then the app and its SQLite
    connection are closed, the thread is reopened from the file by a freshly built app (with
    fresh scripted model objects when offline) and the last turn runs there.

    Args:
        script: The conversation (see `load_script`).
        model: A real chat model for every role; ``None`` replays the script offline.
        turns: How many turns to replay (default: all; at least 2).
        db_path: SQLite file of the checkpointer (default: a temporary file).
        writer: Where the progress goes (default: ``sys.stdout``).
        quiet: Print only the resume and savings lines.

    Raises:
        ConfigurationError: ``turns`` is out of range, or the database cannot be opened.
        HistCompressError: A model call failed in a way the graph does not absorb.

    Example:
        >>> import io
        >>> report = replay_conversation(load_script(), turns=6, writer=io.StringIO())
        >>> [t.fact_count for t in report.turns], report.resume.summarizer_calls
        ([0, 0, 0, 0, 8, 8], 0)
    """
    total = len(script.turns)
    count = total if turns is None else turns
    if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= total:
        msg = f"turns must be an integer from 2 to {total}, got {turns!r}"
        raise ConfigurationError(msg)
    printer = _Printer(writer or sys.stdout, quiet=quiet)
    counter = TiktokenCounter(COUNTER_MODEL)
    offline = model is None
    real = model

    def factory() -> BaseChatModel:
        return ScriptedChatModel(script=script, counter=counter) if real is None else real

    run = _Run(
        script=script,
        model_factory=factory,
        offline=offline,
        counter=counter,
        meter=UsageMeter(counter),
        clock=_Clock(),
        printer=printer,
    )
    with contextlib.ExitStack() as stack:
        if db_path is None:
            folder = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="histcompress-demo-", ignore_cleanup_errors=True)
            )
            path = Path(folder) / "demo.sqlite"
        else:
            path = Path(db_path).expanduser()
            if not path.parent.is_dir():
                msg = f"--db folder does not exist: {path.parent}"
                raise ConfigurationError(msg)
        report = _replay(run, script, count, path)
    return report


@contextlib.contextmanager
def _open_saver(path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open a SQLite checkpointer on ``path``, closed again on exit."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    try:
        connection = sqlite3.connect(str(path), check_same_thread=False)
    except sqlite3.Error as exc:
        msg = f"cannot open the SQLite checkpoint file {path}: {exc}"
        raise ConfigurationError(msg) from exc
    try:
        saver = SqliteSaver(connection)
        try:
            saver.setup()
        except sqlite3.Error as exc:
            msg = f"cannot use the SQLite checkpoint file {path}: {exc}"
            raise ConfigurationError(msg) from exc
        yield saver
    finally:
        connection.close()


def _replay(run: _Run, script: DemoScript, count: int, path: Path) -> DemoReport:
    printer = run.printer
    turns = script.turns[:count]
    model = run.model_factory()
    mode = "offline replay (scripted models, no key)" if run.offline else _model_name(model)
    printer.line(f"langchain-histcompress demo: {script.title}")
    printer.line(
        f"{count} of {len(script.turns)} turns over {turns[-1].session} sessions; models: {mode}"
    )
    printer.line(
        "graph: START -> extract_facts -> compress -> [rephrase] -> model -> END, "
        "SQLite checkpointer"
    )
    printer.line(
        f"compression: {ROUNDS_TO_COMPRESS} rounds per summarizer call, newest "
        f"{ROUNDS_TO_RETAIN} kept verbatim, profile 'code'"
    )
    printer.line(
        f"facts: extracted every {FACT_BATCH_ROUNDS} rounds, top {TOP_K_FACTS} shown to the "
        f"model; tokens: tiktoken {COUNTER_MODEL}"
    )
    with _open_saver(path) as saver:
        thread_id = _free_thread(saver, "histcompress-demo")
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id},
            "callbacks": [run.meter],
        }
        printer.line(f"checkpoints: {path} (thread {thread_id})")
        printer.line(
            "each turn: prompt tokens sent to the answering model / with the full history, "
            "summary version, facts"
        )
        graph, _ = build_demo_graph(
            model, counter=run.counter, checkpointer=saver, clock=run.clock, offline=run.offline
        )
        session = 0
        state: dict[str, Any] = {}
        for turn in turns[:-1]:
            if turn.session != session:
                session = turn.session
                printer.session(script.sessions[session - 1])
            state = run.turn(graph, config, turn)
        before_summary, _ = _summary_version(state)
        before_facts = state.get("facts") or {}
    printer.rule("app closed; reopening the thread from the SQLite file")
    last = turns[-1]
    with _open_saver(path) as saver:
        graph, compressor = build_demo_graph(
            run.model_factory(),
            counter=run.counter,
            checkpointer=saver,
            clock=run.clock,
            offline=run.offline,
        )
        restored = dict(graph.get_state(config).values)
        messages = list(restored.get("messages") or [])
        summary, version = _summary_version(restored)
        facts_restored = restored.get("facts") or {}
        printer.line(
            f"restored: {len(messages)} messages, "
            + (
                f"summary v{version} covering {summary.rounds_covered} rounds, "
                if summary is not None
                else "no summary yet, "
            )
            + f"{len(facts_restored)} facts"
        )
        question = HumanMessage(last.user_text, id=last.user_id)
        plan = compressor.plan(ensure_ids([*messages, question]), summary)
        if last.session != turns[-2].session:
            printer.session(script.sessions[last.session - 1])
        state = run.turn(graph, config, last, resumed=True)
        calls = run.records[-1].billed.get("summarize", (0, 0))[0]
    resume = ResumeRecord(
        thread_id=thread_id,
        messages=len(messages),
        summary_version=version,
        rounds_covered=summary.rounds_covered if summary is not None else 0,
        facts=len(facts_restored),
        matches_before=summary == before_summary and facts_restored == before_facts,
        expected_summarizer_calls=len(plan.chunks),
        summarizer_calls=calls,
    )
    final_summary, _ = _summary_version(state)
    return DemoReport(
        offline=run.offline,
        model=mode,
        turns=tuple(run.records),
        summary=final_summary,
        facts=facts_from_state(state.get("facts")),
        resume=resume,
        db_path=str(path),
    )


# --------------------------------------------------------------------------- final report


def _wrap(printer: _Printer, text: str, indent: str = "  ", width: int = 98) -> None:
    for paragraph in text.split("\n"):
        if not paragraph.strip():
            printer.line()
            continue
        lead = len(paragraph) - len(paragraph.lstrip(" -"))
        for line in textwrap.wrap(
            paragraph,
            width=width,
            initial_indent=indent,
            subsequent_indent=indent + " " * lead,
        ):
            printer.line(line)


def _print_summary(printer: _Printer, report: DemoReport) -> None:
    summary = report.summary
    printer.line()
    if summary is None:
        printer.line("running summary: none yet (too few rounds)")
        return
    printer.line(
        f"running summary v{summary.version} (covers {summary.rounds_covered} rounds, "
        f"{len(summary.covered_ids)} messages):"
    )
    _wrap(printer, summary.text)


def _print_facts(printer: _Printer, report: DemoReport) -> None:
    facts = list(report.facts.values())
    deleted = sum(t.facts_deleted for t in report.turns)
    printer.line()
    printer.line(
        f"facts ({len(facts)}; {report.updates_applied} updates and {deleted} deletions "
        "applied along the way):"
    )
    arrow = "→" if printer.fancy else "->"
    for fact in facts:
        shown = fact.source_ids[-3:]
        sources = ("… " if printer.fancy else "... ") if len(fact.source_ids) > 3 else ""
        sources += " ".join(shown)
        lines = textwrap.wrap(fact.content, width=62) or [""]
        printer.line(f"  {fact.type[:16]:<16}  {lines[0]:<62}  {sources}")
        for extra in lines[1:]:
            printer.line(f"  {'':<16}  {extra}")
        if fact.supersedes:
            history = f" {arrow} ".join(fact.supersedes)
            for index, extra in enumerate(textwrap.wrap(f"was: {history}", width=76)):
                printer.line(f"  {'':<16}  {'  ' if index else ''}{extra}")


def _print_follow_ups(printer: _Printer, report: DemoReport, script: DemoScript) -> None:
    follow = [
        (t, script.turns[t.number - 1])
        for t in report.turns
        if script.turns[t.number - 1].standalone_question is not None
    ]
    if not follow:
        return
    arrow = "→" if printer.fancy else "->"
    printer.line()
    printer.line(f"follow-ups rephrased before choosing the facts to show ({len(follow)}):")
    for record, turn in follow:
        result = record.standalone_question or f"(kept as is: {record.rephrase_fallback})"
        printer.line(f"  turn {record.number:2d}  {turn.user_text}")
        _wrap(printer, f"{arrow} {result}", indent="           ", width=98)


def _print_savings(printer: _Printer, report: DemoReport) -> None:
    printer.line()
    printer.line(f"billed tokens (prompt + completion of every call, tiktoken {COUNTER_MODEL}):")
    by_kind = report.billed_by_kind()
    for kind in (*_KINDS, *sorted(set(by_kind) - set(_KINDS))):
        if kind in by_kind:
            calls, tokens = by_kind[kind]
            printer.line(f"  {kind:<11} {calls:4d} calls  {tokens:>10,}")
    total_calls = sum(calls for calls, _ in by_kind.values())
    printer.line(f"  {'total':<11} {total_calls:4d} calls  {report.billed_tokens:>10,}")
    printer.line(
        f"  {'full history':<11} {len(report.turns):4d} calls  {report.full_history_tokens:>10,}"
        "   (every message sent on every turn)"
    )
    last = report.turns[-1]
    if last.full_tokens:
        printer.line(
            f"last turn: {last.sent_tokens:,} prompt tokens sent instead of "
            f"{last.full_tokens:,} ({1 - last.sent_tokens / last.full_tokens:.0%} smaller)"
        )
    printer.line(
        f"summarize + extract + rephrase: {report.internal_share:.0%} of the billed tokens"
    )
    printer.line(
        f"savings: {report.savings:.1%} ({report.billed_tokens:,} vs "
        f"{report.full_history_tokens:,} billed tokens, {len(report.turns)} turns)",
        always=True,
    )


def _print_resume(printer: _Printer, report: DemoReport) -> None:
    resume = report.resume
    if resume is None:
        return
    summary = f"summary v{resume.summary_version}" if resume.summary_version else "no summary"
    if not resume.matches_before:
        printer.line(
            "warning: the restored state differs from the state before closing", always=True
        )
    printer.line(
        f"resumed from checkpoint: {summary}, {resume.facts} facts, "
        f"{resume.extra_summarizer_calls} extra summarizer calls",
        always=True,
    )


def _report(printer: _Printer, report: DemoReport, script: DemoScript) -> None:
    _print_resume(printer, report)
    _print_summary(printer, report)
    _print_facts(printer, report)
    _print_follow_ups(printer, report, script)
    _print_savings(printer, report)


def _problems(report: DemoReport) -> list[str]:
    """Integrity problems of an offline run (the script should replay cleanly)."""
    problems = [
        f"turn {t.number}: fact extraction failed"
        for t in report.turns
        if t.extraction_status == "failed"
    ]
    problems += [
        f"turn {t.number}: rephrasing fell back ({t.rephrase_fallback})"
        for t in report.turns
        if t.rephrase_fallback is not None
    ]
    if report.resume is not None and (
        report.resume.extra_summarizer_calls or not report.resume.matches_before
    ):
        problems.append("the reopened thread did not continue from the stored state")
    return problems


# --------------------------------------------------------------------------- command line


def _parser(total: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description=(
            "Replay a long multi-session chat through a LangGraph app with round compression, "
            "fact memory and follow-up rephrasing, and report the tokens saved."
        ),
    )
    parser.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="real chat model for every role, e.g. openai:gpt-4o-mini (needs its API key; "
        "default: offline replay of the scripted answers)",
    )
    parser.add_argument(
        "--turns", type=int, metavar="N", help=f"replay the first N turns (2-{total}; default all)"
    )
    parser.add_argument("--db", metavar="PATH", help="SQLite checkpoint file (default: temporary)")
    parser.add_argument("--quiet", action="store_true", help="print only the final figures")
    return parser


def _make_model(spec: str) -> BaseChatModel:
    provider, _, name = spec.partition(":")
    if not provider.strip() or not name.strip():
        msg = f"--model must look like provider:name (e.g. openai:gpt-4o-mini), got {spec!r}"
        raise ConfigurationError(msg)
    names = _KEY_ENV.get(provider.strip().lower())
    if names is not None and not any(os.environ.get(n) for n in names):
        msg = (
            f"--model {spec} needs an API key: set {' or '.join(names)} "
            "(or run without --model for the offline replay)"
        )
        raise ConfigurationError(msg)
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        msg = "--model needs langchain (pip install 'langchain-histcompress[agents]')"
        raise ConfigurationError(msg) from exc
    try:
        model = init_chat_model(spec)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"cannot create model {spec!r}: {reason} (check the provider package and API key)"
        raise ConfigurationError(msg) from exc
    if not isinstance(model, BaseChatModel):
        msg = f"{spec!r} did not give a chat model"
        raise ConfigurationError(msg)
    return model


def _fail(errors: TextIO, message: object, code: int = 2) -> int:
    errors.write(f"{_PROG}: error: {' '.join(str(message).split())}\n")
    return code


def run_demo(
    argv: list[str] | None = None,
    *,
    writer: TextIO | None = None,
    errors: TextIO | None = None,
) -> int:
    """Run the demo (what ``histcompress demo`` and ``make demo`` call) and return its exit code.

    Options: ``--model provider:name`` (a real model does everything; needs its key),
    ``--turns N``, ``--db PATH``, ``--quiet``. Exit codes: 0 success; 2 bad option, model
    that cannot be created (e.g. no API key) or unusable ``--db``; 1 the run failed (a model
    error, or an offline replay that did not go as scripted).

    Args:
        argv: Options, without the program name (default: ``sys.argv[1:]``).
        writer: Where the report goes (default: ``sys.stdout``).
        errors: Where errors go (default: ``sys.stderr``).

    Example:
        >>> import io
        >>> run_demo(["--turns", "1"], errors=io.StringIO())
        2
    """
    out = writer or sys.stdout
    err = errors or sys.stderr
    model: BaseChatModel | None = None
    try:
        script = load_script()
    except ConfigurationError as exc:
        return _fail(err, exc, 1)
    parser = _parser(len(script.turns))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        model = _make_model(args.model) if args.model else None
        printer = _Printer(out, quiet=args.quiet)
        report = replay_conversation(
            script,
            model=model,
            turns=args.turns,
            db_path=args.db,
            writer=out,
            quiet=args.quiet,
        )
    except ConfigurationError as exc:
        return _fail(err, exc)
    except HistCompressError as exc:
        return _fail(err, f"the demo run failed: {exc}", 1)
    except Exception as exc:
        if model is None:
            raise
        return _fail(err, f"the model call failed ({type(exc).__name__}: {exc})", 1)
    _report(printer, report, script)
    if report.offline:
        problems = _problems(report)
        if problems:
            return _fail(
                err, "the offline replay did not go as scripted: " + "; ".join(problems), 1
            )
    return 0
