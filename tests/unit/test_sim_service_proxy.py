"""The simulated cluster's Service proxy: from a Service IP and port to a ready pod's."""

from __future__ import annotations

import pathlib
import socket
import tempfile
import threading
from typing import Any

import pytest

from cdsim.kubelet import serviceproxy


def _service(selector: dict[str, str] | None, target: int | str = 9443) -> dict[str, Any]:
    return {
        "metadata": {"name": "hook", "namespace": "ns"},
        "spec": {
            "clusterIP": "10.96.0.7",
            "clusterIPs": ["10.96.0.7"],
            "selector": selector,
            "ports": [{"name": "https", "port": 443, "targetPort": target}],
        },
    }


def _pod(name: str, ip: str, *, ready: bool = True, namespace: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "hook"}},
        "spec": {"containers": [{"ports": [{"name": "https", "containerPort": 8443}]}]},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_a_service_address_goes_to_its_first_ready_pod_at_the_target_port() -> None:
    pods = [_pod("b", "127.1.0.2"), _pod("a", "127.1.0.1", ready=False), _pod("c", "127.1.0.3"),
            _pod("z", "127.9.0.1", namespace="other")]  # fmt: skip
    services = [_service({"app": "hook"})]
    assert serviceproxy.resolve("10.96.0.7:443", services, pods) == serviceproxy.Target(
        "127.1.0.2", 9443
    )
    named = [_service({"app": "hook"}, target="https")]
    assert serviceproxy.resolve("10.96.0.7:443", named, pods) == serviceproxy.Target(
        "127.1.0.2", 8443
    )


def test_other_addresses_are_not_services() -> None:
    services = [_service({"app": "hook"})]
    assert serviceproxy.resolve("127.17.0.1:10250", services, []) is None
    assert serviceproxy.resolve("10.96.0.7:80", services, []) is None


@pytest.mark.parametrize(
    ("selector", "pods", "message"),
    [
        ({"app": "hook"}, [], "no ready pod"),
        ({"app": "hook"}, [_pod("a", "127.1.0.1", ready=False)], "no ready pod"),
        (None, [_pod("a", "127.1.0.1")], "no selector"),
    ],
)
def test_a_service_without_a_ready_pod_is_refused_with_the_reason(
    selector: dict[str, str] | None, pods: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(serviceproxy.NoEndpoint, match=message):
        serviceproxy.resolve("10.96.0.7:443", [_service(selector)], pods)


def test_connect_tunnels_to_the_pod_and_refuses_what_has_no_endpoint() -> None:
    backend = socket.create_server(("127.0.0.1", 0))
    port = backend.getsockname()[1]

    def echo() -> None:
        conn, _ = backend.accept()
        with conn:
            conn.sendall(conn.recv(100).upper())

    threading.Thread(target=echo, daemon=True).start()
    pod = _pod("a", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="sp-") as folder:
        path = pathlib.Path(folder) / serviceproxy.SOCKET_NAME
        proxy = serviceproxy.ServiceProxy(path, lambda: ([_service({"app": "hook"}, port)], [pod]))
        proxy.start()
        try:
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(path))
                conn.sendall(b"CONNECT 10.96.0.7:443 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert conn.recv(100).startswith(b"HTTP/1.1 200")
                conn.sendall(b"hello")
                assert conn.recv(100) == b"HELLO"
            pod["status"]["conditions"][0]["status"] = "False"
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(path))
                conn.sendall(b"CONNECT 10.96.0.7:443 HTTP/1.1\r\n\r\n")
                answer = conn.recv(200)
                assert answer.startswith(b"HTTP/1.1 503") and b"no ready pod" in answer
        finally:
            proxy.stop()
            backend.close()
