"""What each strategy's replayed requests cost under prompt caching, per pricing model.

Every request of a replay (the answering calls and the strategy's internal calls, in order)
is encoded to token ids and priced by one `pricing.PromptCache` per pricing model, shared by
the calls of the conversation. The turns of a LoCoMo session are ``turn_gap`` seconds apart
(`turn_times`): the cache is warm within a session and cold at the next one. The method is
described in docs/design/workbench.md.
"""

from __future__ import annotations

import logging
import statistics
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from langchain_core.messages import BaseMessage, SystemMessage

from langchain_histcompress.context.builder import is_context_message
from langchain_histcompress.core.pricing import (
    PRICING_MODELS,
    Bill,
    PricingModel,
    PromptCache,
    PromptRequest,
    RequestCost,
)
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.locomo import LocomoConversation

__all__ = [
    "REPORTED_PRICINGS",
    "SESSION_GAP",
    "TURN_GAP",
    "CostFigures",
    "CostMeter",
    "RequestEncoder",
    "RunCost",
    "cost_figures",
    "parse_session_time",
    "stamped_messages",
    "turn_times",
]

logger = logging.getLogger(__name__)

TURN_GAP = 30.0
"""Seconds between two turns of a session."""
SESSION_GAP = 86_400.0
"""Seconds between sessions whose dates cannot be read (a day: the cache is cold)."""
REPORTED_PRICINGS: tuple[str, ...] = tuple(PRICING_MODELS)
"""Pricing models the benchmark reports, in column order."""

_SESSION_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")


def parse_session_time(text: str) -> datetime | None:
    """The start of a LoCoMo session (``"1:56 pm on 8 May, 2023"``), UTC; ``None`` if unreadable.

    Example:
        >>> parse_session_time("1:56 pm on 8 May, 2023").isoformat()
        '2023-05-08T13:56:00+00:00'
        >>> parse_session_time("sometime") is None
        True
    """
    cleaned = " ".join(text.split())
    for fmt in _SESSION_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


def turn_times(conversation: LocomoConversation, *, turn_gap: float = TURN_GAP) -> dict[str, float]:
    """When each turn was said, in seconds from the first session's start, by turn id.

    A session starts at its date (never before the previous session's last turn); a session
    without a readable date starts `SESSION_GAP` after the previous one ended.

    Example:
        >>> from langchain_histcompress.workbench.locomo import parse_locomo
        >>> conversation = parse_locomo({"speaker_a": "A", "speaker_b": "B", "qa": [],
        ...     "session_1_date_time": "1:56 pm on 8 May, 2023",
        ...     "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"},
        ...                   {"speaker": "B", "dia_id": "D1:2", "text": "yo"}],
        ...     "session_2_date_time": "1:14 pm on 25 May, 2023",
        ...     "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "hey"}]})
        >>> times = turn_times(conversation)
        >>> times["D1:2"] - times["D1:1"], (times["D2:1"] - times["D1:1"]) // 86400
        (30.0, 16.0)
    """
    times: dict[str, float] = {}
    origin: datetime | None = None
    clock = 0.0
    for index, session in enumerate(conversation.sessions):
        start = parse_session_time(session.date_time)
        if start is not None and origin is None:
            origin = start
        if start is not None and origin is not None:
            begin = max((start - origin).total_seconds(), clock + turn_gap if index else 0.0)
        else:
            begin = clock + SESSION_GAP if index else 0.0
        for position, turn in enumerate(session.turns):
            times[turn.dia_id] = begin + position * turn_gap
        clock = begin + (len(session.turns) - 1) * turn_gap
    return times


def stamped_messages(
    conversation: LocomoConversation, *, turn_gap: float = TURN_GAP
) -> list[BaseMessage]:
    """The conversation's messages, each with its time in ``additional_kwargs["timestamp"]``.

    Times are `turn_times` from the first session's date (or 2000-01-01 when unreadable), as
    ISO 8601 strings; the compressor's timestamp reader understands them.

    Example:
        >>> from langchain_histcompress.workbench.locomo import parse_locomo
        >>> conversation = parse_locomo({"speaker_a": "A", "speaker_b": "B", "qa": [],
        ...     "session_1_date_time": "1:56 pm on 8 May, 2023",
        ...     "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]})
        >>> stamped_messages(conversation)[0].additional_kwargs
        {'timestamp': '2023-05-08T13:56:00+00:00'}
    """
    first = conversation.sessions[0].date_time if conversation.sessions else ""
    origin = parse_session_time(first) or datetime(2000, 1, 1, tzinfo=timezone.utc)
    times = turn_times(conversation, turn_gap=turn_gap)
    out: list[BaseMessage] = []
    for message in conversation.messages():
        at = origin + timedelta(seconds=times[str(message.id)])
        kwargs = {**message.additional_kwargs, "timestamp": at.isoformat()}
        out.append(message.model_copy(update={"additional_kwargs": kwargs}))
    return out


class RequestEncoder:
    """Token ids of requests, with each message's ids cached (a history is encoded once).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> encoder = RequestEncoder(TiktokenCounter())
        >>> len(encoder.encode([HumanMessage("hello world", id="1")]))
        9
    """

    def __init__(self, counter: TiktokenCounter, *, cache_size: int = 65_536) -> None:
        """Encode with ``counter``'s encoding; keep at most ``cache_size`` messages."""
        self.counter = counter
        self._cache: OrderedDict[tuple[object, ...], list[int]] = OrderedDict()
        self._cache_size = cache_size

    @staticmethod
    def _key(message: BaseMessage) -> tuple[object, ...]:
        content = message.content if isinstance(message.content, str) else repr(message.content)
        extra = getattr(message, "tool_call_id", None)
        calls = getattr(message, "tool_calls", None) or getattr(message, "invalid_tool_calls", None)
        return (type(message), message.id, message.name, content, extra, repr(calls))

    def message(self, message: BaseMessage) -> list[int]:
        """The ids of one message (`TiktokenCounter.encode_message`)."""
        key = self._key(message)
        ids = self._cache.get(key)
        if ids is None:
            ids = self._cache[key] = self.counter.encode_message(message)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return ids

    def encode(self, messages: Sequence[BaseMessage], *, tools_text: str = "") -> list[int]:
        """The ids of a request (same layout as `pricing.encode_request`)."""
        return self.encode_with_breakpoints(messages, tools_text=tools_text)[0]

    def encode_with_breakpoints(
        self, messages: Sequence[BaseMessage], *, tools_text: str = ""
    ) -> tuple[list[int], tuple[int, ...]]:
        """The ids of a request and where a client marks Anthropic cache breakpoints.

        After the preamble (tool definitions and leading system messages), as Anthropic's
        guide places the first one; before each package data message
        (`context.is_context_message`: what follows changes with the question, so writing
        it to the cache would be paid for and never read); and at the end of a prompt
        without a data message (the next request extends it). Anthropic takes at most four:
        the preamble's and the last three.
        """
        ids: list[int] = self.counter.encode_text(tools_text) if tools_text else []
        marks: list[int] = []
        in_preamble = True
        data = False
        for message in messages:
            if in_preamble and not isinstance(message, SystemMessage):
                in_preamble = False
                if ids:
                    marks.append(len(ids))
            if ids and is_context_message(message):
                data = True
                marks.append(len(ids))
            ids += self.message(message)
        if messages:
            ids += self.counter.encode_reply_priming()
        if not data and ids:
            marks.append(len(ids))
        unique = sorted(set(marks))
        return ids, tuple(unique[:1] + unique[1:][-3:])


@dataclass(frozen=True)
class RunCost:
    """One replay priced by one pricing model."""

    answer: Bill
    """The answering calls."""
    internal: Bill
    """The strategy's own summarize / extract calls."""

    @property
    def total(self) -> Bill:
        """Both."""
        return self.answer + self.internal


class CostMeter:
    """Prices one conversation's requests under several pricing models, as they are made.

    Example:
        >>> from langchain_core.messages import HumanMessage, SystemMessage
        >>> meter = CostMeter(TiktokenCounter(), pricings=["none", "openai-90"])
        >>> prompt = [SystemMessage("rules " * 1500, id="s"), HumanMessage("hi", id="1")]
        >>> meter.answer(prompt, output_tokens=5, at=0.0)
        >>> meter.answer([*prompt, HumanMessage("again", id="2")], output_tokens=5, at=30.0)
        >>> costs = meter.costs()
        >>> costs["openai-90"].total.cached_tokens, costs["none"].total.cached_tokens
        (1408, 0)
    """

    def __init__(
        self,
        counter: TiktokenCounter,
        *,
        pricings: Iterable[str | PricingModel] = REPORTED_PRICINGS,
        tools_text: str = "",
        encoder: RequestEncoder | None = None,
    ) -> None:
        """Start cold; ``tools_text`` is sent ahead of every answering request."""
        models = [p if isinstance(p, PricingModel) else PRICING_MODELS[p] for p in pricings]
        self.pricings = {p.name: p for p in models}
        self.encoder = encoder or RequestEncoder(counter)
        self.tools_text = tools_text
        self._caches = {name: PromptCache(p) for name, p in self.pricings.items()}
        self._answer: dict[str, list[RequestCost]] = {name: [] for name in self.pricings}
        self._internal: dict[str, list[RequestCost]] = {name: [] for name in self.pricings}
        self._reported: list[int] = []

    def _price(
        self,
        target: dict[str, list[RequestCost]],
        ids: list[int],
        output_tokens: int,
        at: float,
        breakpoints: tuple[int, ...] = (),
    ) -> None:
        request = PromptRequest(
            tokens=ids, output_tokens=output_tokens, at=at, breakpoints=breakpoints
        )
        for name, cache in self._caches.items():
            target[name].append(cache.price(request))

    def answer(self, messages: Sequence[BaseMessage], *, output_tokens: int, at: float) -> None:
        """Price an answering call (Anthropic breakpoints as `RequestEncoder` places them)."""
        ids, marks = self.encoder.encode_with_breakpoints(messages, tools_text=self.tools_text)
        self._price(self._answer, ids, output_tokens, at, marks)

    def internal(
        self,
        messages: Sequence[BaseMessage],
        *,
        output_tokens: int,
        at: float,
        reported_cached: int | None = None,
    ) -> None:
        """Price an internal call; ``reported_cached`` is what a real provider said it cached."""
        ids, marks = self.encoder.encode_with_breakpoints(messages)
        self._price(self._internal, ids, output_tokens, at, marks)
        if reported_cached is not None:
            self._reported.append(reported_cached)

    @property
    def reported_cached_tokens(self) -> int | None:
        """Cached input tokens the provider reported for internal calls (``None``: no report)."""
        return sum(self._reported) if self._reported else None

    def costs(self) -> dict[str, RunCost]:
        """Everything priced so far, by pricing model name."""
        return {
            name: RunCost(
                Bill(pricing, tuple(self._answer[name])),
                Bill(pricing, tuple(self._internal[name])),
            )
            for name, pricing in self.pricings.items()
        }


@dataclass(frozen=True)
class CostFigures:
    """A strategy's cost under one pricing model, over one or more conversations."""

    pricing: str
    """Pricing model name."""
    cost: float
    """Total price of every call."""
    internal_cost: float
    """Price of the internal calls."""
    input_tokens: int
    """Prompt tokens of every call."""
    cached_tokens: int
    """Prompt tokens read from the cache."""
    savings: float | None = None
    """``1 - cost / cost(full)`` priced the same way; ``None`` without the baseline."""
    per_conversation_savings: tuple[float, ...] = field(default_factory=tuple)
    """Savings on each conversation (when the baseline ran on all)."""
    output_cost: float = 0.0
    """Price of the answering calls' output tokens (the same for every strategy)."""
    answer_savings: float | None = None
    """Savings if the internal calls were free: ``1 - answer cost / cost(full)``, an upper
    bound for the strategy's prompts whatever its summarizer costs."""

    @property
    def cached_share(self) -> float:
        """Share of prompt tokens read from the cache."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def worst_savings(self) -> float | None:
        """The lowest per-conversation savings (``None`` without them)."""
        return min(self.per_conversation_savings) if self.per_conversation_savings else None

    @property
    def median_savings(self) -> float | None:
        """The median per-conversation savings (``None`` without them)."""
        values = self.per_conversation_savings
        return statistics.median(values) if values else None


def cost_figures(
    runs: Sequence[Mapping[str, RunCost]],
    pricing: str,
    *,
    baselines: Sequence[Mapping[str, RunCost]] | None = None,
) -> CostFigures | None:
    """Pool ``runs`` (one cost mapping per conversation) under ``pricing``.

    ``baselines`` are the full-history costs of the same conversations, in the same order.

    Example:
        >>> from langchain_histcompress.core.pricing import RequestCost
        >>> p = PRICING_MODELS["none"]
        >>> def run(cost):
        ...     paid = RequestCost(10, 0, 0, 0, cost)
        ...     return {"none": RunCost(Bill(p, (paid,)), Bill(p))}
        >>> figures = cost_figures([run(1.0)], "none", baselines=[run(4.0)])
        >>> figures.savings, figures.cached_share
        (0.75, 0.0)
    """
    if not runs or any(pricing not in r for r in runs):
        return None
    totals = [r[pricing].total for r in runs]
    cost = sum(b.cost for b in totals)
    savings: float | None = None
    answer_savings: float | None = None
    per: tuple[float, ...] = ()
    answer_cost = sum(r[pricing].answer.cost for r in runs)
    if baselines is not None and len(baselines) == len(runs):
        base = [b[pricing].total.cost for b in baselines if pricing in b]
        if len(base) == len(runs) and all(base):
            savings = 1 - cost / sum(base)
            answer_savings = 1 - answer_cost / sum(base)
            per = tuple(1 - t.cost / c for t, c in zip(totals, base, strict=True))
    model = runs[0][pricing].answer.pricing
    return CostFigures(
        pricing=pricing,
        cost=cost,
        internal_cost=sum(r[pricing].internal.cost for r in runs),
        input_tokens=sum(b.input_tokens for b in totals),
        cached_tokens=sum(b.cached_tokens for b in totals),
        savings=savings,
        per_conversation_savings=per,
        output_cost=sum(model.output_cost(r[pricing].answer.output_tokens) for r in runs),
        answer_savings=answer_savings,
    )
