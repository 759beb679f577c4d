"""Run a helm binary against a test cluster, with its state kept out of the user's home."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess

Renders = dict[tuple[str, ...], str]
"""``helm template`` outputs by their key (:func:`render_key`)."""


def render_key(binary: pathlib.Path, args: tuple[str, ...]) -> tuple[str, ...]:
    """What a render's output depends on: the binary, the arguments and the content of every
    file they name (a values file a test rewrites renders again)."""
    files = []
    for arg in args:
        for part in arg.replace("=", ",").split(","):
            path = pathlib.Path(part)
            if "/" in part and path.is_file():
                files.append(path.read_text(errors="replace"))
    return (str(binary), *args, *files)


@dataclasses.dataclass(frozen=True)
class Helm:
    """One helm binary (v3 or v4) bound to a kubeconfig and a private home."""

    binary: pathlib.Path
    kubeconfig: pathlib.Path
    home: pathlib.Path
    renders: Renders | None = dataclasses.field(default=None, compare=False)
    """Outputs of ``helm template`` to reuse (the chart does not change during a test run);
    None renders every time."""

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
        if self.renders is not None and args[:1] == ("template",):
            key = render_key(self.binary, args)
            if key not in self.renders:
                self.renders[key] = self._run(args, timeout)
            return self.renders[key]
        return self._run(args, timeout)

    def _run(self, args: tuple[str, ...], timeout: float) -> str:
        proc = self.attempt(*args, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout
