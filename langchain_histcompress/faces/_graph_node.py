"""The runnable shell shared by the package's LangGraph nodes.

A node implements ``_run`` (sync model calls) and ``_arun`` (awaited model calls); this base
turns them into one Runnable, so ``graph.invoke`` runs the first and ``graph.ainvoke`` the second.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Generic

from langchain_core.runnables import Runnable, RunnableConfig
from typing_extensions import TypeVar

from langchain_histcompress.edge.twin_runnable import TwinRunnable

__all__ = ["GraphNode"]

Update = TypeVar("Update", default=dict[str, Any])
"""What a node body returns: the state update (a dict, or a LangGraph ``Command``)."""


class GraphNode(Runnable[Any, Update], Generic[Update]):
    """Base of the package's graph nodes: a sync and an async body behind one Runnable.

    A body returns the state update: a dict, or a LangGraph ``Command`` carrying it.
    """

    def _bind_body(self, name: str) -> None:
        """Build the Runnable that dispatches to `_run` / `_arun` (call once, in ``__init__``)."""
        # one traced run per call, without RunnableLambda's per-call signature inspection
        self._body: Runnable[Any, Update] = TwinRunnable(self._run, self._arun, name=name)

    @abstractmethod
    def _run(self, state: Any, config: RunnableConfig) -> Update:
        """Compute the state update, calling models synchronously."""

    @abstractmethod
    async def _arun(self, state: Any, config: RunnableConfig) -> Update:
        """Compute the state update, awaiting model calls."""

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Update:
        """Run the node on a state and return the state update."""
        return self._body.invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Update:
        """Async `invoke`: the node's model calls are awaited."""
        return await self._body.ainvoke(input, config, **kwargs)
