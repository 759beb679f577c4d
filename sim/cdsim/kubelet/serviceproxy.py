"""The simulated cluster's Service proxy: how the API server reaches webhook Services.

Service IPs are allocated but not routed here, and EndpointSlices cannot hold the pods'
loopback IPs (the API server refuses loopback endpoint addresses). So, as kube-proxy would
on a control-plane host, this proxy turns a connection to a Service's cluster IP and port
into one to a ready pod behind it: the API server's ``cluster`` egress (admission and
CRD-conversion webhooks, aggregated APIs, the kubelet API) goes through it as HTTP CONNECT on
the unix socket :data:`SOCKET_NAME` in the cluster folder (``--egress-selector-config-file``,
see :func:`egress_selector_config`). A node's kubelet port is answered by the simulated
kubelet itself (``kubelet_api``: container logs, :mod:`logserver`). Addresses that are no
Service's are dialled as they are.
TLS stays end to end: the API server still checks the webhook's certificate for
``<service>.<namespace>.svc``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pathlib
import selectors
import socket
import socketserver
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from computedomains.kube import pods as kube_pods

SOCKET_NAME = "service-proxy.sock"
"""The proxy's socket, in the cluster's folder."""
_CONNECT_TIMEOUT = 10.0
_HEADER_LIMIT = 16384
_LOG = logging.getLogger(__name__)


class NoEndpoint(LookupError):
    """The address is a Service's, but no ready pod serves that port."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one proxied connection goes."""

    host: str
    port: int


def egress_selector_config(socket_path: pathlib.Path) -> dict[str, Any]:
    """The API server's EgressSelectorConfiguration: ``cluster`` traffic through this proxy."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(socket_path)}},
                },
            }
        ],
    }


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _ready(pod: Mapping[str, Any]) -> bool:
    return (
        "deletionTimestamp" not in pod.get("metadata", {})
        and bool(pod.get("status", {}).get("podIP"))
        and kube_pods.is_ready(pod)
    )


def _container_port(pod: Mapping[str, Any], name: str) -> int | None:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == name:
                return int(port["containerPort"])
    return None


def resolve(
    address: str, services: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> Target | None:
    """Where a connection to ``address`` (``host:port``) goes.

    A Service's cluster IP and port go to the first ready pod (by name) its selector picks, at
    the port's ``targetPort`` (a number, or a container port's name); None for an address that
    is no Service's (dial it directly). :class:`NoEndpoint` when the Service has no such pod.
    """
    host, port = _split(address)
    for service in services:
        spec = service.get("spec", {})
        ports = [p for p in spec.get("ports", []) if p.get("port") == port]
        if host not in (spec.get("clusterIPs") or [spec.get("clusterIP")]) or not ports:
            continue
        meta = service["metadata"]
        label = f"Service {meta['namespace']}/{meta['name']} port {port}"
        selector = spec.get("selector") or {}
        if not selector:
            raise NoEndpoint(f"{label}: no selector (the simulated cluster proxies to pods only)")
        target = ports[0].get("targetPort", port)
        candidates = sorted(
            (
                p
                for p in pods
                if p["metadata"].get("namespace") == meta["namespace"]
                and selector.items() <= (p["metadata"].get("labels") or {}).items()
                and _ready(p)
            ),
            key=lambda p: str(p["metadata"]["name"]),
        )
        for pod in candidates:
            number = target if isinstance(target, int) else _container_port(pod, str(target))
            if number is not None:
                return Target(str(pod["status"]["podIP"]), int(number))
        raise NoEndpoint(f"{label}: no ready pod serves target port {target!r}")
    return None


def is_kubelet(address: str, pods: Sequence[Mapping[str, Any]], port: int) -> bool:
    """Whether ``address`` is a node's kubelet API: ``port`` on a node some pod runs on.

    The API server dials a node by its first address of ``--kubelet-preferred-address-types``
    (by default its Hostname: the node's name), else its InternalIP.
    """
    host, number = _split(address)
    return number == port and any(
        host in (p.get("spec", {}).get("nodeName"), p.get("status", {}).get("hostIP")) for p in pods
    )


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    with selectors.DefaultSelector() as selector:
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        while True:
            for key, _ in selector.select():
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                if not data:
                    return
                key.data.sendall(data)


class ServiceProxy:
    """HTTP CONNECT on a unix socket; ``lookup`` gives the current Services and pods.

    ``kubelet_api``: ``(port, serve)``: a connection to ``port`` on a node's IP is answered
    by ``serve(connection)`` in this process instead of being dialled.
    """

    def __init__(
        self,
        socket_path: pathlib.Path,
        lookup: Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]],
        kubelet_api: tuple[int, Callable[[socket.socket], None]] | None = None,
    ) -> None:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        socket_path.unlink(missing_ok=True)
        self._lookup = lookup
        self._kubelet_api = kubelet_api
        self._server = socketserver.ThreadingUnixStreamServer(str(socket_path), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="service-proxy", daemon=True
        )

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting connections (open tunnels end with their peers)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handle(self, client: socket.socket) -> None:
        header = b""
        while b"\r\n\r\n" not in header and len(header) < _HEADER_LIMIT:
            chunk = client.recv(4096)
            if not chunk:
                return
            header += chunk
        method, address, *_ = header.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        services, pods = self._lookup()
        early = header.split(b"\r\n\r\n", 1)[1]  # bytes sent before our answer
        try:
            kubelet = self._kubelet_api is not None and is_kubelet(
                address, pods, self._kubelet_api[0]
            )
            if kubelet and early:
                raise ValueError("TLS must wait for the CONNECT answer")
            target = None if kubelet else resolve(address, services, pods)
            host, port = (target.host, target.port) if target else _split(address)
            upstream = None if kubelet else socket.create_connection((host, port), _CONNECT_TIMEOUT)
        except (NoEndpoint, OSError, ValueError) as exc:
            _LOG.warning("CONNECT %s: %s", address, exc)
            reason = str(exc).replace("\r", " ").replace("\n", " ")
            client.sendall(f"HTTP/1.1 503 {reason}\r\n\r\n".encode("latin-1", "replace"))
            return
        if upstream is None:
            assert self._kubelet_api is not None
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with contextlib.suppress(OSError):
                self._kubelet_api[1](client)
            return
        with contextlib.closing(upstream):
            upstream.settimeout(None)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if early:
                upstream.sendall(early)
            with contextlib.suppress(OSError):
                _pump(client, upstream)
