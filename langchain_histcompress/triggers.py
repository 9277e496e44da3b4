"""When to compress and how much to keep, in the terms of LangChain's ``SummarizationMiddleware``.

`CompressionTrigger` gives `RoundCompressor` the trigger and keep settings users know from
``SummarizationMiddleware``, measured on whole rounds:

* ``trigger``: a ``(unit, value)`` pair such as ``("tokens", 3000)``, ``("messages", 50)`` or
  ``("fraction", 0.8)`` (of the model's context window), or a dict of several that must all
  hold (AND), or a list of those where any one is enough (OR);
* ``keep``: how much of the newest conversation stays verbatim after a fold, by ``"rounds"``,
  ``"messages"``, ``"tokens"`` or ``"fraction"``; always whole rounds, at least the latest one;
* ``use_usage_metadata``: measure the conversation with the provider-reported
  ``usage_metadata`` of the last AI message (plus the messages after it) instead of counting,
  when that message comes from the provider of the model measured for (as
  ``SummarizationMiddleware`` decides: its ``response_metadata["model_provider"]`` is that
  model's LangSmith ``ls_provider``, or a known alias of it); usage another provider
  reported is ignored;
* ``max_tokens_per_call``: cap the summarizer's input per call. A fold is one call, like
  ``SummarizationMiddleware``'s; unlike ``trim_tokens_to_summarize`` nothing is cut from what
  the summary covers: a fold over the cap is split into several calls (a single round above
  the cap goes alone).

The size that triggers is the conversation as the model would see it now: the system preamble,
the running summary and every uncompressed round. ``"fraction"`` needs the context window: an
explicit ``context_window`` (tokens, or a chat model whose ``profile`` has ``max_input_tokens``);
without one the summarizer model's profile is read when the compressor is built.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> trigger = CompressionTrigger(
    ...     trigger={"tokens": 40, "messages": 6}, keep=("tokens", 25), context_window=1000)
    >>> history = []
    >>> for n in range(4):
    ...     history += [HumanMessage(f"question {n}"), AIMessage(f"answer number {n}")]
    >>> size = trigger.measure(history, counter=lambda ms: 6 * len(ms))
    >>> size.tokens, size.messages, trigger.fires(size)
    (48, 8, True)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from langchain_core.messages import AIMessage, BaseMessage

from langchain_histcompress.errors import ConfigurationError
from langchain_histcompress.rounds import Round, split_rounds
from langchain_histcompress.tokens import TokenCounter, message_costs

__all__ = [
    "CompressionTrigger",
    "ContextSize",
    "ContextUnit",
    "ConversationSize",
    "TriggerClause",
    "context_window_of",
    "model_provider_of",
]

ContextUnit = Literal["fraction", "tokens", "messages", "rounds"]
"""What a size is measured in: a fraction of the context window, tokens, messages or rounds."""
ContextSize = tuple[ContextUnit, float]
"""One threshold or keep amount, e.g. ``("tokens", 3000)`` or ``("fraction", 0.8)``."""
TriggerClause = Mapping[ContextUnit, float]
"""Several thresholds that must all be reached, e.g. ``{"tokens": 3000, "messages": 40}``."""

_UNITS: tuple[ContextUnit, ...] = ("fraction", "tokens", "messages", "rounds")

_LS_PROVIDER_ALIASES: dict[str, frozenset[str]] = {
    "amazon_bedrock": frozenset({"bedrock", "bedrock_converse"}),
    "openai-mantle": frozenset({"openai"}),
    "anthropic-mantle": frozenset({"anthropic"}),
}
"""``model_provider`` values an ``ls_provider`` also answers to (the aliases LangChain's
``SummarizationMiddleware`` accepts: some models tag their messages with a provider name
that differs from the one they trace under)."""


def model_provider_of(model: object) -> str | None:
    """The provider a chat model traces under (its LangSmith ``ls_provider``), or ``None``.

    This is the name ``SummarizationMiddleware`` compares an AI message's
    ``response_metadata["model_provider"]`` with before it trusts the message's usage.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> model_provider_of(GenericFakeChatModel(messages=iter([]))), model_provider_of(3)
        ('genericfakechatmodel', None)
    """
    params = getattr(model, "_get_ls_params", None)  # the LangSmith hook providers override
    if not callable(params):
        return None
    try:
        provider = params().get("ls_provider")
    except Exception:  # a model that cannot describe itself is measured by counting
        return None
    return provider if isinstance(provider, str) and provider else None


def _same_provider(message: AIMessage, provider: str | None) -> bool:
    """Whether ``message`` was produced by ``provider`` (per its ``model_provider`` tag)."""
    tagged = message.response_metadata.get("model_provider")
    if provider is None or not isinstance(tagged, str):
        return False
    return tagged == provider or tagged in _LS_PROVIDER_ALIASES.get(provider, frozenset())


@dataclass(frozen=True)
class ConversationSize:
    """How large the conversation the model would see is, in every unit a trigger uses."""

    tokens: int
    """Tokens: counted, or from the provider's ``usage_metadata`` (see ``source``)."""
    messages: int
    """Messages: the preamble, the summary message (when there is one) and every pending one."""
    rounds: int
    """Uncompressed rounds (the latest included)."""
    source: Literal["counted", "usage_metadata"] = "counted"
    """Where ``tokens`` comes from."""


def context_window_of(model: object) -> int | None:
    """The ``max_input_tokens`` of a chat model's ``profile``, or ``None`` when it has none.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> model = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 8192})
        >>> context_window_of(model), context_window_of(object())
        (8192, None)
    """
    profile = getattr(model, "profile", None)
    if not isinstance(profile, Mapping):
        return None
    value = profile.get("max_input_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _check_size(value: object, where: str, *, allow_rounds: bool) -> ContextSize:
    units = _UNITS if allow_rounds else _UNITS[:3]
    if not isinstance(value, tuple) or len(value) != 2 or value[0] not in units:
        msg = f"{where} must be a (unit, value) pair with unit one of {list(units)}, got {value!r}"
        raise ConfigurationError(msg)
    unit, amount = value
    _check_amount(unit, amount, where)
    return cast("ContextSize", (unit, amount))


def _check_amount(unit: str, amount: object, where: str) -> None:
    if unit == "fraction":
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            ok = False
        else:
            ok = 0 < amount <= 1
        if not ok:
            msg = f"{where}: a fraction must be a number in (0, 1], got {amount!r}"
            raise ConfigurationError(msg)
        return
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        msg = f"{where}: {unit} must be an integer >= 1, got {amount!r}"
        raise ConfigurationError(msg)


def _check_clause(value: object, where: str) -> dict[ContextUnit, float]:
    if isinstance(value, tuple):
        unit, amount = _check_size(value, where, allow_rounds=True)
        return {unit: amount}
    if isinstance(value, Mapping) and value:
        clause: dict[ContextUnit, float] = {}
        for unit, amount in value.items():
            if unit not in _UNITS:
                msg = f"{where}: unknown unit {unit!r}; use {list(_UNITS)}"
                raise ConfigurationError(msg)
            _check_amount(unit, amount, where)
            clause[unit] = amount
        return clause
    msg = (
        f"{where} must be a (unit, value) pair or a non-empty dict of them "
        f"(all must hold), got {value!r}"
    )
    raise ConfigurationError(msg)


class CompressionTrigger:
    """``SummarizationMiddleware``-style trigger and keep settings for `RoundCompressor`.

    Args:
        trigger: When to fold: a ``(unit, value)`` pair; a dict of pairs that must all hold
            (AND); or a list of pairs and dicts, any one of which is enough (OR). Units:
            ``"fraction"`` (of the context window), ``"tokens"``, ``"messages"``, ``"rounds"``.
        keep: What stays verbatim after a fold (``None``: the compressor's
            ``rounds_to_retain``). Whole rounds only, the latest always: ``("tokens", 2000)``
            keeps the newest rounds that fit in 2,000 tokens.
        context_window: The model's input limit for ``"fraction"``: tokens, or a chat model
            whose ``profile["max_input_tokens"]`` is used (default: the summarizer's).
        use_usage_metadata: Take the conversation's tokens from the ``usage_metadata`` the
            provider reported on the last AI message (its input + output tokens, plus the
            messages after it) when that message comes from the provider of the model
            measured for (the ``context_window`` model, else the one the trigger is bound
            to: the summarizer); counting is the fallback.
        max_tokens_per_call: Cap on the tokens of the rounds sent to one summarizer call; a
            larger fold is split into several calls (nothing is dropped).

    Raises:
        ConfigurationError: A setting is malformed (named in the message).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress import CompressionTrigger, RoundCompressor
        >>> summarizer = GenericFakeChatModel(
        ...     messages=iter([AIMessage('{"ConversationSummary": "Six questions."}')]),
        ...     profile={"max_input_tokens": 400})
        >>> compressor = RoundCompressor(summarizer, token_counter="approximate",
        ...     trigger=CompressionTrigger(
        ...         trigger=[("fraction", 0.5), {"messages": 12, "tokens": 100}],
        ...         keep=("messages", 4)))
        >>> history = []
        >>> for n in range(7):
        ...     history += [HumanMessage(f"question {n}", id=f"h{n}"),
        ...                 AIMessage(f"answer {n}", id=f"a{n}")]
        >>> plan = compressor.plan(history)
        >>> plan.reasons, [m.id for m in compressor.compress(history).messages[1:]]
        (('trigger',), ['h5', 'a5', 'h6', 'a6'])
    """

    def __init__(
        self,
        *,
        trigger: ContextSize | TriggerClause | Sequence[ContextSize | TriggerClause],
        keep: ContextSize | None = None,
        context_window: int | object | None = None,
        use_usage_metadata: bool = False,
        max_tokens_per_call: int | None = None,
    ) -> None:
        """Validate the settings (see the class docstring)."""
        if isinstance(trigger, list):
            if not trigger:
                msg = "trigger must not be an empty list"
                raise ConfigurationError(msg)
            clauses = [_check_clause(t, f"trigger[{i}]") for i, t in enumerate(trigger)]
        else:
            clauses = [_check_clause(trigger, "trigger")]
        self.clauses: tuple[dict[ContextUnit, float], ...] = tuple(clauses)
        """The trigger as OR-ed clauses of AND-ed thresholds."""
        self.keep: ContextSize | None = (
            None if keep is None else _check_size(keep, "keep", allow_rounds=True)
        )
        """What stays verbatim after a fold (``None``: the compressor's ``rounds_to_retain``)."""
        if isinstance(context_window, bool) or (
            isinstance(context_window, int) and context_window < 1
        ):
            msg = f"context_window must be a positive integer or a chat model, not {context_window}"
            raise ConfigurationError(msg)
        window = context_window
        if window is not None and not isinstance(window, int):
            window = context_window_of(context_window)
            if window is None:
                msg = (
                    f"context_window: {type(context_window).__name__} has no profile with "
                    "max_input_tokens; pass the window in tokens instead"
                )
                raise ConfigurationError(msg)
        self.context_window: int | None = window
        """The model's input limit in tokens (``None`` until known)."""
        self.model_provider: str | None = (
            None if isinstance(context_window, int) else model_provider_of(context_window)
        )
        """The provider (``ls_provider``) of the model measured for: ``usage_metadata`` is
        used only from AI messages it produced (``None`` until bound: never used)."""
        if not isinstance(use_usage_metadata, bool):
            msg = f"use_usage_metadata must be a bool, got {use_usage_metadata!r}"
            raise ConfigurationError(msg)
        self.use_usage_metadata = use_usage_metadata
        """Measure tokens with the provider's ``usage_metadata`` when the last AI message has it."""
        if max_tokens_per_call is not None:
            _check_amount("max_tokens_per_call", max_tokens_per_call, "max_tokens_per_call")
        self.max_tokens_per_call = max_tokens_per_call
        """Cap on the tokens of the rounds sent to one summarizer call (``None``: no cap)."""

    def __repr__(self) -> str:
        """Show the settings."""
        return (
            f"{type(self).__name__}(trigger={list(self.clauses)!r}, keep={self.keep!r}, "
            f"context_window={self.context_window!r}, "
            f"use_usage_metadata={self.use_usage_metadata}, "
            f"max_tokens_per_call={self.max_tokens_per_call!r})"
        )

    def _uses_fraction(self) -> bool:
        keep_unit = self.keep[0] if self.keep is not None else None
        return keep_unit == "fraction" or any("fraction" in c for c in self.clauses)

    def bind(self, model: object) -> CompressionTrigger:
        """This trigger resolved for ``model``: its context window and provider.

        The window comes from ``model``'s profile when needed; the provider whose usage is
        trusted is ``model``'s, unless ``context_window`` named a model.

        Raises:
            ConfigurationError: A ``"fraction"`` is used and no window is known.

        Example:
            >>> trigger = CompressionTrigger(trigger=("fraction", 0.8))
            >>> trigger.bind(object())
            Traceback (most recent call last):
            ...
            langchain_histcompress.errors.ConfigurationError: trigger uses a fraction of the \
context window, but object has no profile with max_input_tokens; pass context_window=<tokens>
        """
        provider = self.model_provider or model_provider_of(model)
        if self.context_window is not None or not self._uses_fraction():
            if provider == self.model_provider:
                return self
            bound = copy.copy(self)
            bound.model_provider = provider
            return bound
        window = context_window_of(model)
        if window is None:
            msg = (
                "trigger uses a fraction of the context window, but "
                f"{type(model).__name__} has no profile with max_input_tokens; "
                "pass context_window=<tokens>"
            )
            raise ConfigurationError(msg)
        bound = copy.copy(self)
        bound.context_window = window
        bound.model_provider = provider
        return bound

    def _tokens(self, unit: ContextUnit, amount: float) -> float:
        if unit != "fraction":
            return amount
        if self.context_window is None:
            msg = "a fraction needs the context window: bind() the trigger to a model first"
            raise ConfigurationError(msg)
        return amount * self.context_window

    # ------------------------------------------------------------------ measuring (pure)

    def measure(
        self,
        messages: Sequence[BaseMessage],
        *,
        counter: TokenCounter,
        pending: Sequence[Round] | None = None,
    ) -> ConversationSize:
        """Measure what the model would see: ``messages`` (preamble, summary, pending rounds).

        Args:
            messages: The messages the model would receive now.
            counter: Token counter for the counted measure.
            pending: The uncompressed rounds among them (default: split from ``messages``).

        With ``use_usage_metadata``, the latest AI message with ``usage_metadata`` supplies
        the tokens only when its ``response_metadata["model_provider"]`` is
        ``model_provider`` (or an alias): usage from another provider, or from a message
        that does not say, is ignored and the conversation is counted.
        """
        rounds = pending if pending is not None else split_rounds(list(messages)).rounds
        if self.use_usage_metadata:
            for index in range(len(messages) - 1, -1, -1):
                message = messages[index]
                usage = message.usage_metadata if isinstance(message, AIMessage) else None
                if not usage:
                    continue
                if not _same_provider(cast("AIMessage", message), self.model_provider):
                    break  # another provider's count of another request: count instead
                used = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
                after = sum(message_costs(counter, messages[index + 1 :]))
                return ConversationSize(used + after, len(messages), len(rounds), "usage_metadata")
        tokens = sum(message_costs(counter, messages))
        return ConversationSize(tokens, len(messages), len(rounds))

    def fires(self, size: ConversationSize) -> bool:
        """Whether any clause has all of its thresholds reached."""
        values = {"tokens": size.tokens, "messages": size.messages, "rounds": size.rounds}

        def reached(unit: ContextUnit, amount: float) -> bool:
            if unit == "fraction":
                return size.tokens >= self._tokens(unit, amount)
            return values[unit] >= amount

        return any(all(reached(u, a) for u, a in clause.items()) for clause in self.clauses)

    def kept_rounds(self, costs: Sequence[int], sizes: Sequence[int], retain: int) -> int:
        """How many newest rounds stay verbatim (at least 1).

        Args:
            costs: Tokens of each pending round, oldest first.
            sizes: Messages of each pending round, oldest first.
            retain: The compressor's ``rounds_to_retain`` (used when ``keep`` is ``None``).
        """
        if not costs:
            return 0
        if self.keep is None:
            return min(max(retain, 1), len(costs))
        unit, amount = self.keep
        if unit == "rounds":
            return min(max(int(amount), 1), len(costs))
        limit = self._tokens(unit, amount)
        per_round = sizes if unit == "messages" else costs
        kept, total = 0, 0
        for value in reversed(per_round):
            if kept and total + value > limit:
                break
            total += value
            kept += 1
        return kept

    def due_rounds(
        self,
        view: Sequence[BaseMessage],
        pending: Sequence[Round],
        *,
        counter: TokenCounter,
        retain: int,
    ) -> int:
        """Oldest pending rounds to fold now (0 when the trigger does not fire).

        Args:
            view: What the model would see now (preamble, summary, pending rounds).
            pending: The uncompressed rounds, oldest first, the latest included.
            counter: Token counter.
            retain: The compressor's ``rounds_to_retain``.
        """
        if len(pending) < 2 or not self.fires(self.measure(view, counter=counter, pending=pending)):
            return 0
        costs = [sum(message_costs(counter, r.messages)) for r in pending]
        sizes = [len(r.messages) for r in pending]
        return len(pending) - max(self.kept_rounds(costs, sizes, retain), 1)

    def chunk_sizes(self, costs: Sequence[int], due: int) -> list[int]:
        """Rounds per summarizer call for a fold of the ``due`` oldest rounds with these costs.

        One call for the whole fold; with ``max_tokens_per_call``, as many calls as needed to
        keep each under the cap (a round above the cap goes alone).

        Example:
            >>> CompressionTrigger(trigger=("rounds", 4), max_tokens_per_call=100).chunk_sizes(
            ...     [60, 30, 20, 150, 10], due=5)
            [2, 1, 1, 1]
        """
        cap = self.max_tokens_per_call if self.max_tokens_per_call is not None else math.inf
        out: list[int] = []
        count, total = 0, 0
        for cost in costs[:due]:
            if count and total + cost > cap:
                out.append(count)
                count, total = 0, 0
            count += 1
            total += cost
        if count:
            out.append(count)
        return out
