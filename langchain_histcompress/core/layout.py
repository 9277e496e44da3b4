"""The order of a prompt's parts, chosen so that a provider's prompt cache keeps working.

Providers cache the longest prefix a request shares with earlier ones, so what changes from
one request to the next must come as late as possible. The ``"cache_stable"`` order, shared by
every prompt the package assembles, is: the system preamble (byte-identical); stable data (the
running summary); the verbatim rounds; volatile data (what depends on the current question:
retrieved facts and turns); the current round. Nothing that changes per request comes before
the volatile part. The older ``"data_first"`` order puts all data right after the preamble.
`arrange` assembles the parts in either order; `check_layout` validates a layout name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import ConfigurationError

__all__ = ["LAYOUTS", "PromptLayout", "arrange", "check_layout"]

PromptLayout = Literal["cache_stable", "data_first"]
"""``"cache_stable"``: question-dependent data next to the question; ``"data_first"``: all
data right after the preamble."""

LAYOUTS: tuple[PromptLayout, ...] = ("cache_stable", "data_first")
"""Every layout name."""


def check_layout(layout: object) -> PromptLayout:
    """Return ``layout`` when it names a layout, else raise `ConfigurationError`.

    Example:
        >>> check_layout("cache_stable")
        'cache_stable'
    """
    if layout not in LAYOUTS:
        msg = f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}"
        raise ConfigurationError(msg)
    return layout


def arrange(
    layout: PromptLayout,
    *,
    preamble: Sequence[BaseMessage] = (),
    stable: Sequence[BaseMessage] = (),
    verbatim: Sequence[BaseMessage] = (),
    volatile: Sequence[BaseMessage] = (),
    current: Sequence[BaseMessage] = (),
) -> list[BaseMessage]:
    """The prompt's messages in ``layout`` order (see the module docstring).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> parts = dict(preamble=[SystemMessage("rules", id="s")],
        ...              stable=[SystemMessage("summary", id="sum")],
        ...              verbatim=[HumanMessage("hi", id="h1"), AIMessage("yo", id="a1")],
        ...              volatile=[HumanMessage("facts", id="f")],
        ...              current=[HumanMessage("question", id="q")])
        >>> [m.id for m in arrange("cache_stable", **parts)]
        ['s', 'sum', 'h1', 'a1', 'f', 'q']
        >>> [m.id for m in arrange("data_first", **parts)]
        ['s', 'sum', 'f', 'h1', 'a1', 'q']
    """
    if layout == "cache_stable":
        return [*preamble, *stable, *verbatim, *volatile, *current]
    return [*preamble, *stable, *volatile, *verbatim, *current]
