"""A build's version: a release as it is, a pre-release naming its commit."""

from __future__ import annotations

import pytest

from cdsim import versions

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_a_release_is_built_as_its_version() -> None:
    assert versions.build_version("0.3.0", commit=COMMIT) == "0.3.0"


def test_uncommitted_changes_to_a_release_make_a_pre_release_of_it() -> None:
    version = versions.build_version("0.3.0", commit=COMMIT, changes="ab" * 32)
    assert version == "0.3.0-dirty-abababab"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [("", "0.2.1-dev.g0123456"), ("0099" * 16, "0.2.1-dev.g0123456.dirty-00990099")],
)
def test_a_pre_release_names_its_commit_and_its_changes(changes: str, expected: str) -> None:
    # An all-digit abbreviation would be a numeric identifier with a leading zero (not SemVer).
    assert versions.build_version("0.2.1-dev", commit=COMMIT, changes=changes) == expected


def test_two_edits_of_one_commit_are_two_versions() -> None:
    one = versions.build_version("0.2.1-dev", commit=COMMIT, changes="a" * 64)
    two = versions.build_version("0.2.1-dev", commit=COMMIT, changes="b" * 64)
    assert one != two


def test_build_metadata_in_the_chart_version_is_refused() -> None:
    with pytest.raises(ValueError, match="build metadata"):
        versions.build_version("0.3.0+local", commit=COMMIT)


def test_chart_yaml_without_a_version_is_refused() -> None:
    with pytest.raises(ValueError, match="no string version"):
        versions.chart_version("name: x\n")
