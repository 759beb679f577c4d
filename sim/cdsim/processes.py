"""Start, watch and stop the simulated cluster's processes, by PID, leaving no orphans.

Each child runs in its own session (so a Ctrl-C in the terminal reaches only the supervisor,
which then stops the children in order) and asks the kernel to kill it should the supervisor
die without cleaning up (``PR_SET_PDEATHSIG``), so even ``kill -9`` of the supervisor leaves
nothing running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from computedomains import parentdeath

CLUSTER_ENV = "COMPUTE_DOMAINS_SIM_CLUSTER_DIR"
"""Set to the cluster's directory in each of its processes' environment: finds them all."""


class ProcessError(RuntimeError):
    """A process exited early or did not become ready; the message carries its log tail."""


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state letter follows the parenthesised command name, which may contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def log_tail(path: pathlib.Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
    except OSError as exc:
        return f"(log unreadable: {exc})"


@dataclasses.dataclass
class Managed:
    """One child process started by the supervisor, with what :func:`start_again` needs."""

    name: str
    popen: subprocess.Popen[bytes]
    log: pathlib.Path
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: pathlib.Path | None = None

    @property
    def pid(self) -> int:
        """The child's PID."""
        return self.popen.pid

    def check_running(self) -> None:
        """Raise with the log tail when the process has exited."""
        code = self.popen.poll()
        if code is not None:
            raise ProcessError(f"{self.name} exited with code {code}; log:\n{log_tail(self.log)}")


def start(
    name: str,
    argv: Sequence[str],
    *,
    log_dir: pathlib.Path,
    env: Mapping[str, str] | None = None,
    cwd: pathlib.Path | None = None,
) -> Managed:
    """Start ``argv`` with output to ``<log_dir>/<name>.log``, tied to this process's life."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=parentdeath.die_with_parent(),  # noqa: PLW1509 - only prctl in the child
        )
    return Managed(name=name, popen=popen, log=log, argv=tuple(argv), env=env, cwd=cwd)


def start_again(child: Managed) -> Managed:
    """Start a stopped ``child`` again as it was started.

    Same command line, environment, folder and log (appended to). Call it from the thread that
    started the cluster: the new process's parent-death signal is tied to the calling thread.
    """
    return start(child.name, child.argv, log_dir=child.log.parent, env=child.env, cwd=child.cwd)


def stop_pids(
    pids: Sequence[int], *, grace: float = 10.0, sleep: Callable[[float], None] = time.sleep
) -> list[int]:
    """SIGTERM each PID, wait up to ``grace`` seconds, SIGKILL survivors; returns those killed."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        sleep(0.05)
    killed = [p for p in pids if pid_alive(p)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in killed) and time.monotonic() < deadline:
        sleep(0.05)
    return killed


def stop_all(children: Sequence[Managed], *, grace: float = 10.0) -> None:
    """Stop children in reverse start order and reap them, so no zombie or orphan remains."""
    for child in reversed(children):
        if child.popen.poll() is None:
            child.popen.terminate()
            try:
                child.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait(timeout=10)


def strays(directory: pathlib.Path) -> dict[int, str]:
    """Live processes that carry :data:`CLUSTER_ENV` = ``directory``: PID → command line.

    Every process of a cluster does (the control plane sets it, the simulated kubelet hands it
    to each container, and what those start inherits it), so after a stop these are the ones
    that escaped it. A user's shell or ``tail`` in the cluster's folder does not.
    """
    marker = f"{CLUSTER_ENV}={directory}".encode()
    found = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker in environ and pid_alive(int(entry.name)):
            found[int(entry.name)] = " ".join(args).strip()
    return found


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """One process as :func:`scan` saw it."""

    pid: int
    argv: tuple[str, ...]
    cwd: pathlib.Path | None
    """Its working folder; None when unreadable (another user's, or gone meanwhile)."""
    root: pathlib.Path | None = None
    """The host folder its root is mounted from when it runs in a container (the bundle's
    ``rootfs``, found from its root mount's overlay layer); None for a process of the host."""

    def inside(self, folder: pathlib.Path) -> bool:
        """It works in ``folder``, or runs in a container whose root lies below it."""
        return any(
            path is not None and path.is_relative_to(folder) for path in (self.cwd, self.root)
        )


def _link(path: pathlib.Path) -> pathlib.Path | None:
    try:
        return path.readlink()
    except OSError:
        return None


def _container_root(entry: pathlib.Path, own_namespace: pathlib.Path | None) -> pathlib.Path | None:
    """The host folder a container's process has as its root, None for a host process.

    Seen from the host, ``<pid>/root`` of a process in another mount namespace reads ``/``;
    its own mount table names the overlay its ``/`` is: the upper layer lies in the container's
    bundle, beside the ``rootfs`` the runtime mounted (:mod:`cdsim.kubelet.containers`).
    """
    namespace = _link(entry / "ns" / "mnt")
    if namespace is None or namespace == own_namespace:
        return None
    try:
        table = (entry / "mountinfo").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/" and " - overlay " in line:
            options = line.rpartition(" ")[2].split(",")
            upper = next(
                (o.removeprefix("upperdir=") for o in options if o.startswith("upperdir=")), ""
            )
            return pathlib.Path(upper).parent / "rootfs" if upper else None
    return None


def scan() -> list[ProcessInfo]:
    """Every live process of this machine's user that can be read: PID, arguments, folder.

    One pass over ``/proc``, for callers that look for many processes at once.
    """
    found = []
    own_namespace = _link(pathlib.Path("/proc/self/ns/mnt"))
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        cwd, root = _link(entry / "cwd"), _container_root(entry, own_namespace)
        decoded = tuple(a.decode(errors="replace") for a in argv if a)
        if decoded:
            found.append(ProcessInfo(int(entry.name), decoded, cwd, root))
    return found


def find(
    *needles: str, under: pathlib.Path | None = None, table: Sequence[ProcessInfo] | None = None
) -> int | None:
    """PID of a process that has every one of ``needles`` as an argument; None when none runs.

    With ``under`` (a simulated node's host tree, or a pod's folder in it), only a process
    working in it, or a container's rooted in it, counts: the simulated kubelet runs each pod
    in its pod folder there (its containers' roots too), and the
    same node names exist in every simulated cluster on the machine (a demo's, another test
    run's). ``table``: a :func:`scan` to look in instead of a fresh one.
    """
    root = under.resolve() if under is not None else None
    for proc in scan() if table is None else table:
        if not all(n in proc.argv for n in needles):
            continue
        if (root is None or proc.inside(root)) and pid_alive(proc.pid):
            return proc.pid
    return None


def _signal(pid: int, sig: signal.Signals) -> None:
    # PermissionError: the PID went to another user's process meanwhile; not ours to stop.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
