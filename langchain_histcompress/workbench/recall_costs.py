"""What one recall-tool call at question time adds to the bill, under each pricing model.

An agent that looks things up answers in two requests: the first returns a tool call, the
second repeats it with the call and the tool's result appended. The call adds its output
tokens and the second request's input, whose first part the first request has just written
to the provider's cache (docs/design/workbench.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.pricing import PricingModel, PromptCache, PromptRequest

if TYPE_CHECKING:
    from langchain_histcompress.workbench.costs import RequestEncoder

__all__ = ["ToolCallCost", "price_tool_call"]


@dataclass(frozen=True)
class ToolCallCost:
    """The extra request one tool call makes, under one pricing model."""

    input_tokens: int
    """Prompt tokens of the second request (the first request, the call, the result)."""
    cached_tokens: int
    """Of those, the tokens read from the cache the first request wrote."""
    call_tokens: int
    """Output tokens of the tool call (the first request's reply)."""
    cost: float
    """Price of the second request's input plus the call's output."""


def price_tool_call(
    asked: Sequence[BaseMessage],
    answered: Sequence[BaseMessage],
    *,
    call_tokens: int,
    encoder: RequestEncoder,
    pricings: Iterable[PricingModel],
    tools_text: str = "",
) -> dict[str, ToolCallCost]:
    """Price the extra request of a tool call under each pricing model.

    Args:
        asked: The first request (it returns the tool call).
        answered: The second request (``asked``, the call, the tool's result).
        call_tokens: Output tokens of the tool call.
        encoder: Encodes requests (and places Anthropic cache breakpoints).
        pricings: The pricing models.
        tools_text: Tool definitions sent ahead of both requests.

    Returns:
        Pricing model name -> the extra's cost.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
        >>> from langchain_histcompress.workbench.costs import RequestEncoder
        >>> from langchain_histcompress.core.pricing import PRICING_MODELS
        >>> from langchain_histcompress.core.tokens import TiktokenCounter
        >>> encoder = RequestEncoder(TiktokenCounter())
        >>> asked = [SystemMessage("rules " * 1500, id="s"), HumanMessage("Where?", id="q")]
        >>> call = AIMessage("", id="c", tool_calls=[{"name": "recall_history",
        ...                                          "args": {"query": "Where?"}, "id": "t1"}])
        >>> answered = [*asked, call, ToolMessage("[h1 user] Oslo", tool_call_id="t1", id="r")]
        >>> costs = price_tool_call(asked, answered, call_tokens=12, encoder=encoder,
        ...                         pricings=[PRICING_MODELS["none"], PRICING_MODELS["openai-90"]])
        >>> costs["none"].cached_tokens, costs["openai-90"].cached_tokens
        (0, 1408)
        >>> costs["openai-90"].cost < costs["none"].cost
        True
    """
    first, first_marks = encoder.encode_with_breakpoints(asked, tools_text=tools_text)
    second, second_marks = encoder.encode_with_breakpoints(answered, tools_text=tools_text)
    out: dict[str, ToolCallCost] = {}
    for pricing in pricings:
        cache = PromptCache(pricing)
        cache.price(
            PromptRequest(tokens=first, output_tokens=call_tokens, at=0.0, breakpoints=first_marks)
        )
        priced = cache.price(
            PromptRequest(tokens=second, output_tokens=0, at=1.0, breakpoints=second_marks)
        )
        out[pricing.name] = ToolCallCost(
            input_tokens=priced.input_tokens,
            cached_tokens=priced.cached_tokens,
            call_tokens=call_tokens,
            cost=priced.cost + pricing.output_cost(call_tokens),
        )
    return out
