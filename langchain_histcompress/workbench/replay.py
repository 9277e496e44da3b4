"""An offline chat model that answers summarize / extract prompts with a file's own model output.

LoCoMo files carry what a real model wrote about each session: a summary and key facts with
their source turns. `ReplayChatModel` stands in for the package's summarizer / extractor: it
reads which turns a prompt shows (`detect_prompt_kind` tells what is asked) and answers with
that real output, so the package's prompt -> parse -> merge path runs offline and
deterministically. How prompts are read and answered: docs/design/workbench.md.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import InputTokenDetails, OutputTokenDetails, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, InstanceOf, PrivateAttr

from langchain_histcompress.core.fact_lines import format_fact_lines
from langchain_histcompress.core.render import message_text, read_turn_lines
from langchain_histcompress.core.tokens import TiktokenCounter, resolve_counter
from langchain_histcompress.workbench.locomo import LocomoConversation, Observation

__all__ = [
    "PromptKind",
    "PromptView",
    "ReplayChatModel",
    "build_fact_operations",
    "build_running_summary",
    "counted_reply",
    "detect_prompt_kind",
    "fact_operations_format",
    "read_prompt",
    "render_fact_operations",
]

PromptKind = Literal["summary_json", "fact_operations", "summary_text"]
"""What a prompt asks for: the package's JSON summary, fact operations, or a plain summary."""

OperationsFormat = Literal["lines", "json"]
"""How fact operations are written: one per line (`fact_lines`) or a JSON array."""

_START_TAG = re.compile(r"<message\b([^>]*)>")
_PLAIN_ELEMENT = re.compile(r"<message\b([^>]*)>([^<]*)</message>")
_ID_ATTRIBUTE = re.compile(r'\bid="([^"]*)"')
_TURN_LINES = re.compile(r"^\[[^\s\]]+ [^\s\]]+(?: [^\s\]]+)*\].*(?:\n  .*)*$", re.MULTILINE)
"""A `render.render_turn_lines` line and its continuation lines (data, not instructions)."""
_OPERATIONS_MARKER = re.compile(r'"op"|\bADD\b')
_JSON_OPERATIONS_MARKER = re.compile(r'"op"')
_JSON_UNICODE = re.compile(r"\\u([0-9a-fA-F]{4})")
_WORD = re.compile(r"\w+")
_TIME_WORDS = re.compile(
    r"\b(yesterday|today|tomorrow|tonight|recently|last|next|ago|week|weekend|month|year|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d{4})\b",
    re.IGNORECASE,
)


def detect_prompt_kind(instructions: str) -> PromptKind:
    """Tell what a prompt asks for from its instruction text (transcript removed).

    Example:
        >>> detect_prompt_kind('Answer as {"ConversationSummary": "..."}')
        'summary_json'
        >>> detect_prompt_kind('Return a list of {"op": "ADD", ...}')
        'fact_operations'
        >>> detect_prompt_kind("Create a summary of the conversation above:")
        'summary_text'
    """
    if "ConversationSummary" in instructions:
        return "summary_json"
    if _OPERATIONS_MARKER.search(instructions):
        return "fact_operations"
    return "summary_text"


def fact_operations_format(instructions: str) -> OperationsFormat:
    """How an extraction prompt wants its operations: JSON when it shows the JSON schema.

    Example:
        >>> fact_operations_format('Return a list of {"op": "ADD", ...}')
        'json'
        >>> fact_operations_format("One per line: ADD <type> <confidence> <ids> | <fact>")
        'lines'
    """
    return "json" if _JSON_OPERATIONS_MARKER.search(instructions) else "lines"


def _normalize(text: str) -> str:
    """Lower-case words only, after undoing HTML and JSON escapes (for containment tests)."""
    text = html.unescape(text)
    text = _JSON_UNICODE.sub(lambda m: chr(int(m.group(1), 16)), text)
    for escape in ("\\n", "\\t", "\\r", '\\"'):
        text = text.replace(escape, " ")
    return " ".join(_WORD.findall(text.lower()))


def _default_counter() -> TiktokenCounter:
    counter = resolve_counter(None)
    return counter if isinstance(counter, TiktokenCounter) else TiktokenCounter()


def _base_id(message_id: str) -> str:
    return message_id.split("#", 1)[0]


@dataclass(frozen=True)
class PromptView:
    """What `read_prompt` found in a prompt."""

    kind: PromptKind
    """What the prompt asks for."""
    shown_ids: tuple[str, ...]
    """Ids of the conversation turns the prompt shows as messages, in turn order."""
    carried_ids: frozenset[str]
    """Ids of turns already covered by a previous summary quoted in the prompt."""
    complete_sessions: frozenset[int]
    """Sessions whose file summary is quoted in the prompt (finished earlier)."""
    shown_as: Mapping[str, str] = field(default_factory=dict)
    """Turn id -> the id the prompt shows for it, when that differs (an alias ``m1``, or a
    repetition's fresh id ``D1:3#2``)."""
    operations_format: OperationsFormat = "lines"
    """How a fact-operations prompt wants its answer written."""


class _Index:
    """Per-conversation lookups, built once per model."""

    def __init__(self, conversation: LocomoConversation) -> None:
        self.conversation = conversation
        turns = conversation.turns
        self.position = {t.dia_id: i for i, t in enumerate(turns)}
        self.by_text: dict[str, list[str]] = {}
        for turn in turns:
            self.by_text.setdefault(turn.text.strip(), []).append(turn.dia_id)
        self.summaries = [
            (s.number, _normalize(s.summary)) for s in conversation.sessions if s.summary
        ]
        self.observations = [(o, _normalize(o.text)) for o in conversation.observations]


def _read_with_index(messages: Sequence[BaseMessage], index: _Index) -> PromptView:
    shown: set[str] = set()
    shown_as: dict[str, str] = {}
    instructions: list[str] = []
    texts: list[str] = []
    last = -1
    for message in messages:
        text = message_text(message)
        texts.append(text)
        if message.id is not None and _base_id(message.id) in index.position:
            shown.add(_base_id(message.id))
            continue  # a conversation turn passed as is: data, not instructions
        for tag in _START_TAG.finditer(text):
            found = _ID_ATTRIBUTE.search(tag.group(1))
            turn_id: str | None = None
            if found is not None:
                candidate = _base_id(html.unescape(found.group(1)))
                turn_id = candidate if candidate in index.position else None
            if turn_id is None and (element := _PLAIN_ELEMENT.match(text, tag.start())):
                # no id, or a prompt alias (``m1``): find the turn by its text
                options = index.by_text.get(html.unescape(element.group(2)).strip(), [])
                later = [o for o in options if index.position[o] > last]
                chosen = later or options
                turn_id = chosen[0] if chosen else None
            if turn_id is not None:
                shown.add(turn_id)
                last = index.position[turn_id]
                # an alias (``m1``) or a repetition's fresh id (``D1:3#2``): answer with it
                if found is not None and html.unescape(found.group(1)) != turn_id:
                    shown_as[turn_id] = html.unescape(found.group(1))
        for line_id, _role, body in read_turn_lines(text):
            turn_id = _base_id(line_id) if _base_id(line_id) in index.position else None
            if turn_id is None:  # an alias (``m1``): find the turn by its text
                options = index.by_text.get(body.strip(), [])
                later = [o for o in options if index.position[o] > last]
                chosen = later or options
                turn_id = chosen[0] if chosen else None
            if turn_id is not None:
                shown.add(turn_id)
                last = index.position[turn_id]
                if line_id != turn_id:
                    shown_as[turn_id] = line_id
        instructions.append(_TURN_LINES.sub("", _PLAIN_ELEMENT.sub("", text)))
    normalized = _normalize("\n".join(texts))
    complete = frozenset(n for n, s in index.summaries if s and s in normalized)
    carried: set[str] = set()
    for session in index.conversation.sessions:
        if session.number in complete:
            carried.update(t.dia_id for t in session.turns)
    for observation, norm in index.observations:
        if norm and norm in normalized:
            carried.update(observation.source_ids)
    instruction_text = "\n".join(instructions)
    return PromptView(
        kind=detect_prompt_kind(instruction_text),
        shown_ids=tuple(sorted(shown, key=index.position.__getitem__)),
        carried_ids=frozenset(carried),
        complete_sessions=complete,
        shown_as=shown_as,
        operations_format=fact_operations_format(instruction_text),
    )


def read_prompt(messages: Sequence[BaseMessage], conversation: LocomoConversation) -> PromptView:
    """Find the kind of a prompt, the turns it shows, and what its previous summary covers.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_histcompress.workbench.locomo import parse_locomo
        >>> conversation = parse_locomo({"speaker_a": "A", "speaker_b": "B", "qa": [],
        ...     "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"},
        ...                   {"speaker": "B", "dia_id": "D1:2", "text": "yo"}]})
        >>> view = read_prompt([HumanMessage('<message type="ai">yo</message>')], conversation)
        >>> view.kind, view.shown_ids
        ('summary_text', ('D1:2',))
    """
    return _read_with_index(messages, _Index(conversation))


def build_running_summary(
    conversation: LocomoConversation,
    covered: Iterable[str],
    *,
    complete_sessions: Iterable[int] = (),
    counter: TiktokenCounter | None = None,
    token_cap: int = 128,
) -> str:
    """Build the running summary of the ``covered`` turns from the file's own model output.

    Sessions whose last turn is covered (or listed in ``complete_sessions``) contribute their
    file summary; sessions in progress contribute the observations sourced from covered
    turns (or a one-line note when none is). Oldest pieces are dropped while the text is
    over ``token_cap`` tokens; the newest piece is always kept, cut to its leading whole
    sentences when it alone is over the cap (as a model told to stay under a size would
    condense it), so the text never exceeds the cap.

    Example:
        >>> from langchain_histcompress.workbench.locomo import parse_locomo
        >>> conversation = parse_locomo({"speaker_a": "A", "speaker_b": "B", "qa": [],
        ...     "session_1_date_time": "2 May", "session_1_summary": "They met.",
        ...     "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"},
        ...                   {"speaker": "B", "dia_id": "D1:2", "text": "yo"}]})
        >>> build_running_summary(conversation, ["D1:1"])
        '2 May: A and B started talking.'
        >>> build_running_summary(conversation, ["D1:1", "D1:2"])
        'They met.'
    """
    covered_set = set(covered)
    complete = set(complete_sessions)
    pieces: list[str] = []
    for session in conversation.sessions:
        touched = [t for t in session.turns if t.dia_id in covered_set]
        prefix = f"{session.date_time}: " if session.date_time else ""
        if session.number in complete or session.turns[-1].dia_id in covered_set:
            if session.summary:
                pieces.append(session.summary)
                continue
            touched = list(session.turns)
        if not touched:
            continue
        facts = [
            o.text for o in session.observations if any(i in covered_set for i in o.source_ids)
        ]
        if facts:
            pieces.append(prefix + " ".join(facts))
        else:
            names = f"{conversation.speaker_a} and {conversation.speaker_b}"
            pieces.append(f"{prefix}{names} started talking.")
    if not pieces:
        return f"{conversation.speaker_a} and {conversation.speaker_b} have not talked yet."
    count = (counter or _default_counter()).count_text
    while len(pieces) > 1 and count("\n\n".join(pieces)) > token_cap:
        pieces.pop(0)
    return _fit(pieces[0], token_cap, count) if len(pieces) == 1 else "\n\n".join(pieces)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _fit(text: str, token_cap: int, count: Callable[[str], int]) -> str:
    """``text`` cut to its leading whole sentences within ``token_cap`` tokens.

    A model told to stay under a size condenses; the replay keeps the file's own sentences,
    so it keeps the leading ones. The first sentence is cut at a word when it alone is over.
    """
    if count(text) <= token_cap:
        return text
    kept = ""
    for sentence in _SENTENCE_END.split(text):
        candidate = f"{kept} {sentence}" if kept else sentence
        if count(candidate) > token_cap:
            break
        kept = candidate
    if kept:
        return kept
    words = text.split()
    while len(words) > 1 and count(" ".join(words)) > token_cap:
        words = words[: max(1, len(words) * 3 // 4)]
    return " ".join(words)


def fact_type(text: str) -> str:
    """``"event"`` for a fact anchored in time, else ``"confirmed_detail"``.

    Example:
        >>> fact_type("Ann ran a marathon last week."), fact_type("Ann likes tea.")
        ('event', 'confirmed_detail')
    """
    return "event" if _TIME_WORDS.search(text) else "confirmed_detail"


def build_fact_operations(
    conversation: LocomoConversation, shown_ids: Sequence[str], *, confidence: float = 0.9
) -> list[dict[str, Any]]:
    """One ``ADD`` operation per observation sourced from the shown turns, none from later ones.

    Example:
        >>> from langchain_histcompress.workbench.locomo import parse_locomo
        >>> conversation = parse_locomo({"speaker_a": "A", "speaker_b": "B", "qa": [],
        ...     "session_1_observation": {"A": [["A likes tea.", "D1:1"]]},
        ...     "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "tea!"}]})
        >>> [operation] = build_fact_operations(conversation, ["D1:1"])
        >>> operation["op"], operation["type"], operation["content"], operation["source_ids"]
        ('ADD', 'confirmed_detail', 'A likes tea.', ['D1:1'])
    """
    shown = set(shown_ids)
    if not shown:
        return []
    position = {t.dia_id: i for i, t in enumerate(conversation.turns)}
    horizon = max(position[i] for i in shown if i in position)
    operations: list[dict[str, Any]] = []
    observation: Observation
    for observation in conversation.observations:
        sources = [i for i in observation.source_ids if i in shown]
        if not sources or max(position[i] for i in observation.source_ids) > horizon:
            continue
        operations.append(
            {
                "op": "ADD",
                "type": fact_type(observation.text),
                "content": observation.text,
                "confidence": confidence,
                "source_ids": sources,
            }
        )
    return operations


def render_fact_operations(
    operations: Sequence[dict[str, Any]], fmt: OperationsFormat = "json"
) -> str:
    """The text an extractor expects for a list of operations: a JSON array, or lines.

    Example:
        >>> render_fact_operations([{"op": "ADD", "content": "A likes tea."}])
        '[{"op": "ADD", "content": "A likes tea."}]'
        >>> render_fact_operations([{"op": "ADD", "content": "A likes tea."}], "lines")
        'ADD other | A likes tea.'
    """
    if fmt == "lines":
        return format_fact_lines(operations)
    return json.dumps(list(operations), ensure_ascii=False)


class ReplayChatModel(BaseChatModel):
    """Chat model answering summarize / extract prompts with a LoCoMo file's model output.

    How prompts are read and answered: docs/design/workbench.md. Deterministic, offline,
    thread-safe (no mutable state besides a lookup index built once).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_histcompress.workbench.locomo import parse_locomo
        >>> conversation = parse_locomo({
        ...     "speaker_a": "Ann", "speaker_b": "Bob",
        ...     "session_1_date_time": "1 May", "session_1_summary": "Ann and Bob met.",
        ...     "session_1_observation": {"Ann": [["Ann moved to Oslo last week.", "D1:1"]]},
        ...     "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I moved!"},
        ...                   {"speaker": "Bob", "dia_id": "D1:2", "text": "Great."}],
        ...     "qa": []})
        >>> model = ReplayChatModel(conversation=conversation)
        >>> prompt = ('Return {"ConversationSummary": ...} for: '
        ...           '<message id="D1:1" role="user">I moved!</message>')
        >>> model.invoke([HumanMessage(prompt)]).content
        '{"ConversationSummary": "1 May: Ann moved to Oslo last week."}'
        >>> prompt = prompt.replace("D1:1", "D1:2").replace("I moved!", "Great.")
        >>> model.invoke([HumanMessage(prompt)]).content
        '{"ConversationSummary": "Ann and Bob met."}'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    conversation: InstanceOf[LocomoConversation] = Field(repr=False)
    """The conversation whose session summaries and observations are replayed (left out of
    the model's repr, which LangChain's callbacks build on every call)."""
    counter: InstanceOf[TiktokenCounter] | None = None
    """Counter for usage metadata and the summary cap (default: the shared gpt-4o-mini one)."""
    summary_token_cap: int = Field(default=128, gt=0)
    """Largest running summary, in tokens: oldest pieces are dropped beyond it, and the
    newest keeps its leading sentences (give the summarizer the same cap)."""
    fact_confidence: float = Field(default=0.9, ge=0.0, le=1.0)
    """Confidence given to every replayed fact."""
    _index: _Index = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Build the lookup index."""
        super().model_post_init(context)
        self._index = _Index(self.conversation)

    @property
    def _llm_type(self) -> str:
        return "histcompress-locomo-replay"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"conversation": self.conversation.name, "cap": self.summary_token_cap}

    def _counter(self) -> TiktokenCounter:
        return self.counter or _default_counter()

    def reply_for(self, messages: Sequence[BaseMessage]) -> str:
        """The reply text for a prompt (what `invoke` returns as content)."""
        view = _read_with_index(messages, self._index)
        if view.kind == "fact_operations":
            operations = build_fact_operations(
                self.conversation, view.shown_ids, confidence=self.fact_confidence
            )
            for operation in operations:  # answer with the ids the prompt showed
                operation["source_ids"] = [view.shown_as.get(i, i) for i in operation["source_ids"]]
            return render_fact_operations(operations, view.operations_format)
        text = build_running_summary(
            self.conversation,
            set(view.shown_ids) | view.carried_ids,
            complete_sessions=view.complete_sessions,
            counter=self._counter(),
            token_cap=self.summary_token_cap,
        )
        if view.kind == "summary_json":
            return json.dumps({"ConversationSummary": text}, ensure_ascii=False)
        return text

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return counted_reply(self.reply_for(messages), messages, self._counter())


def counted_reply(
    reply: str, prompt: Sequence[BaseMessage], counter: TiktokenCounter
) -> ChatResult:
    """A chat result answering ``prompt`` with ``reply``, its usage counted by ``counter``.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> result = counted_reply("yo", [HumanMessage("hi")], TiktokenCounter())
        >>> result.generations[0].message.usage_metadata["output_tokens"]
        1
    """
    prompt_tokens = counter.count_messages(prompt)
    completion_tokens = counter.count_text(reply)
    usage = UsageMetadata(
        input_tokens=prompt_tokens,
        output_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        input_token_details=InputTokenDetails(),
        output_token_details=OutputTokenDetails(),
    )
    return ChatResult(generations=[ChatGeneration(message=AIMessage(reply, usage_metadata=usage))])
