"""Run a helm binary against a test cluster, with its state kept out of the user's home."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess


@dataclasses.dataclass(frozen=True)
class Helm:
    """One helm binary (v3 or v4) bound to a kubeconfig and a private home."""

    binary: pathlib.Path
    kubeconfig: pathlib.Path
    home: pathlib.Path

    def attempt(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``helm args...`` and return how it went, failed or not (for expected failures)."""
        env = dict(os.environ)
        env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "HELM_CACHE_HOME": str(self.home / "cache"),
                "HELM_CONFIG_HOME": str(self.home / "config"),
                "HELM_DATA_HOME": str(self.home / "data"),
            }
        )
        return subprocess.run(
            [str(self.binary), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run(self, *args: str, timeout: float = 300) -> str:
        """Run ``helm args...``; raise with helm's own output when it fails."""
        proc = self.attempt(*args, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout
