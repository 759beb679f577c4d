"""What a build of a commit is called: the chart's version, naming the commit between releases.

The chart's ``version`` in ``chart/Chart.yaml`` names the release line. A release version
(``0.3.0``) is used as it is; a pre-release one (``0.2.1-dev``) is a build between releases, so
each build names its commit: ``0.2.1-dev.g1a2b3c4``. A build of uncommitted changes also names
their content (``.dirty-<hash>``, the hash :mod:`cdsim.image.source` takes of the product's
files), so two edits of one commit get two versions. The image tag, the packaged chart's
``version`` and ``appVersion`` are all this one string, so one tag never names two builds; a
release version names the build of the commit it is tagged on.
"""

from __future__ import annotations

import pathlib

import yaml

CHART_FILE = pathlib.Path("chart/Chart.yaml")
"""The chart's metadata, relative to the repository root."""


def chart_version(chart_yaml: str) -> str:
    """The ``version`` of a Chart.yaml's text."""
    document = yaml.safe_load(chart_yaml)
    if not isinstance(document, dict) or not isinstance(document.get("version"), str):
        raise ValueError("Chart.yaml has no string version")
    return str(document["version"])


def build_version(base: str, *, commit: str, changes: str = "") -> str:
    """The version of a build of ``commit`` whose chart says ``base`` (rules above).

    ``changes``: the content hash of uncommitted changes built with it (empty: none).
    """
    if "+" in base:
        raise ValueError(f"chart version {base} carries build metadata; builds name themselves")
    dirty = f"dirty-{changes[:8]}" if changes else ""
    if "-" not in base:
        return f"{base}-{dirty}" if dirty else base
    # "g" keeps an all-digit abbreviation from reading as a numeric identifier (SemVer 9).
    return f"{base}.g{commit[:7]}" + (f".{dirty}" if dirty else "")
