"""Helm runners for the render tests: one per major version, or helm 4 alone."""

from __future__ import annotations

import pathlib

import pytest

from tests.chart import rendering as r
from tests.support import helm


@pytest.fixture(scope="session")
def renders() -> helm.Renders:
    """The session's ``helm template`` outputs: many tests render the same values."""
    return {}


@pytest.fixture(params=r.MAJORS)
def h(request: pytest.FixtureRequest, tmp_path: pathlib.Path, renders: helm.Renders) -> helm.Helm:
    """A helm runner of each major version (render only)."""
    return r.helm_for(str(request.param), tmp_path, renders=renders)


@pytest.fixture
def h4(tmp_path: pathlib.Path, renders: helm.Renders) -> helm.Helm:
    """helm 4 (what Argo CD renders with) for cases where the major makes no difference."""
    return r.helm_for("helm4", tmp_path, renders=renders)
