"""The committed message modules are exactly what the pinned generator makes from our protos."""

from __future__ import annotations

import subprocess
import sys


def test_generated_stubs_are_current() -> None:
    check = subprocess.run(
        [sys.executable, "-m", "computedomains.drapb.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
