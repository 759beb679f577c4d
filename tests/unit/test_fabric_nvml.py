"""The nvml backend through the real pynvml over the fake libnvidia-ml.so.1, and its loading.

Every test here drives :mod:`computedomains.fabric.nvml` as production does; the library's
answers come from the topology file the simulator writes (:mod:`cdsim.fakenvml`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import pathlib
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from cdsim import fakenvml, hosttree, topology
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks, classify, discovery, nvml
from computedomains.fabric.model import FabricDiscoveryError, FabricState, NodeReport, Reason
from tests.support import nvmlnode

Profile = topology.FabricProfile


@pytest.fixture
def proc_root(tmp_path: pathlib.Path, nvml_library: pathlib.Path) -> pathlib.Path:
    """A GB200 node's /proc (IMEX majors, capability, channel count)."""
    return hosttree.write(tmp_path / "node", _node(), nvml_library=nvml_library).root / "proc"


def _node(profile: topology.FabricProfile = Profile.HEALTHY) -> topology.SimNode:
    name = "gb200-r0-n00"
    spec = topology.Topology(
        racks=1, nodes_per_rack=1, overrides={name: topology.NodeOverride(profile)}
    )
    return topology.expand(spec, cluster_name="unit", address_block=0)[0]


def _answers(profile: topology.FabricProfile = Profile.HEALTHY, **changes: str) -> fakenvml.Answers:
    return dataclasses.replace(fakenvml.answers(_node(profile)), **changes)


def _changed(gpu: fakenvml.GpuAnswers, changes: dict[str, Any]) -> fakenvml.GpuAnswers:
    if "fabric" in changes:
        return dataclasses.replace(gpu, fabric=changes["fabric"])
    assert gpu.fabric is not None
    return dataclasses.replace(gpu, fabric=dataclasses.replace(gpu.fabric, **changes))


def _with_fabric(model: fakenvml.Answers, **changes: Any) -> fakenvml.Answers:
    """``model`` with every GPU's fabric answer changed (``fabric=None``: NOT_SUPPORTED)."""
    return dataclasses.replace(model, gpus=tuple(_changed(g, changes) for g in model.gpus))


def _discover(
    node: nvmlnode.NvmlNode, proc_root: pathlib.Path, model: fakenvml.Answers
) -> NodeReport:
    node.answer(model)
    return node.backend(proc_root).discover()


def _assert_shut_down() -> None:
    """NVML counts inits; a shutdown beyond the last one answers UNINITIALIZED."""
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()


def test_healthy_rack_node_reports_every_gpu_in_its_racks_clique(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path
) -> None:
    node = _node()
    report = _discover(nvml_node, proc_root, fakenvml.answers(node))
    _assert_shut_down()
    assert report.driver_version == node.driver_version == topology.DEFAULT_DRIVER_VERSION
    assert report.imex_channel_count == 2048
    assert [(g.index, g.uuid, g.name) for g in report.gpus] == [
        (g.index, g.uuid, "NVIDIA GB200") for g in node.gpus
    ]
    cluster_uuid = topology.rack_cluster_uuid("unit", 0)
    for gpu in report.gpus:
        assert gpu.fabric is not None
        assert gpu.fabric.state is FabricState.COMPLETED
        assert gpu.fabric.status == "SUCCESS"
        assert gpu.fabric.cluster_uuid == cluster_uuid
        assert gpu.fabric.clique_id == topology.DEFAULT_CLIQUE_ID
        assert gpu.fabric.health_mask == 0
        assert gpu.fabric.clique == node.clique
    verdict = classify.classify(report, checks.gather(proc_root))
    assert (verdict.kind, verdict.clique) == (VerdictKind.HEALTHY, node.clique)


def test_cluster_uuid_is_reported_canonical(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path
) -> None:
    upper = topology.rack_cluster_uuid("unit", 0).upper()
    report = _discover(nvml_node, proc_root, _with_fabric(_answers(), cluster_uuid=upper))
    assert {g.fabric.cluster_uuid for g in report.gpus if g.fabric} == {upper.lower()}


def test_the_v2_call_reports_the_health_mask(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path
) -> None:
    report = _discover(nvml_node, proc_root, _with_fabric(_answers(), health_mask=0x2A45))
    assert {g.fabric.health_mask for g in report.gpus if g.fabric} == {0x2A45}
    degraded = _discover(nvml_node, proc_root, _answers(Profile.DEGRADED))
    assert classify.classify(degraded, checks.gather(proc_root)).kind is VerdictKind.DEGRADED


@pytest.mark.parametrize(
    "v2_answer", ["ERROR_ARGUMENT_VERSION_MISMATCH", "ERROR_FUNCTION_NOT_FOUND"]
)
def test_without_the_v2_call_the_v1_call_answers_without_health(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path, v2_answer: str
) -> None:
    node = _node(Profile.DEGRADED)
    model = dataclasses.replace(fakenvml.answers(node), fabric_info_v=v2_answer)
    report = _discover(nvml_node, proc_root, model)
    _assert_shut_down()
    for gpu in report.gpus:
        assert gpu.fabric is not None
        assert gpu.fabric.health_mask is None, "V1 has no health mask"
        assert (gpu.fabric.state, gpu.fabric.status) == (FabricState.COMPLETED, "SUCCESS")
        assert gpu.fabric.clique == node.clique


def test_the_v2_call_refuses_a_struct_version_it_does_not_know(
    nvml_node: nvmlnode.NvmlNode,
) -> None:
    nvml_node.answer(_answers())
    library = nvml.load_library(nvml_node.driver_root)
    library.nvmlInit()
    try:
        handle = library.nvmlDeviceGetHandleByIndex(0)
        newer = pynvml.c_nvmlGpuFabricInfo_v3_t()
        with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
            library.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.pointer(newer))
        known = pynvml.c_nvmlGpuFabricInfo_v2_t()
        library.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.pointer(known))
        assert known.cliqueId == topology.DEFAULT_CLIQUE_ID
    finally:
        library.nvmlShutdown()


@pytest.mark.parametrize("v2_answer", ["SUCCESS", "ERROR_FUNCTION_NOT_FOUND"])
def test_gpus_answering_not_supported_have_no_fabric(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path, v2_answer: str
) -> None:
    model = dataclasses.replace(_with_fabric(_answers(), fabric=None), fabric_info_v=v2_answer)
    report = _discover(nvml_node, proc_root, model)
    assert [g.fabric for g in report.gpus] == [None] * 4
    assert classify.classify(report, checks.gather(proc_root)).kind is VerdictKind.NO_FABRIC


@pytest.mark.parametrize("state", list(FabricState))
def test_every_fabric_state_is_reported(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path, state: FabricState
) -> None:
    report = _discover(nvml_node, proc_root, _with_fabric(_answers(), state=state.value))
    assert {g.fabric.state for g in report.gpus if g.fabric} == {state}


@pytest.mark.parametrize("status", ["ERROR_UNKNOWN", "ERROR_NOT_READY", "ERROR_TIMEOUT"])
def test_registration_status_is_named(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path, status: str
) -> None:
    report = _discover(nvml_node, proc_root, _with_fabric(_answers(), status=status))
    assert {g.fabric.status for g in report.gpus if g.fabric} == {status}
    failed = _discover(nvml_node, proc_root, _answers(Profile.FAILED))
    verdict = classify.classify(failed, checks.gather(proc_root))
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.FAILED)


def test_the_file_is_read_again_at_every_init(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path
) -> None:
    backend = nvml_node.backend(proc_root)
    nvml_node.answer(_answers(Profile.IN_PROGRESS))
    assert {g.fabric.state for g in backend.discover().gpus if g.fabric} == {
        FabricState.IN_PROGRESS
    }
    nvml_node.answer(dataclasses.replace(_answers(), driver_version="570.158.01"))
    settled = backend.discover()
    assert {g.fabric.state for g in settled.gpus if g.fabric} == {FabricState.COMPLETED}
    assert settled.driver_version == "570.158.01"


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded"),
        ("ERROR_LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."),
    ],
)
def test_init_failure_is_a_broken_verdict_that_names_it(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path, code: str, text: str
) -> None:
    nvml_node.answer(_answers(init=code))
    backend = nvml_node.backend(proc_root)
    with pytest.raises(nvml.NvmlUnavailable) as raised:
        backend.discover()
    assert str(raised.value) == f"NVML initialisation failed: {text} ({code})"
    _assert_shut_down()
    observation = discovery.Observer(backend, proc_root).observe()
    assert observation.report is None
    verdict = observation.verdict
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.BROKEN,
        Reason.DISCOVERY_FAILED,
        "",
    )
    assert code in verdict.message


def test_a_failing_query_is_an_error_and_nvml_is_shut_down(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path
) -> None:
    nvml_node.answer(_answers(fabric_info_v="ERROR_GPU_IS_LOST"))
    with pytest.raises(FabricDiscoveryError, match=r"GPU is lost \(ERROR_GPU_IS_LOST\)"):
        nvml_node.backend(proc_root).discover()
    _assert_shut_down()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{NVML_ERROR_UNKNOWN", f":1: the first line must be: format {fakenvml.FORMAT}"),
        (b"", "empty file"),
        (b"format compute-domains.sim/fake-nvml.v1\n", ":1: the first line must be"),
        (f"format {fakenvml.FORMAT}\ndriver-version 580.95.05\ngpu 1\n".encode(), ":3: gpu blocks"),
        (f"format {fakenvml.FORMAT}\ndriverVersion 580.95.05\n".encode(), ":2: unknown key"),
        (f"format {fakenvml.FORMAT}\ninit ERROR_NOPE\n".encode(), ":2: unknown return code"),
        (f"format {fakenvml.FORMAT}\nnode n\n".encode(), "no driver-version"),
        (f"format {fakenvml.FORMAT}\ndriver-version 5\0\n".encode(), "a NUL byte"),
    ],
)
def test_a_garbled_topology_file_makes_init_fail_with_unknown(
    nvml_node: nvmlnode.NvmlNode,
    proc_root: pathlib.Path,
    capfd: pytest.CaptureFixture[str],
    content: bytes,
    said: str,
) -> None:
    nvml_node.answer(_answers())
    nvml_node.topology.write_bytes(content)
    with pytest.raises(nvml.NvmlUnavailable, match=r"Unknown Error \(ERROR_UNKNOWN\)"):
        nvml_node.backend(proc_root).discover()
    assert said in capfd.readouterr().err, "the library says why on stderr"


def test_a_garbled_gpu_block_names_its_line(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    text = fakenvml.render(_answers())
    broken = text.replace("clique-id 32766", "clique-id -1", 1)
    nvml_node.answer(_answers())
    nvml_node.topology.write_text(broken)
    with pytest.raises(nvml.NvmlUnavailable, match="ERROR_UNKNOWN"):
        nvml_node.backend(proc_root).discover()
    line = broken.splitlines().index("clique-id -1") + 1
    assert f":{line}: not an unsigned integer: -1" in capfd.readouterr().err


def test_a_missing_topology_file_makes_init_fail_with_unknown(
    nvml_node: nvmlnode.NvmlNode, proc_root: pathlib.Path
) -> None:
    nvml_node.answer(_answers())
    nvml_node.topology.unlink()
    with pytest.raises(nvml.NvmlUnavailable, match=r"Unknown Error \(ERROR_UNKNOWN\)"):
        nvml_node.backend(proc_root).discover()
    nvml_node.answer(_answers())
    assert nvml_node.backend(proc_root).discover().gpus, "a file put back is read"


_RETURN_NAMES = sorted(
    name.removeprefix("NVML_")
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
)


@pytest.mark.parametrize("name", _RETURN_NAMES)
def test_every_return_code_is_pynvmls(nvml_node: nvmlnode.NvmlNode, name: str) -> None:
    """The library's table of names, codes and strings agrees with pynvml's."""
    nvml_node.answer(_answers(init=name))
    library = nvml.load_library(nvml_node.driver_root)
    with pytest.raises(pynvml.NVMLError) as raised:
        library.nvmlInit()
    code = getattr(pynvml, f"NVML_{name}")
    assert raised.value.value == code
    assert nvml.return_name(code) == name
    known = pynvml.NVMLError._errcode_to_string.get(code)
    if known is not None:
        assert pynvml.nvmlErrorString(code) == known


# -- loading the library -----------------------------------------------------------------


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


def test_library_is_loaded_from_the_driver_root(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, nvml_library: pathlib.Path
) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    root = tmp_path / "run/nvidia/driver"
    library = root / "lib64/libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.write_bytes(nvml_library.read_bytes())
    nvml.load_library(root)
    assert pynvml.nvmlLib._name == str(library)


def test_another_driver_roots_library_is_refused_once_one_is_loaded(
    tmp_path: pathlib.Path, nvml_node: nvmlnode.NvmlNode, nvml_library: pathlib.Path
) -> None:
    nvml.load_library(nvml_node.driver_root)
    other = nvmlnode.make(tmp_path / "other-root", nvml_library)
    with pytest.raises(nvml.NvmlUnavailable, match=f"already uses NVML from {nvml_node.library}"):
        nvml.load_library(other.driver_root)
    assert pynvml.nvmlLib._name == str(nvml_node.library)


def test_the_library_is_where_this_machines_drivers_put_it(nvml_node: nvmlnode.NvmlNode) -> None:
    assert fakenvml.library_dir() in nvml.LIBRARY_DIRS
    assert nvml.find_library(nvml_node.driver_root) == nvml_node.library
