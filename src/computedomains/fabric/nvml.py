"""Fabric information from ``libnvidia-ml.so.1`` in the driver root, through ``pynvml``.

The NVML calls go through :class:`NvmlLibrary`, the call surface of the ``pynvml`` module
(names, arguments, :class:`pynvml.NVMLError` codes). On a GPU node that is the driver's
library; in the simulated cluster each node's driver root holds a fake one written in C that
answers from the node's topology file, so this module runs unchanged there.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import pathlib
import types
import uuid
from typing import Any, Protocol

import pynvml  # type: ignore[import-untyped]

from computedomains.fabric import checks
from computedomains.fabric.model import (
    FabricDiscoveryError,
    FabricState,
    Gpu,
    GpuFabric,
    NodeReport,
)

LIBRARY = "libnvidia-ml.so.1"
LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
)
"""Where drivers install NVML, relative to the driver root (``/``, or e.g. the GPU operator's
``/run/nvidia/driver``)."""

# A driver without the versioned fabric call (or without its V2 struct) answers with one of
# these; the V1 call still works there, it only lacks the health mask.
_V2_UNAVAILABLE = (
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
)
_STATES = types.MappingProxyType(
    {
        pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: FabricState.NOT_SUPPORTED,
        pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: FabricState.NOT_STARTED,
        pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: FabricState.IN_PROGRESS,
        pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: FabricState.COMPLETED,
    }
)


class NvmlUnavailable(FabricDiscoveryError):
    """NVML cannot be loaded or initialised on this node."""


class NvmlLibrary(Protocol):
    """The NVML calls fabric discovery makes, as ``pynvml`` spells them."""

    def nvmlInit(self) -> None:
        """Initialise NVML."""

    def nvmlShutdown(self) -> None:
        """Release NVML."""

    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver version, e.g. ``580.95.05``."""

    def nvmlDeviceGetCount(self) -> int:
        """Number of GPUs."""

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        """Opaque handle of GPU ``index``."""

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        """``GPU-<uuid>``."""

    def nvmlDeviceGetName(self, handle: Any) -> str:
        """Product name."""

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        """Fill a pointer to ``c_nvmlGpuFabricInfo_v2_t`` (with health mask)."""

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> int:
        """Fill a pointer to ``c_nvmlGpuFabricInfo_t`` (V1, no health mask)."""


def library_candidates(driver_root: pathlib.Path) -> list[pathlib.Path]:
    """Every path searched for NVML under ``driver_root``, in search order."""
    return [driver_root / d / LIBRARY for d in LIBRARY_DIRS]


def find_library(driver_root: pathlib.Path) -> pathlib.Path:
    """The first NVML library file under ``driver_root``; :class:`NvmlUnavailable` if none."""
    candidates = library_candidates(driver_root)
    for path in candidates:
        if path.is_file():  # a directory of that name must not shadow a later real file
            return path
    raise NvmlUnavailable(
        f"{LIBRARY} not found under driver root {driver_root}; searched "
        + ", ".join(str(p) for p in candidates)
        + " (set --driver-root to where the driver is installed)"
    )


def load_library(driver_root: pathlib.Path) -> NvmlLibrary:
    """``pynvml`` bound to the NVML library of ``driver_root``.

    One library per process: :class:`NvmlUnavailable` when another driver root's is loaded.
    """
    # pynvml would dlopen the bare name through the loader's search path, which knows
    # nothing of the driver root. It keeps the handle in its module global ``nvmlLib`` and
    # loads only while that is None, so setting it first makes every call use our library.
    with pynvml.libLoadLock:
        if pynvml.nvmlLib is None:
            path = find_library(driver_root)
            try:
                pynvml.nvmlLib = ctypes.CDLL(str(path))
            except OSError as exc:
                raise NvmlUnavailable(f"cannot load {path}: {exc}") from None
        loaded = str(pynvml.nvmlLib._name)
        if loaded not in {str(p) for p in library_candidates(driver_root)}:
            raise NvmlUnavailable(
                f"this process already uses NVML from {loaded}, not from driver root "
                f"{driver_root} (pynvml holds one library per process)"
            )
    library: NvmlLibrary = pynvml
    return library


def return_name(code: int) -> str:
    """The ``nvmlReturn_t`` name of ``code`` without ``NVML_`` (``SUCCESS``, ``ERROR_UNKNOWN``)."""
    members: dict[str, object] = vars(pynvml)
    for name, value in members.items():
        if (name == "NVML_SUCCESS" or name.startswith("NVML_ERROR_")) and value == code:
            return name.removeprefix("NVML_")
    return f"UNKNOWN_RETURN_{code}"


def _describe(exc: Any) -> str:
    return f"{exc} ({return_name(exc.value)})"


def discover(library: NvmlLibrary, *, proc_root: pathlib.Path) -> NodeReport:
    """Query driver version and every GPU's identity and fabric through ``library``."""
    try:
        library.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML initialisation failed: {_describe(exc)}") from None
    try:
        driver_version = library.nvmlSystemGetDriverVersion()
        gpus = tuple(_gpu(library, i) for i in range(library.nvmlDeviceGetCount()))
    except pynvml.NVMLError as exc:
        raise FabricDiscoveryError(f"NVML query failed: {_describe(exc)}") from None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            library.nvmlShutdown()
    return NodeReport(
        driver_version=driver_version,
        gpus=gpus,
        # NVML does not report the channel count; the driver publishes it in its params.
        imex_channel_count=checks.read_imex_channel_count(proc_root),
    )


def _gpu(library: NvmlLibrary, index: int) -> Gpu:
    handle = library.nvmlDeviceGetHandleByIndex(index)
    return Gpu(
        index=index,
        uuid=library.nvmlDeviceGetUUID(handle),
        name=library.nvmlDeviceGetName(handle),
        fabric=_fabric(library, handle, index),
    )


def _fabric(library: NvmlLibrary, handle: Any, index: int) -> GpuFabric | None:
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    try:
        library.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.pointer(info))
        return _fabric_model(info, index, health_mask=int(info.healthMask))
    except pynvml.NVMLError as exc:
        if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
            return None
        if exc.value not in _V2_UNAVAILABLE:
            raise
    info_v1 = pynvml.c_nvmlGpuFabricInfo_t()
    try:
        library.nvmlDeviceGetGpuFabricInfo(handle, ctypes.pointer(info_v1))
    except pynvml.NVMLError as exc:
        if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise
    return _fabric_model(info_v1, index, health_mask=None)


def _fabric_model(info: Any, index: int, *, health_mask: int | None) -> GpuFabric:
    state = _STATES.get(int(info.state))
    if state is None:
        raise FabricDiscoveryError(f"GPU {index}: NVML reports unknown fabric state {info.state}")
    return GpuFabric(
        state=state,
        status=return_name(int(info.status)),
        cluster_uuid=str(uuid.UUID(bytes=bytes(info.clusterUuid))),
        clique_id=int(info.cliqueId),
        health_mask=health_mask,
    )


@dataclasses.dataclass(frozen=True)
class NvmlBackend:
    """Discovery through the node's real NVML."""

    driver_root: pathlib.Path
    proc_root: pathlib.Path

    def discover(self) -> NodeReport:
        """Load NVML (once per process) and query it."""
        return discover(load_library(self.driver_root), proc_root=self.proc_root)
