"""When to fold, said in one argument: the vocabulary of LangChain's ``SummarizationMiddleware``.

A trigger (`CompressionTrigger`) is ``"cost"`` (the default: fold when folding pays under the
answering model's pricing, see `schedule.FoldSchedule`; ``("cost", "openai-90")`` names the
pricing), a threshold ``("tokens", 3000)``, ``("messages", 50)``, ``("rounds", 5)`` or
``("fraction", 0.8)`` of the context window, measured on what the model would see,
``("idle", timedelta(minutes=30))`` (fold everything before the latest round after such a
pause), a dict of thresholds that must all hold (AND), a list of any of these (OR), or
``None`` (never fold by choice). Whatever the trigger, the context budget always applies: a
view over it is folded regardless (see `budget`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, TypeAlias, Union, cast

from langchain_core.messages import AIMessage, BaseMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.pricing import PricingModel, pricing_model
from langchain_histcompress.core.rounds import Round, split_rounds
from langchain_histcompress.core.tokens import TokenCounter, message_costs

__all__ = [
    "CompressionTrigger",
    "ContextSize",
    "ContextUnit",
    "ConversationSize",
    "TriggerSpec",
    "kept_rounds",
    "model_provider_of",
]

ContextUnit = Literal["fraction", "tokens", "messages", "rounds"]
"""What a size is measured in: a fraction of the context window, tokens, messages or rounds."""
ContextSize = tuple[ContextUnit, float]
"""One threshold or keep amount, e.g. ``("tokens", 3000)`` or ``("fraction", 0.8)``."""

_Single: TypeAlias = (
    Literal["cost"]
    | tuple[Literal["cost"], PricingModel | str]
    | tuple[Literal["idle"], timedelta | float]
    | ContextSize
    | Mapping[ContextUnit, float]
)
TriggerSpec: TypeAlias = Union[_Single, Sequence[_Single], "CompressionTrigger", None]
"""What ``RoundCompressor(trigger=...)`` accepts (see the module docstring)."""

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


def _check_amount(unit: str, amount: object, where: str) -> float:
    if unit == "fraction":
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not 0 < amount <= 1:
            msg = f"{where}: a fraction must be a number in (0, 1], got {amount!r}"
            raise ConfigurationError(msg)
        return float(amount)
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        msg = f"{where}: {unit} must be an integer >= 0, got {amount!r}"
        raise ConfigurationError(msg)
    return amount


def check_size(value: object, where: str) -> ContextSize:
    """``value`` as a `ContextSize`, or a `ConfigurationError` naming ``where``.

    Example:
        >>> check_size(("rounds", 3), "keep")
        ('rounds', 3)
    """
    if not isinstance(value, tuple) or len(value) != 2 or value[0] not in _UNITS:
        msg = f"{where} must be a (unit, value) pair with unit one of {list(_UNITS)}, got {value!r}"
        raise ConfigurationError(msg)
    unit, amount = value
    return cast("ContextSize", (unit, _check_amount(unit, amount, where)))


def _idle(value: object, where: str) -> timedelta:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta) or value <= timedelta(0):
        msg = f"{where}: an idle gap must be a positive timedelta or seconds, got {value!r}"
        raise ConfigurationError(msg)
    return value


class CompressionTrigger:
    """A parsed trigger (see the module docstring for what ``trigger`` accepts).

    Args:
        trigger: ``"cost"``, a threshold, ``("idle", gap)``, a dict (AND), a list (OR).
        use_usage_metadata: Take the conversation's tokens from the ``usage_metadata`` the
            provider reported on the last AI message (its input + output tokens, plus the
            messages after it) when there is one; counting is the fallback.

    Raises:
        ConfigurationError: The trigger is malformed (the message says where).

    Example:
        >>> CompressionTrigger(["cost", ("idle", 1800)])
        CompressionTrigger(['cost', ('idle', 1800.0)])
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> trigger = CompressionTrigger([{"tokens": 40, "messages": 6}, ("rounds", 10)])
        >>> history = []
        >>> for n in range(4):
        ...     history += [HumanMessage(f"question {n}"), AIMessage(f"answer number {n}")]
        >>> size = trigger.measure(history, counter=lambda ms: 6 * len(ms))
        >>> size.tokens, size.messages, trigger.fires(size, window=1000)
        (48, 8, True)
    """

    def __init__(self, trigger: TriggerSpec = "cost", *, use_usage_metadata: bool = False) -> None:
        """Parse and validate (see the class docstring)."""
        self.cost = False
        """Fold when it pays (`schedule.FoldSchedule`)."""
        self.pricing: PricingModel | None = None
        """The pricing named with ``("cost", ...)`` (``None``: read from the model)."""
        self.idle: timedelta | None = None
        """Fold everything before a round that opens after this pause."""
        clauses: list[dict[ContextUnit, float]] = []
        if isinstance(trigger, CompressionTrigger):
            msg = "use the CompressionTrigger itself, or its spec, not one inside another"
            raise ConfigurationError(msg)
        items: Sequence[object]
        if trigger is None:
            items = []
        elif isinstance(trigger, list):
            if not trigger:
                msg = "trigger must not be an empty list (None: only the budget folds)"
                raise ConfigurationError(msg)
            items = trigger
        else:
            items = [trigger]
        for index, item in enumerate(items):
            where = "trigger" if len(items) == 1 else f"trigger[{index}]"
            clause = self._add(item, where)
            if clause is not None:
                clauses.append(clause)
        self.clauses: tuple[dict[ContextUnit, float], ...] = tuple(clauses)
        """Threshold clauses: any one whose thresholds all hold fires."""
        if not isinstance(use_usage_metadata, bool):
            msg = f"use_usage_metadata must be a bool, got {use_usage_metadata!r}"
            raise ConfigurationError(msg)
        self.use_usage_metadata = use_usage_metadata
        """Measure tokens with the provider's ``usage_metadata`` when the last AI message has it."""
        self._spec = [self._describe(item) for item in items]

    def _add(self, item: object, where: str) -> dict[ContextUnit, float] | None:
        if item == "cost":
            self.cost = True
            return None
        if isinstance(item, tuple) and len(item) == 2 and item[0] == "cost":
            self.cost = True
            self.pricing = pricing_model(cast("PricingModel | str", item[1]))
            return None
        if isinstance(item, tuple) and len(item) == 2 and item[0] == "idle":
            self.idle = _idle(item[1], where)
            return None
        if isinstance(item, Mapping):
            if not item:
                msg = f"{where} must not be an empty dict"
                raise ConfigurationError(msg)
            return {
                cast("ContextUnit", unit): check_size((unit, amount), where)[1]
                for unit, amount in item.items()
            }
        if isinstance(item, tuple):
            unit, amount = check_size(item, where)
            return {unit: amount}
        msg = (
            f"{where} must be 'cost', ('cost', pricing), ('idle', gap), a (unit, value) pair "
            f"with unit one of {list(_UNITS)}, a dict of pairs (all must hold) or a list of "
            f"those (any one is enough); got {item!r}"
        )
        raise ConfigurationError(msg)

    def _describe(self, item: object) -> object:
        if isinstance(item, tuple) and item and item[0] == "idle":
            return ("idle", cast("timedelta", self.idle).total_seconds())
        if isinstance(item, tuple) and item and item[0] == "cost":
            return ("cost", cast("PricingModel", self.pricing).name)
        return item

    def __repr__(self) -> str:
        """Show the trigger as it was given."""
        spec = self._spec[0] if len(self._spec) == 1 else self._spec
        extra = ", use_usage_metadata=True" if self.use_usage_metadata else ""
        return f"{type(self).__name__}({spec!r}{extra})"

    @classmethod
    def of(cls, trigger: TriggerSpec) -> CompressionTrigger:
        """``trigger`` parsed (a `CompressionTrigger` is returned as is)."""
        if isinstance(trigger, CompressionTrigger):
            return trigger
        return cls(trigger)

    def with_pricing(self, pricing: PricingModel) -> CompressionTrigger:
        """A copy that folds by cost under ``pricing``."""
        bound = copy.copy(self)
        bound.cost, bound.pricing = True, pricing
        return bound

    @property
    def uses_fraction(self) -> bool:
        """Whether a threshold is a fraction of the context window."""
        return any("fraction" in c for c in self.clauses)

    # ------------------------------------------------------------------ measuring (pure)

    def measure(
        self,
        messages: Sequence[BaseMessage],
        *,
        counter: TokenCounter,
        pending: Sequence[Round] | None = None,
        tokens: int | None = None,
        provider: str | None = None,
    ) -> ConversationSize:
        """Measure what the model would see: ``messages`` (preamble, summary, pending rounds).

        With ``use_usage_metadata``, the latest AI message with ``usage_metadata`` supplies
        the tokens only when its ``response_metadata["model_provider"]`` is ``provider`` (or
        an alias), as ``SummarizationMiddleware`` decides: usage another provider reported, or
        a message that does not say, is ignored and the conversation is counted.

        Args:
            messages: The messages the model would receive now.
            counter: Token counter for the counted measure.
            pending: The uncompressed rounds among them (default: split from ``messages``).
            tokens: Their tokens when already counted.
            provider: The provider (``ls_provider``) of the model measured for.
        """
        rounds = pending if pending is not None else split_rounds(list(messages)).rounds
        if self.use_usage_metadata:
            for index in range(len(messages) - 1, -1, -1):
                message = messages[index]
                usage = message.usage_metadata if isinstance(message, AIMessage) else None
                if not usage:
                    continue
                if not _same_provider(cast("AIMessage", message), provider):
                    break  # another provider's count of another request: count instead
                used = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
                after = sum(message_costs(counter, messages[index + 1 :]))
                return ConversationSize(used + after, len(messages), len(rounds), "usage_metadata")
        counted = tokens if tokens is not None else sum(message_costs(counter, messages))
        return ConversationSize(counted, len(messages), len(rounds))

    def fires(self, size: ConversationSize, *, window: int) -> bool:
        """Whether any threshold clause has all of its thresholds reached.

        Args:
            size: The conversation's size.
            window: The answering model's context window (for ``"fraction"``).
        """
        values = {"tokens": size.tokens, "messages": size.messages, "rounds": size.rounds}

        def reached(unit: ContextUnit, amount: float) -> bool:
            if unit == "fraction":
                return size.tokens >= amount * window
            return values[unit] >= amount

        return any(all(reached(u, a) for u, a in clause.items()) for clause in self.clauses)


def kept_rounds(
    keep: ContextSize, costs: Sequence[int], sizes: Sequence[int], *, window: int
) -> int:
    """How many newest pending rounds ``keep`` keeps verbatim (whole rounds, at least one).

    ``("rounds", 0)`` keeps none: the caller decides whether the latest round may fold.

    Args:
        keep: The keep setting.
        costs: Tokens of each pending round, oldest first.
        sizes: Messages of each pending round, oldest first.
        window: The answering model's context window (for ``"fraction"``).

    Example:
        >>> kept_rounds(("tokens", 45), [30, 20, 20, 10], [2, 2, 2, 2], window=1000)
        2
    """
    if not costs:
        return 0
    unit, amount = keep
    if unit == "rounds":
        return min(int(amount), len(costs))
    limit = amount * window if unit == "fraction" else amount
    per_round = sizes if unit == "messages" else costs
    kept, total = 0, 0
    for value in reversed(per_round):
        if kept and total + value > limit:
            break
        total += value
        kept += 1
    return kept
