"""The nvml backend against a stand-in with NVML's call surface, and library loading."""

from __future__ import annotations

import dataclasses
import pathlib
import uuid
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks, classify, nvml
from computedomains.fabric.model import FabricDiscoveryError, FabricState

CLUSTER_UUID = "386b0bf3-73f0-5054-949b-d5b6149cb09f"


@dataclasses.dataclass
class StandInGpu:
    """What one GPU answers; ``fabric`` None means ERROR_NOT_SUPPORTED."""

    uuid: str
    name: str = "NVIDIA GB200"
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = pynvml.NVML_SUCCESS
    cluster_uuid: str = CLUSTER_UUID
    clique_id: int = 32766
    health_mask: int = 0
    fabric: bool = True


class StandInNvml:
    """Answers like libnvidia-ml through pynvml: same names, NVMLError with NVML's codes."""

    def __init__(
        self,
        gpus: list[StandInGpu],
        *,
        driver: str = "580.95.05",
        v2_error: int | None = None,
        init_error: int | None = None,
        uuid_error: int | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.v2_error = v2_error
        self.init_error = init_error
        self.uuid_error = uuid_error
        self.initialised = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> StandInGpu:
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: StandInGpu) -> str:
        if self.uuid_error is not None:
            raise pynvml.NVMLError(self.uuid_error)
        return handle.uuid

    def nvmlDeviceGetName(self, handle: StandInGpu) -> str:
        return handle.name

    def nvmlDeviceGetGpuFabricInfoV(self, handle: StandInGpu, info: Any) -> int:
        if self.v2_error is not None:
            raise pynvml.NVMLError(self.v2_error)
        if info.contents.version != pynvml.nvmlGpuFabricInfo_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        self._fill(handle, info.contents)
        info.contents.healthMask = handle.health_mask
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuFabricInfo(self, handle: StandInGpu, info: Any) -> int:
        self._fill(handle, info.contents)
        return int(pynvml.NVML_SUCCESS)

    @staticmethod
    def _fill(gpu: StandInGpu, info: Any) -> None:
        if not gpu.fabric:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info.clusterUuid[:] = list(uuid.UUID(gpu.cluster_uuid).bytes)
        info.status = gpu.status
        info.cliqueId = gpu.clique_id
        info.state = gpu.state


def _gb200(**fields: Any) -> list[StandInGpu]:
    return [
        StandInGpu(uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, str(i))}", **fields) for i in range(4)
    ]


@pytest.fixture
def proc_root(tmp_path: pathlib.Path) -> pathlib.Path:
    params = tmp_path / "proc/driver/nvidia/params"
    params.parent.mkdir(parents=True)
    params.write_text("ImexChannelCount: 2048\n")
    return tmp_path / "proc"


def test_healthy_gb200_reports_every_gpu_in_one_clique(proc_root: pathlib.Path) -> None:
    library = StandInNvml(_gb200(cluster_uuid=CLUSTER_UUID.upper()))
    report = nvml.discover(library, proc_root=proc_root)
    assert library.initialised == 0, "NVML is shut down again"
    assert report.driver_version == "580.95.05"
    assert report.imex_channel_count == 2048
    assert [g.index for g in report.gpus] == [0, 1, 2, 3]
    assert report.gpus[0].uuid == library.gpus[0].uuid
    for gpu in report.gpus:
        assert gpu.fabric is not None
        assert gpu.fabric.state is FabricState.COMPLETED
        assert gpu.fabric.status == "SUCCESS"
        assert gpu.fabric.cluster_uuid == CLUSTER_UUID, "canonical lowercase"
        assert gpu.fabric.health_mask == 0
        assert gpu.fabric.clique == f"{CLUSTER_UUID}.32766"


def test_not_supported_gpus_have_no_fabric(proc_root: pathlib.Path) -> None:
    report = nvml.discover(StandInNvml(_gb200(fabric=False)), proc_root=proc_root)
    assert all(g.fabric is None for g in report.gpus)
    host = checks.gather(proc_root)
    assert classify.classify(report, host).kind is VerdictKind.NO_FABRIC


@pytest.mark.parametrize(
    "v2_error",
    [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH],
)
def test_without_the_v2_call_the_v1_call_answers_without_health(
    proc_root: pathlib.Path, v2_error: int
) -> None:
    library = StandInNvml(_gb200(health_mask=1), v2_error=v2_error)
    report = nvml.discover(library, proc_root=proc_root)
    for gpu in report.gpus:
        assert gpu.fabric is not None
        assert gpu.fabric.health_mask is None
        assert gpu.fabric.clique == f"{CLUSTER_UUID}.32766"


def test_registration_error_status_is_named(proc_root: pathlib.Path) -> None:
    library = StandInNvml(_gb200(status=pynvml.NVML_ERROR_UNKNOWN))
    report = nvml.discover(library, proc_root=proc_root)
    assert {g.fabric.status for g in report.gpus if g.fabric} == {"ERROR_UNKNOWN"}


def test_init_failure_is_a_clear_error(proc_root: pathlib.Path) -> None:
    library = StandInNvml(_gb200(), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(nvml.NvmlUnavailable, match=r"Driver Not Loaded.*ERROR_DRIVER_NOT_LOADED"):
        nvml.discover(library, proc_root=proc_root)


def test_query_failure_shuts_nvml_down(proc_root: pathlib.Path) -> None:
    library = StandInNvml(_gb200(), uuid_error=pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(FabricDiscoveryError, match="ERROR_GPU_IS_LOST"):
        nvml.discover(library, proc_root=proc_root)
    assert library.initialised == 0


def test_absent_library_names_every_searched_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    with pytest.raises(nvml.NvmlUnavailable) as raised:
        nvml.NvmlBackend(driver_root=tmp_path, proc_root=tmp_path).discover()
    message = str(raised.value)
    for directory in nvml.LIBRARY_DIRS:
        assert str(tmp_path / directory / "libnvidia-ml.so.1") in message
    assert pynvml.nvmlLib is None


def test_a_directory_does_not_shadow_the_library(tmp_path: pathlib.Path) -> None:
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    library = tmp_path / "lib/aarch64-linux-gnu/libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    assert nvml.find_library(tmp_path) == library


def test_unloadable_library_is_a_clear_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    library = tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"not a shared object")
    with pytest.raises(nvml.NvmlUnavailable, match=f"cannot load {library}"):
        nvml.load_library(tmp_path)


def _loaded_libc() -> pathlib.Path:
    for line in pathlib.Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if path.endswith("/libc.so.6"):
            return pathlib.Path(path)
    pytest.skip("no libc.so.6 mapped into this process")


def test_library_is_loaded_from_the_driver_root(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any shared object proves the path is used; libc is one every test machine has.
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    library = tmp_path / "run/nvidia/driver/lib64/libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.symlink_to(_loaded_libc())
    nvml.load_library(tmp_path / "run/nvidia/driver")
    assert pynvml.nvmlLib._name == str(library)
