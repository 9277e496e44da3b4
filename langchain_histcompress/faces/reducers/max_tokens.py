"""`MaxTokensReducer`: keep the system preamble and the newest whole rounds within a budget."""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableBinding
from langchain_core.utils.function_calling import convert_to_openai_tool

from langchain_histcompress.core.errors import BudgetError, ConfigurationError
from langchain_histcompress.core.rounds import split_units
from langchain_histcompress.core.tokens import (
    REPLY_PRIMING_TOKENS,
    TokenCounter,
    count_request,
    message_costs,
    resolve_counter,
)
from langchain_histcompress.faces.reducers._units import (
    ConfigEquality,
    Unit,
    answered_units,
    check_count,
    flatten,
    preamble_length,
    provider_valid,
    unchanged,
)

__all__ = ["MaxTokensReducer"]

TextSplitter = Callable[[str], list[str]]
"""Splits a message's text into pieces whose concatenation is the text."""

_LINE = re.compile(r"[^\n]*\n|[^\n]+")


def split_lines(text: str) -> list[str]:
    r"""Split ``text`` into lines, each keeping its ``\n`` (the default `text_splitter`).

    Example:
        >>> split_lines("a\nb\nc")
        ['a\n', 'b\n', 'c']
    """
    return _LINE.findall(text)


class _Measure:
    """Token cost of candidate requests, with as few counter calls as possible.

    A counter that counts messages one by one (``count_each`` / ``count_message``, like
    `TiktokenCounter`) is asked once per message; any other counter is only ever given whole
    requests that a provider would accept (never a lone tool result), once per candidate.
    """

    def __init__(self, counter: TokenCounter, extra: int) -> None:
        self.counter = counter
        self.extra = extra
        self.additive = callable(getattr(counter, "count_each", None)) or callable(
            getattr(counter, "count_message", None)
        )
        self._each: dict[int, tuple[BaseMessage, int]] = {}

    def __call__(self, request: Sequence[BaseMessage]) -> int:
        if not self.additive:
            return count_request(self.counter, request) + self.extra
        missing = [m for m in request if self._each.get(id(m), (None,))[0] is not m]
        for message, cost in zip(missing, message_costs(self.counter, missing), strict=True):
            self._each[id(message)] = (message, cost)
        total = sum(self._each[id(m)][1] for m in request)
        return total + (REPLY_PRIMING_TOKENS if request else 0) + self.extra


def _oldest_fitting(count: int, fits: Callable[[int], bool]) -> int:
    """Largest ``k`` in ``[0, count]`` with ``fits(k)`` (``fits(0)`` is assumed true).

    ``fits`` must be monotone (true up to some k, false after). Gallops 1, 2, 4... then
    bisects, so it calls ``fits`` O(log k) times and never looks past twice the answer.
    """
    good, step = 0, 1
    bad = count + 1
    while good < count:
        probe = min(good + step, count)
        if not fits(probe):
            bad = probe
            break
        good = probe
        step *= 2
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


class _RoundStarts:
    """Starts of the rounds after ``floor``, newest first, found by walking back lazily."""

    def __init__(self, messages: Sequence[BaseMessage], floor: int) -> None:
        self._messages = messages
        self._floor = floor
        self._next = len(messages) - 1
        self.found: list[int] = []

    def upto(self, count: int) -> int:
        """Find up to ``count`` starts; return how many exist (at most ``count``)."""
        messages = self._messages
        while len(self.found) < count and self._next >= self._floor:
            index = self._next
            self._next -= 1
            if isinstance(messages[index], HumanMessage) or index == self._floor:
                self.found.append(index)
        return len(self.found)


class MaxTokensReducer(ConfigEquality):
    r"""Keep the system preamble and the newest whole rounds that fit in ``max_tokens``.

    If the latest round alone does not fit, its user message is kept with the newest whole
    tool groups / messages of that round that fit. The budget covers the whole request: the
    messages, the reply priming and, when given, the tool schemas sent with it (``tools``;
    `with_history_reducer` picks them up from ``model.bind_tools(...)`` by itself).

    A per-message counter (`TiktokenCounter`, the default) is asked once per message, cached
    across turns; any other counter (``count_tokens_approximately``, a chat model, a
    provider's token-count endpoint) only receives whole requests that a provider accepts.

    With ``allow_partial``, the newest part of the next older plain message that still fits
    is kept too, split by ``text_splitter`` (lines by default), as ``trim_messages`` does; a
    message made of content blocks keeps its newest blocks, the oldest of them a text block
    possibly in part (images and other non-text blocks are never split).
    The kept part is repaired like `TruncationReducer`'s (stray tool results dropped,
    placeholders for calls left unanswered before the last step, logged).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> history = [SystemMessage("be brief")]
        >>> for i in range(20):
        ...     history += [HumanMessage(f"question {i}"), AIMessage(f"answer {i}")]
        >>> reducer = MaxTokensReducer(max_tokens=60)
        >>> reduced = reducer.reduce(history)
        >>> reduced[0].content, reduced[-1].content, reducer.counter(reduced) <= 60
        ('be brief', 'answer 19', True)

        A long message may be kept in part (any counter works; a chat model as
        ``token_counter`` uses its ``get_num_tokens_from_messages``):

        >>> from langchain_core.messages.utils import count_tokens_approximately
        >>> long = [HumanMessage("old"), AIMessage("\n".join(f"line {i}" for i in range(50))),
        ...         HumanMessage("new")]
        >>> partial = MaxTokensReducer(max_tokens=40, token_counter=count_tokens_approximately,
        ...                            allow_partial=True, start_on_human=False).reduce(long)
        >>> partial[0].content.startswith("line "), partial[-1].content
        (True, 'new')

        A custom counter is asked about whole requests only, a few times:

        >>> from langchain_core.messages import ToolMessage
        >>> asked = []
        >>> def endpoint(messages):
        ...     asked.append([m.type for m in messages])
        ...     return count_tokens_approximately(messages)
        >>> call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        >>> MaxTokensReducer(max_tokens=500, token_counter=endpoint).reduce(
        ...     [HumanMessage("hi"), call, ToolMessage("done", tool_call_id="c1")]) is None
        True
        >>> asked
        [['human', 'ai', 'tool']]
    """

    def __init__(
        self,
        max_tokens: int,
        *,
        token_counter: TokenCounter
        | BaseLanguageModel[Any]
        | RunnableBinding[Any, Any]
        | str
        | None = None,
        threshold_tokens: int = 0,
        start_on_human: bool = True,
        allow_partial: bool = False,
        text_splitter: TextSplitter | None = None,
        tools: Sequence[Any] | None = None,
    ) -> None:
        """Configure the reducer.

        Args:
            max_tokens: Budget for the whole request (an integer >= 1): messages, reply
                priming and tool schemas.
            token_counter: Any ``(messages) -> int`` callable, a chat model (its
                ``get_num_tokens_from_messages``; a bound one, ``model.bind(...)``, counts
                with the model it binds), a model name for an exact tiktoken counter, or
                ``None`` for the default `TiktokenCounter`.
            threshold_tokens: Extra tokens tolerated before reducing (an integer >= 0).
            start_on_human: Start the kept part on a user message.
            allow_partial: Keep the newest pieces of the next older plain message that fit.
            text_splitter: How to cut a message for ``allow_partial`` (default: lines).
            tools: Tool definitions sent with every request (anything ``bind_tools``
                accepts); their JSON schemas count toward ``max_tokens``.

        Raises:
            ConfigurationError: When a budget is out of range, the counter is invalid or a
                tool cannot be converted to a schema.
        """
        self.max_tokens = check_count("max_tokens", max_tokens, minimum=1)
        self.threshold_tokens = check_count("threshold_tokens", threshold_tokens, minimum=0)
        self.start_on_human = bool(start_on_human)
        self.allow_partial = bool(allow_partial)
        if text_splitter is not None and not callable(text_splitter):
            msg = f"text_splitter must be a callable str -> list[str], got {text_splitter!r}"
            raise ConfigurationError(msg)
        self.text_splitter = text_splitter or split_lines
        self._counter_spec = token_counter
        self.counter = resolve_counter(token_counter)
        self.tools = tuple(tools or ())
        try:
            schemas = [convert_to_openai_tool(tool) for tool in self.tools]
        except (TypeError, ValueError) as exc:
            msg = f"tools must be tools, functions or schemas bind_tools accepts: {exc}"
            raise ConfigurationError(msg) from exc
        self._tool_schema = json.dumps(schemas, ensure_ascii=False, sort_keys=True)
        self.tool_tokens = self._count_tools() if schemas else 0

    def _count_tools(self) -> int:
        count_text = getattr(self.counter, "count_text", None)
        if callable(count_text):
            return int(count_text(self._tool_schema))
        return count_request(self.counter, [SystemMessage(self._tool_schema)])

    def with_tools(self, tools: Sequence[Any]) -> MaxTokensReducer:
        """A copy of this reducer whose budget also pays for ``tools``' schemas.

        Example:
            >>> def lookup(city: str) -> str:
            ...     '''Look up the weather in a city.'''
            ...     return "sunny"
            >>> MaxTokensReducer(max_tokens=500).with_tools([lookup]).tool_tokens > 0
            True
        """
        return MaxTokensReducer(
            self.max_tokens,
            token_counter=self._counter_spec,
            threshold_tokens=self.threshold_tokens,
            start_on_human=self.start_on_human,
            allow_partial=self.allow_partial,
            text_splitter=None if self.text_splitter is split_lines else self.text_splitter,
            tools=tools,
        )

    def _config(self) -> tuple[Hashable, ...]:
        spec = self._counter_spec
        counter: Hashable = spec if _hashable(spec) else id(spec)
        return (
            self.max_tokens,
            self.threshold_tokens,
            self.start_on_human,
            self.allow_partial,
            id(self.text_splitter) if self.text_splitter is not split_lines else None,
            counter,
            self._tool_schema,
        )

    def reduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Return the reduced history, or ``None`` when it already fits.

        Raises:
            BudgetError: When the preamble and the latest user message alone exceed
                ``max_tokens``.
        """
        head = preamble_length(messages)
        preamble = list(messages[:head])
        measure = _Measure(self.counter, self.tool_tokens)
        starts = _RoundStarts(messages, head)

        def cost_from(rounds: int) -> int:
            units = split_units(messages[starts.found[rounds - 1] :])
            return measure([*preamble, *flatten(answered_units(units)[0])])

        limit = self.max_tokens + self.threshold_tokens
        available = starts.upto(1)
        whole = _oldest_fitting(1 << 62, lambda k: starts.upto(k) >= k and cost_from(k) <= limit)
        if whole >= 1 and whole == starts.upto(whole + 1):  # every round fits the limit
            out = provider_valid(list(messages))  # within the budget: checking it is cheap
            return None if unchanged(out, messages) else out
        if available == 0:
            return None  # no body at all, and the preamble is never cut
        rounds = whole
        if self.threshold_tokens:
            rounds = _oldest_fitting(whole, lambda k: cost_from(k) <= self.max_tokens)
        if rounds == 0:
            return self._oversized_round(messages, preamble, starts.found[0], measure)
        start = starts.found[rounds - 1]
        kept = flatten(answered_units(split_units(messages[start:]))[0])
        older = messages[start - 1] if start > head else None
        partial = self._partial(older, preamble, kept, measure)
        return provider_valid([*preamble, *partial, *messages[start:]])

    def _oversized_round(
        self,
        messages: Sequence[BaseMessage],
        preamble: list[BaseMessage],
        start: int,
        measure: _Measure,
    ) -> list[BaseMessage]:
        """The latest round alone is over budget: its user message and newest units that fit."""
        human = messages[start] if isinstance(messages[start], HumanMessage) else None
        base = [*preamble, human] if human is not None else preamble
        used = measure(base)
        if human is not None and used > self.max_tokens:
            msg = (
                f"the system preamble and the latest user message need {used} tokens, "
                f"more than max_tokens={self.max_tokens}"
            )
            raise BudgetError(msg)
        units: list[Unit] = split_units(messages[start + (human is not None) :])

        def fits(count: int) -> bool:
            newest, _ = answered_units(units[len(units) - count :])
            return measure([*base, *flatten(newest)]) <= self.max_tokens

        count = _oldest_fitting(len(units), fits)
        tail = flatten(answered_units(units[len(units) - count :])[0])
        older = units[len(units) - count - 1] if count < len(units) else None
        single = older[0] if older is not None and len(older) == 1 else None
        partial = self._partial(single, base, tail, measure, after_human=human is not None)
        return provider_valid([*base, *partial, *flatten(units[len(units) - count :])])

    def _partial(
        self,
        message: BaseMessage | None,
        before: list[BaseMessage],
        after: list[BaseMessage],
        measure: _Measure,
        *,
        after_human: bool = False,
    ) -> list[BaseMessage]:
        """The newest pieces of ``message`` that fit between ``before`` and ``after``.

        A text is cut by ``text_splitter``. A list of content blocks is cut like
        ``trim_messages(allow_partial=True)`` cuts one: whole blocks go from the oldest,
        and a text block (a string, or ``{"type": "text"}``) may be kept in part, split the
        same way; other blocks (images, files...) are kept or left out whole.
        """
        if not self.allow_partial or message is None:
            return []
        if not isinstance(message, HumanMessage | AIMessage) or (
            isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls)
        ):
            return []
        if self.start_on_human and not after_human and not isinstance(message, HumanMessage):
            return []
        pieces = _pieces(message.content, self.text_splitter)

        def cut(count: int) -> BaseMessage:
            kept = pieces[len(pieces) - count :]
            return message.model_copy(update={"content": _joined(message.content, kept)})

        def fits(count: int) -> bool:
            return measure([*before, cut(count), *after]) <= self.max_tokens

        count = _oldest_fitting(len(pieces), fits)
        return [cut(count)] if count else []

    async def areduce(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async twin of `reduce` (no I/O, so it simply calls it)."""
        return self.reduce(messages)


_Piece = tuple[int, str | None]
"""A piece of a message's content: (block index, text piece), or (block index, ``None``)
for a block kept or left out whole. A plain text content is block 0."""


def _block_text(block: object) -> str | None:
    """The text of a text block (``trim_messages`` splits these), else ``None``."""
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and block.get("type") == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    return None


def _pieces(content: str | list[Any], splitter: TextSplitter) -> list[_Piece]:
    """``content`` as the pieces a partial message keeps a suffix of, oldest first."""
    if isinstance(content, str):
        return [(0, piece) for piece in splitter(content)]
    out: list[_Piece] = []
    for index, block in enumerate(content):
        text = _block_text(block)
        if text:
            out.extend((index, piece) for piece in splitter(text))
        else:
            out.append((index, None))
    return out


def _joined(content: str | list[Any], kept: list[_Piece]) -> str | list[Any]:
    """The content made of the ``kept`` pieces (a suffix of `_pieces` of ``content``)."""
    if isinstance(content, str):
        return "".join(text or "" for _, text in kept)
    blocks: list[Any] = []
    for index, group in itertools.groupby(kept, key=operator.itemgetter(0)):
        texts = [text for _, text in group]
        block = content[index]
        if texts == [None]:
            blocks.append(block)
        elif isinstance(block, str):
            blocks.append("".join(t or "" for t in texts))
        else:
            blocks.append({**block, "text": "".join(t or "" for t in texts)})
    return blocks


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
