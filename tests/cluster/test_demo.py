"""`computedomains demo --until-ready` works without a terminal, from a clean start to Ready."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster
REPO = pathlib.Path(__file__).resolve().parents[2]


def test_demo_runs_to_a_ready_domain_without_a_terminal(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "computedomains", "demo", "--until-ready", "--timeout", "300"],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert "ComputeDomain demo/nccl-allreduce is Ready" in text
    assert "pods 4/4 Running | members 4/4 IMEX-ready" in text
    assert "\r" not in text  # no terminal: plain lines, one per change
    assert "Cleaning up the simulated cluster" in text
