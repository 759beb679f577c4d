"""Host prerequisites of IMEX, read from ``/proc``: device majors, capabilities, processes.

Every function takes ``proc_root`` (the host's ``/proc`` as this process sees it) so the same
code reads a real node, a host ``/proc`` mounted into a pod, or a simulated node's host tree.
The kubelet plugin reuses :func:`read_proc_devices` and :func:`read_capability` to build the
device nodes it injects.

Spotting a host ``nvidia-imex`` needs the host's process table: the chart mounts the host's
``/proc`` into the node-init pod and passes it as ``--proc-root`` (``/proc/devices`` and the
driver files are the same in every PID namespace, so they come from the same mount).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

IMEX_CHANNELS_DEVICE = "nvidia-caps-imex-channels"
"""``/proc/devices`` name of the IMEX channel character devices (``channel<N>`` minors)."""
CAPS_DEVICE = "nvidia-caps"
"""``/proc/devices`` name of NVIDIA capability devices (the IMEX management device is one)."""
IMEX_MGMT_CAPABILITY = "fabric-imex-mgmt"
"""The capability that entitles a process to run the IMEX daemon."""
IMEX_PROCESS = "nvidia-imex"
"""``comm`` of the IMEX daemon; exact match, so ``nvidia-imex-ctl`` does not count."""
_POD_CGROUP_MARK = "kubepods"
"""Part of every pod's cgroup path (cgroupfs and systemd drivers alike): such a process is a
container's, like our own IMEX daemons, not the host service that conflicts with them."""


@dataclasses.dataclass(frozen=True)
class ProcDevices:
    """Majors from ``/proc/devices``, by device name."""

    character: Mapping[str, int]
    block: Mapping[str, int]

    def char_major(self, name: str) -> int | None:
        """The major of character device ``name``, or None when the kernel did not register it."""
        return self.character.get(name)


@dataclasses.dataclass(frozen=True)
class DeviceCapability:
    """A ``/proc/driver/nvidia/capabilities/<name>`` file: how to create its device node."""

    minor: int
    """Minor under the ``nvidia-caps`` major; the node is ``/dev/nvidia-caps/nvidia-cap<minor>``."""
    mode: int
    """File mode of the device node (the driver writes it in decimal: 438 = 0o666)."""
    modify: bool
    """Whether the driver allows the device node's mode to be changed."""


@dataclasses.dataclass(frozen=True)
class HostChecks:
    """Everything the fabric verdict needs from the host besides NVML."""

    imex_channels_major: int | None
    caps_major: int | None
    imex_mgmt: DeviceCapability | None
    """None when the capability file is missing or unreadable."""
    imex_channel_count: int | None
    host_imex_pids: tuple[int, ...]
    proc_root: pathlib.Path

    @property
    def imex_mgmt_path(self) -> pathlib.Path:
        """Where the IMEX management capability file was looked for."""
        return capability_path(self.proc_root, IMEX_MGMT_CAPABILITY)


def parse_proc_devices(text: str) -> ProcDevices:
    """Parse ``/proc/devices``; lines that are not ``<major> <name>`` are skipped."""
    sections: dict[str, dict[str, int]] = {"character": {}, "block": {}}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Character devices"):
            current = sections["character"]
            continue
        if stripped.startswith("Block devices"):
            current = sections["block"]
            continue
        fields = stripped.split(None, 1)
        if current is None or len(fields) != 2 or not fields[0].isdigit():
            continue
        # A name can appear twice (e.g. "4 /dev/vc/0" then "4 tty"); the first line wins.
        current.setdefault(fields[1], int(fields[0]))
    return ProcDevices(character=sections["character"], block=sections["block"])


def read_proc_devices(proc_root: pathlib.Path) -> ProcDevices:
    """``<proc_root>/devices`` parsed; an absent file reads as no devices at all."""
    try:
        return parse_proc_devices((proc_root / "devices").read_text())
    except FileNotFoundError:
        return ProcDevices(character={}, block={})


def capability_path(proc_root: pathlib.Path, name: str) -> pathlib.Path:
    """Path of the driver's capability file ``name`` under ``proc_root``."""
    return proc_root / "driver/nvidia/capabilities" / name


def _key_values(text: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            pairs[key.strip()] = value.strip()
    return pairs


def parse_capability(text: str) -> DeviceCapability:
    """Parse a capability file; ValueError when a field is missing or not a number."""
    fields = _key_values(text)
    try:
        return DeviceCapability(
            minor=int(fields["DeviceFileMinor"]),
            mode=int(fields["DeviceFileMode"]),
            modify=int(fields["DeviceFileModify"]) != 0,
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"malformed capability file: {exc}") from None


def read_capability(
    proc_root: pathlib.Path, name: str = IMEX_MGMT_CAPABILITY
) -> DeviceCapability | None:
    """The capability ``name``, None when the driver does not expose it; ValueError if garbled."""
    try:
        text = capability_path(proc_root, name).read_text()
    except FileNotFoundError:
        return None
    return parse_capability(text)


def read_imex_channel_count(proc_root: pathlib.Path) -> int | None:
    """``ImexChannelCount`` from ``<proc_root>/driver/nvidia/params``; None when absent."""
    try:
        text = (proc_root / "driver/nvidia/params").read_text()
    except FileNotFoundError:
        return None
    value = _key_values(text).get("ImexChannelCount")
    return int(value) if value is not None and value.isdigit() else None


def parse_driver_version(text: str) -> tuple[int, ...]:
    """``"570.158.01"`` as ``(570, 158, 1)``; ValueError for anything else."""
    parts = text.strip().split(".")
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"not a driver version: {text!r}")
    return tuple(int(p) for p in parts)


def driver_at_least(found: str, minimum: str) -> bool:
    """True when driver version ``found`` is ``minimum`` or newer; ValueError if unparsable."""
    return parse_driver_version(found) >= parse_driver_version(minimum)


def _is_pod_process(pid_dir: pathlib.Path) -> bool:
    try:
        return _POD_CGROUP_MARK in (pid_dir / "cgroup").read_text()
    except OSError:
        return False


def find_host_processes(proc_root: pathlib.Path, comm: str = IMEX_PROCESS) -> tuple[int, ...]:
    """PIDs of host (non-container) processes named ``comm``, read from ``<pid>/comm``."""
    pids: list[int] = []
    for entry in proc_root.iterdir() if proc_root.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue  # the process exited while we looked, or is not ours to read
        if name == comm and not _is_pod_process(entry):
            pids.append(int(entry.name))
    return tuple(sorted(pids))


def gather(proc_root: pathlib.Path) -> HostChecks:
    """Run every host check against ``proc_root``."""
    devices = read_proc_devices(proc_root)
    try:
        imex_mgmt = read_capability(proc_root)
    except ValueError:
        imex_mgmt = None
    return HostChecks(
        imex_channels_major=devices.char_major(IMEX_CHANNELS_DEVICE),
        caps_major=devices.char_major(CAPS_DEVICE),
        imex_mgmt=imex_mgmt,
        imex_channel_count=read_imex_channel_count(proc_root),
        host_imex_pids=find_host_processes(proc_root),
        proc_root=proc_root,
    )
