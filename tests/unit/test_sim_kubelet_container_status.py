"""The simulated kubelet reports what a pod's processes really do, and can keep one down."""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time
from typing import Any

from computedomains import waiting
from computedomains.sim.kubelet import podspec, runner

KWOK = [{"name": "main", "image": "busybox", "ready": True, "restartCount": 0,
         "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]  # fmt: skip
"""What kwok reported once, when the pod started, and never corrects."""


def test_a_killed_container_is_reported_down_while_held_and_running_once_restarted(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "pids"
    script = (
        "import os, signal, sys; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); signal.pause()"
    )
    plan = podspec.PodPlan(
        init=(),
        containers=(
            podspec.ContainerPlan(
                name="main", argv=(sys.executable, "-c", script, str(out)), env={},
                cwd=tmp_path, mounts=(),
            ),
        ),
        restart_policy="Always",
    )  # fmt: skip
    hold = tmp_path / runner.HOLD_DIR
    pod = runner.PodRunner(label="ns/p", plan=plan, log_dir=tmp_path / "log", hold_dir=hold)

    def ticked(check: Any) -> Any:
        def step() -> Any:
            pod.tick(time.monotonic())
            return check()

        return step

    def started() -> list[int]:
        return [int(line) for line in out.read_text().split()] if out.exists() else []

    waiting.until("the container to start", ticked(started), timeout=30, interval=0.05)
    assert pod.version == 0 and pod.container_statuses(KWOK) == KWOK, "kwok's word stands"

    hold.mkdir()
    (hold / "main").touch()
    os.kill(started()[0], signal.SIGKILL)
    waiting.until("the exit to be seen", ticked(lambda: pod.version == 1), timeout=30)
    (status,) = pod.container_statuses(KWOK)
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert (status["ready"], status["restartCount"], status["image"]) == (False, 0, "busybox")
    # That nothing happens takes time to show: tick past the 1 s restart backoff, so that only
    # the hold keeps the container down.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        pod.tick(time.monotonic())
        assert len(started()) == 1 and pod.pids() == [], "held: not restarted"
        time.sleep(0.05)

    (hold / "main").unlink()
    waiting.until("the restart", ticked(lambda: len(started()) == 2), timeout=30, interval=0.05)
    (status,) = pod.container_statuses(KWOK)
    assert pod.version == 2
    assert (
        set(status["state"]) == {"running"}
        and status["state"]["running"]["startedAt"] > (KWOK[0]["state"]["running"]["startedAt"])
    )
    assert (status["ready"], status["restartCount"]) == (True, 1)
    pod.terminate(time.monotonic(), grace=5)
    waiting.until("the pod to stop", ticked(lambda: pod.finished), timeout=30)
