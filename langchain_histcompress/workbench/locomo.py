"""Load LoCoMo conversation files and replay them as LangChain chat histories.

A LoCoMo file holds one long two-person conversation split into dated sessions, what a real
model wrote about it (per-session observations and summaries) and questions whose answers sit
in known turns (*evidence*). ``speaker_a`` turns become ``HumanMessage`` objects and
``speaker_b`` turns ``AIMessage`` objects, the turn's ``dia_id`` as id; rounds are cut as
`rounds.split_rounds` cuts them. The mapping is described in docs/design/workbench.md.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import Round, split_rounds

__all__ = [
    "RECALL_CATEGORIES",
    "LocomoConversation",
    "Observation",
    "QAItem",
    "Session",
    "Turn",
    "find_locomo_files",
    "load_locomo",
    "parse_locomo",
]

logger = logging.getLogger(__name__)

RECALL_CATEGORIES = frozenset({1, 2, 3, 4})
"""Question categories that count for evidence recall (5 = adversarial, left out)."""

SYSTEM_MESSAGE_ID = "locomo-system"
"""Id of the system message `LocomoConversation.system_message` builds."""

_SESSION_KEY = re.compile(r"session_(\d+)")
_ID_SPLIT = re.compile(r"[;,\s]+")


@dataclass(frozen=True)
class Turn:
    """One turn of the conversation."""

    dia_id: str
    """The turn's stable id, e.g. ``"D3:14"``; also the id of its message."""
    speaker: str
    """Name of the speaker."""
    text: str
    """The turn text, with a shared photo's caption appended as ``[shared a photo: ...]``."""
    session: int
    """Number of the session holding the turn."""
    from_user: bool
    """True for ``speaker_a`` (replayed as the user), False for ``speaker_b``."""

    def to_message(self) -> BaseMessage:
        """The turn as a ``HumanMessage`` (speaker_a) or ``AIMessage`` (speaker_b)."""
        if self.from_user:
            return HumanMessage(self.text, id=self.dia_id)
        return AIMessage(self.text, id=self.dia_id)


@dataclass(frozen=True)
class Observation:
    """One key fact a model extracted from a session, with its provenance."""

    text: str
    """The fact as written in the file."""
    speaker: str
    """The speaker the fact is about."""
    source_ids: tuple[str, ...]
    """Ids of the turns the fact was extracted from (only ids of existing turns)."""
    session: int
    """Number of the session it was extracted from."""


@dataclass(frozen=True)
class Session:
    """One dated session of the conversation."""

    number: int
    """The ``n`` of ``session_<n>``."""
    date_time: str
    """When the session happened, as written in the file (may be empty)."""
    turns: tuple[Turn, ...]
    """The session's turns in order (never empty)."""
    summary: str
    """The model-written summary of the session (empty when the file has none)."""
    observations: tuple[Observation, ...]
    """The model-written key facts of the session."""


@dataclass(frozen=True)
class QAItem:
    """One question about the conversation."""

    question: str
    """The question text."""
    answer: str | None
    """The reference answer (``None`` when missing, as for adversarial questions)."""
    evidence: tuple[str, ...]
    """Ids of the existing turns that hold the answer."""
    category: int
    """LoCoMo category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial."""
    unknown_evidence: tuple[str, ...] = ()
    """Evidence ids that name no turn of the conversation (dropped from `evidence`)."""

    @property
    def counts_for_recall(self) -> bool:
        """Whether the question enters evidence recall (category 1-4, some evidence)."""
        return self.category in RECALL_CATEGORIES and bool(self.evidence)


@dataclass(frozen=True)
class LocomoConversation:
    """A validated LoCoMo conversation."""

    name: str
    """Short name, the file stem (``"26"`` for ``26.json``)."""
    speaker_a: str
    """Name of the speaker replayed as the user."""
    speaker_b: str
    """Name of the speaker replayed as the assistant."""
    sessions: tuple[Session, ...]
    """Sessions with turns, in session-number order."""
    qa: tuple[QAItem, ...] = ()
    """Every question of the file, adversarial ones included."""
    source: str = ""
    """Where the conversation was read from (a path), for messages."""
    _turns: dict[str, Turn] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Index turns by id."""
        object.__setattr__(self, "_turns", {t.dia_id: t for s in self.sessions for t in s.turns})

    @property
    def turns(self) -> list[Turn]:
        """Every turn in order."""
        return [t for s in self.sessions for t in s.turns]

    def turn(self, dia_id: str) -> Turn | None:
        """The turn with id ``dia_id``, or ``None``."""
        return self._turns.get(dia_id)

    @cached_property
    def observations(self) -> tuple[Observation, ...]:
        """Every observation in session order."""
        return tuple(o for s in self.sessions for o in s.observations)

    def system_message(self) -> SystemMessage:
        """A short system prompt for the replayed assistant (names only, no file text)."""
        return SystemMessage(
            f"You are {self.speaker_b}, chatting with your friend {self.speaker_a}. "
            f"Reply as {self.speaker_b}.",
            id=SYSTEM_MESSAGE_ID,
        )

    def messages(self) -> list[BaseMessage]:
        """Every turn as a message, in order (no system message)."""
        return [t.to_message() for t in self.turns]

    def rounds(self) -> tuple[Round, ...]:
        """The conversation cut into rounds (see `rounds.split_rounds`)."""
        return split_rounds(self.messages()).rounds

    def recall_questions(self) -> list[QAItem]:
        """The questions that count for evidence recall."""
        return [q for q in self.qa if q.counts_for_recall]


def load_locomo(path: str | Path) -> LocomoConversation:
    """Read and validate one LoCoMo JSON file.

    Args:
        path: The file to read.

    Returns:
        The conversation, named after the file stem.

    Raises:
        ConfigurationError: The file is missing or unreadable, is not JSON, or breaks the
            format; the message names the file and the offending key.
    """
    file = Path(path)
    try:
        raw = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        msg = f"{file}: no such file"
        raise ConfigurationError(msg) from None
    except IsADirectoryError:
        msg = f"{file}: is a directory, expected a LoCoMo JSON file"
        raise ConfigurationError(msg) from None
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{file}: cannot read: {exc}"
        raise ConfigurationError(msg) from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        msg = f"{file}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise ConfigurationError(msg) from None
    return parse_locomo(data, source=str(file), name=file.stem)


def _fail(source: str, where: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{source}: {where}: {problem}")


def _type_name(value: object) -> str:
    return type(value).__name__


def _string(data: Mapping[str, Any], key: str, source: str, where: str = "") -> str:
    place = f"{where}.{key}" if where else key
    if key not in data:
        raise _fail(source, place, "missing key")
    value = data[key]
    if not isinstance(value, str):
        raise _fail(source, place, f"expected a string, got {_type_name(value)}")
    return value


def _split_ids(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    ids: list[str] = []
    for item in items:
        if isinstance(item, str):
            ids.extend(part for part in _ID_SPLIT.split(item) if part)
    return ids


def _parse_turn(
    raw: object, *, source: str, where: str, number: int, speakers: tuple[str, str]
) -> Turn:
    if not isinstance(raw, Mapping):
        raise _fail(source, where, f"expected an object, got {_type_name(raw)}")
    speaker = _string(raw, "speaker", source, where)
    dia_id = _string(raw, "dia_id", source, where).strip()
    text = _string(raw, "text", source, where)
    if not dia_id:
        raise _fail(source, f"{where}.dia_id", "empty id")
    if speaker not in speakers:
        raise _fail(
            source,
            f"{where}.speaker",
            f"{speaker!r} is neither speaker_a {speakers[0]!r} nor speaker_b {speakers[1]!r}",
        )
    caption = raw.get("blip_caption")
    if caption is not None and not isinstance(caption, str):
        raise _fail(
            source, f"{where}.blip_caption", f"expected a string, got {_type_name(caption)}"
        )
    if caption and caption.strip():
        photo = f"[shared a photo: {caption.strip()}]"
        text = f"{text} {photo}" if text else photo
    return Turn(dia_id, speaker, text, number, speaker == speakers[0])


def _parse_observations(
    raw: object, *, source: str, key: str, number: int, known: set[str]
) -> tuple[Observation, ...]:
    if not isinstance(raw, Mapping):
        raise _fail(source, key, f"expected an object of speaker -> facts, got {_type_name(raw)}")
    found: list[Observation] = []
    for speaker, facts in raw.items():
        if not isinstance(facts, list):
            raise _fail(source, f"{key}.{speaker}", f"expected a list, got {_type_name(facts)}")
        for index, fact in enumerate(facts):
            place = f"{key}.{speaker}[{index}]"
            if not isinstance(fact, list) or len(fact) < 2 or not isinstance(fact[0], str):
                raise _fail(source, place, "expected [fact text, source id or ids]")
            ids = _split_ids(fact[1])
            if not ids:
                raise _fail(source, place, "no source turn id")
            kept = tuple(i for i in ids if i in known)
            if len(kept) < len(ids):
                logger.debug("%s: %s names unknown turn ids", source, place)
            if kept and fact[0].strip():
                found.append(Observation(fact[0].strip(), str(speaker), kept, number))
    return tuple(found)


def _parse_qa(raw: object, *, source: str, known: set[str]) -> tuple[QAItem, ...]:
    if not isinstance(raw, list):
        raise _fail(source, "qa", f"expected a list, got {_type_name(raw)}")
    items: list[QAItem] = []
    for index, entry in enumerate(raw):
        where = f"qa[{index}]"
        if not isinstance(entry, Mapping):
            raise _fail(source, where, f"expected an object, got {_type_name(entry)}")
        question = _string(entry, "question", source, where)
        category = entry.get("category")
        if isinstance(category, bool) or not isinstance(category, int):
            raise _fail(source, f"{where}.category", f"expected an integer, got {category!r}")
        evidence = entry.get("evidence", [])
        if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
            raise _fail(source, f"{where}.evidence", "expected a list of turn ids")
        ids = list(dict.fromkeys(_split_ids(evidence)))
        answer = entry.get("answer")
        items.append(
            QAItem(
                question=question,
                answer=None if answer is None else str(answer),
                evidence=tuple(i for i in ids if i in known),
                category=category,
                unknown_evidence=tuple(i for i in ids if i not in known),
            )
        )
    return tuple(items)


def parse_locomo(data: object, *, source: str = "<data>", name: str = "") -> LocomoConversation:
    """Validate parsed LoCoMo JSON and build the conversation.

    Args:
        data: The decoded JSON object.
        source: Where it came from, used in error messages.
        name: Short name of the conversation (defaults to ``source``).

    Returns:
        The conversation.

    Raises:
        ConfigurationError: A required key is missing or a value has the wrong shape; the
            message names ``source`` and the key.

    Example:
        >>> conversation = parse_locomo(
        ...     {
        ...         "speaker_a": "Ann",
        ...         "speaker_b": "Bob",
        ...         "session_1_date_time": "1:00 pm on 1 May, 2023",
        ...         "session_1": [
        ...             {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi!"},
        ...             {"speaker": "Bob", "dia_id": "D1:2", "text": "Hello.",
        ...              "blip_caption": "a photo of a cat"},
        ...         ],
        ...         "qa": [{"question": "Q?", "answer": "A", "evidence": ["D1:2"], "category": 1}],
        ...     },
        ...     source="example.json",
        ... )
        >>> [(m.type, m.id, m.content) for m in conversation.messages()]
        [('human', 'D1:1', 'Hi!'), ('ai', 'D1:2', 'Hello. [shared a photo: a photo of a cat]')]
        >>> conversation.recall_questions()[0].evidence
        ('D1:2',)
    """
    if not isinstance(data, Mapping):
        raise _fail(source, "top level", f"expected a JSON object, got {_type_name(data)}")
    speakers = (_string(data, "speaker_a", source), _string(data, "speaker_b", source))
    if not all(s.strip() for s in speakers) or speakers[0] == speakers[1]:
        raise _fail(source, "speaker_a/speaker_b", "need two different non-empty names")
    numbers = sorted(
        int(m.group(1)) for key in data if (m := _SESSION_KEY.fullmatch(str(key))) is not None
    )
    seen: set[str] = set()
    raw_sessions: list[tuple[int, list[Turn]]] = []
    for number in numbers:
        key = f"session_{number}"
        turns_raw = data[key]
        if not isinstance(turns_raw, list):
            raise _fail(source, key, f"expected a list of turns, got {_type_name(turns_raw)}")
        turns = [
            _parse_turn(raw, source=source, where=f"{key}[{i}]", number=number, speakers=speakers)
            for i, raw in enumerate(turns_raw)
        ]
        for i, turn in enumerate(turns):
            if turn.dia_id in seen:
                raise _fail(source, f"{key}[{i}].dia_id", f"duplicate turn id {turn.dia_id!r}")
            seen.add(turn.dia_id)
        if turns:
            raw_sessions.append((number, turns))
    if not raw_sessions:
        raise _fail(source, "session_<n>", "no session with turns")
    sessions: list[Session] = []
    for number, turns in raw_sessions:
        date_key = f"session_{number}_date_time"
        date_time = _string(data, date_key, source) if date_key in data else ""
        summary_key = f"session_{number}_summary"
        summary = _string(data, summary_key, source).strip() if summary_key in data else ""
        obs_key = f"session_{number}_observation"
        observations: tuple[Observation, ...] = ()
        if obs_key in data:
            observations = _parse_observations(
                data[obs_key], source=source, key=obs_key, number=number, known=seen
            )
        sessions.append(Session(number, date_time, tuple(turns), summary, observations))
    if "qa" not in data:
        raise _fail(source, "qa", "missing key")
    qa = _parse_qa(data["qa"], source=source, known=seen)
    return LocomoConversation(
        name=name or source,
        speaker_a=speakers[0],
        speaker_b=speakers[1],
        sessions=tuple(sessions),
        qa=qa,
        source=source,
    )


def find_locomo_files(paths: Sequence[str | Path]) -> list[Path]:
    """Expand ``paths`` into LoCoMo files: a folder stands for its ``*.json`` files, sorted.

    Raises:
        ConfigurationError: A path does not exist or a folder holds no JSON file.

    Example:
        >>> find_locomo_files(["/no/such/file.json"])
        Traceback (most recent call last):
        ...
        langchain_histcompress.core.errors.ConfigurationError: /no/such/file.json: no such file
    """
    files: list[Path] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
            if not found:
                msg = f"{path}: folder holds no .json file"
                raise ConfigurationError(msg)
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            msg = f"{path}: no such file"
            raise ConfigurationError(msg)
    return files
