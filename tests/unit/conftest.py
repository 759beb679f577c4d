"""Fixtures shared by unit tests."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from cdsim.kubelet import probes
from tests.support import nvmlnode


@pytest.fixture
def prober() -> Iterator[probes.Prober]:
    """The simulated kubelet's probe threads, stopped after the test."""
    made = probes.Prober(workers=2)
    yield made
    made.close()


@pytest.fixture(scope="session")
def nvml_library() -> pathlib.Path:
    """The fake ``libnvidia-ml.so.1``, built by the tools' build when the cache lacks it."""
    return nvmlnode.built_library()


@pytest.fixture(scope="session")
def nvml_node(
    tmp_path_factory: pytest.TempPathFactory, nvml_library: pathlib.Path
) -> nvmlnode.NvmlNode:
    """The one driver root whose NVML this process loads (pynvml keeps one library)."""
    return nvmlnode.make(tmp_path_factory.mktemp("driver-root"), nvml_library)
