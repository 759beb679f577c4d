"""Lay out each simulated node's host filesystem: the files the driver and kubelet provide.

Components started for a simulated node get paths inside that node's tree instead of ``/``,
so every node-local contract (DESIGN §4) is exercised with real files. The fake-NVML
topology file format is documented in ``docs/simulation.md``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import uuid
from typing import Any

from cdsim import topology
from cdsim.fakeimex import install as fake_imex
from computedomains.fabric import fake as fake_nvml

FAKE_NVML_FORMAT = fake_nvml.FAKE_NVML_FORMAT
"""The fabric backend's file format, which the host trees are written in."""

FAKE_NVML_FILE = "etc/compute-domains/fake-nvml.json"
IMEX_CHANNEL_COUNT = 2048
NVIDIA_CAPS_MAJOR = 236
IMEX_CHANNELS_MAJOR = 235
FABRIC_IMEX_MGMT_MINOR = 1

_DIRECTORIES = (
    "var/lib/kubelet/plugins",
    "var/lib/kubelet/plugins_registry",
    "var/run/cdi",
    "var/run/compute-domains",
    "dev",
)


@dataclasses.dataclass(frozen=True)
class HostTree:
    """Paths of one node's host tree."""

    root: pathlib.Path

    @property
    def fake_nvml(self) -> pathlib.Path:
        """The node's fake-NVML topology file."""
        return self.root / FAKE_NVML_FILE

    @property
    def proc_devices(self) -> pathlib.Path:
        """``/proc/devices``."""
        return self.root / "proc/devices"

    @property
    def boot_id(self) -> pathlib.Path:
        """``/proc/sys/kernel/random/boot_id``."""
        return self.root / "proc/sys/kernel/random/boot_id"

    @property
    def fabric_imex_mgmt(self) -> pathlib.Path:
        """``/proc/driver/nvidia/capabilities/fabric-imex-mgmt``."""
        return self.root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt"

    @property
    def kubelet_plugins(self) -> pathlib.Path:
        """``/var/lib/kubelet/plugins``."""
        return self.root / "var/lib/kubelet/plugins"

    @property
    def kubelet_registry(self) -> pathlib.Path:
        """``/var/lib/kubelet/plugins_registry``."""
        return self.root / "var/lib/kubelet/plugins_registry"

    @property
    def cdi(self) -> pathlib.Path:
        """``/var/run/cdi``."""
        return self.root / "var/run/cdi"


def proc_devices_text(*, with_nvidia: bool) -> str:
    """A ``/proc/devices`` like a GPU node's, with the IMEX majors when a driver is loaded."""
    chars = [
        (1, "mem"),
        (4, "/dev/vc/0"),
        (4, "tty"),
        (5, "/dev/tty"),
        (5, "/dev/console"),
        (10, "misc"),
        (13, "input"),
        (89, "i2c"),
        (128, "ptm"),
        (136, "pts"),
        (180, "usb"),
        (189, "usb_device"),
    ]
    if with_nvidia:
        chars += [
            (195, "nvidia-frontend"),
            (234, "nvidia-uvm"),
            (IMEX_CHANNELS_MAJOR, "nvidia-caps-imex-channels"),
            (NVIDIA_CAPS_MAJOR, "nvidia-caps"),
            (237, "nvidia-nvlink"),
            (238, "nvidia-nvswitch"),
        ]
    blocks = [(7, "loop"), (8, "sd"), (259, "blkext")]
    lines = [
        "Character devices:",
        *(f"{m:3d} {n}" for m, n in chars),
        "",
        "Block devices:",
        *(f"{m:3d} {n}" for m, n in blocks),
    ]
    return "\n".join(lines) + "\n"


def fake_nvml_document(node: topology.SimNode) -> dict[str, Any]:
    """The fake-NVML topology file of ``node`` as a JSON-ready dict."""
    return {
        "format": FAKE_NVML_FORMAT,
        "node": node.name,
        "driverVersion": node.driver_version,
        "imexChannelCount": IMEX_CHANNEL_COUNT,
        "gpus": [
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "pciBusId": gpu.pci_bus_id,
                "fabric": {
                    "state": gpu.fabric.state,
                    "status": gpu.fabric.status,
                    "clusterUuid": gpu.fabric.cluster_uuid,
                    "cliqueId": gpu.fabric.clique_id,
                    "healthMask": gpu.fabric.health_mask,
                },
            }
            for gpu in node.gpus
        ],
    }


def write(root: pathlib.Path, node: topology.SimNode) -> HostTree:
    """Create ``root`` as ``node``'s host tree (directories, /proc files, fake NVML)."""
    tree = HostTree(root)
    for directory in _DIRECTORIES:
        (root / directory).mkdir(parents=True, exist_ok=True)
    tree.proc_devices.parent.mkdir(parents=True, exist_ok=True)
    tree.proc_devices.write_text(proc_devices_text(with_nvidia=True))
    tree.boot_id.parent.mkdir(parents=True, exist_ok=True)
    tree.boot_id.write_text(f"{uuid.uuid4()}\n")
    tree.fabric_imex_mgmt.parent.mkdir(parents=True, exist_ok=True)
    # 438 = 0o666, the mode the driver reports for the capability's device file.
    tree.fabric_imex_mgmt.write_text(
        f"DeviceFileMinor: {FABRIC_IMEX_MGMT_MINOR}\nDeviceFileMode: 438\nDeviceFileModify: 1\n"
    )
    params = root / "proc/driver/nvidia/params"
    params.write_text(f"ImexChannelCount: {IMEX_CHANNEL_COUNT}\n")
    tree.fake_nvml.parent.mkdir(parents=True, exist_ok=True)
    tree.fake_nvml.write_text(json.dumps(fake_nvml_document(node), indent=2) + "\n")
    # Where the driver installs them; the IMEX agent runs <driver root>/usr/bin/nvidia-imex.
    fake_imex.install(root / "usr/bin")
    return tree
