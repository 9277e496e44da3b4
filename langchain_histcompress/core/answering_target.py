"""The answering model as fold planning sees it: its budget and, to fold by cost, its pricing.

The pricing is the trigger's own when it names one, else the preset of the answering model's
provider and name (`pricing.preset_for_model`), else the default pricing.
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_histcompress.core.budget import ContextBudget, context_budget
from langchain_histcompress.core.pricing import DEFAULT_PRICING, PRICING_MODELS, preset_for_model
from langchain_histcompress.core.schedule import FoldSchedule
from langchain_histcompress.core.triggers import CompressionTrigger, ContextSize, model_provider_of

__all__ = ["AnsweringTarget", "answering_target"]


@dataclass(frozen=True)
class AnsweringTarget:
    """The answering model as planning sees it: its budget and, for ``"cost"``, its pricing."""

    budget: ContextBudget
    """The view's budget."""
    schedule: FoldSchedule | None
    """The cost schedule (``None`` when the trigger does not fold by cost)."""
    pricing: str
    """Which pricing the schedule uses and where it comes from (for reasons and logs)."""
    provider: str | None = None
    """The answering model's provider (``ls_provider``), whose ``usage_metadata`` a
    ``use_usage_metadata`` trigger trusts (the summarizer's when the model is unknown)."""


def answering_target(
    answering: int | object | None,
    *,
    trigger: CompressionTrigger,
    keep: ContextSize,
    summary_tokens: int,
    instruction_tokens: int,
    summarizer_model: object,
) -> AnsweringTarget:
    """The target for ``answering`` (a window in tokens, a chat model, a name or ``None``).

    Args:
        answering: The answering model (see `budget.context_budget`).
        trigger: The compressor's trigger (whether and under which pricing it folds by cost).
        keep: What the compressor keeps verbatim (its rounds are the schedule's retained ones).
        summary_tokens: The summary's cap.
        instruction_tokens: Tokens of the summarizer's instructions.
        summarizer_model: The summarizer's model, whose provider stands in for an unknown
            answering model's.

    Example:
        >>> from langchain_histcompress.core.triggers import CompressionTrigger
        >>> target = answering_target(
        ...     32_000, trigger=CompressionTrigger.of("cost"), keep=("rounds", 3),
        ...     summary_tokens=512, instruction_tokens=300, summarizer_model=None)
        >>> target.budget.tokens, target.pricing
        (27200, 'openai-50, the default pricing')
    """
    budget = context_budget(answering)
    provider = model_provider_of(answering) or model_provider_of(summarizer_model)
    if not trigger.cost:
        return AnsweringTarget(budget, None, "none", provider)
    if trigger.pricing is not None:
        pricing, source = trigger.pricing, trigger.pricing.name
    else:
        preset = preset_for_model(answering) if not isinstance(answering, int) else None
        if preset is None:
            pricing = PRICING_MODELS[DEFAULT_PRICING]
            source = f"{DEFAULT_PRICING}, the default pricing"
        else:
            name = type(answering).__name__ if not isinstance(answering, str) else answering
            pricing, source = PRICING_MODELS[preset], f"{preset}, from {name}"
    schedule = FoldSchedule(
        pricing=pricing,
        summary_tokens=summary_tokens,
        instruction_tokens=instruction_tokens,
        retain_rounds=max(int(keep[1]), 1) if keep[0] == "rounds" else 1,
    )
    return AnsweringTarget(budget, schedule, source, provider)
