"""Which Python runs a chart container, by its image tag: this checkout's, or a release's.

A container runs the image entrypoint ``computedomains`` as ``<python> -m computedomains``.
By default that Python is the simulated kubelet's own, so pods run this checkout's code. The
file ``<cluster dir>/image-pythons.json`` (:data:`FILE_NAME`) maps image tags to other Python
executables, so a pod of an older chart (image tag = that release's appVersion, say
``0.1.0``) runs that release's code from a virtualenv it is installed in::

    {"apiVersion": "compute-domains.sim/v1", "kind": "ImagePythons",
     "pythons": {"0.1.0": "/path/to/venv/bin/python"}}

A tag is what :func:`podspec.image_tag` reads from the container's image. The kubelet reads
the file whenever it starts a pod, so a test may change it while the cluster runs
(:func:`register` / :func:`unregister`); pods already running keep their Python.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from computedomains import nodefiles

FILE_NAME = "image-pythons.json"
"""The mapping's file name, in the cluster's directory."""
API_VERSION = "compute-domains.sim/v1"
KIND = "ImagePythons"


def path(cluster_dir: pathlib.Path) -> pathlib.Path:
    """Where the mapping lives for the cluster in ``cluster_dir``."""
    return cluster_dir / FILE_NAME


def read(cluster_dir: pathlib.Path) -> dict[str, str]:
    """Image tag → Python executable; empty when the file does not exist."""
    document = nodefiles.read_json(path(cluster_dir), kind=KIND, api_version=API_VERSION)
    if document is None:
        return {}
    return {str(tag): str(python) for tag, python in document.get("pythons", {}).items()}


def _write(cluster_dir: pathlib.Path, pythons: Mapping[str, str]) -> None:
    document = {"apiVersion": API_VERSION, "kind": KIND, "pythons": dict(pythons)}
    nodefiles.write_json(path(cluster_dir), document, boot_scoped=True)


def register(cluster_dir: pathlib.Path, tag: str, python: pathlib.Path) -> None:
    """Run pods whose image tag is ``tag`` with ``python`` from now on."""
    if not tag:
        raise ValueError("an image tag is needed: untagged images run this checkout's code")
    _write(cluster_dir, {**read(cluster_dir), tag: str(python)})


def unregister(cluster_dir: pathlib.Path, tag: str) -> None:
    """Run pods whose image tag is ``tag`` with the kubelet's own Python again."""
    pythons = read(cluster_dir)
    if pythons.pop(tag, None) is not None:
        _write(cluster_dir, pythons)
