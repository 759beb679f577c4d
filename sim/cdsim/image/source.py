"""Which revision an image is built from, and its product files and wheel.

A named revision is read with ``git archive``, so any commit builds (an upgrade test builds
the previous release). Without one, HEAD builds; when the product's files differ from HEAD
in the working tree, the working tree builds and its version is marked ``.dirty-<hash>``. The
version is the build's (:mod:`cdsim.versions`): the chart's, naming the commit between releases.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

from cdsim import versions
from cdsim.image import errors

PRODUCT = ("pyproject.toml", "README.md", "src", "hooks", "node-init", "image", "chart")
"""What the wheel, the image and the chart published beside it are made of, relative to the
repository root (the chart names the version). The recipe itself (this package) is not: it
lives in the test-only simulator."""


class SourceError(errors.ImageError):
    """The revision cannot be read or its wheel not built; the message says why."""


@dataclasses.dataclass(frozen=True)
class Source:
    """A revision to build."""

    repo: pathlib.Path
    commit: str
    """The commit (40 hex digits): the revision, or HEAD for a working tree."""
    dirty: bool
    """True when the working tree's product files are built instead of the commit's."""
    epoch: int
    """The commit time: SOURCE_DATE_EPOCH for everything built from it."""
    version: str
    """The build's version (:func:`cdsim.versions.build_version`): image tag, chart version."""
    fingerprint: str
    """Hex digest of the product files of a dirty tree; empty for a commit."""

    @property
    def key(self) -> str:
        """The cache key: the commit, plus a content hash for a working tree."""
        return f"{self.commit}-dirty-{self.fingerprint[:12]}" if self.dirty else self.commit


def git(repo: pathlib.Path, *args: str) -> str:
    """Output of a git command in ``repo`` (an error names the command)."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise SourceError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def working_files(repo: pathlib.Path) -> list[str]:
    """The product files of the working tree that git tracks or would track, sorted."""
    listed = git(
        repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *PRODUCT
    )
    return sorted(p for p in set(listed.split("\0")) if p and (repo / p).is_file())


def fingerprint(repo: pathlib.Path, files: list[str]) -> str:
    """Hex SHA-256 over the names, modes and contents of ``files``."""
    digest = hashlib.sha256()
    for name in files:
        path = repo / name
        digest.update(f"{name}\0{os.access(path, os.X_OK)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def resolve(repo: pathlib.Path, rev: str | None = None) -> Source:
    """The revision ``rev`` (a commit, tag or branch), or HEAD/the working tree for None."""
    commit = git(repo, "rev-parse", "--verify", f"{rev or 'HEAD'}^{{commit}}").strip()
    epoch = int(git(repo, "log", "-1", "--format=%ct", commit).strip())
    dirty = rev is None and bool(
        git(repo, "status", "--porcelain", "--untracked-files=all", "--", *PRODUCT).strip()
    )
    chart = (
        (repo / versions.CHART_FILE).read_text()
        if dirty
        else git(repo, "show", f"{commit}:{versions.CHART_FILE}")
    )
    changes = fingerprint(repo, working_files(repo)) if dirty else ""
    version = versions.build_version(versions.chart_version(chart), commit=commit, changes=changes)
    return Source(repo, commit, dirty, epoch, version, changes)


def export(source: Source, dest: pathlib.Path) -> None:
    """Write the revision's product files into ``dest`` (``git archive``, or the working tree)."""
    dest.mkdir(parents=True, exist_ok=True)
    if source.dirty:
        for name in working_files(source.repo):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source.repo / name, dest / name)
        return
    done = subprocess.run(
        ["git", "-C", str(source.repo), "archive", "--format=tar", source.commit],
        capture_output=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise SourceError(f"git archive {source.commit}: {done.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as archive:
        members = [m for m in archive.getmembers() if m.name.split("/", 1)[0] in PRODUCT]
        archive.extractall(dest, members=members, filter="data")


def build_wheel(tree: pathlib.Path, out: pathlib.Path, *, epoch: int) -> pathlib.Path:
    """Build the wheel of an exported tree into ``out`` with this environment's backend.

    ``--no-isolation``: the development environment already holds the build backend the
    project names (``make venv``), and a build needs no download.
    """
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(tree),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
        check=False,
        timeout=600,
    )
    wheels = sorted(out.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise SourceError(
            f"building the wheel exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return wheels[0]
