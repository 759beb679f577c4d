"""The API client against a loopback HTTP server that refuses, then answers."""

from __future__ import annotations

import logging
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from cdsim import kubeconfig
from computedomains.api import resources
from computedomains.kube import client, credentials, nodes, retry, writes
from tests.support.answering import Server, serving


def _client(server: Server) -> client.Client:
    host, port = server.server_address[:2]
    # No spread: a Retry-After is waited exactly, so the log names it and no test waits more.
    fast = retry.Policy(attempts=3, backoff_initial=0.01, backoff_cap=0.02, jitter=0.0)
    return client.Client(f"http://{host!s}:{port}", policy=fast)


def test_a_429_with_retry_after_then_200_succeeds_without_an_error_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG), serving((429, {"Retry-After": "1"}), (200, {})) as server:
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
    with serving((500, {})) as server, pytest.raises(client.ApiError) as raised:
        _client(server).create("/api/v1/namespaces/default/configmaps", {})
    assert raised.value.status == 500 and server.seen == ["POST"]


def test_a_read_is_tried_the_policys_count_then_the_last_error_is_raised() -> None:
    with serving((503, {})) as server, pytest.raises(client.ApiError) as raised:
        _client(server).get("/api/v1/namespaces/default/configmaps/x")
    assert raised.value.status == 503 and server.seen == ["GET"] * 3


def test_a_refused_connection_is_tried_again_even_for_a_write() -> None:
    with serving((200, {})) as server:
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
    with serving((429, {"Retry-After": "5"})) as server:
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

    with serving((429, {"Retry-After": "0"}), (200, {})) as server:
        api = _client(server)
        api.observer = lambda method, path, status: leading.__setitem__(0, False)
        with pytest.raises(RuntimeError, match="no longer leading"):
            api.create("/api/v1/namespaces/default/configmaps", {}, guard=fence)
    assert server.seen == ["POST"]


_LEADER_WRITES = [
    # The controller's writes of a clique, a domain's status and a node's label copy.
    pytest.param("POST", lambda api: api.create(resources.CLIQUES.path(namespace="drv"), {}),
                 id="clique"),
    pytest.param("PUT", lambda api: writes.write_planned(
        api, resources.COMPUTE_DOMAINS.path("d", namespace="ns"), lambda obj: obj,
        current={"metadata": {"resourceVersion": "7"}}, subresource="status",
    ), id="status"),
    pytest.param("PATCH", lambda api: nodes.set_label_if(
        api, "node-1", "label", expected="", value="d", resource_version="7",
    ), id="node-label"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "write"), _LEADER_WRITES)
def test_a_leaders_write_waiting_for_its_retry_is_not_sent_once_the_lease_is_lost(
    method: str, write: Callable[[client.Client], Any]
) -> None:
    leading = [True]
    with serving((429, {"Retry-After": "0"}), (200, {})) as server:
        api = _client(server)
        # The fence closes while the refused write waits to be sent again.
        api.observer = lambda method, path, status: leading.__setitem__(0, False)
        leader = writes.fenced(api, lambda: leading[0])
        with pytest.raises(writes.Fenced):
            write(leader)
        assert server.seen == [method]
        # Reads change nothing: they still go out.
        assert leader.get(resources.NODES.path("node-1"))["metadata"]["name"] == "x"
    assert server.seen == [method, "GET"]


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
    with serving((401, {}), (200, {})) as server:
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
