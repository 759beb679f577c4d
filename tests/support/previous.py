"""The previous release (git tag v0.1.0): its code in a virtualenv, its chart, for upgrade tests.

:func:`build` resolves the tag to a commit (or the commit it names, for a clone without the
tag), then builds once, under the tools' cache root and keyed by that commit:

- ``<cache>/previous/<commit>/venv``: a virtualenv with the package as of that commit;
- ``<cache>/previous/<commit>/source/chart`` and ``.../values``: that commit's chart and value
  profiles (``git archive``), for ``helm install``.

:func:`running_in` tells the simulated kubelet to run pods whose image tag is the release's
appVersion with that virtualenv's Python (:mod:`computedomains.sim.kubelet.images`), so the
release's chart runs the release's code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import pathlib
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator

import yaml

from computedomains.sim import cluster as sim_cluster
from computedomains.sim import tools
from computedomains.sim.kubelet import images

TAG = "v0.1.0"
"""The previous release: the chart and code before the lifecycle work (API v1beta1 only)."""
FALLBACK_COMMIT = "cf84093"
"""The commit the tag names, for clones that lack the tag."""
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
_STAMP = ".complete"


class PreviousReleaseError(RuntimeError):
    """The previous release cannot be found in this clone or cannot be built."""


@dataclasses.dataclass(frozen=True)
class PreviousRelease:
    """A built previous release."""

    commit: str
    directory: pathlib.Path

    @property
    def python(self) -> pathlib.Path:
        """The virtualenv's Python, with the release's package installed."""
        return self.directory / "venv" / "bin" / "python"

    @property
    def chart(self) -> pathlib.Path:
        """The release's chart directory."""
        return self.directory / "source" / "chart"

    def profile(self, name: str) -> pathlib.Path:
        """One of the release's value profiles (``values/<name>.yaml``)."""
        return self.directory / "source" / "values" / f"{name}.yaml"

    @property
    def app_version(self) -> str:
        """The chart's appVersion: the default image tag of the release's pods."""
        chart = yaml.safe_load((self.chart / "Chart.yaml").read_text())
        return str(chart["appVersion"])


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, check=False)


def resolve_commit() -> str:
    """The full commit of :data:`TAG`, else of :data:`FALLBACK_COMMIT`; raises when neither."""
    for ref in (TAG, FALLBACK_COMMIT):
        found = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.returncode == 0:
            return found.stdout.decode().strip()
    raise PreviousReleaseError(
        f"this clone has neither tag {TAG} nor commit {FALLBACK_COMMIT} (the previous release), "
        "which the upgrade tests install; a shallow clone lacks them: run "
        "`git fetch --tags --unshallow` (or clone without --depth) and retry"
    )


def _extract(commit: str, dest: pathlib.Path) -> None:
    """The commit's whole tree (the package needs hooks/ and node-init/ too) into ``dest``."""
    archive = _git("archive", "--format=tar", commit)
    if archive.returncode != 0:
        raise PreviousReleaseError(f"git archive {commit}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    if proc.returncode != 0:
        raise PreviousReleaseError(
            f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )


def build(cache: pathlib.Path | None = None) -> PreviousRelease:
    """The previous release, built on first use (minutes: a pip install) and cached after."""
    commit = resolve_commit()
    root = (cache or tools.cache_root()) / "previous"
    release = PreviousRelease(commit=commit, directory=root / commit)
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{commit}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once build it once
        if (release.directory / _STAMP).exists():
            return release
        # A build that died half-way left no stamp: start again from nothing. The
        # virtualenv is built where it stays, since its scripts name their own path.
        shutil.rmtree(release.directory, ignore_errors=True)
        _extract(commit, release.directory / "source")
        venv = release.directory / "venv"
        _run([sys.executable, "-m", "venv", str(venv)], f"creating a virtualenv for {TAG}")
        # Not editable: the virtualenv holds the release's code, whatever this checkout holds.
        source = str(release.directory / "source")
        _run(
            [str(release.python), "-m", "pip", "install", "--quiet", source],
            f"installing compute-domains {TAG} ({commit[:7]}) into {venv}",
        )
        (release.directory / _STAMP).touch()
    return release


@contextlib.contextmanager
def running_in(sim: sim_cluster.SimCluster, release: PreviousRelease) -> Iterator[None]:
    """While inside, the simulated kubelet runs pods tagged with the release's appVersion with
    the release's Python (pods started meanwhile keep it after the block)."""
    assert sim.directory is not None
    tag = release.app_version
    images.register(sim.directory, tag, release.python)
    try:
        yield
    finally:
        images.unregister(sim.directory, tag)
