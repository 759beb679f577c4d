"""Lay out each simulated node's host filesystem: the files the driver and kubelet provide.

Components started for a simulated node get paths inside that node's tree instead of ``/``,
so every node-local contract (DESIGN §4) is exercised with real files. NVML is the fake
``libnvidia-ml.so.1`` (:mod:`cdsim.fakenvml`) where drivers install it, with the node's
topology file beside it (format in ``docs/simulation.md``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import uuid
from typing import Any

from cdsim import fakenvml, topology
from cdsim.fakeimex import config as fake_imex_config
from cdsim.fakeimex import install as fake_imex
from computedomains import nodefiles
from computedomains.api import constants

PREVIOUS_RELEASES_NVML_FILE = "etc/compute-domains/fake-nvml.json"
"""Where the previous releases' ``fake`` fabric backend (gone since) reads what NVML answers,
in their JSON format (:func:`previous_releases_document`): upgrade tests run their chart."""
PREVIOUS_RELEASES_NVML_FORMAT = "compute-domains.sim/fake-nvml.v1"
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
    def nvml_library(self) -> pathlib.Path:
        """The node's (fake) ``libnvidia-ml.so.1``, under the driver root (the tree's root)."""
        return self.root / fakenvml.library_dir() / fakenvml.LIBRARY

    @property
    def nvml_topology(self) -> pathlib.Path:
        """The topology file the node's NVML answers from, beside the library."""
        return self.root / fakenvml.library_dir() / fakenvml.TOPOLOGY_FILE

    @property
    def previous_releases_nvml(self) -> pathlib.Path:
        """The same answers for the previous releases' ``fake`` backend."""
        return self.root / PREVIOUS_RELEASES_NVML_FILE

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

    @property
    def plugin_checkpoint(self) -> pathlib.Path:
        """The kubelet plugin's checkpoint: ``<plugins dir>/<driver>/checkpoint.json``."""
        return self.kubelet_plugins / constants.DRIVER_NAME / "checkpoint.json"

    @property
    def imex_dir(self) -> pathlib.Path:
        """``/var/run/compute-domains/imex``: the IMEX agent's files (``imexd.cfg``, ...)."""
        return self.root / str(constants.IMEX_DIR).lstrip("/")

    @property
    def imex_config(self) -> pathlib.Path:
        """The ``imexd.cfg`` the agent renders, which its ``nvidia-imex`` is started with."""
        return self.imex_dir / "imexd.cfg"

    @property
    def imex_status(self) -> pathlib.Path:
        """The IMEX agent's status file (``ImexStatus``)."""
        return self.root / str(constants.IMEX_STATUS_FILE).lstrip("/")

    @property
    def imex_fault_file(self) -> pathlib.Path:
        """The fake IMEX's fault file (``bind``, ``hang``, ...: :mod:`cdsim.fakeimex.config`)."""
        return self.imex_dir / fake_imex_config.FAIL_FILE


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


def previous_releases_document(model: fakenvml.Answers) -> dict[str, Any]:
    """``model`` in the JSON the previous releases' ``fake`` fabric backend reads.

    Those releases (tests.support.previous) read this file instead of NVML; it says what the
    topology file says, apart from the faults only the library can play (init and V2 answers).
    """
    return {
        "format": PREVIOUS_RELEASES_NVML_FORMAT,
        "node": model.node,
        "driverVersion": model.driver_version,
        "imexChannelCount": IMEX_CHANNEL_COUNT,
        "gpus": [
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "pciBusId": gpu.pci_bus_id,
                "fabric": None
                if gpu.fabric is None
                else {
                    "state": gpu.fabric.state,
                    "status": gpu.fabric.status,
                    "clusterUuid": gpu.fabric.cluster_uuid,
                    "cliqueId": gpu.fabric.clique_id,
                    "healthMask": gpu.fabric.health_mask,
                },
            }
            for gpu in model.gpus
        ],
    }


def write_nvml_answers(tree: HostTree, model: fakenvml.Answers) -> None:
    """Change what the node's NVML answers from its next init on (each file atomically)."""
    fakenvml.write_topology(tree.nvml_topology, model)
    nodefiles.write_json(
        tree.previous_releases_nvml, previous_releases_document(model), boot_scoped=True
    )


def write(
    root: pathlib.Path,
    node: topology.SimNode,
    *,
    nvml_library: pathlib.Path,
    imex_python: str = sys.executable,
) -> HostTree:
    """Create ``root`` as ``node``'s host tree (directories, /proc files, NVML, IMEX).

    ``nvml_library`` is the built fake ``libnvidia-ml.so.1``
    (:meth:`cdsim.tools.ToolBox.nvml_library`); the tree gets a copy of it. ``imex_python``
    runs the fake IMEX where the node's agent runs it (the image's Python in a container).
    """
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
    fakenvml.install(nvml_library, tree.nvml_library.parent)
    write_nvml_answers(tree, fakenvml.answers(node))
    # Where the driver installs them; the IMEX agent runs <driver root>/usr/bin/nvidia-imex.
    fake_imex.install(root / "usr/bin", python=imex_python)
    return tree
