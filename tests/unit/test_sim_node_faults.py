"""What the simulator offers to break a node or the control plane, and to put it back.

The chaos run and the cluster tests use these: a node made NotReady through kwok's stages,
pod conditions the kubelet writes back after the node lifecycle controller changed them,
processes found by their arguments and folder, a control-plane process restarted alike, a
plugin checkpoint damaged, the fake IMEX's fault file.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest
import yaml

from cdsim import controlplane, hosttree, nodefaults, nodes, processes
from cdsim.kubelet import main as kubelet_main
from computedomains import nodefiles, waiting
from computedomains.api import constants
from computedomains.kubeletplugin import checkpoint

NOT_READY = f'.metadata.annotations["{nodes.NOT_READY_ANNOTATION}"]'


def _node_stages() -> dict[str, list[dict[str, Any]]]:
    stages = yaml.safe_load_all(controlplane.STAGES_FILE.read_text())
    return {
        s["metadata"]["name"]: s["spec"]["selector"]["matchExpressions"]
        for s in stages
        if s["spec"]["resourceRef"]["kind"] == "Node"
    }


def test_the_not_ready_annotation_is_set_and_removed_by_a_merge_patch() -> None:
    assert nodes.not_ready_patch(True) == {
        "metadata": {"annotations": {nodes.NOT_READY_ANNOTATION: "true"}}
    }
    assert nodes.not_ready_patch(False) == {
        "metadata": {"annotations": {nodes.NOT_READY_ANNOTATION: None}}
    }


def test_kwok_reports_an_annotated_node_not_ready_and_no_two_node_stages_meet() -> None:
    """kwok picks at random among the stages that match: each node state matches one at most."""
    stages = _node_stages()
    assert set(stages) == {"sim-node-ready", "sim-node-heartbeat", "sim-node-not-ready"}
    for name in ("sim-node-ready", "sim-node-heartbeat"):
        assert {"key": NOT_READY, "operator": "NotIn", "values": ["true"]} in stages[name]
    assert {"key": NOT_READY, "operator": "In", "values": ["true"]} in stages["sim-node-not-ready"]
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    assert {"key": ready, "operator": "In", "values": ["True"]} in stages["sim-node-not-ready"]
    assert {"key": ready, "operator": "NotIn", "values": ["True"]} in stages["sim-node-ready"]


def test_the_kubelet_writes_its_conditions_back_when_another_writer_changed_them() -> None:
    reported = {
        "conditions": [
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "True"},
        ]
    }
    marked = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert kubelet_main.overwritten(marked, reported) == ["Ready"]
    same = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "x"}]}}
    assert kubelet_main.overwritten(same, reported) == []
    assert kubelet_main.overwritten(marked, None) == []


def test_a_process_is_found_by_its_arguments_and_folder(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "nodes/n1/pods/uid-1"
    folder.mkdir(parents=True)
    child = processes.start(
        "finder",
        [sys.executable, "-c", "import time; time.sleep(60)", "imex-agent", "--node-name=n1"],
        log_dir=tmp_path,
        cwd=folder,
    )
    try:
        needles = ("imex-agent", "--node-name=n1")
        assert processes.find(*needles, under=tmp_path / "nodes/n1") == child.pid
        assert processes.find(*needles, under=tmp_path / "nodes/n2") is None
        assert processes.find("imex-agent", "--node-name=n2") is None
        table = processes.scan()
        assert processes.find(*needles, table=table) == child.pid
        tree = hosttree.HostTree(tmp_path / "nodes/n1")
        assert nodefaults.container_pid(tree, "uid-1", "imex-agent") == child.pid
    finally:
        processes.stop_all([child])


def test_a_control_plane_process_is_started_again_alike(tmp_path: pathlib.Path) -> None:
    plane = controlplane.ControlPlane(
        directory=tmp_path,
        binaries=controlplane.Binaries(*(pathlib.Path("/nonexistent"),) * 5),
        name="t",
        log=lambda line: None,
    )
    script = "import os, time; print(os.getcwd(), os.environ['MARK'], flush=True); time.sleep(60)"
    plane.children.append(
        processes.start(
            "sleeper",
            [sys.executable, "-c", script],
            log_dir=tmp_path / "logs",
            env={"MARK": "m1", "PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
        )
    )
    first = plane.component("sleeper")
    line = f"{tmp_path.resolve()} m1"

    def said(times: int) -> bool:
        return first.log.read_text().count(line) == times

    try:
        waiting.until("the process to say where it runs", lambda: said(1), timeout=10)
        plane.start_component("sleeper")  # still running: nothing to do
        assert plane.component("sleeper") is first
        plane.stop_component("sleeper", grace=2)
        assert not processes.pid_alive(first.pid)
        plane.start_component("sleeper")
        again = plane.component("sleeper")
        assert again.pid != first.pid and again.argv == first.argv and again.cwd == first.cwd
        waiting.until("the restarted process to say it too", lambda: said(2), timeout=10)
        with pytest.raises(KeyError):
            plane.component("etcd")
    finally:
        plane.stop()


@pytest.mark.parametrize(
    ("how", "outcome"),
    [
        ("corrupt", checkpoint.LoadOutcome.CORRUPT),
        ("newer-version", checkpoint.LoadOutcome.NEWER_VERSION),
    ],
)
def test_a_damaged_checkpoint_is_what_the_plugin_calls_it(
    tmp_path: pathlib.Path, how: str, outcome: checkpoint.LoadOutcome
) -> None:
    path = tmp_path / "checkpoint.json"
    nodefiles.write_json(path, checkpoint.Checkpoint(boot_id="b1").to_document())
    nodefaults.damage_checkpoint(path, how)
    assert checkpoint.load(path, boot_id="b1").outcome is outcome
    nodefaults.damage_checkpoint(path, how)  # damaged twice: still what it was
    nodefaults.damage_checkpoint(tmp_path / "missing.json", how)  # none yet: garbage there
    assert (tmp_path / "missing.json").exists()
    with pytest.raises(ValueError, match="unknown checkpoint damage"):
        nodefaults.damage_checkpoint(path, "burnt")


def test_the_imex_fault_file_is_put_back_as_it_was(tmp_path: pathlib.Path) -> None:
    tree = hosttree.HostTree(tmp_path)
    assert tree.imex_fault_file == tmp_path / "var/run/compute-domains/imex/fail"
    before = nodefaults.set_imex_fault(tree, "hang")
    assert before is None and tree.imex_fault_file.read_text() == "hang\n"
    nodefaults.restore_imex_fault(tree, before)
    assert not tree.imex_fault_file.exists()
    tree.imex_fault_file.write_text("bind\n")
    before = nodefaults.set_imex_fault(tree, "hang")
    nodefaults.restore_imex_fault(tree, before)
    assert tree.imex_fault_file.read_text() == "bind\n"


def test_the_host_tree_names_the_files_where_the_components_put_them() -> None:
    tree = hosttree.HostTree(pathlib.Path("/x/nodes/n1"))
    root = "/x/nodes/n1"
    assert str(tree.imex_status) == root + str(constants.IMEX_STATUS_FILE)
    assert str(tree.imex_config) == root + str(constants.IMEX_DIR / "imexd.cfg")
    assert str(tree.plugin_checkpoint) == (
        root + f"{constants.KUBELET_PLUGINS_DIR}/{constants.DRIVER_NAME}/checkpoint.json"
    )


def test_a_process_that_exited_is_not_found(tmp_path: pathlib.Path) -> None:
    child = processes.start(
        "brief", [sys.executable, "-c", "pass", "brief-marker"], log_dir=tmp_path
    )
    child.popen.wait(timeout=10)
    assert processes.find("brief-marker") is None
