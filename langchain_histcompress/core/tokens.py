"""Exact, offline token counting for chat histories: `TiktokenCounter` and the counter helpers.

A message costs OpenAI's published chat formula, extended to tool calls and content blocks
(the formula is written out in ``docs/design/core.md``); the encodings come from `encodings`.
`TiktokenCounter` caches per-message counts and remembers the last lists it counted, so
counting a history after appending to it costs O(new messages).

Example:
    >>> from langchain_core.messages import HumanMessage
    >>> counter = TiktokenCounter("gpt-4o-mini")
    >>> counter.count_text("hello world")
    2
    >>> counter([HumanMessage("hello world")])
    9
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableBinding

from langchain_histcompress.core.encodings import _SPECS, encoding_name_for_model, get_encoding
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.prefix import holds

__all__ = [
    "CacheInfo",
    "TiktokenCounter",
    "TokenCounter",
    "cost_ceilings",
    "count_request",
    "message_costs",
    "request_ceiling",
    "resolve_counter",
    "text_ceiling",
]

TokenCounter = Callable[[Sequence[BaseMessage]], int]
"""Any callable that returns the token cost of a message list."""

DEFAULT_MODEL = "gpt-4o-mini"
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_TOOL_CALL = 3
REPLY_PRIMING_TOKENS = 3

_IMAGE_BLOCK_TYPES = frozenset({"image", "image_url", "input_image"})
_TEXT_BLOCK_TYPES = frozenset({"text", "input_text", "output_text"})
# String content up to this length is kept in the cache key as is (its hash is cached by
# CPython, so re-keying is O(1)); longer content is keyed by a digest to bound memory.
_INLINE_KEY_CHARS = 256


class CacheInfo(NamedTuple):
    """Statistics of a counter's per-message cache."""

    hits: int
    """Lookups served from the cache."""
    misses: int
    """Lookups that had to count the message."""
    maxsize: int
    """Largest number of entries kept."""
    currsize: int
    """Entries held now."""


_JSON = json.JSONEncoder(ensure_ascii=False, default=str)
_FLAT_TYPES = frozenset({str, int, bool, type(None)})


def _dumps(value: Any) -> str:
    return _JSON.encode(value)


def _digest(text: str, domain: bytes = b"text") -> bytes:
    """16-byte blake2b of ``text``; ``domain`` keeps raw text apart from serialized JSON."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16, person=domain).digest()


def _text_key(text: str | None) -> str | bytes | None:
    """Short text stands for itself (CPython caches its hash); long text is digested."""
    if text is None or len(text) <= _INLINE_KEY_CHARS:
        return text
    return _digest(text)


def _flat_args(args: Any) -> list[Any] | None:
    """Flatten arguments made of short scalars into (name, type, value) runs, else None."""
    if type(args) is not dict:
        return None
    flat: list[Any] = []
    for name, value in args.items():
        kind = type(value)
        if (
            type(name) is not str
            or kind not in _FLAT_TYPES
            or (kind is str and len(value) > _INLINE_KEY_CHARS)
        ):
            return None
        flat += (name, kind, value)
    return flat


def _add_calls_key(parts: list[Any], message: AIMessage) -> None:
    """Append a flat fingerprint of the tool calls; equal fingerprints give equal counts.

    Arguments made of short scalars stand for themselves, typed so that ``1`` and ``True``
    differ; other arguments are digested from their JSON. Lengths prefix every variable part,
    so a fingerprint has one reading.
    """
    parts += (len(message.tool_calls), len(message.invalid_tool_calls))
    for call in message.tool_calls:
        parts += (call["name"], call["id"])
        flat = _flat_args(call["args"])
        if flat is None:
            parts += (-1, _digest(_dumps(call["args"]), b"json"))
        else:
            parts.append(len(flat))
            parts += flat
    for invalid in message.invalid_tool_calls:
        parts += (invalid["name"], invalid["id"], _text_key(invalid["args"]))


def _role(message: BaseMessage) -> str:
    if isinstance(message, ChatMessage):
        return message.role
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        role = message.additional_kwargs.get("__openai_role__")
        return role if isinstance(role, str) else "system"
    if isinstance(message, ToolMessage):
        return "tool"
    return message.type


def _calls(message: BaseMessage) -> list[tuple[str, str, str]]:
    """The (name, arguments, id) strings the API receives for an AIMessage's tool calls."""
    if not isinstance(message, AIMessage):
        return []
    calls = [(tc["name"] or "", _dumps(tc["args"]), tc["id"] or "") for tc in message.tool_calls]
    calls.extend(
        (tc["name"] or "", tc["args"] or "", tc["id"] or "") for tc in message.invalid_tool_calls
    )
    return calls


_Key = tuple[Any, ...]


_ROLES_REMEMBERED = 64  # ChatMessage roles are free text: remember only the first few
_PREFIX_MEMOS = 8  # histories remembered at once (e.g. a few concurrent sessions)
_COMPARE_CHUNK = 4096
# How a list is matched against a remembered one (see `TiktokenCounter.count_each`): common
# parts up to _FULL_CHECK messages are compared reference by reference; longer ones by their
# first _CHECK_HEAD and last _CHECK_TAIL references plus _CHECK_SWEEP more in rotation, so
# the check costs the same at 10k and 100k messages.
_FULL_CHECK = 2048
_CHECK_HEAD = 64
_CHECK_TAIL = 512
_CHECK_SWEEP = 1024


def _as_list(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return messages if isinstance(messages, list) else list(messages)


def _same(messages: Sequence[BaseMessage], mine: list[BaseMessage], start: int, stop: int) -> bool:
    """Whether ``messages[start:stop]`` and ``mine[start:stop]`` hold the same messages."""
    return _as_list(messages[start:stop]) == mine[start:stop]


class _Counted:
    """The messages counted from one first message, in order, with their running totals.

    Grown in place when a longer list with the same beginning is counted, so a history that
    grows by a few messages per turn costs those messages plus a check of bounded size
    (identical objects compare equal without calling ``__eq__``).
    """

    __slots__ = ("counts", "messages", "sweep", "totals")

    def __init__(self, messages: list[BaseMessage], counts: list[int]) -> None:
        self.messages = messages
        self.counts = counts
        self.totals = list(itertools.accumulate(counts))
        self.sweep = _CHECK_HEAD  # where the next rotating check of a long common part starts

    def shared_prefix(self, messages: Sequence[BaseMessage]) -> int:
        """Length of the common beginning of ``self.messages`` and ``messages``, as checked.

        Messages match when identical, or equal as values (then their counts are equal).
        The caller holds the counter's lock (`sweep` moves).
        """
        n = min(len(self.messages), len(messages))
        if self._agrees(messages, n):
            return n
        return self._first_difference(messages, n)

    def _agrees(self, messages: Sequence[BaseMessage], n: int) -> bool:
        """Whether ``messages[:n]`` holds ``self.messages[:n]``: wholly up to `_FULL_CHECK`."""
        mine = self.messages
        if n <= _FULL_CHECK:
            return holds(messages, mine, n, by_value=True)  # pointers, touching no message
        tail = n - _CHECK_TAIL
        if not (_same(messages, mine, 0, _CHECK_HEAD) and _same(messages, mine, tail, n)):
            return False
        start = self.sweep if _CHECK_HEAD <= self.sweep < tail else _CHECK_HEAD
        stop = min(start + _CHECK_SWEEP, tail)
        self.sweep = stop
        return _same(messages, mine, start, stop)

    def _first_difference(self, messages: Sequence[BaseMessage], n: int) -> int:
        """The first position below ``n`` where the lists differ (``n`` when none does)."""
        mine = self.messages
        start = 0
        while start < n:  # find the first chunk that differs, then the message
            stop = min(start + _COMPARE_CHUNK, n)
            if not _same(messages, mine, start, stop):
                break
            start = stop
        while start < n and (mine[start] is messages[start] or mine[start] == messages[start]):
            start += 1
        return start

    def extend(self, messages: Sequence[BaseMessage], counts: list[int]) -> None:
        """Append counted messages (the caller holds the counter's lock)."""
        total = self.totals[-1] if self.totals else 0
        self.messages.extend(messages)
        self.counts.extend(counts)
        self.totals.extend(itertools.islice(itertools.accumulate(counts, initial=total), 1, None))


class TiktokenCounter:
    """Exact, offline chat token counter with a per-message LRU cache.

    Counts follow the formula in ``docs/design/core.md``: per message, 3 tokens + T(role) +
    content (text blocks as text, image blocks at ``image_tokens``, other blocks as their
    JSON) + T(name) + 1 when named + T(tool_call_id) for tool results + T(name) + T(arguments)
    + T(id) + 3 per tool call; a list costs the sum + 3 reply-priming tokens. The instance is a
    `TokenCounter`, so it drops into ``trim_messages(token_counter=counter)``.

    Per-message counts are cached under (message id, type, fingerprint of every counted field),
    so an edited message is recounted and recounting a grown history only encodes the new
    messages. The cache is a bounded LRU shared safely between threads.

    Args:
        model: Model whose encoding to use (see `encoding_name_for_model`).
        encoding: Encoding name overriding the model's.
        image_tokens: Fixed cost of one image block.
        cache_size: Most cached per-message counts; 0 disables the cache.

    Raises:
        ConfigurationError: An argument is invalid or the encoding is unknown.
        TokenizerError: The encoding's rank file is missing or fails its checksum.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> counter = TiktokenCounter("gpt-4o")
        >>> counter.count_message(HumanMessage("hello world"))
        6
        >>> counter.count_messages([HumanMessage("hi"), AIMessage("hello!")])
        14
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        encoding: str | None = None,
        image_tokens: int = 85,
        cache_size: int = 262_144,
    ) -> None:
        """Validate the configuration and load the encoding."""
        if not isinstance(model, str) or not model.strip():
            msg = f"model must be a non-empty string, got {model!r}"
            raise ConfigurationError(msg)
        if encoding is not None and not isinstance(encoding, str):
            msg = f"encoding must be a string or None, got {encoding!r}"
            raise ConfigurationError(msg)
        for field, value in (("image_tokens", image_tokens), ("cache_size", cache_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"{field} must be an integer >= 0, got {value!r}"
                raise ConfigurationError(msg)
        self._model = model
        self._encoding_override = encoding
        self._encoding = get_encoding(encoding or encoding_name_for_model(model))
        self._encode = self._encoding.encode_ordinary
        self._image_tokens = image_tokens
        self._cache_size = cache_size
        self._cache: OrderedDict[_Key, int] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._prefixes: list[_Counted] = []
        """Remembered lists with their counts, the most recently used last."""
        self._roles: dict[str, int] = {}

    @property
    def model(self) -> str:
        """The model name given at construction."""
        return self._model

    @property
    def encoding_name(self) -> str:
        """Name of the encoding in use."""
        return self._encoding.name

    @property
    def image_tokens(self) -> int:
        """Fixed cost of one image block."""
        return self._image_tokens

    def __repr__(self) -> str:
        """Show the configuration."""
        return (
            f"TiktokenCounter(model={self._model!r}, encoding={self.encoding_name!r}, "
            f"image_tokens={self._image_tokens}, cache_size={self._cache_size})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and copy by configuration; the cache starts empty."""
        args = (self._model, self._encoding_override, self._image_tokens, self._cache_size)
        return (_rebuild_counter, args)

    def count_text(self, text: str) -> int:
        """Count the tokens of ``text``; special-token text counts as ordinary text.

        Example:
            >>> TiktokenCounter().count_text("<|endoftext|>")
            7
        """
        return len(self._encode(text))

    @staticmethod
    def _key(message: BaseMessage) -> _Key:
        """Fingerprint every field the count depends on; equal keys mean equal counts."""
        content = message.content
        if type(content) is not str:
            content_key: Any = _digest(_dumps(content), b"json")
        elif len(content) > _INLINE_KEY_CHARS:
            content_key = _digest(content)
        else:
            content_key = content
        cls = type(message)
        if cls is HumanMessage or (
            cls is AIMessage
            and not message.tool_calls  # type: ignore[attr-defined]
            and not message.invalid_tool_calls  # type: ignore[attr-defined]
        ):
            return (message.id, cls, message.name, content_key)
        if cls is ToolMessage:
            return (message.id, cls, message.name, content_key, message.tool_call_id)  # type: ignore[attr-defined]
        parts: list[Any] = [message.id, cls, message.name, content_key]
        if cls is not AIMessage:
            parts.append(_role(message))
            if isinstance(message, ToolMessage):
                parts.append(message.tool_call_id)
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            _add_calls_key(parts, message)
        return tuple(parts)

    def _content_tokens(self, content: str | list[str | dict[Any, Any]], call_ids: set[str]) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        total = 0
        for block in content:
            if isinstance(block, str):
                total += self.count_text(block)
                continue
            kind = block.get("type")
            text = block.get("text")
            if kind in _TEXT_BLOCK_TYPES and isinstance(text, str):
                total += self.count_text(text)
            elif kind in _IMAGE_BLOCK_TYPES:
                total += self._image_tokens
            elif kind != "tool_use" or block.get("id") not in call_ids:
                total += self.count_text(_dumps(block))
        return total

    def _count_uncached(self, message: BaseMessage) -> int:
        calls = _calls(message)
        role = _role(message)
        role_tokens = self._roles.get(role)
        if role_tokens is None:  # a handful of roles: remembered, not encoded per message
            role_tokens = self.count_text(role)
            if len(self._roles) < _ROLES_REMEMBERED:
                self._roles[role] = role_tokens
        total = TOKENS_PER_MESSAGE + role_tokens
        total += self._content_tokens(message.content, {call_id for _, _, call_id in calls})
        if message.name and not isinstance(message, ToolMessage):
            total += self.count_text(message.name) + TOKENS_PER_NAME
        if isinstance(message, ToolMessage):
            total += self.count_text(message.tool_call_id)
        for name, arguments, call_id in calls:
            total += self.count_text(name) + self.count_text(arguments)
            total += self.count_text(call_id) + TOKENS_PER_TOOL_CALL
        return total

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token text encoded as ordinary text).

        Example:
            >>> len(TiktokenCounter().encode_text("hello world"))
            2
        """
        return self._encode(text)

    def encode_message(self, message: BaseMessage) -> list[int]:
        """Token ids of one message as the provider reads them, ``count_message`` long.

        Text is encoded exactly; the per-message framing, the name separator, the per-call
        framing and image blocks are stand-in ids above the vocabulary (the provider's own
        framing tokens are not public), so two encodings share a prefix exactly when the
        provider's would. Used to simulate prompt caching (see ``pricing``).

        Example:
            >>> from langchain_core.messages import HumanMessage
            >>> counter = TiktokenCounter()
            >>> ids = counter.encode_message(HumanMessage("hello world"))
            >>> len(ids) == counter.count_message(HumanMessage("hello world"))
            True
        """
        start, sep, end, name_sep, call, image = (self._encoding.n_vocab + k for k in range(6))
        calls = _calls(message)
        ids = [start, *self._encode(_role(message)), sep]
        content = message.content
        if isinstance(content, str):
            ids += self._encode(content)
        else:
            call_ids = {call_id for _, _, call_id in calls}
            for block in content:
                if isinstance(block, str):
                    ids += self._encode(block)
                    continue
                kind, text = block.get("type"), block.get("text")
                if kind in _TEXT_BLOCK_TYPES and isinstance(text, str):
                    ids += self._encode(text)
                elif kind in _IMAGE_BLOCK_TYPES:
                    ids += [image] * self._image_tokens
                elif kind != "tool_use" or block.get("id") not in call_ids:
                    ids += self._encode(_dumps(block))
        if message.name and not isinstance(message, ToolMessage):
            ids += [name_sep, *self._encode(message.name)]
        if isinstance(message, ToolMessage):
            ids += self._encode(message.tool_call_id)
        for name, arguments, call_id in calls:
            ids += [call, *self._encode(name), call, *self._encode(arguments)]
            ids += [call, *self._encode(call_id)]
        ids.append(end)
        return ids

    def encode_reply_priming(self) -> list[int]:
        """The ids closing every request (the start of the assistant's reply), 3 long.

        Example:
            >>> len(TiktokenCounter().encode_reply_priming())
            3
        """
        start, sep = self._encoding.n_vocab, self._encoding.n_vocab + 1
        return [start, *self._encode("assistant"), sep]

    def count_message(self, message: BaseMessage) -> int:
        """Count one message's tokens, reply priming excluded (see the class docstring).

        Example:
            >>> from langchain_core.messages import HumanMessage
            >>> TiktokenCounter().count_message(HumanMessage("hi", name="ann"))
            7
        """
        return self._count_each([message])[0]

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Count a message list: the sum of `count_message` + 3 (0 for an empty list).

        Example:
            >>> TiktokenCounter().count_messages([])
            0
        """
        if not messages:
            return 0
        memo = self._counted(messages)
        return memo.totals[len(messages) - 1] + REPLY_PRIMING_TOKENS

    def count_each(self, messages: Sequence[BaseMessage]) -> list[int]:
        """Per-message counts (as `count_message`), in O(new messages) for a grown list.

        A list that begins with the same messages as one of the last few lists counted (the
        same objects, or equal ones) reuses their counts: only the messages after the common
        beginning are fingerprinted and looked up in the per-message cache. What is checked
        to find that beginning, so that a grown history costs the same at 1k and 100k
        messages:

        * a list is matched only with a remembered list that starts with the same two
          objects, and every conversation keeps its own: lists sharing their first
          messages (a fixed system prompt and greeting) do not evict each other, and a list
          that shares at least half of a remembered one (the same history, edited) takes
          its place;
        * when the part they share is at most 2,048 messages long, every reference in it is
          compared (exact: any message replaced, inserted or removed is seen);
        * when it is longer, each call compares its first 64 and last 512 references and
          1,024 more in rotation. An insertion or removal shifts the last ones and is seen
          at once; a message replaced by another object deep inside a long list, the rest
          untouched, is seen within a full rotation (about 100 calls at 100k messages), and
          the sum may use its old count until then.

        Messages are treated as values: edit one in place after counting it and a later
        count of a list holding that same object may be stale (copy it with
        ``model_copy(update=...)`` instead, as LangGraph's ``add_messages`` does, or call
        `cache_clear`). `count_message` always re-fingerprints, and `cache_clear` forgets
        every remembered list.

        Example:
            >>> from langchain_core.messages import AIMessage, HumanMessage
            >>> counter = TiktokenCounter()
            >>> history = [HumanMessage("hi"), AIMessage("hello!")]
            >>> counter.count_each(history), counter.count_each([*history, HumanMessage("hi")])
            ([5, 6], [5, 6, 5])
        """
        if not messages:
            return []
        return self._counted(messages).counts[: len(messages)]

    def _counted(self, messages: Sequence[BaseMessage]) -> _Counted:
        """A memo whose first ``len(messages)`` entries are the counts of ``messages``."""
        with self._lock:
            memo, kept = self._best_memo(messages)
            size = len(memo.messages) if memo is not None else 0
        if memo is not None and kept == len(messages):
            return memo
        fresh = self._count_each(messages[kept:])
        with self._lock:
            if memo is not None and kept == size == len(memo.messages):
                memo.extend(messages[kept:], fresh)  # still the newest list: grow in place
            else:
                counts = memo.counts[:kept] if memo is not None else []
                replaced = memo if memo is not None and 2 * kept >= len(memo.messages) else None
                memo = _Counted(_as_list(messages[:]), counts + fresh)
                self._remember(memo, replaced)
        return memo

    def _remember(self, memo: _Counted, replaced: _Counted | None) -> None:
        """Keep ``memo`` as the most recently used list (the caller holds the lock).

        It takes the place of ``replaced``, a list it shares at least half of (the same
        conversation, edited or tried with another last message); otherwise it is another
        list (a conversation sharing only its first messages) and the least recently used
        memo goes when there are too many.
        """
        memos = self._prefixes
        if replaced is not None:
            memos[:] = [m for m in memos if m is not replaced]
        memos.append(memo)
        if len(memos) > _PREFIX_MEMOS:
            del memos[0]

    def _best_memo(self, messages: Sequence[BaseMessage]) -> tuple[_Counted | None, int]:
        """The remembered list sharing the longest beginning with ``messages``, and its length.

        Only lists that start with the same two objects are compared (so lists sharing only a
        system message cost a pointer comparison each), most recently used first; a list
        holding all of ``messages``, or wholly held by it, ends the search. The memo found
        becomes the most recently used. The caller holds the counter's lock.
        """
        first = messages[0]
        second = messages[1] if len(messages) > 1 else None
        memos = self._prefixes
        best: _Counted | None = None
        kept = 0
        at_best = -1
        for at in range(len(memos) - 1, -1, -1):
            mine = memos[at].messages
            if mine[0] is not first or (
                second is not None and len(mine) > 1 and mine[1] is not second
            ):
                continue
            shared = memos[at].shared_prefix(messages)
            if best is None or shared > kept:
                best, kept, at_best = memos[at], shared, at
            if shared in (len(mine), len(messages)):
                break
        if best is not None:
            memos.append(memos.pop(at_best))
        return best, kept

    def _count_each(self, messages: Sequence[BaseMessage]) -> list[int]:
        """Per-message counts: cached ones under one lock, the others computed outside it."""
        if not self._cache_size:
            return [self._count_uncached(message) for message in messages]
        keys = [self._key(message) for message in messages]
        counts: list[int | None] = []
        with self._lock:
            cache = self._cache
            for key in keys:
                count = cache.get(key)
                if count is not None:
                    cache.move_to_end(key)
                counts.append(count)
            missing = counts.count(None)
            self._hits += len(keys) - missing
            self._misses += missing
        if not missing:
            return counts  # type: ignore[return-value]
        fresh: dict[_Key, int] = {}
        result: list[int] = []
        for message, key, count in zip(messages, keys, counts, strict=True):
            if count is None:
                count = fresh.get(key)
                if count is None:
                    count = fresh[key] = self._count_uncached(message)
            result.append(count)
        with self._lock:
            cache.update(fresh)
            while len(cache) > self._cache_size:
                cache.popitem(last=False)
        return result

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        """Same as `count_messages`."""
        return self.count_messages(messages)

    def cache_info(self) -> CacheInfo:
        """Report cache hits, misses and size.

        Example:
            >>> from langchain_core.messages import HumanMessage
            >>> counter = TiktokenCounter()
            >>> _ = counter([HumanMessage("hi", id="1")]), counter([HumanMessage("hi", id="1")])
            >>> counter.cache_info()
            CacheInfo(hits=1, misses=1, maxsize=262144, currsize=1)
        """
        with self._lock:
            return CacheInfo(self._hits, self._misses, self._cache_size, len(self._cache))

    def cache_clear(self) -> None:
        """Drop every cached count and reset the statistics."""
        with self._lock:
            self._cache.clear()
            self._prefixes.clear()
            self._hits = self._misses = 0


def _rebuild_counter(
    model: str, encoding: str | None, image_tokens: int, cache_size: int
) -> TiktokenCounter:
    return TiktokenCounter(
        model, encoding=encoding, image_tokens=image_tokens, cache_size=cache_size
    )


@lru_cache(maxsize=64)
def _shared_counter(model: str) -> TiktokenCounter:
    return TiktokenCounter(model)


@lru_cache(maxsize=4)
def _shared_encoding_counter(encoding: str) -> TiktokenCounter:
    return TiktokenCounter(encoding, encoding=encoding)


def resolve_counter(
    counter: TokenCounter | BaseLanguageModel[Any] | RunnableBinding[Any, Any] | str | None,
) -> TokenCounter:
    """Turn a counter specification into a token counter.

    Args:
        counter: ``None`` for the shared ``gpt-4o-mini`` `TiktokenCounter`; a model name for the
            shared `TiktokenCounter` of that model, an encoding name (``"o200k_base"``,
            ``"cl100k_base"``) for a counter of that encoding (``"approximate"`` for
            ``count_tokens_approximately``); a chat model, whose
            ``get_num_tokens_from_messages`` is used (a bound one, ``model.bind(...)``,
            counts with the model it binds); any callable taking a message list is returned
            as is (``count_tokens_approximately``...).

    Returns:
        The token counter.

    Raises:
        ConfigurationError: ``counter`` is none of the above, or names a model whose
            encoding is unknown.

    Example:
        >>> resolve_counter(None) is resolve_counter("gpt-4o-mini")
        True
        >>> resolve_counter("cl100k_base").encoding_name
        'cl100k_base'
    """
    if counter is None:
        return _shared_counter(DEFAULT_MODEL)
    if isinstance(counter, str):
        if counter == "approximate":
            return count_tokens_approximately
        if not counter.strip():
            msg = "token counter model name must not be empty"
            raise ConfigurationError(msg)
        if counter in _SPECS:
            return _shared_encoding_counter(counter)
        return _shared_counter(counter)
    bound = _bound_model(counter)
    if bound is not None:
        counter = bound
    if isinstance(counter, BaseLanguageModel):
        model = counter
        return lambda messages: model.get_num_tokens_from_messages(list(messages))
    if isinstance(counter, type) or not callable(counter):
        msg = (
            "token counter must be None, a model name or a callable taking a message list, "
            f"got {counter!r}"
        )
        raise ConfigurationError(msg)
    return counter


def _bound_model(counter: object) -> BaseLanguageModel[Any] | None:
    """The model inside ``model.bind(...)`` / ``with_config(...)`` wrappers, if that is one.

    Raises:
        ConfigurationError: ``counter`` is a binding of something that is not a model.
    """
    if not isinstance(counter, RunnableBinding):
        return None
    inner: object = counter
    while isinstance(inner, RunnableBinding):
        inner = inner.bound
    if not isinstance(inner, BaseLanguageModel):
        msg = (
            "token counter must be None, a model name, a chat model (bound or not) or a "
            f"callable taking a message list, got a binding of {type(inner).__name__}"
        )
        raise ConfigurationError(msg)
    return inner


def message_costs(counter: TokenCounter, messages: Sequence[BaseMessage]) -> list[int]:
    """Cost of each message on its own.

    Uses ``counter.count_message`` when the counter has it (exact, no per-call overhead);
    otherwise ``counter([message])`` per message, which may include a per-call overhead such as
    reply priming and so over-estimates (the safe side for budgets).

    Raises:
        ConfigurationError: The counter returned something other than an integer >= 0.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> message_costs(TiktokenCounter(), [HumanMessage("hi"), AIMessage("hello!")])
        [5, 6]
    """
    count_each = getattr(counter, "count_each", None)
    count_one = getattr(counter, "count_message", None)
    if callable(count_each):
        costs = count_each(messages)
    elif callable(count_one):
        costs = [count_one(message) for message in messages]
    else:
        costs = [counter([message]) for message in messages]
    return [_as_count(counter, cost) for cost in costs]


def count_request(counter: TokenCounter, messages: Sequence[BaseMessage]) -> int:
    """Token cost of ``messages`` as one request, checked to be an integer >= 0.

    Raises:
        ConfigurationError: The counter returned something other than an integer >= 0.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> count_request(TiktokenCounter(), [HumanMessage("hello world")])
        9
    """
    return _as_count(counter, counter(messages))


# --------------------------------------------------------------------------- ceilings
# A tiktoken token stands for at least one byte of UTF-8, so a text has at most as many
# tokens as bytes: a check that holds for the bytes holds for the exact count, without
# encoding anything. Only for a plain `TiktokenCounter` (a subclass may count otherwise).


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def text_ceiling(counter: TokenCounter, text: str) -> int | None:
    """At least ``counter.count_text(text)``, found without encoding (``None``: not known).

    Example:
        >>> text_ceiling(TiktokenCounter(), "hello world"), text_ceiling(len, "hi")
        (11, None)
    """
    return _utf8_length(text) if type(counter) is TiktokenCounter else None


def _message_ceiling(message: BaseMessage) -> int | None:
    """At least `TiktokenCounter.count_message` (``None`` for content blocks)."""
    content = message.content
    if type(content) is not str:
        return None
    total = TOKENS_PER_MESSAGE + _utf8_length(_role(message)) + _utf8_length(content)
    if isinstance(message, ToolMessage):
        total += _utf8_length(message.tool_call_id)
    elif message.name:
        total += _utf8_length(message.name) + TOKENS_PER_NAME
    for name, arguments, call_id in _calls(message):
        total += _utf8_length(name) + _utf8_length(arguments) + _utf8_length(call_id)
        total += TOKENS_PER_TOOL_CALL
    return total


def cost_ceilings(counter: TokenCounter, messages: Sequence[BaseMessage]) -> list[int] | None:
    """At least `message_costs`, message by message, found without encoding (``None``: not known).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> message_costs(TiktokenCounter(), [HumanMessage("hi")])
        [5]
        >>> cost_ceilings(TiktokenCounter(), [HumanMessage("hi")])
        [9]
    """
    if type(counter) is not TiktokenCounter:
        return None
    ceilings: list[int] = []
    for message in messages:
        ceiling = _message_ceiling(message)
        if ceiling is None:
            return None
        ceilings.append(ceiling)
    return ceilings


def request_ceiling(counter: TokenCounter, messages: Sequence[BaseMessage]) -> int | None:
    """At least `count_request`, found without encoding (``None``: not known).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> counter, request = TiktokenCounter(), [HumanMessage("hello world")]
        >>> count_request(counter, request), request_ceiling(counter, request)
        (9, 21)
    """
    ceilings = cost_ceilings(counter, messages)
    if ceilings is None:
        return None
    return sum(ceilings) + REPLY_PRIMING_TOKENS if ceilings else 0


def _as_count(counter: object, value: Any) -> int:
    if not isinstance(value, bool):
        try:
            count = operator.index(value)
        except TypeError:
            count = -1
        if count >= 0:
            return count
    msg = f"token counter {counter!r} returned {value!r}; expected an integer >= 0"
    raise ConfigurationError(msg)
