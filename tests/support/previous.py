"""Previous releases as users installed them: their image and their chart, for upgrade tests.

Two are known: :data:`V0_1_0` (git tag v0.1.0) and :data:`EARLY_0_1_0`, a 0.1.0 build from
before the IMEX agent's heartbeats and report annotations. :func:`build` resolves one to a
commit (the tag, else the commit it names, for a clone without the tag), then builds:

- the release's image, by this checkout's recipe from that commit's sources
  (:mod:`cdsim.image`, cached per commit with the other images);
- ``<cache>/previous/<commit>/source/chart`` and ``.../values``: that commit's chart and value
  profiles (``git archive``), for ``helm install``.

:func:`publish` pushes both to the simulated cluster's registry; the chart is then installed
from there with the image pinned by digest (both known releases say appVersion 0.1.0, so
their tag alone would not tell them apart), and the simulated kubelet pulls and runs it.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
import shutil
import subprocess
import tarfile

import yaml

from cdsim import publish as sim_publish
from cdsim import tools
from cdsim.image import cache as image_cache
from cdsim.image import recipe


@dataclasses.dataclass(frozen=True)
class Ref:
    """A previous release: its tag (when the clone has one) and the commit it names."""

    tag: str | None
    commit: str


V0_1_0 = Ref("v0.1.0", "cf84093")
"""The previous release: the chart and code before the lifecycle work (API v1beta1 only)."""
EARLY_0_1_0 = Ref(None, "6ac3ff58")
"""An earlier 0.1.0 build: its IMEX agent writes no heartbeat and no report annotations."""
WAIVED = ("the simulator package",)
"""Image checks 0.1.0 predates: its package carried the simulator (``computedomains.sim``),
so its image does too, as it shipped."""
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
_STAMP = ".complete"


class PreviousReleaseError(RuntimeError):
    """The previous release cannot be found in this clone or cannot be built."""


@dataclasses.dataclass(frozen=True)
class PreviousRelease:
    """A built previous release."""

    commit: str
    directory: pathlib.Path
    image: recipe.Build

    @property
    def chart(self) -> pathlib.Path:
        """The release's chart directory."""
        return self.directory / "source" / "chart"

    def profile(self, name: str) -> pathlib.Path:
        """One of the release's value profiles (``values/<name>.yaml``)."""
        return self.directory / "source" / "values" / f"{name}.yaml"

    @property
    def app_version(self) -> str:
        """The chart's appVersion: the tag of the release's image."""
        chart = yaml.safe_load((self.chart / "Chart.yaml").read_text())
        return str(chart["appVersion"])


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, check=False)


def resolve_commit(ref: Ref = V0_1_0) -> str:
    """The full commit of ``ref``'s tag, else of its commit; raises when neither is here."""
    for name in (ref.tag, ref.commit):
        if name is None:
            continue
        found = _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if found.returncode == 0:
            return found.stdout.decode().strip()
    raise PreviousReleaseError(
        f"this clone has neither tag {ref.tag} nor commit {ref.commit} (a previous release), "
        "which the upgrade tests install; a shallow clone lacks them: run "
        "`git fetch --tags --unshallow` (or clone without --depth) and retry"
    )


def _extract(commit: str, dest: pathlib.Path) -> None:
    """The commit's chart and value profiles into ``dest``."""
    archive = _git("archive", "--format=tar", commit, "chart", "values")
    if archive.returncode != 0:
        raise PreviousReleaseError(f"git archive {commit}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")


def build(ref: Ref = V0_1_0) -> PreviousRelease:
    """A previous release, built on first use (its image: a minute or two) and cached after."""
    commit = resolve_commit(ref)
    image, _ = image_cache.ImageCache.from_env(REPOSITORY).ensure(commit, waived=WAIVED)
    directory = tools.cache_root() / "previous" / commit
    with image_cache.turn(directory.parent, commit):  # two test runs at once extract it once
        if not (directory / _STAMP).exists():
            shutil.rmtree(directory, ignore_errors=True)  # a half-done extraction
            _extract(commit, directory / "source")
            (directory / _STAMP).touch()
    return PreviousRelease(commit=commit, directory=directory, image=image)


def publish(release: PreviousRelease, registry: str, helm: pathlib.Path) -> list[str]:
    """Push the release's image (tagged with its version, 0.1.0) and chart to ``registry``;
    what ``helm install|upgrade RELEASE`` takes to install it from there, image pinned by
    digest."""
    published = sim_publish.publish_build(
        helm=helm, registry=registry, chart_dir=release.chart, log=lambda _: None,
        build=release.image,
    )  # fmt: skip
    return [*published.chart_args(), "--set", f"image.digest={release.image.index}"]
