"""Optional extras: a missing one is named in the error, before anything runs."""

from __future__ import annotations

import importlib
import sys

import pytest


def hide_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``langchain`` (the agents extra) unimportable; langchain_core stays."""
    for name in list(sys.modules):
        if name == "langchain" or name.startswith("langchain."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "langchain", None)
    monkeypatch.delitem(sys.modules, "langchain_histcompress.faces.middleware", raising=False)


def test_middleware_without_the_agents_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_langchain(monkeypatch)
    with pytest.raises(ImportError, match=r"pip install 'langchain-histcompress\[agents\]'"):
        importlib.import_module("langchain_histcompress.faces.middleware")
    import langchain_histcompress

    with pytest.raises(ImportError, match=r"RoundCompressionMiddleware needs"):
        langchain_histcompress.RoundCompressionMiddleware  # noqa: B018
