"""A named Runnable over a sync and an async function of ``(input, config)``.

It traces like a ``RunnableLambda`` (one chain run, the child config carries its callbacks
and is set as the context's config) but calls its functions directly, without inspecting
their signatures on every call.

Example:
    >>> double = TwinRunnable(lambda x, config: 2 * x, name="double", input_type=int)
    >>> double.invoke(21), double.get_name(), double.input_schema.model_json_schema()["type"]
    (42, 'double', 'integer')
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    patch_config,
    set_config_context,
)
from typing_extensions import TypeVar

__all__ = ["TwinRunnable"]

In = TypeVar("In")
Out = TypeVar("Out")


class TwinRunnable(Runnable[In, Out], Generic[In, Out]):
    """Run ``func`` on ``invoke`` and ``afunc`` on ``ainvoke`` (``func`` in a thread without it).

    Both receive the input and the child config (the caller's, with this run's callbacks).
    """

    def __init__(
        self,
        func: Callable[[In, RunnableConfig], Out],
        afunc: Callable[[In, RunnableConfig], Awaitable[Out]] | None = None,
        *,
        name: str,
        input_type: Any = Any,
        output_type: Any = Any,
    ) -> None:
        """Keep the functions, the run name and the types the schemas show."""
        self._func = func
        self._afunc = afunc
        self.name = name
        self._input_type = input_type
        self._output_type = output_type

    @property
    def InputType(self) -> Any:  # noqa: N802 - the Runnable property
        """The input type (``input_schema`` is built from it)."""
        return self._input_type

    @property
    def OutputType(self) -> Any:  # noqa: N802 - the Runnable property
        """The output type (``output_schema`` is built from it)."""
        return self._output_type

    def invoke(self, input: In, config: RunnableConfig | None = None, **kwargs: Any) -> Out:
        """Run ``func`` inside one traced chain run."""
        config = ensure_config(config)
        manager = get_callback_manager_for_config(config)
        if not manager.handlers:
            # no handler (no tracer, no stream, no callback) would see the run: skip its
            # start and end events; the body gets the same config, callbacks included
            config.pop("run_id", None)
            child = patch_config(config, callbacks=manager)
            with set_config_context(child) as context:
                return context.run(self._func, input, child)
        run = manager.on_chain_start(
            None,
            input,
            name=config.get("run_name") or self.name,
            run_id=config.pop("run_id", None),
        )
        try:
            child = patch_config(config, callbacks=run.get_child())
            with set_config_context(child) as context:
                output = context.run(self._func, input, child)
        except BaseException as exc:
            run.on_chain_error(exc)
            raise
        run.on_chain_end(output)
        return output

    async def ainvoke(self, input: In, config: RunnableConfig | None = None, **kwargs: Any) -> Out:
        """Await ``afunc`` inside one traced chain run (its own task, in the run's context)."""
        if self._afunc is None:
            return await super().ainvoke(input, config, **kwargs)
        config = ensure_config(config)
        manager = get_async_callback_manager_for_config(config)
        run = await manager.on_chain_start(
            None,
            input,
            name=config.get("run_name") or self.name,
            run_id=config.pop("run_id", None),
        )
        try:
            child = patch_config(config, callbacks=run.get_child())
            with set_config_context(child) as context:
                # the task runs in a copy of the run's context (``create_task(context=)`` is 3.11+)
                output = await context.run(asyncio.create_task, self._acall(input, child))
        except BaseException as exc:
            await run.on_chain_error(exc)
            raise
        await run.on_chain_end(output)
        return output

    async def _acall(self, input: In, config: RunnableConfig) -> Out:
        assert self._afunc is not None
        return await self._afunc(input, config)
