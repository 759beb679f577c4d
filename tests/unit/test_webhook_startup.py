"""The webhook starts without the simulator or the generated client; cryptography it needs."""

from __future__ import annotations

import json
import subprocess
import sys

ARGS = ["webhook", "--service-name=s", "--tls-secret=t"]


def test_webhook_start_up_imports_neither_the_simulator_nor_the_generated_client() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.startup", *ARGS],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["sim"] == [] and report["kubernetes"] == []
    assert report["cryptography"], "the webhook makes its certificates with cryptography"


def test_other_commands_do_not_import_cryptography_through_the_webhook_flags() -> None:
    code = (
        "import sys; from computedomains import cli; cli.build_parser(['webhook']); "
        "print(any(m.startswith('cryptography') for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
