"""The simulated kubelet's container logs API: paths and the parts of a log a request asks for."""

from __future__ import annotations

import http.client
import pathlib
import socket
import ssl
import threading

import pytest

from cdsim.kubelet import logserver, serviceproxy

LOG = b"one\ntwo\nthree\n"


@pytest.mark.parametrize(
    ("tail", "limit", "expected"),
    [
        (None, None, LOG),
        (2, None, b"two\nthree\n"),
        (0, None, b""),
        (10, None, LOG),
        (None, 5, b"one\nt"),
        (2, 4, b"two\n"),  # the tail first, then the byte limit from its start
    ],
)
def test_tail_lines_then_limit_bytes(tail: int | None, limit: int | None, expected: bytes) -> None:
    assert logserver.select(LOG, tail_lines=tail, limit_bytes=limit) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/containerLogs/ns/pod-1/main", ("ns", "pod-1", "main")),
        ("/containerLogs/ns/pod-1", None),
        ("/containerLogs/ns//main", None),
        ("/exec/ns/pod/main", None),
    ],
)
def test_only_container_log_paths_are_served(
    path: str, expected: tuple[str, str, str] | None
) -> None:
    assert logserver.parse_path(path) == expected


def test_the_kubelet_port_of_a_node_with_pods_is_the_kubelet_api() -> None:
    pods = [{"spec": {"nodeName": "n3"}, "status": {"hostIP": "127.16.0.3", "podIP": "127.17.0.9"}}]
    assert serviceproxy.is_kubelet("127.16.0.3:10250", pods, logserver.KUBELET_PORT)
    assert serviceproxy.is_kubelet("n3:10250", pods, logserver.KUBELET_PORT)  # by Hostname
    assert not serviceproxy.is_kubelet("n4:10250", pods, logserver.KUBELET_PORT)
    assert not serviceproxy.is_kubelet("127.16.0.3:8443", pods, logserver.KUBELET_PORT)
    assert not serviceproxy.is_kubelet("127.17.0.9:10250", pods, logserver.KUBELET_PORT)


def test_a_log_is_served_over_tls_as_the_api_server_asks(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "hook.log"
    log.write_bytes(b"preflight: checking\npreflight: REFUSED: fix it\n")
    context = logserver.tls_context(tmp_path / "tls")
    server_end, client_end = socket.socketpair()

    def log_file(namespace: str, pod: str, container: str) -> pathlib.Path | None:
        return log if (namespace, pod, container) == ("ns", "job-abc", "preflight") else None

    served = threading.Thread(
        target=logserver.serve_connection,
        args=(server_end,),
        kwargs={"context": context, "log_file": log_file},
        daemon=True,
    )
    served.start()
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE  # as the API server does
    with client.wrap_socket(client_end) as tls:
        conn = http.client.HTTPConnection("kubelet")
        conn.sock = tls
        conn.request("GET", "/containerLogs/ns/job-abc/preflight?tailLines=1")
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (200, b"preflight: REFUSED: fix it\n")
        conn.request("GET", "/containerLogs/ns/other/preflight")
        missing = conn.getresponse()
        assert missing.status == 404 and b"pod other" in missing.read()
    served.join(timeout=10)
    assert not served.is_alive(), "the handler did not end when the API server hung up"
