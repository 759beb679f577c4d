"""The simulated cluster's OCI registry: Debian's ``docker-registry`` on a loopback port.

Each cluster starts its own (a free port, storage in the cluster's folder, stopped with it), so
the tests and the demo publish the image and the packaged chart there and install the chart by
``oci://`` reference, as a user installs from theirs. Plain HTTP on loopback: helm and skopeo
are told so (``--plain-http``, ``--dest-tls-verify=false``).
"""

from __future__ import annotations

import json
import pathlib
import shutil

BINARY = "docker-registry"
"""Debian's package of the CNCF distribution registry (``apt-get install docker-registry``)."""


class RegistryUnavailable(RuntimeError):
    """The registry binary is not installed."""


def binary() -> pathlib.Path:
    """The registry binary on PATH; :class:`RegistryUnavailable` names the package if absent."""
    found = shutil.which(BINARY)
    if found is None:
        raise RegistryUnavailable(
            f"{BINARY} not found on PATH: install Debian's docker-registry package "
            "(make test and make demo install it; or apt-get install docker-registry)"
        )
    return pathlib.Path(found)


def config(*, port: int, storage: pathlib.Path) -> dict[str, object]:
    """The registry's configuration: loopback only, filesystem storage, no auth, quiet."""
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }


def write_config(directory: pathlib.Path, *, port: int) -> pathlib.Path:
    """Write the configuration (JSON is YAML) into ``directory``; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.yml"
    path.write_text(json.dumps(config(port=port, storage=directory / "storage"), indent=2))
    return path
