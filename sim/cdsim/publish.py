"""Publish a build to the cluster's registry as a user publishes to theirs, and install from it.

The chart is packaged (``helm package``, version and appVersion set to the build's version) and
pushed as an OCI artifact (``helm push``); the image's OCI archive, every architecture under one
index, is copied with ``skopeo copy --all``. A release then installs
``oci://<registry>/charts/compute-domains --version <version>`` with ``image.repository``
pointing at the registry (:meth:`Published.chart_args`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable

import yaml

from cdsim import tools
from cdsim.image import cache as image_cache
from cdsim.image import debian, recipe, workload

CHART_REPOSITORY = "charts"
"""The registry path the chart is pushed under: ``oci://<registry>/charts/<chart name>``."""
IMAGE_REPOSITORY = "compute-domains"
"""The image's repository in the registry."""


class PublishError(RuntimeError):
    """Packaging or pushing failed; the message carries the tool's own output."""


@dataclasses.dataclass(frozen=True)
class Published:
    """A chart (and its image) in the cluster's registry."""

    registry: str
    chart_name: str
    version: str

    @property
    def chart_ref(self) -> str:
        """The chart's OCI reference, without the version."""
        return f"oci://{self.registry}/{CHART_REPOSITORY}/{self.chart_name}"

    @property
    def image_repository(self) -> str:
        """The image's repository, as ``image.repository`` takes it."""
        return f"{self.registry}/{IMAGE_REPOSITORY}"

    def chart_args(self) -> list[str]:
        """What ``helm install|upgrade RELEASE`` takes to install this chart from the registry."""
        return [
            self.chart_ref,
            "--version",
            self.version,
            "--plain-http",  # the simulated cluster's registry speaks HTTP on loopback
            "--set",
            f"image.repository={self.image_repository}",
        ]


def _run(argv: list[str], what: str, *, timeout: float = 300) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise PublishError(f"{what} did not finish in {timeout:.0f}s") from None
    if done.returncode != 0:
        raise PublishError(f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise PublishError(f"{name} not found on PATH: install Debian's {package} package")
    return found


def publish_chart(
    *,
    helm: pathlib.Path,
    chart_dir: pathlib.Path,
    registry: str,
    version: str | None = None,
    log: Callable[[str], None] = print,
) -> Published:
    """Package ``chart_dir`` and push it to ``registry``.

    ``version``: the chart's ``version`` and ``appVersion`` (the image tag) both; None keeps
    what its Chart.yaml says (a previous release's chart).
    """
    metadata = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    name = str(metadata["name"])
    with tempfile.TemporaryDirectory(prefix="cd-chart-") as scratch:
        package = ["package", str(chart_dir), "--destination", scratch]
        if version is not None:
            package += ["--version", version, "--app-version", version]
        version = version or str(metadata["version"])
        _run([str(helm), *package], f"helm package {chart_dir}")
        (archive,) = pathlib.Path(scratch).glob("*.tgz")
        target = f"oci://{registry}/{CHART_REPOSITORY}"
        log(f"[publish] chart {name} {version} -> {target}/{name}")
        _run([str(helm), "push", str(archive), target, "--plain-http"], f"helm push {archive.name}")
    return Published(registry=registry, chart_name=name, version=version)


def publish_image(
    *,
    archive: pathlib.Path,
    registry: str,
    tag: str,
    repository: str = IMAGE_REPOSITORY,
    log: Callable[[str], None] = print,
) -> str:
    """Copy the OCI archive (its whole index) to ``<registry>/<repository>:<tag>``.

    Returns the pushed reference.
    """
    reference = f"{registry}/{repository}:{tag}"
    log(f"[publish] image {archive.name} -> {reference}")
    skopeo = _tool("skopeo", "skopeo")
    _run(
        [skopeo, "copy", "--all", "--quiet", "--dest-tls-verify=false",
         f"oci-archive:{archive}", f"docker://{reference}"],
        f"skopeo copy to {reference}",
    )  # fmt: skip
    return reference


def publish_build(
    *,
    helm: pathlib.Path,
    registry: str,
    chart_dir: pathlib.Path,
    log: Callable[[str], None] = print,
    build: recipe.Build | None = None,
    version: str | None = None,
) -> Published:
    """Publish a build: its image, then the chart ``chart_dir``, at one version.

    ``build``: None for the checkout ``chart_dir`` lies in, built or reused from the cache
    (:mod:`cdsim.image.cache`). ``version``: the image tag and the chart's version and
    appVersion (a changed chart published as a later release); None: the build's
    (:mod:`cdsim.versions`).
    """
    if build is None:
        repository = pathlib.Path(
            _run(["git", "-C", str(chart_dir), "rev-parse", "--show-toplevel"], "git").strip()
        )
        build, _ = image_cache.ImageCache.from_env(repository).ensure()
    publish_image(archive=build.archive, registry=registry, tag=version or build.tag, log=log)
    return publish_chart(
        helm=helm, chart_dir=chart_dir, registry=registry, version=version or build.version,
        log=log,
    )  # fmt: skip


def publish_workload(*, registry: str, log: Callable[[str], None] = print) -> str:
    """Push the workload image (built on first use) to ``registry``; its reference there.

    See :mod:`cdsim.image.workload`.
    """
    built = workload.ensure(
        tools.cache_root() / "images", debian.Mirror.from_env(dict(os.environ)), log=log
    )
    return publish_image(
        archive=built.archive, registry=registry, tag=workload.TAG,
        repository=workload.REPOSITORY, log=log,
    )  # fmt: skip
