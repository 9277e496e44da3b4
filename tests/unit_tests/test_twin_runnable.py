"""TwinRunnable: one traced run per call when someone listens, the same config either way."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import ensure_config

from langchain_histcompress.edge.twin_runnable import TwinRunnable


class Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, UUID | None]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.events.append(("start", kwargs.get("name"), kwargs.get("parent_run_id")))

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self.events.append(("end", None, kwargs.get("parent_run_id")))

    def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
        self.events.append(("error", type(error).__name__, None))


def body(value: int, config: RunnableConfig) -> dict[str, Any]:
    def read_config(_: int) -> RunnableConfig:
        return ensure_config()  # the config the call's context holds

    inner = RunnableLambda(read_config).invoke(value)
    return {"tags": config.get("tags"), "inner_tags": inner.get("tags"), "value": 2 * value}


def test_a_listened_call_is_one_run_with_nested_runs_under_it() -> None:
    handler = Events()
    twin = TwinRunnable(body, name="twin")
    out = twin.invoke(3, {"callbacks": [handler], "tags": ["t"], "run_name": "named"})
    assert out == {"tags": ["t"], "inner_tags": ["t"], "value": 6}
    starts = [e for e in handler.events if e[0] == "start"]
    assert starts[0][1] == "named" and starts[0][2] is None
    assert starts[1][2] is not None  # the nested lambda runs under the twin's run
    assert [e[0] for e in handler.events] == ["start", "start", "end", "end"]


def test_an_unheard_call_gets_the_same_config_and_result() -> None:
    twin = TwinRunnable(body, name="twin")
    config: RunnableConfig = {"tags": ["t"], "run_id": UUID(int=1)}
    assert twin.invoke(3, config) == {"tags": ["t"], "inner_tags": ["t"], "value": 6}
    assert config == {"tags": ["t"], "run_id": UUID(int=1)}  # the caller's config untouched


def test_errors_propagate_and_are_reported() -> None:
    def fail(value: int, config: RunnableConfig) -> int:
        raise KeyError(value)

    handler = Events()
    twin = TwinRunnable(fail, name="twin")
    with pytest.raises(KeyError):
        twin.invoke(1, {"callbacks": [handler]})
    assert [e[:2] for e in handler.events] == [("start", "twin"), ("error", "KeyError")]
    with pytest.raises(KeyError):
        twin.invoke(1)
