"""The API client against a loopback HTTP server that refuses, then answers."""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import pathlib
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from cdsim import kubeconfig
from computedomains.kube import client, credentials, retry


class _Server(http.server.ThreadingHTTPServer):
    answers: list[tuple[int, dict[str, str]]]
    """(status, extra headers) per request in turn; the last repeats."""
    seen: list[str]
    auth: list[str]
    """The Authorization header of each request."""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.seen.append(self.command)
        self.server.auth.append(self.headers.get("Authorization", ""))
        answers = self.server.answers
        status, headers = answers[min(len(self.server.seen), len(answers)) - 1]
        document: dict[str, object]
        if status >= 400:
            document = {"kind": "Status", "reason": "Refused", "message": f"answer {status}"}
        else:
            document = {"kind": "ConfigMap", "metadata": {"name": "x"}}
        body = json.dumps(document).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def _serving(*answers: tuple[int, dict[str, str]]) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.answers, server.seen, server.auth = list(answers), [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _client(server: _Server) -> client.Client:
    host, port = server.server_address[:2]
    fast = retry.Policy(attempts=3, backoff_initial=0.01, backoff_cap=0.02)
    return client.Client(f"http://{host!s}:{port}", policy=fast)


def test_a_429_with_retry_after_then_200_succeeds_without_an_error_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG), _serving((429, {"Retry-After": "1"}), (200, {})) as server:
        api = _client(server)
        seen: list[int] = []
        api.observer = lambda method, path, status: seen.append(status)
        answer = api.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "x"}})
    assert answer["metadata"]["name"] == "x"
    assert server.seen == ["POST", "POST"]
    assert seen == [429, 200]  # the request metrics count the refusal too
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    (waited,) = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert "answered 429" in waited and "1.00s" in waited


def test_a_write_that_failed_on_the_server_is_not_sent_twice() -> None:
    with _serving((500, {})) as server, pytest.raises(client.ApiError) as raised:
        _client(server).create("/api/v1/namespaces/default/configmaps", {})
    assert raised.value.status == 500 and server.seen == ["POST"]


def test_a_read_is_tried_the_policys_count_then_the_last_error_is_raised() -> None:
    with _serving((503, {})) as server, pytest.raises(client.ApiError) as raised:
        _client(server).get("/api/v1/namespaces/default/configmaps/x")
    assert raised.value.status == 503 and server.seen == ["GET"] * 3


def test_a_refused_connection_is_tried_again_even_for_a_write() -> None:
    with _serving((200, {})) as server:
        address = server.server_address
    api = client.Client(f"http://{address[0]!s}:{address[1]}",
                        policy=retry.Policy(attempts=2, backoff_initial=0.01))  # fmt: skip
    tries: list[int] = []
    api.observer = lambda method, path, status: tries.append(status)
    with pytest.raises(client.API_ERRORS):
        api.create("/api/v1/namespaces/default/configmaps", {})
    assert tries == [0, 0]  # nothing listens any more: both tries failed to connect


def test_no_wait_reaches_past_the_requests_timeout() -> None:
    # The leader's Lease renewal passes the time left before its deadline as the timeout.
    with _serving((429, {"Retry-After": "5"})) as server:
        started = time.monotonic()
        with pytest.raises(client.ApiError) as raised:
            _client(server).get("/apis/coordination.k8s.io/v1/leases", timeout=1)
        waited = time.monotonic() - started
    assert raised.value.status == 429 and server.seen == ["GET"]
    # Not the 5 s asked for: the answer came back at once (any load on the machine aside).
    assert waited < 5, "it waited for a try it could not make in time"


def test_a_guard_that_refuses_stops_the_retry_of_a_write() -> None:
    # The controller's fence: a replica that lost the lead while a write waited sends no more.
    leading = [True]

    def fence() -> None:
        if not leading[0]:
            raise RuntimeError("no longer leading")

    with _serving((429, {"Retry-After": "0"}), (200, {})) as server:
        api = _client(server)
        api.observer = lambda method, path, status: leading.__setitem__(0, False)
        with pytest.raises(RuntimeError, match="no longer leading"):
            api.create("/api/v1/namespaces/default/configmaps", {}, guard=fence)
    assert server.seen == ["POST"]


_PLUGIN = """\
import json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": f"{os.environ['PREFIX']}-{n}"}}))
"""


def test_a_kubeconfig_exec_plugin_supplies_the_token_and_runs_again_after_a_401(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "plugin.py").write_text(_PLUGIN)
    with _serving((401, {}), (200, {})) as server:
        host, port = server.server_address[:2]
        exec_entry = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(tmp_path / "plugin.py"), str(tmp_path / "count")],
            "env": [{"name": "PREFIX", "value": "issued"}],
            "interactiveMode": "Never",
        }
        config = kubeconfig.write(
            tmp_path / "kubeconfig",
            cluster_name="c",
            cluster={"server": f"http://{host!s}:{port}"},
            user="u",
            credentials={"exec": exec_entry},
        )
        api = client.Client.from_kubeconfig(config)
        with pytest.raises(client.ApiError) as refused:
            api.get("/api/v1/namespaces/default/configmaps/x")
        assert refused.value.status == 401
        assert api.get("/api/v1/namespaces/default/configmaps/x")["metadata"]["name"] == "x"
    assert server.auth == ["Bearer issued-1", "Bearer issued-2"]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (404, client.Failure.NOT_FOUND),
        (409, client.Failure.CONFLICT),
        (400, client.Failure.REFUSED),
        (403, client.Failure.REFUSED),
        (422, client.Failure.REFUSED),
        (408, client.Failure.BUSY),
        (429, client.Failure.BUSY),
        (500, client.Failure.BUSY),
        (503, client.Failure.BUSY),
    ],
)
def test_every_answer_is_one_kind_of_failure(status: int, kind: client.Failure) -> None:
    error = client.ApiError(status, "R", "m")
    assert error.failure is client.failure(error) is kind
    assert kind.transient == (kind is client.Failure.BUSY)


def test_no_answer_is_unreachable_and_a_bug_is_no_api_failure() -> None:
    assert client.failure(ConnectionRefusedError()) is client.Failure.UNREACHABLE
    assert client.failure(credentials.CredentialError("no token")) is client.Failure.UNREACHABLE
    assert client.Failure.UNREACHABLE.transient
    assert client.failure(KeyError("spec")) is None
    assert client.failure(OSError(28, "No space left on device")) is None  # local, not the API
