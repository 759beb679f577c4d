"""Stopping a simulated cluster leaves no process and no temp dir, however it is stopped.

Each test starts its own small cluster beside the session's, which also shows that two
clusters run side by side (free ports, separate loopback blocks).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import uuid

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import processes, publish, topology
from computedomains import waiting
from tests.support import clusters, kube

SMALL = topology.Topology(racks=1, nodes_per_rack=2)


def _gone(pids: list[int], directory: pathlib.Path) -> bool:
    return not any(processes.pid_alive(p) for p in pids) and not directory.exists()


def test_stop_leaves_no_process_and_no_temp_dir() -> None:
    sim = sim_cluster.SimCluster(name=f"teardown-{uuid.uuid4().hex[:6]}", topology_spec=SMALL)
    state = sim.start()
    pids = list(state.children.values())
    directory = pathlib.Path(state.directory)
    # etcd, API server, KCM, scheduler, kwok, the registry, the simulated kubelet
    assert len(pids) == 7 and all(processes.pid_alive(p) for p in pids)
    assert set(pids) <= set(processes.strays(directory))  # each marked as this cluster's
    assert directory.is_dir() and sim_cluster.state_file(sim.name).exists()

    sim.stop()

    assert [p for p in pids if processes.pid_alive(p)] == []
    assert not directory.exists()
    assert not sim_cluster.state_file(sim.name).exists()


def test_stop_ends_a_process_that_escaped_its_supervisor_and_says_so() -> None:
    said: list[str] = []
    sim = sim_cluster.SimCluster(
        name=f"teardown-{uuid.uuid4().hex[:6]}", topology_spec=SMALL, log=said.append
    )
    state = sim.start()
    # Started by nobody the cluster tracks, as a container whose supervisor lost it would be;
    # left alive it would keep its address and port from the next cluster in the same block.
    escaped = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, processes.CLUSTER_ENV: state.directory},
    )
    try:
        sim.stop()
        assert escaped.wait(timeout=10) == -signal.SIGTERM
    finally:
        escaped.kill()
    warning = [line for line in said if "outlived their supervisor" in line]
    assert warning == ["[sim] warning: 1 process(es) outlived their supervisor; stopping:"]
    assert any(f"pid {escaped.pid}: {sys.executable} -c" in line for line in said)


def test_stop_runs_when_the_body_fails() -> None:
    seen: dict[str, object] = {}
    with (
        pytest.raises(RuntimeError, match="test body failed"),
        sim_cluster.SimCluster(name=f"teardown-{uuid.uuid4().hex[:6]}", topology_spec=SMALL) as sim,
    ):
        assert sim.state is not None
        seen["pids"] = list(sim.state.children.values())
        seen["dir"] = pathlib.Path(sim.state.directory)
        raise RuntimeError("test body failed")
    assert _gone(seen["pids"], seen["dir"])


def _start_cli(
    name: str, log_path: pathlib.Path
) -> tuple[subprocess.Popen[bytes], sim_cluster.ClusterState]:
    log = log_path.open("wb")
    child = subprocess.Popen(
        [
            # Ctrl-C with its default action, as from a terminal: a test run started in the
            # background ignores SIGINT, and its children would inherit that.
            "env",
            "--default-signal=INT",
            sys.executable,
            "-m",
            "cdsim",
            "up",
            "--name",
            name,
            "--racks",
            "1",
            "--nodes-per-rack",
            "2",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()

    def ready() -> sim_cluster.ClusterState | None:
        if child.poll() is not None:
            raise AssertionError(f"sim up exited early with {child.returncode}")
        path = sim_cluster.state_file(name)
        return sim_cluster.ClusterState.read(path) if path.exists() else None

    return child, waiting.until(f"`sim up --name {name}` to be ready", ready, timeout=120)


def _stopped(child: subprocess.Popen[bytes], log: pathlib.Path, *, timeout: float) -> int:
    """``child``'s exit status once it exits; if it has not within ``timeout``, its stacks
    (``kill -USR1``) and output in the failure, and it is killed."""
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGUSR1)
        with contextlib.suppress(waiting.WaitTimeout):
            waiting.until(
                "the stack dump of the stuck cdsim",
                lambda: b"most recent call first" in log.read_bytes(),
                timeout=10,
            )
        child.kill()
        child.wait(timeout=10)
        raise AssertionError(
            f"cdsim up did not exit {timeout:g} s after Ctrl-C:\n"
            + log.read_text(errors="replace")[-6000:]
        ) from None


def test_ctrl_c_on_sim_up_stops_everything(tmp_path: pathlib.Path) -> None:
    name = f"teardown-{uuid.uuid4().hex[:6]}"
    child, state = _start_cli(name, tmp_path / "up.log")
    pids = list(state.children.values())
    status = subprocess.run(
        [sys.executable, "-m", "cdsim", "status", "--name", name, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(status.stdout)
    assert report["nodes"] == {"total": 2, "ready": 2}
    assert {p["pid"] for p in report["processes"].values()} == set(pids)
    assert all(p["running"] for p in report["processes"].values())
    child.send_signal(signal.SIGINT)
    assert _stopped(child, tmp_path / "up.log", timeout=60) == 0
    assert _gone(pids, pathlib.Path(state.directory))
    assert not sim_cluster.state_file(name).exists()


def test_killed_supervisor_takes_its_children_and_sim_down_cleans_up(
    tmp_path: pathlib.Path,
) -> None:
    name = f"teardown-{uuid.uuid4().hex[:6]}"
    child, state = _start_cli(name, tmp_path / "up.log")
    pids = list(state.children.values())
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    # No chance to clean up: the kernel's parent-death signal must take the children down.
    waiting.until(
        "the control-plane processes of a SIGKILLed supervisor to exit",
        lambda: not any(processes.pid_alive(p) for p in pids),
        timeout=30,
    )
    assert pathlib.Path(state.directory).exists(), "files outlive a SIGKILL; sim down removes them"

    down = subprocess.run(
        [sys.executable, "-m", "cdsim", "down", "--name", name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert down.returncode == 0, down.stdout + down.stderr
    assert not pathlib.Path(state.directory).exists()
    assert not sim_cluster.state_file(name).exists()


def test_a_killed_supervisors_containers_outlive_it_until_sim_down_removes_them(
    tmp_path: pathlib.Path,
) -> None:
    name = f"teardown-{uuid.uuid4().hex[:6]}"
    child, state = _start_cli(name, tmp_path / "up.log")
    directory = pathlib.Path(state.directory)
    try:
        image = publish.publish_workload(registry=state.registry, log=lambda _: None)
        core = client.CoreV1Api(clusters.typed_client(pathlib.Path(state.kubeconfig)))
        kube.wait_for_default_service_account(core.api_client, "default")
        node = topology.expand(SMALL, cluster_name=name, address_block=state.address_block)[0]
        core.create_namespaced_pod("default", {
            "metadata": {"name": "sleeper"},
            "spec": {"nodeName": node.name, "containers": [
                {"name": "main", "image": image, "command": ["sleep", "3600"]}]},
        })  # fmt: skip
        pid = waiting.until(
            "the pod's container to run",
            lambda: processes.find("sleep", "3600", under=directory),
            timeout=120,
        )
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    # The kubelet and its runc died with the supervisor; the container did not (as on a node
    # whose kubelet dies): only `cdsim down` (or a start that must reuse its block) removes it.
    waiting.until(
        "the control-plane processes of a SIGKILLed supervisor to exit",
        lambda: not any(processes.pid_alive(p) for p in state.children.values()),
        timeout=30,
    )
    assert processes.pid_alive(pid)
    down = subprocess.run(
        [sys.executable, "-m", "cdsim", "down", "--name", name],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert down.returncode == 0, down.stdout + down.stderr
    assert "removed containers" in down.stdout, down.stdout
    assert not processes.pid_alive(pid)
    assert str(directory) not in pathlib.Path("/proc/self/mounts").read_text()
    assert not directory.exists()
