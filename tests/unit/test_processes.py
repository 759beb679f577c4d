"""Process start and stop by PID."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from cdsim import processes
from computedomains import waiting


def test_stop_pids_escalates_to_sigkill_for_a_process_ignoring_sigterm(
    tmp_path: pathlib.Path,
) -> None:
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    child = processes.start("stubborn", [sys.executable, "-c", script], log_dir=tmp_path)
    stdout_ready = lambda: "up" in child.log.read_text()  # noqa: E731
    waiting.until(
        "the child to install its SIGTERM handler", stdout_ready, timeout=10, interval=0.01
    )
    killed = processes.stop_pids([child.pid], grace=0.2)
    assert killed == [child.pid]
    child.popen.wait(timeout=5)
    assert not processes.pid_alive(child.pid)


def test_check_running_reports_exit_code_and_log_tail(tmp_path: pathlib.Path) -> None:
    child = processes.start(
        "fails",
        [sys.executable, "-c", "print('bind: address already in use'); raise SystemExit(3)"],
        log_dir=tmp_path,
    )
    child.popen.wait(timeout=10)
    with pytest.raises(
        processes.ProcessError, match=r"fails exited with code 3(.|\n)*address already in use"
    ):
        child.check_running()


def test_pid_alive_is_false_for_a_reaped_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not processes.pid_alive(proc.pid)


def test_strays_finds_the_processes_marked_with_the_cluster_directory(
    tmp_path: pathlib.Path,
) -> None:
    mine, other = tmp_path / "cluster", tmp_path / "cluster-2"
    nap = [sys.executable, "-c", "import time; time.sleep(600)"]

    def marked(directory: pathlib.Path) -> subprocess.Popen[bytes]:
        # Started outside processes.start, as a process that escaped its supervisor is.
        env = {**os.environ, processes.CLUSTER_ENV: str(directory)}
        return subprocess.Popen(nap, env=env)

    ours, theirs = marked(mine), marked(other)
    # Works in the cluster's folder and names it, but is not one of its processes.
    unmarked = subprocess.Popen([*nap, str(mine / "logs")], cwd=tmp_path)
    try:
        assert processes.strays(mine) == {ours.pid: " ".join(nap)}
        assert list(processes.strays(other)) == [theirs.pid]
    finally:
        for child in (ours, theirs, unmarked):
            child.kill()
            child.wait(timeout=10)
    assert processes.strays(mine) == {}
