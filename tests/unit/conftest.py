"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdsim.kubelet import probes


@pytest.fixture
def prober() -> Iterator[probes.Prober]:
    """The simulated kubelet's probe threads, stopped after the test."""
    made = probes.Prober(workers=2)
    yield made
    made.close()
