"""Host-tree files for one simulated node."""

from __future__ import annotations

import json
import pathlib

from cdsim import hosttree, topology


def test_written_tree_matches_the_node(tmp_path: pathlib.Path) -> None:
    node = topology.expand(
        topology.Topology(racks=1, nodes_per_rack=1), cluster_name="c", address_block=0
    )[0]
    tree = hosttree.write(tmp_path / node.name, node)
    document = json.loads(tree.fake_nvml.read_text())
    assert document == hosttree.fake_nvml_document(node)
    assert document["driverVersion"] == topology.DEFAULT_DRIVER_VERSION
    assert document["imexChannelCount"] == 2048
    assert [g["uuid"] for g in document["gpus"]] == [g.uuid for g in node.gpus]
    assert "ImexChannelCount: 2048" in (tree.root / "proc/driver/nvidia/params").read_text()


def test_proc_devices_lists_imex_majors_only_with_a_driver() -> None:
    with_driver = hosttree.proc_devices_text(with_nvidia=True)
    assert f"{hosttree.IMEX_CHANNELS_MAJOR} nvidia-caps-imex-channels" in with_driver
    assert f"{hosttree.NVIDIA_CAPS_MAJOR} nvidia-caps\n" in with_driver
    assert with_driver.index("nvidia-caps") < with_driver.index("Block devices:")
    assert "nvidia" not in hosttree.proc_devices_text(with_nvidia=False)
