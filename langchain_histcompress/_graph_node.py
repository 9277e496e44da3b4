"""The runnable shell shared by the package's LangGraph nodes.

A node implements ``_run`` (sync model calls) and ``_arun`` (awaited model calls); this base
turns them into one Runnable, so ``graph.invoke`` runs the first and ``graph.ainvoke`` the second.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

__all__ = ["GraphNode"]


class GraphNode(Runnable[Any, Any]):
    """Base of the package's graph nodes: a sync and an async body behind one Runnable.

    A body returns the state update: a dict, or a LangGraph ``Command`` carrying it.
    """

    def _bind_body(self, name: str) -> None:
        """Build the Runnable that dispatches to `_run` / `_arun` (call once, in ``__init__``)."""
        self._body: Runnable[Any, Any] = RunnableLambda(
            self._run, afunc=self._arun, name=name
        )

    @abstractmethod
    def _run(self, state: Any, config: RunnableConfig) -> Any:
        """Compute the state update, calling models synchronously."""

    @abstractmethod
    async def _arun(self, state: Any, config: RunnableConfig) -> Any:
        """Compute the state update, awaiting model calls."""

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the node on a state and return the state update."""
        return self._body.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async `invoke`: the node's model calls are awaited."""
        return await self._body.ainvoke(input, config, **kwargs)
