"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.fakes import Control

# `make test` draws the same examples on every run (HYPOTHESIS_PROFILE=repeatable), so a red
# run means a change broke something, never an unlucky draw; plain pytest keeps exploring.
settings.register_profile("repeatable", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def control() -> Iterator[Control]:
    """The shared behaviour of ControlledSummarizer models; hung model calls end afterwards."""
    c = Control()
    yield c
    c.release.set()  # let hung model threads finish
