"""A build's version: a release as it is, a pre-release naming its commit."""

from __future__ import annotations

import pytest

from cdsim import versions

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_a_release_is_built_as_its_version() -> None:
    assert versions.build_version("0.3.0", commit=COMMIT, dirty=False) == "0.3.0"


def test_uncommitted_changes_to_a_release_make_a_pre_release_of_it() -> None:
    assert versions.build_version("0.3.0", commit=COMMIT, dirty=True) == "0.3.0-dirty"


@pytest.mark.parametrize(
    ("dirty", "expected"),
    [(False, "0.2.1-dev.g0123456"), (True, "0.2.1-dev.g0123456.dirty")],
)
def test_a_pre_release_names_its_commit(dirty: bool, expected: str) -> None:
    # An all-digit abbreviation would be a numeric identifier with a leading zero (not SemVer).
    assert versions.build_version("0.2.1-dev", commit=COMMIT, dirty=dirty) == expected


def test_chart_yaml_without_a_version_is_refused() -> None:
    with pytest.raises(ValueError, match="no string version"):
        versions.chart_version("name: x\n")
