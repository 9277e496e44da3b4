"""The context budget: how much a model's view may hold, and messages too large for it.

Every face keeps the view it sends under the answering model's budget (`context_budget`):
85% of its input window, taken from an explicit number, from a chat model's
``profile["max_input_tokens"]``, or `DEFAULT_CONTEXT_WINDOW`. A single message that cannot fit
even after every older round is folded is *shortened in the view* (`shorten_message`): its
head and tail are kept around a marker that says how much was left out; the original stays
whole in state and storage.

Example:
    >>> budget = context_budget(1000)
    >>> budget.tokens, budget.source
    (850, 'context_window=1,000')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.encodings import get_encoding
from langchain_histcompress.core.errors import BudgetError, ConfigurationError
from langchain_histcompress.core.tokens import (
    TiktokenCounter,
    TokenCounter,
    count_request,
    message_costs,
    resolve_counter,
)

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "SHORTENED_KEY",
    "ContextBudget",
    "context_budget",
    "context_window_of",
    "fit_messages",
    "shorten_message",
]

DEFAULT_CONTEXT_WINDOW = 128_000
"""Input window assumed when the answering model's is not known (gpt-4o's)."""

VIEW_SHARE = 0.85
"""Share of the window a view may fill."""

KEEP_SHARE = 0.5
"""Share of the budget a fold forced by the budget leaves in the view, so it is not forced
again on the next turn."""

SHORTENED_KEY = "lc_shortened"
"""``additional_kwargs`` key of a shortened copy: ``{"original_tokens", "kept_tokens"}``."""

_MIN_KEPT = 64  # tokens a shortened message keeps at least (head and tail)


def context_window_of(model: object) -> int | None:
    """The ``max_input_tokens`` of a chat model's ``profile``, or ``None`` when it has none.

    A bound model (``model.bind(...)``) is read through to the model it binds.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> model = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 8192})
        >>> context_window_of(model), context_window_of(object())
        (8192, None)
    """
    bound = getattr(model, "bound", None)
    if bound is not None and getattr(model, "profile", None) is None:
        model = bound
    profile = getattr(model, "profile", None)
    if not isinstance(profile, Mapping):
        return None
    value = profile.get("max_input_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


@dataclass(frozen=True)
class ContextBudget:
    """The answering model's input window and the share of it a view may use."""

    window: int
    """The model's input window in tokens."""
    source: str
    """Where the window comes from (for logs): an argument, a model profile, the default."""

    @property
    def tokens(self) -> int:
        """Tokens a view may hold."""
        return int(self.window * VIEW_SHARE)

    @property
    def keep_tokens(self) -> int:
        """Tokens a fold forced by the budget leaves in the view at most (whole rounds)."""
        return int(self.tokens * KEEP_SHARE)


def context_budget(
    value: int | object | None, *, default: int = DEFAULT_CONTEXT_WINDOW
) -> ContextBudget:
    """The budget for an answering model given as a window in tokens, a chat model or nothing.

    Args:
        value: The window in tokens, a chat model (its profile's ``max_input_tokens``) or
            ``None`` (the default window).
        default: The window used when ``value`` is ``None`` or a model without a profile.

    Raises:
        ConfigurationError: ``value`` is a number below 1 or a bool.

    Example:
        >>> context_budget(None).source
        'default window (128,000 tokens)'
    """
    if isinstance(value, bool) or (isinstance(value, int) and value < 1):
        msg = f"context_window must be a positive number of tokens or a chat model, got {value!r}"
        raise ConfigurationError(msg)
    if isinstance(value, int):
        return ContextBudget(value, f"context_window={value:,}")
    if value is not None:
        window = context_window_of(value)
        if window is not None:
            return ContextBudget(window, f"{type(value).__name__} profile")
        name = type(value).__name__
        return ContextBudget(default, f"default window ({default:,} tokens; {name} has no profile)")
    return ContextBudget(default, f"default window ({default:,} tokens)")


# --------------------------------------------------------------------------- shortening


def _text_of(message: BaseMessage) -> str | None:
    """The message's text when its content can be shortened (a string, or text blocks)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "\n".join(parts) if parts else None


def _cut(text: str, keep: int, counter: TokenCounter) -> tuple[str, int]:
    """Head and tail of ``text`` holding about ``keep`` tokens, and the tokens left out."""
    if isinstance(counter, TiktokenCounter):
        encoding = get_encoding(counter.encoding_name)
        tokens = encoding.encode_ordinary(text)
        head, tail = keep - keep // 2, keep // 2
        kept = encoding.decode(tokens[:head]), encoding.decode(tokens[len(tokens) - tail :])
        return _joined(kept, len(tokens) - keep), len(tokens) - keep
    total = _count_text(counter, text)
    ratio = keep / max(total, 1)
    chars = int(len(text) * ratio)
    head, tail = chars - chars // 2, chars // 2
    return _joined((text[:head], text[len(text) - tail :]), total - keep), total - keep


def _joined(parts: tuple[str, str], omitted: int) -> str:
    return (
        f"{parts[0]}\n\n[... {omitted:,} tokens of this message left out to fit the model's "
        f"context window; the whole message is kept in the conversation history ...]\n\n"
        f"{parts[1]}"
    )


def _count_text(counter: TokenCounter, text: str) -> int:
    if isinstance(counter, TiktokenCounter):
        return counter.count_text(text)
    return max(counter([HumanMessage(text)]) - counter([HumanMessage("")]), 0)


def shorten_message(
    message: BaseMessage, max_tokens: int, counter: TokenCounter | str | None = None
) -> BaseMessage:
    """A copy of ``message`` whose text keeps its head and tail within ``max_tokens``.

    The copy keeps the id, type, tool call id and tool calls; non-text content blocks are
    dropped; ``additional_kwargs[SHORTENED_KEY]`` records the sizes. A message already within
    ``max_tokens`` is returned as is.

    Raises:
        BudgetError: The message has no text to shorten (its size is in tool call arguments
            or non-text blocks).

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> report = ToolMessage("row " * 2000, tool_call_id="c1", id="t1")
        >>> short = shorten_message(report, 120, counter="approximate")
        >>> short.id, short.additional_kwargs[SHORTENED_KEY]["original_tokens"] > 120
        ('t1', True)
    """
    count = resolve_counter(counter)
    total = message_costs(count, [message])[0]
    if total <= max_tokens:
        return message
    text = _text_of(message)
    overhead = total - _count_text(count, text) if text is not None else total
    keep = max(max_tokens - overhead - 40, _MIN_KEPT)  # 40: the marker itself
    if text is None or _count_text(count, text) <= keep:
        msg = (
            f"a {message.type} message (id {message.id!r}) of {total:,} tokens does not fit "
            f"in {max_tokens:,} tokens and has no text that could be shortened"
        )
        raise BudgetError(msg)
    shortened, omitted = _cut(text, keep, count)
    kwargs = dict(message.additional_kwargs)
    kwargs[SHORTENED_KEY] = {"original_tokens": total, "kept_tokens": total - omitted}
    return message.model_copy(update={"content": shortened, "additional_kwargs": kwargs})


def fit_messages(
    messages: Sequence[BaseMessage],
    max_tokens: int,
    counter: TokenCounter | str | None = None,
    *,
    protected: Callable[[int, BaseMessage], bool] | None = None,
) -> list[BaseMessage]:
    """``messages`` within ``max_tokens``, the largest unprotected ones shortened to fit.

    Every message over a common cap is shortened to it (the smallest cap that makes the list
    fit), so one huge tool result gives way before several medium ones do. By default the
    system messages and the latest human message are protected (never shortened).

    Raises:
        BudgetError: The protected messages alone, or what cannot be shortened, exceed
            ``max_tokens`` (the message names what does not fit).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> view = [HumanMessage("read it", id="h"),
        ...         AIMessage("", tool_calls=[{"name": "read", "args": {}, "id": "c"}], id="a"),
        ...         ToolMessage("word " * 5000, tool_call_id="c", id="t")]
        >>> fitted = fit_messages(view, 500, counter="approximate")
        >>> [m.id for m in fitted], SHORTENED_KEY in fitted[2].additional_kwargs
        (['h', 'a', 't'], True)
    """
    count = resolve_counter(counter)
    out = list(messages)
    costs = message_costs(count, out)
    overhead = max(count_request(count, out) - sum(costs), 0) if out else 0
    if sum(costs) + overhead <= max_tokens:
        return out
    latest_human = max((i for i, m in enumerate(out) if isinstance(m, HumanMessage)), default=-1)

    def default_protected(index: int, message: BaseMessage) -> bool:
        return isinstance(message, SystemMessage) or index == latest_human

    keep = protected or default_protected
    movable = [i for i, m in enumerate(out) if not keep(i, m) and _text_of(m)]
    fixed = sum(costs) - sum(costs[i] for i in movable) + overhead
    room = max_tokens - fixed
    cap = _water_level([costs[i] for i in movable], room) if room > 0 else 0
    # messages under the cap stay whole; those over it must keep a head, a tail and the marker
    if cap < _MIN_KEPT + 60:
        what = _largest(out, costs, movable)
        msg = (
            f"the view needs {fixed:,} tokens for what cannot be shortened ({what}) and "
            f"{sum(costs[i] for i in movable):,} for the rest, but the budget is "
            f"{max_tokens:,} tokens"
        )
        raise BudgetError(msg)
    for i in movable:
        if costs[i] > cap:
            out[i] = shorten_message(out[i], cap, count)
    return out


def _water_level(sizes: Sequence[int], room: int) -> int:
    """The largest cap with ``sum(min(size, cap)) <= room``."""
    ordered = sorted(sizes)
    remaining, left = room, len(ordered)
    for size in ordered:
        if size * left > remaining:
            return max(math.floor(remaining / left), 0)
        remaining -= size
        left -= 1
    return ordered[-1] if ordered else room


def _largest(messages: Sequence[BaseMessage], costs: Sequence[int], movable: Sequence[int]) -> str:
    """Names the largest message that cannot be shortened, for an error message."""
    candidates = [i for i in range(len(messages)) if i not in set(movable)]
    if not candidates:
        return "nothing"
    index = max(candidates, key=costs.__getitem__)
    message: Any = messages[index]
    return f"its largest, a {message.type} message of {costs[index]:,} tokens"
