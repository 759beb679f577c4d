"""Container probes as the kubelet runs them: startup, liveness and readiness.

:func:`parse` reads one probe of a container spec with the API server's defaults and resolves
a named port; :class:`Tracker` is the pure state machine of one probe of one running container
(when the next check is due, what a run of results means, as the kubelet's probe worker
decides it); :func:`check` performs one check (HTTP or HTTPS GET, TCP connect, a command,
gRPC health) against the pod's IP and says whether it passed and why.

Kubelet semantics kept here: a readiness result starts as failure (not ready) and a liveness
result as success; liveness and readiness wait until the startup probe has passed;
``initialDelaySeconds`` counts from the container's start; a result changes only after
``successThreshold`` (``failureThreshold``) equal results in a row; a failed startup or
liveness result stops that probe until the container is restarted (the caller kills it).
The first check of a probe runs as soon as it may, as the kubelet triggers a readiness check
once a container has started; then one every ``periodSeconds``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import enum
import http.client
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import urllib.parse
from collections.abc import Mapping
from typing import Any

import grpc

USER_AGENT = "kube-probe/1.36"
"""What the kubelet sends as User-Agent (it also names the probe's minor version)."""
_BODY_LIMIT = 10 * 1024
_REDIRECTS = 10
_GRPC_SERVING = 1
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"


class ProbeKind(enum.StrEnum):
    """The three probes of a container (the kubelet's order of precedence)."""

    STARTUP = "startup"
    LIVENESS = "liveness"
    READINESS = "readiness"

    @property
    def field(self) -> str:
        """The container spec's field for this probe (``startupProbe``, ...)."""
        return f"{self.value}Probe"


class ProbeSpecError(ValueError):
    """A probe the simulated kubelet cannot run (the message says which and why)."""


@dataclasses.dataclass(frozen=True)
class HttpGet:
    """``httpGet``: success is a status from 200 to 399."""

    host: str
    port: int
    path: str
    scheme: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class TcpSocket:
    """``tcpSocket``: success is an accepted connection."""

    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class Exec:
    """``exec``: success is exit code 0 of the command, run in the container's context."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cwd: str | None = None
    command: tuple[str, ...] = ()
    """The command as the pod gave it, for messages (``argv`` when empty)."""
    pid_file: str | None = None
    """Where the runtime writes the PID of the command it started in the container: a check
    that times out kills that process too (a killed ``runc exec`` leaves it running)."""


@dataclasses.dataclass(frozen=True)
class Grpc:
    """``grpc``: success is ``SERVING`` from ``grpc.health.v1.Health/Check``."""

    host: str
    port: int
    service: str = ""


Action = HttpGet | TcpSocket | Exec | Grpc


@dataclasses.dataclass(frozen=True)
class Probe:
    """One probe of one container, defaults applied."""

    kind: ProbeKind
    action: Action
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: float | None = None
    """``terminationGracePeriodSeconds`` of a liveness or startup probe (None: the pod's)."""

    @property
    def what(self) -> str:
        """How the kubelet names it in Events: ``Readiness probe``."""
        return f"{self.kind.value.capitalize()} probe"


def _port(value: Any, ports: Mapping[str, int], *, where: str) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, str) and value in ports:
        return ports[value]
    raise ProbeSpecError(f"{where}: port {value!r} is no number and no named container port")


def container_ports(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's named ports: name → number."""
    return {
        str(p["name"]): int(p["containerPort"])
        for p in container.get("ports") or []
        if p.get("name") and p.get("containerPort") is not None
    }


def parse(
    kind: ProbeKind,
    spec: Mapping[str, Any],
    *,
    container: Mapping[str, Any],
    pod_ip: str,
    exec_action: Exec | None = None,
) -> Probe:
    """The probe ``spec`` (a container's ``<kind>Probe``) with the API server's defaults.

    ``exec_action`` is the already planned command of an ``exec`` probe: the caller maps it
    into the container's context as it maps the container's own command.
    """
    where = f"container {container.get('name')!r} {kind.field}"
    ports = container_ports(container)
    action: Action
    if "httpGet" in spec:
        get = spec["httpGet"]
        scheme = str(get.get("scheme") or "HTTP").upper()
        if scheme not in ("HTTP", "HTTPS"):
            raise ProbeSpecError(f"{where}: scheme {scheme!r}")
        action = HttpGet(
            host=str(get.get("host") or pod_ip),
            port=_port(get.get("port"), ports, where=where),
            path=str(get.get("path") or "/"),
            scheme=scheme,
            headers=tuple((str(h["name"]), str(h["value"])) for h in get.get("httpHeaders") or []),
        )
    elif "tcpSocket" in spec:
        tcp = spec["tcpSocket"]
        action = TcpSocket(
            str(tcp.get("host") or pod_ip), _port(tcp.get("port"), ports, where=where)
        )
    elif "grpc" in spec:
        call = spec["grpc"]
        if not isinstance(call.get("port"), int):
            raise ProbeSpecError(f"{where}: a grpc probe's port must be a number")
        action = Grpc(pod_ip, int(call["port"]), str(call.get("service") or ""))
    elif "exec" in spec:
        if exec_action is None or not exec_action.argv:
            raise ProbeSpecError(f"{where}: exec without a command")
        action = exec_action
    else:
        raise ProbeSpecError(f"{where}: no httpGet, tcpSocket, grpc or exec handler")
    success = int(spec.get("successThreshold") or 1)
    if kind is not ProbeKind.READINESS and success != 1:
        raise ProbeSpecError(f"{where}: successThreshold must be 1 (the API server says so)")
    grace = spec.get("terminationGracePeriodSeconds")
    return Probe(
        kind=kind,
        action=action,
        initial_delay=float(spec.get("initialDelaySeconds") or 0),
        period=float(spec.get("periodSeconds") or 10),
        timeout=float(spec.get("timeoutSeconds") or 1),
        success_threshold=success,
        failure_threshold=int(spec.get("failureThreshold") or 3),
        termination_grace=None if grace is None else float(grace),
    )


@dataclasses.dataclass(frozen=True)
class Result:
    """One check's outcome; ``message`` says why it failed, as the kubelet's Event does."""

    ok: bool
    message: str = ""


class Change(enum.Enum):
    """What a recorded result did to the probe's standing result."""

    NONE = "none"
    PASSED = "passed"
    """Now success (the threshold of successes reached)."""
    FAILED = "failed"
    """Now failure (the threshold of failures reached)."""


@dataclasses.dataclass
class Tracker:
    """The probe worker of one probe of one container, from the container's (re)start."""

    probe: Probe
    started_at: float
    """Monotonic time the container started: ``initialDelaySeconds`` counts from here."""
    result: bool | None = None
    """The standing result: None until the first threshold is reached."""
    run: int = 0
    """How many equal check results in a row ended with ``last``."""
    last: bool | None = None
    next_at: float = 0.0
    on_hold: bool = False
    """No more checks until the container restarts: a liveness or startup probe that failed,
    a startup probe that passed."""
    message: str = ""
    """The latest failure's message."""

    def __post_init__(self) -> None:
        self.next_at = self.started_at + self.probe.initial_delay

    @property
    def passing(self) -> bool:
        """The standing result, as the kubelet reads it.

        Before the first threshold: readiness not ready, liveness alive, startup not started.
        """
        if self.result is not None:
            return self.result
        return self.probe.kind is ProbeKind.LIVENESS

    def due(self, now: float) -> bool:
        """Whether a check should start at ``now``."""
        return not self.on_hold and now >= self.next_at

    def scheduled(self, now: float) -> None:
        """A check starts now: the next one is a period later."""
        self.next_at = now + self.probe.period

    def record(self, outcome: Result) -> Change:
        """Count one check's outcome; returns whether the standing result changed."""
        if outcome.ok == self.last:
            self.run += 1
        else:
            self.last, self.run = outcome.ok, 1
        if not outcome.ok:
            self.message = outcome.message
        threshold = self.probe.success_threshold if outcome.ok else self.probe.failure_threshold
        if self.run < threshold:
            return Change.NONE
        before = self.result
        self.result = outcome.ok
        if not outcome.ok and self.probe.kind is not ProbeKind.READINESS:
            self.on_hold, self.run = True, 0
        if outcome.ok and self.probe.kind is ProbeKind.STARTUP:
            self.on_hold = True  # a passed startup probe is done for this container
        if before == outcome.ok:
            return Change.NONE
        return Change.PASSED if outcome.ok else Change.FAILED


# -- the checks (I/O) ---------------------------------------------------------------------


def _http(action: HttpGet, timeout: float) -> Result:
    url = urllib.parse.urlunsplit(
        (action.scheme.lower(), f"{action.host}:{action.port}", action.path, "", "")
    )
    for _ in range(_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # the kubelet skips verification too
            connection = http.client.HTTPSConnection(
                str(parts.hostname), parts.port, timeout=timeout, context=context
            )
        else:
            connection = http.client.HTTPConnection(
                str(parts.hostname), parts.port, timeout=timeout
            )
        try:
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            headers = {"User-Agent": USER_AGENT, "Accept": "*/*", **dict(action.headers)}
            connection.request("GET", target or "/", headers=headers)
            response = connection.getresponse()
            body = response.read(_BODY_LIMIT).decode(errors="replace").strip()
            location = response.getheader("Location")
        finally:
            connection.close()
        if 300 <= response.status < 400 and location:
            following = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(following).hostname != parts.hostname:
                return Result(True)  # the kubelet counts a redirect off the host as success
            url = following
            continue
        if 200 <= response.status < 400:
            return Result(True)
        return Result(False, f"HTTP probe failed with statuscode: {response.status} ({body})")
    return Result(False, f"HTTP probe failed: stopped after {_REDIRECTS} redirects")


def _tcp(action: TcpSocket, timeout: float) -> Result:
    with socket.create_connection((action.host, action.port), timeout=timeout):
        return Result(True)


def _exec(action: Exec, timeout: float) -> Result:
    shown = list(action.command or action.argv)
    # Its own session, so a timeout ends what the command started too, as a runtime's exec does.
    with subprocess.Popen(
        list(action.argv), env=dict(action.env), cwd=action.cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    ) as child:  # fmt: skip
        try:
            out, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            _kill_named(action.pid_file)
            child.communicate()
            return Result(False, f"command {shown} timed out after {timeout:g}s")
        finally:
            if action.pid_file:
                pathlib.Path(action.pid_file).unlink(missing_ok=True)
    if child.returncode == 0:
        return Result(True)
    output = out.decode(errors="replace").strip()[-_BODY_LIMIT:]
    return Result(False, f"command {shown} exited with {child.returncode}: {output}")


def _kill_named(pid_file: str | None) -> None:
    """SIGKILL the process whose PID ``pid_file`` holds, if it names one."""
    if not pid_file:
        return
    try:
        pid = int(pathlib.Path(pid_file).read_text().strip())
    except (OSError, ValueError):  # not started yet, or already gone
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def health_request(service: str) -> bytes:
    """``HealthCheckRequest{service}`` in protobuf wire format (field 1, a string)."""
    raw = service.encode()
    return (b"\x0a" + _varint(len(raw)) + raw) if raw else b""


def health_status(message: bytes) -> int:
    """``HealthCheckResponse.status`` (field 1, an enum) from its wire format; 0 when absent."""
    index = 0
    while index < len(message):
        key = message[index]
        index += 1
        if key == 0x08:  # field 1, varint
            value, shift = 0, 0
            while True:
                byte = message[index]
                index += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    return value
        return 0  # a field this reader does not know: not SERVING
    return 0


def _grpc(action: Grpc, timeout: float) -> Result:
    with grpc.insecure_channel(f"{action.host}:{action.port}") as channel:
        call = channel.unary_unary(
            _HEALTH_CHECK,
            request_serializer=health_request,
            response_deserializer=health_status,
        )
        try:
            status = call(action.service, timeout=timeout)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call):
                return Result(False, f"gRPC probe failed: {exc.code().name}: {exc.details()}")
            return Result(False, f"gRPC probe failed: {exc}")
    if status == _GRPC_SERVING:
        return Result(True)
    return Result(False, f"service unhealthy (responded with status {status})")


def check(probe: Probe) -> Result:
    """Perform one check of ``probe`` (blocking, bounded by its timeout)."""
    action = probe.action
    try:
        if isinstance(action, HttpGet):
            return _http(action, probe.timeout)
        if isinstance(action, TcpSocket):
            return _tcp(action, probe.timeout)
        if isinstance(action, Grpc):
            return _grpc(action, probe.timeout)
        return _exec(action, probe.timeout)
    except Exception as exc:  # noqa: BLE001 - any error of a check is a failed check, as for the kubelet
        host = getattr(action, "host", "")
        port = getattr(action, "port", "")
        return Result(False, f"{type(action).__name__} {host}:{port}: {exc}")


class Prober:
    """Runs checks off the caller's thread: the kubelet's loop never waits for one.

    Enough threads that checks timing out on a few pods do not hold up the others' (the
    kubelet runs one worker per probe).
    """

    def __init__(self, workers: int = 32) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="probe")

    def submit(self, probe: Probe) -> concurrent.futures.Future[Result]:
        """Start one check; its future holds the :class:`Result`."""
        return self._pool.submit(check, probe)

    def close(self) -> None:
        """Stop taking checks; those running end by their own timeout."""
        self._pool.shutdown(wait=False, cancel_futures=True)
