"""No component imports the simulator, its PKI (cryptography) or the generated client to start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

COMMANDS = {
    "kubelet-plugin": ["--node-name", "n1"],
    "controller": [],
    "imex-agent": ["--node-name", "n1", "--pod-name", "p", "--pod-ip", "127.0.0.1"],
    "node-init": ["--node-name", "n1"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_component_start_up_imports_nothing_it_does_not_run(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.startup", command, *COMMANDS[command]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["sim"] == [] and report["cryptography"] == [] and report["kubernetes"] == []
    assert report["modules"] > 100  # it did import the component
