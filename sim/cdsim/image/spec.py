"""What the image is, apart from its files: user, entrypoint, environment, labels, paths.

Pure values and builders; the recipe writes them into the root filesystem and the OCI config.
"""

from __future__ import annotations

import dataclasses
import datetime

UID = 65532
"""The unprivileged user (and group) every container runs as unless the chart says otherwise."""
USER_NAME = "computedomains"
PYTHON = "/usr/bin/python3.11"
"""Debian's interpreter; the console script runs it directly."""
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
"""Where the wheels go: Debian's python3.11 puts this folder on ``sys.path`` for local installs."""
SCRIPTS = "usr/local/bin"
"""Where the console scripts go (``usr/local/bin/computedomains``), on the image's PATH."""
ENTRYPOINT = ("computedomains",)
WORKING_DIR = "/"
ENV = (
    "PATH=/usr/local/bin:/usr/bin:/bin",
    # The root filesystem is read-only: no bytecode is written next to the sources, nor tried.
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
TITLE = "compute-domains"
DESCRIPTION = "ComputeDomains (isolated IMEX domains) for multi-node NVLink Kubernetes clusters"
LICENSE = "Apache-2.0"
SOURCE = "https://github.com/compute-domains/compute-domains"
"""``org.opencontainers.image.source``: where the recipe's revisions live."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """The revision an image is built from, as its labels and tags name it."""

    version: str
    """The build's version (:mod:`cdsim.versions`), ``.dirty-<hash>`` for an edited tree."""
    revision: str
    """The git commit (40 hex digits) the build started from."""
    epoch: int
    """SOURCE_DATE_EPOCH: the commit's time, every file's mtime and the ``created`` stamp."""

    @property
    def created(self) -> str:
        """RFC 3339 UTC time of :attr:`epoch`."""
        stamp = datetime.datetime.fromtimestamp(self.epoch, tz=datetime.UTC)
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def tag(self) -> str:
        """The tag of the index (OCI tags allow ``[A-Za-z0-9_.-]``; ``+`` is replaced)."""
        return self.version.replace("+", "_")


def labels(identity: Identity) -> dict[str, str]:
    """The OCI annotation keys the image config carries as labels."""
    prefix = "org.opencontainers.image."
    return {
        prefix + "title": TITLE,
        prefix + "description": DESCRIPTION,
        prefix + "licenses": LICENSE,
        prefix + "source": SOURCE,
        prefix + "revision": identity.revision,
        prefix + "version": identity.version,
        prefix + "created": identity.created,
    }


def passwd() -> str:
    """``/etc/passwd``: root and the unprivileged user, neither with a login shell."""
    return (
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{USER_NAME}:x:{UID}:{UID}:{USER_NAME}:/nonexistent:/usr/sbin/nologin\n"
    )


def group() -> str:
    """``/etc/group``: root's group and the unprivileged user's."""
    return f"root:x:0:\n{USER_NAME}:x:{UID}:\n"


def console_script(module: str, function: str) -> str:
    """The console script pip would write for ``module:function``, for Debian's python3.11.

    ``pip install --target`` writes scripts for the interpreter running pip, so the recipe
    writes this one itself.
    """
    return (
        f"#!{PYTHON}\n"
        "import sys\n"
        f"from {module} import {function}\n"
        "\n"
        'if __name__ == "__main__":\n'
        f"    sys.exit({function}())\n"
    )
