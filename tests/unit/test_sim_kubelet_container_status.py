"""The simulated kubelet reports what a pod's processes really do, and can keep one down."""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time
from typing import Any

import pytest

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


@pytest.mark.parametrize(
    ("exits", "init_failed", "policy", "phase"),
    [
        ([0], False, "Never", "Succeeded"),
        ([3], False, "Never", "Failed"),
        ([0, 1], False, "Never", "Failed"),
        ([0, None], False, "Never", None),
        ([0], False, "OnFailure", "Succeeded"),
        ([None], False, "OnFailure", None),
        ([0], False, "Always", None),
        ([None], True, "Never", "Failed"),
        ([], False, "Never", None),
    ],
)
def test_final_phase_follows_the_exit_codes(
    exits: list[int | None], init_failed: bool, policy: str, phase: str | None
) -> None:
    assert runner.final_phase(exits, init_failed=init_failed, pod_policy=policy) == phase


def _job_pod(tmp_path: pathlib.Path, code: int, *, init_code: int = 0) -> runner.PodRunner:
    def container(name: str, exit_code: int) -> podspec.ContainerPlan:
        argv = (sys.executable, "-c", f"print('{name} says bye'); raise SystemExit({exit_code})")
        return podspec.ContainerPlan(name=name, argv=argv, env={}, cwd=tmp_path, mounts=())

    plan = podspec.PodPlan(
        init=(container("init", init_code),),
        containers=(container("main", code),),
        restart_policy="Never",
    )
    return runner.PodRunner(label="ns/job", plan=plan, log_dir=tmp_path / "log")


def _until_phase(pod: runner.PodRunner) -> str:
    def step() -> str | None:
        pod.tick(time.monotonic())
        return pod.phase

    return str(waiting.until("the pod's final phase", step, timeout=30, interval=0.05))


@pytest.mark.parametrize(("code", "phase", "reason"), [(0, "Succeeded", "Completed"),
                                                        (3, "Failed", "Error")])  # fmt: skip
def test_a_job_container_that_exits_decides_the_pod_phase(
    tmp_path: pathlib.Path, code: int, phase: str, reason: str
) -> None:
    pod = _job_pod(tmp_path, code)
    assert _until_phase(pod) == phase
    (status,) = pod.container_statuses(KWOK)
    terminated = status["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (code, reason)
    assert (status["ready"], status["started"], status["lastState"]) == (False, False, {})
    assert (tmp_path / "log" / "main.log").read_text() == "main says bye\n"
    assert pod.pids() == [] and pod.version >= 1


def test_a_failed_init_container_fails_a_never_restarting_pod(tmp_path: pathlib.Path) -> None:
    pod = _job_pod(tmp_path, 0, init_code=2)
    assert _until_phase(pod) == "Failed"
    kwok_init = [{**KWOK[0], "name": "init"}]
    (status,) = pod.container_statuses(kwok_init, init=True)
    assert status["state"]["terminated"]["exitCode"] == 2
    assert not (tmp_path / "log" / "main.log").exists(), "containers never started"
