"""The simulated kubelet reports what a pod's processes really do, and can keep one down."""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time
from typing import Any

import pytest

from cdsim.kubelet import podspec, probes, runner
from cdsim.kubelet import status as pod_status
from computedomains import waiting

IMAGES = {"main": "busybox", "init": "busybox"}


def _status(pod: runner.PodRunner) -> dict[str, Any]:
    return pod.status(images=IMAGES, gates=[], conditions=[])


def _condition(status: dict[str, Any], kind: str) -> str:
    return str(next(c["status"] for c in status["conditions"] if c["type"] == kind))


def test_a_killed_container_is_reported_down_while_held_and_running_once_restarted(
    tmp_path: pathlib.Path, prober: probes.Prober
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
    pod = runner.PodRunner(
        label="ns/p", plan=plan, log_dir=tmp_path / "log", prober=prober, hold_dir=hold
    )

    def ticked(check: Any) -> Any:
        def step() -> Any:
            pod.tick(time.monotonic())
            return check()

        return step

    def started() -> list[int]:
        return [int(line) for line in out.read_text().split()] if out.exists() else []

    waiting.until("the container to start", ticked(started), timeout=30, interval=0.05)
    status = _status(pod)
    (main,) = status["containerStatuses"]
    assert set(main["state"]) == {"running"} and (main["ready"], main["started"]) == (True, True)
    assert (status["phase"], _condition(status, "Ready")) == ("Running", "True")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] is ready["message"] is None, "a merge patch removes the old ones"

    hold.mkdir()
    (hold / "main").touch()
    os.kill(started()[0], signal.SIGKILL)

    def down() -> bool:
        return not _status(pod)["containerStatuses"][0]["ready"]

    waiting.until("the exit to be seen", ticked(down), timeout=30)
    status = _status(pod)
    (main,) = status["containerStatuses"]
    assert main["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert main["lastState"]["terminated"]["exitCode"] == 137
    assert (main["ready"], main["restartCount"], main["image"]) == (False, 0, "busybox")
    assert (status["phase"], _condition(status, "Ready")) == ("Running", "False")
    # That nothing happens takes time to show: a first exit restarts at once, so only the
    # hold keeps the container down.
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        pod.tick(time.monotonic())
        assert len(started()) == 1 and pod.pids() == [], "held: not restarted"
        time.sleep(0.05)

    (hold / "main").unlink()
    waiting.until("the restart", ticked(lambda: len(started()) == 2), timeout=30, interval=0.05)
    (main,) = _status(pod)["containerStatuses"]
    assert set(main["state"]) == {"running"}
    assert main["lastState"]["terminated"]["exitCode"] == 137
    assert (main["ready"], main["restartCount"]) == (True, 1)
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


def _job_pod(
    tmp_path: pathlib.Path, code: int, prober: probes.Prober, *, init_code: int = 0
) -> runner.PodRunner:
    def container(name: str, exit_code: int) -> podspec.ContainerPlan:
        argv = (sys.executable, "-c", f"print('{name} says bye'); raise SystemExit({exit_code})")
        return podspec.ContainerPlan(name=name, argv=argv, env={}, cwd=tmp_path, mounts=())

    plan = podspec.PodPlan(
        init=(container("init", init_code),),
        containers=(container("main", code),),
        restart_policy="Never",
    )
    return runner.PodRunner(label="ns/job", plan=plan, log_dir=tmp_path / "log", prober=prober)


def _until_phase(pod: runner.PodRunner) -> str:
    def step() -> str | None:
        pod.tick(time.monotonic())
        return pod.phase

    return str(waiting.until("the pod's final phase", step, timeout=30, interval=0.05))


@pytest.mark.parametrize(("code", "phase", "reason"), [(0, "Succeeded", "Completed"),
                                                        (3, "Failed", "Error")])  # fmt: skip
def test_a_job_container_that_exits_decides_the_pod_phase(
    tmp_path: pathlib.Path, prober: probes.Prober, code: int, phase: str, reason: str
) -> None:
    pod = _job_pod(tmp_path, code, prober)
    assert _until_phase(pod) == phase
    status = _status(pod)
    (main,) = status["containerStatuses"]
    terminated = main["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (code, reason)
    assert (main["ready"], main["started"], main["lastState"]) == (False, False, {})
    (init,) = status["initContainerStatuses"]
    assert (init["state"]["terminated"]["exitCode"], init["ready"]) == (0, True)
    assert status["phase"] == phase
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
    assert (ready["status"], ready["reason"]) == ("False", reason)
    assert (tmp_path / "log" / "main.log").read_text() == "main says bye\n"
    assert pod.pids() == []


def test_a_failed_init_container_fails_a_never_restarting_pod(
    tmp_path: pathlib.Path, prober: probes.Prober
) -> None:
    pod = _job_pod(tmp_path, 0, prober, init_code=2)
    assert _until_phase(pod) == "Failed"
    status = _status(pod)
    (init,) = status["initContainerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 2
    assert _condition(status, "Initialized") == "False"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert not (tmp_path / "log" / "main.log").exists(), "containers never started"


def _service_pod(tmp_path: pathlib.Path, prober: probes.Prober, script: str) -> runner.PodRunner:
    plan = podspec.PodPlan(
        init=(),
        containers=(
            podspec.ContainerPlan(name="main", argv=(sys.executable, "-c", script), env={},
                                  cwd=tmp_path, mounts=()),
        ),
        restart_policy="Always",
    )  # fmt: skip
    return runner.PodRunner(label="ns/svc", plan=plan, log_dir=tmp_path / "log", prober=prober)


@pytest.mark.parametrize(
    ("script", "phase", "code"),
    [
        # Handles SIGTERM and exits 0, as our components do.
        ("import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
         "print('up', flush=True); signal.pause()", "Succeeded", 0),
        # Dies of SIGTERM: 128 + 15.
        ("import signal; print('up', flush=True); signal.pause()", "Failed", 143),
    ],
)  # fmt: skip
def test_a_deleted_pod_once_stopped_ends_in_the_phase_its_exit_codes_say(
    tmp_path: pathlib.Path, prober: probes.Prober, script: str, phase: str, code: int
) -> None:
    pod = _service_pod(tmp_path, prober, script)
    log = tmp_path / "log" / "main.log"

    def up() -> bool:
        pod.tick(time.monotonic())
        return log.exists() and "up" in log.read_text()

    waiting.until("the container to run", up, timeout=30, interval=0.05)
    assert pod.phase is None, "an Always pod never finishes by itself"
    pod.terminate(time.monotonic(), grace=10)
    assert _status(pod)["phase"] == "Running", "stopping: not terminal before its processes end"
    assert _until_phase(pod) == phase and pod.finished
    status = _status(pod)
    assert status["phase"] == phase
    (main,) = status["containerStatuses"]
    assert main["state"]["terminated"]["exitCode"] == code
    assert _condition(status, "Ready") == "False"


def test_stopped_phase_is_succeeded_only_when_every_container_exited_zero() -> None:
    assert runner.stopped_phase([0, 0]) == "Succeeded"
    assert runner.stopped_phase([0, 143]) == "Failed"
    assert runner.stopped_phase([0, None]) == "Failed"  # never ran, or no exit seen
    assert runner.stopped_phase([]) == "Failed"


def test_a_pod_deleted_during_its_init_container_never_reports_initialized(
    tmp_path: pathlib.Path, prober: probes.Prober
) -> None:
    init = podspec.ContainerPlan(
        name="init", argv=(sys.executable, "-c", "print('init up', flush=True); import time; "
                           "time.sleep(60)"), env={}, cwd=tmp_path, mounts=(),
    )  # fmt: skip
    main = podspec.ContainerPlan(
        name="main", argv=(sys.executable, "-c", "pass"), env={}, cwd=tmp_path, mounts=()
    )
    plan = podspec.PodPlan(init=(init,), containers=(main,), restart_policy="Always")
    pod = runner.PodRunner(label="ns/init", plan=plan, log_dir=tmp_path / "log", prober=prober)
    log = tmp_path / "log" / "init.log"

    def up() -> bool:
        pod.tick(time.monotonic())
        return log.exists() and "init up" in log.read_text()

    waiting.until("the init container to run", up, timeout=30, interval=0.05)
    pod.terminate(time.monotonic(), grace=10)
    assert _until_phase(pod) == "Failed"
    status = _status(pod)
    assert _condition(status, "Initialized") == "False"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert not (tmp_path / "log" / "main.log").exists(), "the container never started"


@pytest.mark.parametrize("with_init", [False, True])
def test_a_deleted_pod_that_never_ran_ends_failed(with_init: bool) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "main"}]}
    if with_init:
        spec["initContainers"] = [{"name": "init"}]
    previous = [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    final = pod_status.never_started(
        spec, images=IMAGES, previous=previous, now="2026-01-01T00:00:09Z"
    )
    assert final["phase"] == "Failed"
    conditions = {c["type"]: c for c in final["conditions"]}
    ready = conditions["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "PodFailed")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z", "not ready before either"
    (main,) = final["containerStatuses"]
    assert main["image"] == "busybox" and not main["ready"]
    if with_init:  # never initialized: nothing ran, every container still waits
        assert conditions["Initialized"]["status"] == "False"
        (init,) = final["initContainerStatuses"]
        assert init["state"]["waiting"]["reason"] == "PodInitializing"
        assert main["state"]["waiting"]["reason"] == "PodInitializing"
    else:  # nothing to initialize: the container that never ran is unknown
        assert conditions["Initialized"]["status"] == "True"
        terminated = main["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (137, "ContainerStatusUnknown")


def test_a_failed_exits_message_is_the_end_of_its_log_as_the_kubelet_keeps_it() -> None:
    lines = b"".join(f"line {i}\n".encode() for i in range(100))
    message = pod_status.log_tail_message(lines)
    assert message.startswith("line 20\n") and message.endswith("line 99\n")  # the last 80
    long = b"x" * 5000 + b"\nFAILED: why\n"
    message = pod_status.log_tail_message(long)
    assert len(message.encode()) == pod_status.TERMINATION_LOG_BYTES
    assert message.endswith("FAILED: why\n")


@pytest.mark.parametrize(("fallback", "message"), [(True, "refused: fix X\n"), (False, None)])
def test_a_failed_container_says_why_in_its_status_when_it_falls_back_to_logs(
    tmp_path: pathlib.Path, prober: probes.Prober, fallback: bool, message: str | None
) -> None:
    script = "import sys; print('checking'); print('refused: fix X'); sys.exit(1)"
    plan = podspec.PodPlan(
        init=(),
        containers=(
            podspec.ContainerPlan(
                name="main", argv=(sys.executable, "-c", script), env={}, cwd=tmp_path,
                mounts=(), logs_on_error=fallback,
            ),
        ),
        restart_policy="Never",
    )  # fmt: skip
    pod = runner.PodRunner(label="ns/p", plan=plan, log_dir=tmp_path / "log", prober=prober)
    assert _until_phase(pod) == "Failed"
    (main,) = _status(pod)["containerStatuses"]
    terminated = main["state"]["terminated"]
    assert terminated["exitCode"] == 1
    assert terminated.get("message") == (message and f"checking\n{message}")
