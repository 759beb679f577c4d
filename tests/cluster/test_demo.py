"""`cdsim demo --until-ready` works without a terminal, from a clean start to Ready,
while another demo runs on the same machine (as `make demo` may while `make test` runs)."""

from __future__ import annotations

import pathlib
import re
import signal
import subprocess
import sys

import pytest

from computedomains import waiting

pytestmark = pytest.mark.cluster
REPO = pathlib.Path(__file__).resolve().parents[2]
CLUSTER_UP = re.compile(r"^Simulated cluster (\S+) up: ", re.M)


DEMO = (sys.executable, "-m", "cdsim", "demo")


def _cluster_name(log: pathlib.Path) -> str | None:
    match = CLUSTER_UP.search(log.read_text())
    return match.group(1) if match else None


def test_demo_runs_to_a_ready_domain_beside_another_demo(tmp_path: pathlib.Path) -> None:
    # The other demo stays up until told to stop, as `make demo` does; one rack of four nodes
    # (its example's four pods) keeps it light.
    other_log = tmp_path / "other-demo.log"
    with other_log.open("w") as out:
        other = subprocess.Popen(
            [*DEMO, "--racks", "1", "--nodes-per-rack", "4", "--timeout", "1800"],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def other_cluster_up() -> str | None:
            assert other.poll() is None, f"the other demo exited:\n{other_log.read_text()}"
            return _cluster_name(other_log)

        other_name = waiting.until(
            "the other demo's simulated cluster to be up", other_cluster_up, timeout=300
        )
        log = tmp_path / "demo.log"
        with log.open("w") as out:
            done = subprocess.run(
                [*DEMO, "--until-ready", "--timeout", "300"],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=900,
                check=False,
            )
        text = log.read_text()
        assert done.returncode == 0, text
        assert other.poll() is None, f"the other demo stopped:\n{other_log.read_text()}"
    finally:
        other.send_signal(signal.SIGTERM)  # its own handler stops its cluster
        other.wait(timeout=180)
    name = _cluster_name(log)
    assert name is not None and name != other_name, (name, other_name)
    assert f"  status      cdsim status --name {name}" in text
    assert "ComputeDomain demo/nccl-allreduce is Ready" in text
    assert "pods 4/4 Running | members 4/4 IMEX-ready" in text
    kubeconfig = re.search(r"^  kubeconfig  (\S+)$", text, re.M)
    assert kubeconfig is not None
    assert f"Try:  KUBECONFIG={kubeconfig.group(1)} kubectl get computedomains -n demo" in text
    assert "\r" not in text  # no terminal: plain lines, one per change
    assert "Cleaning up the simulated cluster" in text
    assert "Cleaning up the simulated cluster" in other_log.read_text()
