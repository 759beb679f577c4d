"""The fake ``libnvidia-ml.so.1``: what NVML answers on a simulated node, and the C library.

Each simulated node's driver root holds a copy of the library built from ``libnvidia-ml.c``
(next to this module) at ``usr/lib/<machine>-linux-gnu/libnvidia-ml.so.1``, where drivers
install NVML, and beside it the node's topology file (:data:`TOPOLOGY_FILE`). The product's
``nvml`` fabric backend loads that library through the real ``pynvml`` exactly as it loads
the driver's; the library answers from the file, which it reads again at every init, so a test
changes a node's fabric (or breaks its NVML) by replacing the file.

:class:`Answers` is the one model of the file and :func:`render` its one writer; the format is
documented in ``docs/simulation.md``. The library is built once per source version into the
tools' cache (:meth:`cdsim.tools.ToolBox.nvml_library`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import platform
import shutil
import subprocess

import pynvml  # type: ignore[import-untyped]

from cdsim import topology
from computedomains import nodefiles

TOOL = "fakenvml"
"""Its name among the tools (``cdsim tools path fakenvml``)."""
LIBRARY = "libnvidia-ml.so.1"
SOURCE = pathlib.Path(__file__).with_name("libnvidia-ml.c")
FORMAT = "compute-domains.sim/fake-nvml.v2"
"""The topology file's first line is ``format`` and this."""
TOPOLOGY_FILE = "fake-nvml.topology"
"""The topology file's name, in the folder the library was loaded from."""
CFLAGS = ("-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", f"-Wl,-soname,{LIBRARY}")
_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
_STATES = ("NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED")


class FakeNvmlError(RuntimeError):
    """The library cannot be built, or answers that NVML could not give were asked for."""


def return_code(name: str) -> int:
    """NVML's code for a return name without ``NVML_`` (``SUCCESS``, ``ERROR_UNKNOWN``)."""
    code = getattr(pynvml, f"NVML_{name}", None)
    if not (name == "SUCCESS" or name.startswith("ERROR_")) or not isinstance(code, int):
        raise FakeNvmlError(f"{name!r} is not an NVML return code name (SUCCESS, ERROR_...)")
    return code


@dataclasses.dataclass(frozen=True)
class GpuAnswers:
    """What NVML answers about one GPU."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    fabric: topology.FabricInfo | None
    """The fabric calls' answer; None: they answer ERROR_NOT_SUPPORTED (no NVLink fabric)."""


@dataclasses.dataclass(frozen=True)
class Answers:
    """What NVML answers on one node: the model the topology file is written from."""

    node: str
    driver_version: str
    gpus: tuple[GpuAnswers, ...]
    init: str = "SUCCESS"
    """What init answers (ERROR_DRIVER_NOT_LOADED, ERROR_LIB_RM_VERSION_MISMATCH, ...)."""
    fabric_info_v: str = "SUCCESS"
    """What the versioned fabric call answers in place of its data: ERROR_FUNCTION_NOT_FOUND
    or ERROR_ARGUMENT_VERSION_MISMATCH play a driver without it; SUCCESS answers."""

    def __post_init__(self) -> None:
        return_code(self.init)
        return_code(self.fabric_info_v)
        for gpu in self.gpus:
            if gpu.fabric is not None:
                return_code(gpu.fabric.status)
                if gpu.fabric.state not in _STATES:
                    raise FakeNvmlError(f"GPU {gpu.index}: unknown state {gpu.fabric.state!r}")


def answers(node: topology.SimNode) -> Answers:
    """What a healthy driver's NVML answers on ``node`` (its fabric as its profile says)."""
    gpus = tuple(
        GpuAnswers(
            index=g.index, uuid=g.uuid, name=g.name, pci_bus_id=g.pci_bus_id, fabric=g.fabric
        )
        for g in node.gpus
    )
    return Answers(node=node.name, driver_version=node.driver_version, gpus=gpus)


def render(model: Answers) -> str:
    """The topology file of ``model``: ``key value`` lines, one block per GPU."""
    lines = [
        f"# What NVML answers on simulated node {model.node}: read by the fake {LIBRARY} in",
        "# this folder at every init (format: docs/simulation.md).",
        f"format {FORMAT}",
        f"node {model.node}",
        f"driver-version {model.driver_version}",
        f"init {model.init}",
        f"fabric-info-v {model.fabric_info_v}",
    ]
    for gpu in model.gpus:
        lines += ["", f"gpu {gpu.index}", f"uuid {gpu.uuid}", f"name {gpu.name}"]
        lines.append(f"pci-bus-id {gpu.pci_bus_id}")
        if gpu.fabric is None:
            lines.append("fabric-info ERROR_NOT_SUPPORTED")
            continue
        lines += [
            "fabric-info SUCCESS",
            f"state {gpu.fabric.state}",
            f"status {gpu.fabric.status}",
            f"cluster-uuid {gpu.fabric.cluster_uuid}",
            f"clique-id {gpu.fabric.clique_id}",
            f"health-mask {gpu.fabric.health_mask}",
        ]
    for line in lines:
        if "\n" in line or "\r" in line or line != line.strip():
            raise FakeNvmlError(f"topology line {line!r} would not read back as written")
    return "\n".join(lines) + "\n"


def library_dir() -> str:
    """Where this machine's drivers install NVML, relative to the driver root."""
    machine = platform.machine()
    if machine not in _TRIPLETS:
        raise FakeNvmlError(f"no library folder known for machine {machine!r}")
    return f"usr/lib/{_TRIPLETS[machine]}"


def write_topology(path: pathlib.Path, model: Answers) -> None:
    """Replace the topology file at ``path`` atomically (a running library reads it any time)."""
    nodefiles.write_bytes(path, render(model).encode(), boot_scoped=True)


def install(library: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """Copy the built ``library`` into ``folder``; its topology file goes beside it.

    A copy, not a link: a container that sees only the node's tree must find the file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / LIBRARY
    shutil.copyfile(library, target)
    target.chmod(0o755)
    return target


# -- building -----------------------------------------------------------------------------


def compile_command(output: pathlib.Path, compiler: str = "gcc") -> list[str]:
    """The compiler call that builds the library at ``output``."""
    return [
        compiler,
        *CFLAGS,
        f'-DFAKE_NVML_FORMAT="{FORMAT}"',
        f'-DFAKE_NVML_TOPOLOGY_FILE="{TOPOLOGY_FILE}"',
        "-o",
        str(output),
        str(SOURCE),
    ]


def digest() -> str:
    """Cache key of the library: its source, compiler flags and machine (12 hex digits)."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (*compile_command(pathlib.Path("out"))[1:], platform.machine()):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:12]


def compile_library(output: pathlib.Path, compiler: str = "gcc") -> None:
    """Compile the library to ``output``; :class:`FakeNvmlError` with the compiler's words."""
    command = compile_command(output, compiler)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        raise FakeNvmlError(f"building the fake {LIBRARY} needs {compiler} on PATH") from None
    if proc.returncode != 0:
        raise FakeNvmlError(
            f"building the fake {LIBRARY} failed: `{' '.join(command)}` exited "
            f"{proc.returncode}:\n{proc.stderr.strip()}"
        )
