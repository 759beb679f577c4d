"""The simulated kubelet's probes: parsing, the kubelet's result rules, real checks, restarts."""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import http.server
import pathlib
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from cdsim import processes
from cdsim.kubelet import podspec, probes, runner
from computedomains import certificates, waiting

Kind = probes.ProbeKind
CONTAINER = {"name": "main", "ports": [{"name": "http", "containerPort": 8080}]}


def test_parse_applies_the_api_servers_defaults_and_resolves_named_ports() -> None:
    probe = probes.parse(
        Kind.READINESS, {"httpGet": {"path": "/readyz", "port": "http"}},
        container=CONTAINER, pod_ip="127.1.0.5",
    )  # fmt: skip
    assert probe == probes.Probe(
        kind=Kind.READINESS,
        action=probes.HttpGet("127.1.0.5", 8080, "/readyz", "HTTP"),
        initial_delay=0, period=10, timeout=1, success_threshold=1, failure_threshold=3,
    )  # fmt: skip
    tcp = probes.parse(
        Kind.LIVENESS,
        {"tcpSocket": {"port": 9000}, "periodSeconds": 2, "terminationGracePeriodSeconds": 4},
        container=CONTAINER,
        pod_ip="127.1.0.5",
    )
    assert (tcp.action, tcp.period, tcp.termination_grace) == (
        probes.TcpSocket("127.1.0.5", 9000), 2, 4,
    )  # fmt: skip
    https = probes.parse(
        Kind.STARTUP, {"httpGet": {"port": 8443, "scheme": "HTTPS", "host": "127.0.0.9"}},
        container=CONTAINER, pod_ip="127.1.0.5",
    )  # fmt: skip
    assert https.action == probes.HttpGet("127.0.0.9", 8443, "/", "HTTPS")


@pytest.mark.parametrize(
    ("kind", "spec", "error"),
    [
        (Kind.READINESS, {"httpGet": {"port": "metrics"}}, "no number and no named container port"),
        (Kind.READINESS, {"grpc": {"port": "http"}}, "grpc probe's port must be a number"),
        (Kind.LIVENESS, {"tcpSocket": {"port": 1}, "successThreshold": 2}, "successThreshold"),
        (Kind.READINESS, {"periodSeconds": 3}, "no httpGet, tcpSocket, grpc or exec"),
        (Kind.READINESS, {"exec": {"command": []}}, "exec without a command"),
    ],
)
def test_parse_names_what_it_cannot_run(kind: Kind, spec: dict[str, Any], error: str) -> None:
    with pytest.raises(probes.ProbeSpecError, match=error):
        probes.parse(kind, spec, container=CONTAINER, pod_ip="127.1.0.5",
                     exec_action=probes.Exec(()) if "exec" in spec else None)  # fmt: skip


def _tracker(kind: Kind, *, success: int = 1, failure: int = 3) -> probes.Tracker:
    probe = probes.Probe(
        kind, probes.TcpSocket("h", 1), success_threshold=success, failure_threshold=failure
    )
    return probes.Tracker(probe, started_at=0.0)


OK, BAD = probes.Result(True), probes.Result(False, "no")
PASSED, FAILED, NONE = probes.Change.PASSED, probes.Change.FAILED, probes.Change.NONE


@pytest.mark.parametrize(
    ("kind", "success", "failure", "results", "changes", "passing"),
    [
        # Readiness starts not ready; one success makes it ready, three failures unready.
        (Kind.READINESS, 1, 3, [], [], False),
        (Kind.READINESS, 1, 3, [OK], [PASSED], True),
        (Kind.READINESS, 1, 3, [OK, BAD, BAD], [PASSED, NONE, NONE], True),
        (Kind.READINESS, 1, 3, [OK, BAD, BAD, BAD], [PASSED, NONE, NONE, FAILED], False),
        (Kind.READINESS, 1, 3, [OK, BAD, BAD, OK, BAD, BAD], [PASSED] + [NONE] * 5, True),
        (Kind.READINESS, 2, 1, [OK, BAD, OK, OK], [NONE, FAILED, NONE, PASSED], True),
        # Liveness starts alive: failures kill, successes never "pass" it again.
        (Kind.LIVENESS, 1, 3, [], [], True),
        (Kind.LIVENESS, 1, 3, [OK, OK], [PASSED, NONE], True),
        (Kind.LIVENESS, 1, 2, [BAD, BAD], [NONE, FAILED], False),
        # Startup starts not started.
        (Kind.STARTUP, 1, 3, [], [], False),
        (Kind.STARTUP, 1, 3, [BAD, OK], [NONE, PASSED], True),
    ],
)
def test_the_tracker_follows_the_kubelets_thresholds(
    kind: Kind,
    success: int,
    failure: int,
    results: list[probes.Result],
    changes: list[probes.Change],
    passing: bool,
) -> None:
    tracker = _tracker(kind, success=success, failure=failure)
    assert [tracker.record(r) for r in results] == changes
    assert tracker.passing is passing


def test_a_failed_liveness_or_startup_probe_stops_checking_readiness_does_not() -> None:
    for kind, held in ((Kind.LIVENESS, True), (Kind.STARTUP, True), (Kind.READINESS, False)):
        tracker = _tracker(kind, failure=1)
        tracker.record(BAD)
        assert tracker.due(100.0) is not held, kind


def test_a_passed_startup_probe_checks_no_more() -> None:
    startup, liveness = _tracker(Kind.STARTUP), _tracker(Kind.LIVENESS)
    startup.record(OK)
    liveness.record(OK)
    assert not startup.due(100.0) and startup.passing
    assert liveness.due(100.0)


def test_checks_wait_for_the_initial_delay_then_come_a_period_apart() -> None:
    probe = probes.Probe(Kind.LIVENESS, probes.TcpSocket("h", 1), initial_delay=5, period=2)
    tracker = probes.Tracker(probe, started_at=100.0)
    assert not tracker.due(104.9) and tracker.due(105.0)
    tracker.scheduled(105.0)
    assert not tracker.due(106.9) and tracker.due(107.0)


# -- real checks --------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(2)
        if self.path.startswith("/redirect"):
            target = "http://192.0.2.1/elsewhere" if self.path.endswith("away") else "/ok"
            self.send_response(302)
            self.send_header("Location", target)
            self.end_headers()
            return
        code = 200 if self.path in ("/ok", "/slow") else 503
        if self.path == "/agent":
            code = 200 if self.headers["User-Agent"] == probes.USER_AGENT else 400
        body = b"fine" if code == 200 else b"not yet"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@contextlib.contextmanager
def _http_server(tls: ssl.SSLContext | None = None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _check(action: probes.Action, *, timeout: float = 1.0) -> probes.Result:
    return probes.check(probes.Probe(Kind.READINESS, action, timeout=timeout))


def test_http_checks_pass_from_200_to_399_and_say_why_they_fail() -> None:
    with _http_server() as port:
        assert _check(probes.HttpGet("127.0.0.1", port, "/ok", "HTTP")).ok
        assert _check(probes.HttpGet("127.0.0.1", port, "/agent", "HTTP")).ok
        assert _check(probes.HttpGet("127.0.0.1", port, "/redirect", "HTTP")).ok
        assert _check(probes.HttpGet("127.0.0.1", port, "/redirect-away", "HTTP")).ok
        failed = _check(probes.HttpGet("127.0.0.1", port, "/readyz", "HTTP"))
        assert not failed.ok and "statuscode: 503" in failed.message and "not yet" in failed.message
        slow = _check(probes.HttpGet("127.0.0.1", port, "/slow", "HTTP"), timeout=0.3)
        assert not slow.ok and "timed out" in slow.message
    closed = _check(probes.HttpGet("127.0.0.1", port, "/ok", "HTTP"))
    assert not closed.ok and "refused" in closed.message.lower()


def test_https_checks_skip_certificate_verification(tmp_path: pathlib.Path) -> None:
    ca_key, leaf_key = certificates.new_key(), certificates.new_key()
    now = datetime.datetime.now(datetime.UTC)
    later = now + datetime.timedelta(hours=1)
    ca = certificates.new_ca(
        ca_key, subject=certificates.name("probe-test-ca"), now=now, not_after=later
    )
    leaf = certificates.new_leaf(
        leaf_key, ca=ca, ca_key=ca_key, subject=certificates.name("elsewhere.example"),
        usage=ExtendedKeyUsageOID.SERVER_AUTH, now=now, not_after=later,
    )  # fmt: skip
    (tmp_path / "tls.crt").write_bytes(certificates.cert_pem(leaf))
    (tmp_path / "tls.key").write_bytes(certificates.key_pem(leaf_key))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    with _http_server(context) as port:
        assert _check(probes.HttpGet("127.0.0.1", port, "/ok", "HTTPS")).ok
        plain = _check(probes.HttpGet("127.0.0.1", port, "/ok", "HTTP"))
        assert not plain.ok


def test_tcp_checks_need_an_accepting_socket() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert _check(probes.TcpSocket("127.0.0.1", port)).ok
    assert not _check(probes.TcpSocket("127.0.0.1", port)).ok


def test_exec_checks_pass_on_exit_code_zero_and_are_bounded(tmp_path: pathlib.Path) -> None:
    python = sys.executable
    assert _check(probes.Exec((python, "-c", "pass"))).ok
    failed = _check(probes.Exec((python, "-c", "import sys; print('broken'); sys.exit(3)")))
    assert not failed.ok and "exited with 3: broken" in failed.message
    slow = _check(probes.Exec((python, "-c", "import time; time.sleep(5)")), timeout=0.5)
    assert not slow.ok and "timed out" in slow.message
    script = "import os, sys; sys.exit(os.environ['X'] != 'y' or os.getcwd() != sys.argv[1])"
    env = _check(probes.Exec((python, "-c", script, str(tmp_path)), {"X": "y"}, str(tmp_path)))
    assert env.ok, env.message


def test_a_timed_out_exec_check_kills_what_the_runtime_started_and_names_the_pods_command(
    tmp_path: pathlib.Path,
) -> None:
    # Plays `runc exec --pid-file`: the command runs outside the exec's own process group (in
    # the container), its PID written to the file (and, for this test, to a second one that
    # stays); killing the exec would leave it running.
    pid_file, kept = tmp_path / "probe.pid", tmp_path / "kept.pid"
    runtime = (
        "import subprocess, sys, time\n"
        "inside = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "                          start_new_session=True)\n"
        "for path in sys.argv[1:]:\n"
        "    open(path, 'w').write(str(inside.pid))\n"
        "time.sleep(60)\n"
    )
    action = probes.Exec(
        (sys.executable, "-c", runtime, str(pid_file), str(kept)), command=("cat", "/ready"),
        pid_file=str(pid_file),
    )  # fmt: skip
    slow = _check(action, timeout=1.0)
    assert not slow.ok and slow.message == "command ['cat', '/ready'] timed out after 1s"
    inside = int(kept.read_text())
    waiting.until(
        "the command inside the container to be killed",
        lambda: not processes.pid_alive(inside),
        timeout=10,
    )
    assert not pid_file.exists()


@pytest.mark.parametrize("status", [0, 1, 2])
def test_grpc_checks_pass_only_on_serving(status: int) -> None:
    seen: list[bytes] = []

    def check(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append(request)
        return b"\x08" + bytes([status]) if status else b""

    handler = grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health",
        {"Check": grpc.unary_unary_rpc_method_handler(check)},
    )
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        result = _check(probes.Grpc("127.0.0.1", port, "dra"))
        assert result.ok is (status == 1), result.message
        assert _check(probes.Grpc("127.0.0.1", port)).ok is (status == 1)
        assert seen == [b"\x0a\x03dra", b""], "the service name, then the server as a whole"
    finally:
        server.stop(0)
    gone = _check(probes.Grpc("127.0.0.1", port))
    assert not gone.ok and gone.message.startswith("gRPC probe failed: ")


# -- probes driving a pod's containers ------------------------------------------------------

SERVER = """
import http.server, os, sys
state = sys.argv[1]
os.makedirs(state, exist_ok=True)
open(os.path.join(state, "starts"), "a").write(f"{os.getpid()}\\n")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        name = {"/healthz": "sick", "/readyz": "unready", "/startz": "starting"}[self.path]
        code = 503 if os.path.exists(os.path.join(state, name)) else 200
        self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _served_pod(
    tmp_path: pathlib.Path, prober: probes.Prober, events: list[tuple[str, str]], grace: float
) -> tuple[runner.PodRunner, pathlib.Path]:
    state, port = tmp_path / "state", _free_port()

    def probe(kind: Kind, path: str, failure: int) -> probes.Probe:
        action = probes.HttpGet("127.0.0.1", port, path, "HTTP")
        return probes.Probe(kind, action, period=0.1, timeout=1, failure_threshold=failure)

    plan = podspec.PodPlan(
        init=(),
        containers=(
            podspec.ContainerPlan(
                name="main",
                argv=(sys.executable, "-c", SERVER, str(state), str(port)),
                env={},
                cwd=tmp_path,
                mounts=(),
                probes=(
                    probe(Kind.STARTUP, "/startz", 30),
                    probe(Kind.LIVENESS, "/healthz", 2),
                    probe(Kind.READINESS, "/readyz", 1),
                ),
            ),
        ),
        restart_policy="Always",
        termination_grace=grace,
    )
    pod = runner.PodRunner(
        label="ns/served", plan=plan, log_dir=tmp_path / "log", prober=prober,
        on_event=lambda reason, message, warning: events.append((reason, message)),
    )  # fmt: skip
    return pod, state


def _main(pod: runner.PodRunner) -> dict[str, Any]:
    return dict(pod.status(images={}, gates=[], conditions=[])["containerStatuses"][0])


def _until(pod: runner.PodRunner, what: str, check: Any, timeout: float = 30) -> Any:
    def step() -> Any:
        pod.tick(time.monotonic())
        return check()

    return waiting.until(what, step, timeout=timeout, interval=0.02)


def test_readiness_follows_the_probe_and_a_failed_liveness_probe_restarts_the_container(
    tmp_path: pathlib.Path, prober: probes.Prober
) -> None:
    events: list[tuple[str, str]] = []
    pod, state = _served_pod(tmp_path, prober, events, grace=5)
    state.mkdir()
    (state / "starting").touch()
    (state / "unready").touch()
    unhealthy = ("Unhealthy", "Startup probe failed: HTTP probe failed with statuscode: 503 ()")
    _until(pod, "three failed startup checks", lambda: events.count(unhealthy) >= 3)
    main = _main(pod)
    assert (main["started"], main["ready"]) == (False, False), "not started: neither probe ran"
    assert all(reason == "Unhealthy" and "Startup" in message for reason, message in events)

    (state / "starting").unlink()
    _until(pod, "the startup probe to pass", lambda: _main(pod)["started"])
    assert not _main(pod)["ready"], "readiness still fails"
    (state / "unready").unlink()
    _until(pod, "the readiness probe to pass", lambda: _main(pod)["ready"])
    (state / "unready").touch()
    _until(pod, "the readiness probe to fail", lambda: not _main(pod)["ready"])
    assert _main(pod)["restartCount"] == 0, "readiness never restarts"
    (state / "unready").unlink()

    (state / "sick").touch()
    first = int((state / "starts").read_text().split()[0])
    _until(pod, "the restart", lambda: len((state / "starts").read_text().split()) == 2)
    assert ("Killing", "Container main failed liveness probe, will be restarted") in events
    (state / "sick").unlink()
    main = _until(pod, "the new container to be ready", lambda: _main(pod)["ready"] and _main(pod))
    assert main["restartCount"] == 1
    assert main["lastState"]["terminated"]["exitCode"] == 143, "SIGTERM ended it"
    assert int((state / "starts").read_text().split()[1]) != first
    pod.terminate(time.monotonic(), grace=5)
    _until(pod, "the pod to stop", lambda: pod.finished)


def test_a_container_that_ignores_sigterm_is_killed_after_the_grace_period(
    tmp_path: pathlib.Path, prober: probes.Prober
) -> None:
    state, port = tmp_path / "state", _free_port()
    stubborn = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + SERVER.strip()
    # Fails once the container has recorded its start, so after SIGTERM is ignored: a probe
    # that failed earlier would stop the container before it could ignore anything.
    started = probes.Exec(("sh", "-c", f"! test -e {state / 'starts'}"))
    liveness = probes.Probe(Kind.LIVENESS, started, period=0.1, failure_threshold=1)
    plan = podspec.PodPlan(
        init=(),
        containers=(
            podspec.ContainerPlan(
                name="main", argv=(sys.executable, "-c", stubborn, str(state), str(port)),
                env={}, cwd=tmp_path, mounts=(), probes=(liveness,),
            ),
        ),
        restart_policy="Always",
        termination_grace=0.5,
    )  # fmt: skip
    pod = runner.PodRunner(label="ns/s", plan=plan, log_dir=tmp_path / "log", prober=prober)
    main = _until(
        pod, "the stubborn container to be killed",
        lambda: (_main(pod)["lastState"] or None) and _main(pod),
    )  # fmt: skip
    assert main["lastState"]["terminated"]["exitCode"] == 137
    pod.terminate(time.monotonic(), grace=0.5)
    _until(pod, "the pod to stop", lambda: pod.finished)
