"""Previous releases: their code in a virtualenv, their chart, for upgrade tests.

Two are known: :data:`V0_1_0` (git tag v0.1.0) and :data:`EARLY_0_1_0`, a 0.1.0 build from
before the IMEX agent's heartbeats and report annotations. :func:`build` resolves one to a
commit (the tag, else the commit it names, for a clone without the tag), then builds once, under
the tools' cache root and keyed by that commit:

- ``<cache>/previous/<commit>/venv``: a virtualenv with the package as of that commit;
- ``<cache>/previous/<commit>/source/chart`` and ``.../values``: that commit's chart and value
  profiles (``git archive``), for ``helm install``.

:func:`running_in` tells the simulated kubelet to run pods whose image tag is the release's
appVersion with that virtualenv's Python (:mod:`cdsim.kubelet.images`), so the
release's chart runs the release's code. Both known releases say appVersion 0.1.0: one at a
time.
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

from cdsim import cluster as sim_cluster
from cdsim import tools
from cdsim.kubelet import images


@dataclasses.dataclass(frozen=True)
class Ref:
    """A previous release: its tag (when the clone has one) and the commit it names."""

    tag: str | None
    commit: str


V0_1_0 = Ref("v0.1.0", "cf84093")
"""The previous release: the chart and code before the lifecycle work (API v1beta1 only)."""
EARLY_0_1_0 = Ref(None, "6ac3ff58")
"""An earlier 0.1.0 build: its IMEX agent writes no heartbeat and no report annotations."""
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


def build(ref: Ref = V0_1_0, cache: pathlib.Path | None = None) -> PreviousRelease:
    """A previous release, built on first use (minutes: a pip install) and cached after."""
    commit = resolve_commit(ref)
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
        _run([sys.executable, "-m", "venv", str(venv)], f"creating a virtualenv for {commit[:9]}")
        # Not editable: the virtualenv holds the release's code, whatever this checkout holds.
        source = str(release.directory / "source")
        _run(
            [str(release.python), "-m", "pip", "install", "--quiet", source],
            f"installing compute-domains {ref.tag or ''} ({commit[:9]}) into {venv}",
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
