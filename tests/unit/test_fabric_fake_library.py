"""The fake libnvidia-ml.so.1's Python side: its one writer, and its build into the cache."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from cdsim import fakenvml, tools, topology


def _answers() -> fakenvml.Answers:
    node = topology.expand(
        topology.Topology(racks=1, nodes_per_rack=1), cluster_name="c", address_block=0
    )[0]
    return fakenvml.answers(node)


def test_the_topology_file_is_key_value_lines_with_a_block_per_gpu() -> None:
    model = _answers()
    model = dataclasses.replace(
        model, gpus=(model.gpus[0], dataclasses.replace(model.gpus[1], fabric=None))
    )
    lines = fakenvml.render(model).splitlines()
    content = [line for line in lines if line and not line.startswith("#")]
    assert content[0] == f"format {fakenvml.FORMAT}"
    assert content[1:6] == [
        f"node {model.node}",
        f"driver-version {model.driver_version}",
        "init SUCCESS",
        "fabric-info-v SUCCESS",
        "gpu 0",
    ]
    second = content[content.index("gpu 1") :]
    assert second == [
        "gpu 1",
        f"uuid {model.gpus[1].uuid}",
        "name NVIDIA GB200",
        f"pci-bus-id {model.gpus[1].pci_bus_id}",
        "fabric-info ERROR_NOT_SUPPORTED",
    ]
    assert "health-mask 0" in content and f"clique-id {topology.DEFAULT_CLIQUE_ID}" in content


@pytest.mark.parametrize(
    "change",
    [{"init": "DRIVER_NOT_LOADED"}, {"fabric_info_v": "ERROR_NOPE"}, {"init": "NVML_SUCCESS"}],
)
def test_answers_nvml_cannot_give_are_refused(change: dict[str, str]) -> None:
    with pytest.raises(fakenvml.FakeNvmlError, match="not an NVML return code name"):
        dataclasses.replace(_answers(), **change)


def test_a_value_that_would_not_read_back_is_refused() -> None:
    with pytest.raises(fakenvml.FakeNvmlError, match="would not read back"):
        fakenvml.render(dataclasses.replace(_answers(), driver_version="580\ngpu 7"))


def test_the_library_is_built_once_per_source(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[str] = []
    box = tools.ToolBox(versions={}, cache=tmp_path, env={}, log=logged.append)
    library = box.path(fakenvml.TOOL)
    assert library.name == "libnvidia-ml.so.1" and library.is_file()
    assert library.parent.name == f"fakenvml-{fakenvml.digest()}"
    assert box.nvml_library() == library
    assert len([line for line in logged if "building" in line]) == 1, "the second is cached"

    edited = tmp_path / "libnvidia-ml.c"
    edited.write_text(fakenvml.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(fakenvml, "SOURCE", edited)
    rebuilt = box.nvml_library()
    assert rebuilt != library and rebuilt.is_file() and library.is_file()
    assert len([line for line in logged if "building" in line]) == 2


def test_a_source_that_does_not_compile_is_a_tool_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "libnvidia-ml.c"
    broken.write_text("int nvmlInit_v2(void) { return }\n")
    monkeypatch.setattr(fakenvml, "SOURCE", broken)
    box = tools.ToolBox(versions={}, cache=tmp_path / "cache", env={}, log=lambda _: None)
    with pytest.raises(tools.ToolError, match=r"building the fake libnvidia-ml\.so\.1 failed"):
        box.nvml_library()
    assert not any((tmp_path / "cache" / "tools").iterdir()), "nothing half-built is left"
