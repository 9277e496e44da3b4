"""What a conversation's requests really cost once the provider's prompt cache is priced in.

Providers bill a request's input in up to three parts: tokens read from the prompt cache (a
fraction of the input price), tokens written to it (Anthropic: a premium), and the rest at the
full input price; output tokens have their own price. What is cached is a *prefix* shared with
an earlier request of the same conversation while the cache still holds it. A `PricingModel`
states one provider family's rules (``"none"``, ``"openai"`` or ``"anthropic"``), a
`PromptCache` replays a conversation's requests in time order against them, and
`price_requests` does both.

Prices are per million tokens; `PRICING_MODELS` holds the presets the benchmark reports (list
prices when this was written: check your provider's page before relying on them).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.tokens import TiktokenCounter

__all__ = [
    "DEFAULT_PRICING",
    "PRICING_MODELS",
    "Bill",
    "CacheFamily",
    "PricingModel",
    "PromptCache",
    "PromptRequest",
    "RequestCost",
    "encode_request",
    "preset_for_model",
    "price_requests",
    "pricing_model",
]

CacheFamily = Literal["none", "openai", "anthropic"]
"""How a provider caches prompts: not at all, OpenAI's automatic prefix caching (Gemini's
implicit caching works the same way), or Anthropic's explicit breakpoints."""

_FAMILIES = ("none", "openai", "anthropic")
_MILLION = 1_000_000


@dataclass(frozen=True)
class PricingModel:
    """One provider's prices and prompt-cache rules.

    Example:
        >>> gpt = PricingModel(name="gpt", family="openai", input_price=1.25,
        ...                    output_price=10.0, cache_read_ratio=0.1)
        >>> gpt.input_cost(1_000_000, cached=1_000_000)
        0.125
        >>> try:
        ...     PricingModel(name="x", family="openai", input_price=-1.0, output_price=1.0)
        ... except ConfigurationError as exc:
        ...     print(exc)
        input_price must be a finite number >= 0, got -1.0
    """

    name: str
    """Short name for reports (``"openai-90"``)."""
    family: CacheFamily
    """Caching rules: ``"none"``, ``"openai"`` (automatic prefixes) or ``"anthropic"``."""
    input_price: float
    """Price of one million uncached input tokens."""
    output_price: float
    """Price of one million output tokens."""
    cache_read_ratio: float = 1.0
    """Price of a cached input token as a share of the input price (0.1 = 90% off)."""
    cache_write_ratio: float = 1.0
    """Price of an input token written to the cache, as a share of the input price
    (Anthropic's 5-minute cache: 1.25; automatic caches: 1.0)."""
    min_cached_tokens: int = 1024
    """Shortest prefix the cache holds."""
    cache_step: int = 128
    """Granularity of cached prefixes beyond the minimum (``"openai"``; Anthropic caches at
    breakpoints, whatever their position)."""
    cache_lifetime: float = 300.0
    """Seconds an unused cache entry lives; every read or write restarts it."""
    description: str = ""
    """One line for reports (which models these prices are those of)."""

    def __post_init__(self) -> None:
        """Validate prices and rules."""
        if not isinstance(self.name, str) or not self.name.strip():
            msg = f"name must be a non-empty string, got {self.name!r}"
            raise ConfigurationError(msg)
        if self.family not in _FAMILIES:
            msg = f"family must be one of {', '.join(_FAMILIES)}, got {self.family!r}"
            raise ConfigurationError(msg)
        for name in ("input_price", "output_price", "cache_read_ratio", "cache_write_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                msg = f"{name} must be a finite number >= 0, got {value!r}"
                raise ConfigurationError(msg)
            if not math.isfinite(value) or value < 0:
                msg = f"{name} must be a finite number >= 0, got {value!r}"
                raise ConfigurationError(msg)
        for name in ("min_cached_tokens", "cache_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"{name} must be an integer >= 1, got {value!r}"
                raise ConfigurationError(msg)
        lifetime = self.cache_lifetime
        if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or lifetime <= 0:
            msg = f"cache_lifetime must be a number of seconds > 0, got {lifetime!r}"
            raise ConfigurationError(msg)

    @property
    def caches(self) -> bool:
        """Whether this model caches prompts at all."""
        return self.family != "none"

    def input_cost(self, tokens: int, *, cached: int = 0, written: int = 0) -> float:
        """Price of ``tokens`` input tokens of which ``cached`` were read, ``written`` written.

        Example:
            >>> PRICING_MODELS["anthropic"].input_cost(1_000_000, cached=500_000, written=500_000)
            2.025
        """
        plain = tokens - cached - written
        if plain < 0:
            msg = f"cached + written ({cached} + {written}) exceed the input ({tokens})"
            raise ValueError(msg)
        units = plain + cached * self.cache_read_ratio + written * self.cache_write_ratio
        return units * self.input_price / _MILLION

    def output_cost(self, tokens: int) -> float:
        """Price of ``tokens`` output tokens.

        Example:
            >>> PRICING_MODELS["openai-50"].output_cost(1_000_000)
            10.0
        """
        return tokens * self.output_price / _MILLION


PRICING_MODELS: dict[str, PricingModel] = {
    "none": PricingModel(
        name="none",
        family="none",
        input_price=2.5,
        output_price=10.0,
        description="no prompt caching (gpt-4o list prices)",
    ),
    "openai-50": PricingModel(
        name="openai-50",
        family="openai",
        input_price=2.5,
        output_price=10.0,
        cache_read_ratio=0.5,
        description="OpenAI gpt-4o family: cached input 50% off",
    ),
    "openai-75": PricingModel(
        name="openai-75",
        family="openai",
        input_price=2.0,
        output_price=8.0,
        cache_read_ratio=0.25,
        description="OpenAI gpt-4.1 family: cached input 75% off",
    ),
    "openai-90": PricingModel(
        name="openai-90",
        family="openai",
        input_price=1.25,
        output_price=10.0,
        cache_read_ratio=0.1,
        description="OpenAI gpt-5 family: cached input 90% off",
    ),
    "anthropic": PricingModel(
        name="anthropic",
        family="anthropic",
        input_price=3.0,
        output_price=15.0,
        cache_read_ratio=0.1,
        cache_write_ratio=1.25,
        description="Anthropic Claude Sonnet: cache reads 10%, 5-minute cache writes 125%",
    ),
}
"""Preset pricing models, by name; all caches live 5 minutes unused."""

DEFAULT_PRICING = "openai-50"
"""Name of the preset assumed when none is given: the gpt-4o family, the token counter's
default model (``gpt-4o-mini``). ``RoundCompressor(pricing=None)`` folds by cost under it."""


def pricing_model(value: PricingModel | str) -> PricingModel:
    """A `PricingModel` given as itself or as the name of a preset of `PRICING_MODELS`.

    Raises:
        ConfigurationError: An unknown preset name, or neither a name nor a model.

    Example:
        >>> pricing_model("openai-90").cache_read_ratio
        0.1
    """
    if isinstance(value, PricingModel):
        return value
    if isinstance(value, str) and value in PRICING_MODELS:
        return PRICING_MODELS[value]
    msg = f"unknown pricing {value!r}; presets: {', '.join(PRICING_MODELS)} (or a PricingModel)"
    raise ConfigurationError(msg)


# OpenAI's cached-input discount by model family, newest names first (prefix match).
_OPENAI_FAMILIES = (
    ("gpt-5", "openai-90"),
    ("gpt-4.1", "openai-75"),
    ("o4", "openai-75"),
    ("o3", "openai-75"),
    ("codex", "openai-75"),
    ("gpt-4o", "openai-50"),
    ("o1", "openai-50"),
)


def _model_name(model: object) -> str | None:
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def preset_for_model(model: object) -> str | None:
    """The pricing preset a chat model is billed under, when its provider and name say so.

    OpenAI models map by family (``gpt-4o``: ``"openai-50"``, ``gpt-4.1`` / ``o3`` /
    ``o4``: ``"openai-75"``, ``gpt-5``: ``"openai-90"``; older models cache nothing:
    ``"none"``); Anthropic models map to ``"anthropic"`` (which assumes prompt caching is
    on, e.g. with ``AnthropicPromptCachingMiddleware``). ``None`` for anything else. A
    ``"provider:model"`` string and a bound model (``model.bind(...)``) are read too.

    Example:
        >>> from langchain_openai import ChatOpenAI
        >>> preset_for_model(ChatOpenAI(model="gpt-5-mini", api_key="sk-none"))
        'openai-90'
        >>> preset_for_model("anthropic:claude-sonnet-4-5"), preset_for_model(object())
        ('anthropic', None)
    """
    bound = getattr(model, "bound", None)
    if bound is not None and _model_name(model) is None:
        model = bound
    if isinstance(model, str):
        provider, _, name = model.partition(":")
        if not name:
            return None
    else:
        module = type(model).__module__.split(".")[0]
        provider = {"langchain_openai": "openai", "langchain_anthropic": "anthropic"}.get(
            module, ""
        )
        name = _model_name(model) or ""
    provider = provider.strip().lower()
    name = name.strip().lower()
    if provider in ("openai", "azure_openai"):
        base = name.rsplit("/", 1)[-1]
        for prefix, preset in _OPENAI_FAMILIES:
            if base.startswith(prefix):
                return preset
        return "none" if base else None
    if provider == "anthropic":
        return "anthropic"
    return None


@dataclass(frozen=True)
class PromptRequest:
    """One model call of a conversation, as the cache sees it.

    Example:
        >>> PromptRequest(tokens=[1, 2, 3], output_tokens=5, at=12.5).input_tokens
        3
    """

    tokens: Sequence[int]
    """The prompt's token ids (see `encode_request`); only their equality matters."""
    output_tokens: int = 0
    """Tokens of the reply."""
    at: float = 0.0
    """When the call was made, in seconds (any origin; calls must come in time order)."""
    breakpoints: tuple[int, ...] = ()
    """Anthropic cache breakpoints: prompt lengths (in tokens) at which to cache the prefix;
    empty for the end of the prompt. Ignored by other families."""

    @property
    def input_tokens(self) -> int:
        """Prompt length."""
        return len(self.tokens)


@dataclass(frozen=True)
class RequestCost:
    """What one request costs.

    Example:
        >>> cost = RequestCost(input_tokens=2000, cached_tokens=1024, cache_write_tokens=0,
        ...                    output_tokens=10, cost=0.0)
        >>> cost.uncached_tokens
        976
    """

    input_tokens: int
    """Prompt tokens."""
    cached_tokens: int
    """Prompt tokens read from the cache."""
    cache_write_tokens: int
    """Prompt tokens written to the cache at a premium (Anthropic)."""
    output_tokens: int
    """Reply tokens."""
    cost: float
    """Price of the request (input and output)."""

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens billed at the plain input price."""
        return self.input_tokens - self.cached_tokens - self.cache_write_tokens


@dataclass(frozen=True)
class Bill:
    """The priced requests of one or more conversations.

    Example:
        >>> bill = Bill(pricing=PRICING_MODELS["none"], requests=(
        ...     RequestCost(input_tokens=100, cached_tokens=50, cache_write_tokens=0,
        ...                 output_tokens=0, cost=1.0),))
        >>> bill.cost, bill.cached_share
        (1.0, 0.5)
    """

    pricing: PricingModel
    """The pricing model applied."""
    requests: tuple[RequestCost, ...] = field(default_factory=tuple)
    """Every request, in the order given."""

    @property
    def cost(self) -> float:
        """Total price."""
        return math.fsum(r.cost for r in self.requests)

    @property
    def input_tokens(self) -> int:
        """Total prompt tokens."""
        return sum(r.input_tokens for r in self.requests)

    @property
    def cached_tokens(self) -> int:
        """Total prompt tokens read from the cache."""
        return sum(r.cached_tokens for r in self.requests)

    @property
    def output_tokens(self) -> int:
        """Total reply tokens."""
        return sum(r.output_tokens for r in self.requests)

    @property
    def cached_share(self) -> float:
        """Share of prompt tokens read from the cache (0 without prompts)."""
        total = self.input_tokens
        return self.cached_tokens / total if total else 0.0

    def __add__(self, other: Bill) -> Bill:
        """Both bills' requests, when priced the same way."""
        if other.pricing != self.pricing:
            msg = f"cannot add bills priced as {self.pricing.name} and {other.pricing.name}"
            raise ValueError(msg)
        return Bill(self.pricing, self.requests + other.requests)


class PromptCache:
    """A provider's prompt cache for one conversation, fed its requests in time order.

    Cached prefixes are kept as (length, digest of the prefix) entries with the time of their
    last use; prefixes are digested with BLAKE2b-128, so two prompts are taken to share a
    prefix only when its tokens are equal (a collision is astronomically unlikely).

    Example:
        >>> cache = PromptCache(PRICING_MODELS["anthropic"])
        >>> first = cache.price(PromptRequest(tokens=list(range(1500)), at=0.0))
        >>> first.cache_write_tokens, first.cached_tokens
        (1500, 0)
        >>> grown = PromptRequest(tokens=[*range(1500), 7, 8], output_tokens=3, at=30.0)
        >>> second = cache.price(grown)
        >>> second.cached_tokens, second.cache_write_tokens, second.uncached_tokens
        (1500, 2, 0)
    """

    def __init__(self, pricing: PricingModel) -> None:
        """Start cold under ``pricing``."""
        if not isinstance(pricing, PricingModel):
            msg = f"pricing must be a PricingModel, got {type(pricing).__name__}"
            raise ConfigurationError(msg)
        self.pricing = pricing
        self._entries: dict[tuple[int, bytes], float] = {}
        self._lengths: list[int] = []  # sorted distinct lengths of the entries
        self._now = -math.inf

    def _warm(self, key: tuple[int, bytes], at: float) -> bool:
        used = self._entries.get(key)
        return used is not None and at - used <= self.pricing.cache_lifetime

    def _expire(self, at: float) -> None:
        lifetime = self.pricing.cache_lifetime
        stale = [k for k, used in self._entries.items() if at - used > lifetime]
        if not stale:
            return
        for key in stale:
            del self._entries[key]
        self._lengths = sorted({length for length, _ in self._entries})

    def _store(self, key: tuple[int, bytes], at: float) -> None:
        if key not in self._entries:
            index = bisect.bisect_left(self._lengths, key[0])
            if index == len(self._lengths) or self._lengths[index] != key[0]:
                self._lengths.insert(index, key[0])
        self._entries[key] = at

    def price(self, request: PromptRequest) -> RequestCost:
        """Price ``request`` and update the cache as the provider would.

        Raises:
            ValueError: The request is older than the previous one, or a breakpoint lies
                outside its prompt.
        """
        if request.at < self._now:
            msg = f"requests must come in time order: {request.at} after {self._now}"
            raise ValueError(msg)
        self._now = request.at
        pricing = self.pricing
        size = len(request.tokens)
        cached = written = 0
        if pricing.family != "none" and size:
            self._expire(request.at)
            data = array("q", request.tokens).tobytes()
            if pricing.family == "openai":
                cached = self._price_openai(data, size, request.at)
            else:
                cached, written = self._price_anthropic(data, size, request)
        cost = pricing.input_cost(size, cached=cached, written=written)
        cost += pricing.output_cost(request.output_tokens)
        return RequestCost(size, cached, written, request.output_tokens, cost)

    def _price_openai(self, data: bytes, size: int, at: float) -> int:
        pricing = self.pricing
        lengths = range(pricing.min_cached_tokens, size + 1, pricing.cache_step)
        keys = _prefix_keys(data, lengths)
        cached = 0
        for key in keys:  # prefixes are refreshed together, so warm ones come first
            if not self._warm(key, at):
                break
            cached = key[0]
        for key in keys:
            self._store(key, at)
        return cached

    def _price_anthropic(self, data: bytes, size: int, request: PromptRequest) -> tuple[int, int]:
        pricing = self.pricing
        breakpoints = sorted(set(request.breakpoints or (size,)))
        if breakpoints[0] < 1 or breakpoints[-1] > size:
            msg = f"breakpoints must lie within the prompt (1..{size}), got {breakpoints}"
            raise ValueError(msg)
        last = breakpoints[-1]
        candidates = self._lengths[: bisect.bisect_right(self._lengths, last)]
        cached = 0
        hit: tuple[int, bytes] | None = None
        for key in _prefix_keys(data, candidates):
            if self._warm(key, request.at):
                cached, hit = key[0], key
        if hit is not None:
            self._store(hit, request.at)
        cacheable = [b for b in breakpoints if b >= pricing.min_cached_tokens]
        for key in _prefix_keys(data, [b for b in cacheable if b > cached]):
            self._store(key, request.at)
        written = max(0, cacheable[-1] - cached) if cacheable else 0
        return cached, written


def _prefix_keys(data: bytes, lengths: Iterable[int]) -> list[tuple[int, bytes]]:
    """(length, digest) of the prefixes of ``data`` (8 bytes a token) at ascending lengths."""
    hasher = hashlib.blake2b(digest_size=16)
    keys: list[tuple[int, bytes]] = []
    done = 0
    for length in lengths:
        hasher.update(data[done * 8 : length * 8])
        done = length
        keys.append((length, hasher.copy().digest()))
    return keys


def price_requests(requests: Iterable[PromptRequest], pricing: PricingModel) -> Bill:
    """Price one conversation's requests, in time order, starting with a cold cache.

    Example:
        >>> requests = [PromptRequest(tokens=list(range(1100)), output_tokens=10, at=float(t))
        ...             for t in (0, 10)]
        >>> bill = price_requests(requests, PRICING_MODELS["openai-50"])
        >>> bill.cached_tokens, round(bill.cost, 6)
        (1024, 0.00442)
        >>> pricing = PRICING_MODELS["openai-90"]
        >>> first = PromptRequest(tokens=list(range(2000)), at=0.0)
        >>> second = PromptRequest(tokens=[*range(2000), *range(500)], at=60.0)
        >>> [c.cached_tokens for c in price_requests([first, second], pricing).requests]
        [0, 1920]
        >>> late = PromptRequest(tokens=[*range(2000), *range(500)], at=4000.0)
        >>> [c.cached_tokens for c in price_requests([first, late], pricing).requests]
        [0, 0]
    """
    cache = PromptCache(pricing)
    return Bill(pricing, tuple(cache.price(r) for r in requests))


def encode_request(
    messages: Sequence[BaseMessage],
    counter: TiktokenCounter,
    *,
    tools_text: str = "",
) -> list[int]:
    """Token ids of a chat request: tool definitions (as text), messages, reply priming.

    Its length is ``counter.count_messages(messages)`` plus the tokens of ``tools_text``
    (providers render tool definitions ahead of the messages in their own format; pass
    the JSON of the definitions to approximate it).

    Example:
        >>> from langchain_core.messages import HumanMessage, SystemMessage
        >>> counter = TiktokenCounter()
        >>> messages = [SystemMessage("be brief"), HumanMessage("hi")]
        >>> len(encode_request(messages, counter)) == counter.count_messages(messages)
        True
    """
    ids: list[int] = list(counter.encode_text(tools_text)) if tools_text else []
    for message in messages:
        ids += counter.encode_message(message)
    if messages:
        ids += counter.encode_reply_priming()
    return ids
