"""Host-tree files for one simulated node, its NVML among them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from cdsim import fakenvml, hosttree, topology
from computedomains.fabric import nvml


def _node(profile: topology.FabricProfile = topology.FabricProfile.HEALTHY) -> topology.SimNode:
    spec = topology.Topology(
        racks=1, nodes_per_rack=1, overrides={"gb200-r0-n00": topology.NodeOverride(profile)}
    )
    return topology.expand(spec, cluster_name="c", address_block=0)[0]


def _fabric_show(tree: hosttree.HostTree) -> dict[str, object]:
    """``computedomains fabric show --json`` on the node, as an operator would run it there.

    A process of its own: pynvml loads one library per process, and this one must be the
    tree's own.
    """
    done = subprocess.run(
        [sys.executable, "-m", "computedomains", "fabric", "show", "--json",
         f"--driver-root={tree.root}", f"--proc-root={tree.root / 'proc'}"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "NODE_NAME": "gb200-r0-n00"},
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def test_written_tree_matches_the_node(tmp_path: pathlib.Path, nvml_library: pathlib.Path) -> None:
    node = _node()
    tree = hosttree.write(tmp_path / node.name, node, nvml_library=nvml_library)
    assert tree.nvml_topology.read_text() == fakenvml.render(fakenvml.answers(node))
    assert tree.nvml_topology.parent == tree.nvml_library.parent
    assert "ImexChannelCount: 2048" in (tree.root / "proc/driver/nvidia/params").read_text()


def test_the_library_is_a_copy_where_nvml_looks_for_it(
    tmp_path: pathlib.Path, nvml_library: pathlib.Path
) -> None:
    tree = hosttree.write(tmp_path / "n", _node(), nvml_library=nvml_library)
    assert nvml.find_library(tree.root) == tree.nvml_library
    assert not tree.nvml_library.is_symlink(), "a container seeing only the tree must find it"
    assert tree.nvml_library.read_bytes() == nvml_library.read_bytes()
    assert os.access(tree.nvml_library, os.X_OK)


def test_the_node_reports_itself_through_its_own_nvml(
    tmp_path: pathlib.Path, nvml_library: pathlib.Path
) -> None:
    node = _node()
    tree = hosttree.write(tmp_path / node.name, node, nvml_library=nvml_library)
    shown = _fabric_show(tree)
    assert (shown["verdict"], shown["clique"]) == ("healthy", node.clique)
    assert shown["driverVersion"] == topology.DEFAULT_DRIVER_VERSION
    assert shown["imexChannelCount"] == 2048
    gpus = shown["gpus"]
    assert isinstance(gpus, list)
    assert [g["uuid"] for g in gpus] == [g.uuid for g in node.gpus]

    failed = _node(topology.FabricProfile.FAILED)
    hosttree.write_nvml_answers(tree, fakenvml.answers(failed))
    assert (_fabric_show(tree)["reason"]) == "FabricRegistrationFailed"


def test_answers_reach_the_previous_releases_file_too(
    tmp_path: pathlib.Path, nvml_library: pathlib.Path
) -> None:
    node = _node()
    tree = hosttree.write(tmp_path / node.name, node, nvml_library=nvml_library)
    model = fakenvml.answers(_node(topology.FabricProfile.IN_PROGRESS))
    hosttree.write_nvml_answers(tree, model)
    assert tree.nvml_topology.read_text() == fakenvml.render(model)
    previous = json.loads(tree.previous_releases_nvml.read_text())
    assert previous == hosttree.previous_releases_document(model)
    assert previous["format"] == "compute-domains.sim/fake-nvml.v1"
    assert {g["fabric"]["state"] for g in previous["gpus"]} == {"IN_PROGRESS"}
    assert [g["uuid"] for g in previous["gpus"]] == [g.uuid for g in node.gpus]


def test_proc_devices_lists_imex_majors_only_with_a_driver() -> None:
    with_driver = hosttree.proc_devices_text(with_nvidia=True)
    assert f"{hosttree.IMEX_CHANNELS_MAJOR} nvidia-caps-imex-channels" in with_driver
    assert f"{hosttree.NVIDIA_CAPS_MAJOR} nvidia-caps\n" in with_driver
    assert with_driver.index("nvidia-caps") < with_driver.index("Block devices:")
    assert "nvidia" not in hosttree.proc_devices_text(with_nvidia=False)
