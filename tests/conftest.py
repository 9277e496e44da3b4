"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import Control


@pytest.fixture
def control() -> Iterator[Control]:
    """The shared behaviour of ControlledSummarizer models; hung model calls end afterwards."""
    c = Control()
    yield c
    c.release.set()  # let hung model threads finish
