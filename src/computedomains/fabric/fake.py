"""The ``fake`` backend: what NVML would answer, read from the simulated node's topology file.

The simulated cluster writes one such file per node (format in ``docs/simulation.md``); tests
change a node's fabric by replacing the file atomically.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from computedomains.fabric import codec
from computedomains.fabric.model import FabricDiscoveryError, NodeReport

FAKE_NVML_FORMAT = "compute-domains.sim/fake-nvml.v1"
"""The ``format`` field every fake-NVML topology file carries."""
DEFAULT_FAKE_NVML_FILE = pathlib.Path("/etc/compute-domains/fake-nvml.json")


class FakeNvmlError(FabricDiscoveryError):
    """The fake-NVML file is missing or unusable."""


def read_fake_nvml(path: pathlib.Path) -> NodeReport:
    """The node report the fake-NVML file at ``path`` describes."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise FakeNvmlError(
            f"fake-NVML file {path} does not exist (the fake backend needs the simulated "
            "node's topology file; pass --fake-nvml-file)"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FakeNvmlError(f"fake-NVML file {path} is not valid JSON: {exc}") from None
    try:
        return _report(document)
    except ValueError as exc:
        raise FakeNvmlError(f"fake-NVML file {path} is unusable: {exc}") from None


def _report(document: object) -> NodeReport:
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    if document.get("format") != FAKE_NVML_FORMAT:
        raise ValueError(f"format is {document.get('format')!r}, expected {FAKE_NVML_FORMAT!r}")
    gpus = codec.field(document, "gpus", list, "$")
    return NodeReport(
        driver_version=codec.field(document, "driverVersion", str, "$"),
        gpus=tuple(codec.gpu_from_json(g, f"$.gpus[{i}]") for i, g in enumerate(gpus)),
        imex_channel_count=codec.optional_field(document, "imexChannelCount", int, "$"),
    )


@dataclasses.dataclass(frozen=True)
class FakeBackend:
    """Discovery from a fake-NVML topology file."""

    path: pathlib.Path

    def discover(self) -> NodeReport:
        """Read the file now (it may have changed since the last call)."""
        return read_fake_nvml(self.path)
