"""The kubelet API's container logs: what ``kubectl logs`` and Helm's hook output read.

The API server serves ``pods/log`` by asking the pod's node's kubelet
(``GET https://<node IP>:10250/containerLogs/<namespace>/<pod>/<container>``) through its
``cluster`` egress, which is the Service proxy (:mod:`serviceproxy`). The proxy hands a
connection to a node's kubelet port to :func:`serve_connection`, which answers from the
container's log file (``logs/pods/<ns>_<pod>_<uid>/<container>.log``) over TLS with a
certificate of its own, as a kubelet serves with its self-signed one (the API server checks
kubelet certificates only when given ``--kubelet-certificate-authority``).

Supported: ``tailLines``, ``limitBytes``. A container's restarts share one file (``previous``
reads the same), and ``follow`` returns what is there now instead of streaming.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import pathlib
import socket
import ssl
import tempfile
import urllib.parse
from collections.abc import Callable

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from computedomains import certificates

KUBELET_PORT = 10250
"""The kubelet's API port; the simulated nodes report no other, so the API server uses this."""
PATH_PREFIX = "/containerLogs/"
_IDLE_SECONDS = 120.0


def select(text: bytes, *, tail_lines: int | None, limit_bytes: int | None) -> bytes:
    """The part of a log a request asks for.

    Its last ``tail_lines`` lines, then at most ``limit_bytes`` of them (from the start), as
    the kubelet applies both.
    """
    if tail_lines is not None:
        lines = text.splitlines(keepends=True)
        text = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
    if limit_bytes is not None:
        text = text[:limit_bytes]
    return text


def parse_path(path: str) -> tuple[str, str, str] | None:
    """``(namespace, pod, container)`` of a ``/containerLogs/...`` path; None for another path."""
    if not path.startswith(PATH_PREFIX):
        return None
    parts = path.removeprefix(PATH_PREFIX).split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


def _number(query: dict[str, list[str]], key: str) -> int | None:
    values = query.get(key)
    return int(values[0]) if values else None


def tls_context(directory: pathlib.Path) -> ssl.SSLContext:
    """A server context with a fresh certificate of its own CA.

    Its key and certificate are written under ``directory`` (ssl loads them from files only).
    """
    now = datetime.datetime.now(datetime.UTC)
    key = certificates.new_key()
    ca = certificates.new_ca(
        key,
        subject=certificates.name("sim-kubelet-ca"),
        now=now,
        not_after=now + datetime.timedelta(days=30),
    )
    leaf_key = certificates.new_key()
    leaf = certificates.new_leaf(
        leaf_key,
        ca=ca,
        ca_key=key,
        subject=certificates.name("sim-kubelet"),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        now=now,
        not_after=now + datetime.timedelta(days=30),
    )
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".pem", delete=False) as pem:
        pem.write(certificates.cert_pem(leaf) + certificates.key_pem(leaf_key))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem.name)
    return context


def serve_connection(
    client: socket.socket,
    *,
    context: ssl.SSLContext,
    log_file: Callable[[str, str, str], pathlib.Path | None],
) -> None:
    """Answer the requests on one proxied connection (TLS, HTTP/1.1) until it closes.

    ``log_file(namespace, pod, container)``: the container's log, None when there is none.
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = _IDLE_SECONDS  # a connection the API server keeps but no longer uses ends

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            target = parse_path(url.path)
            if target is None:
                self._answer(404, b"the simulated kubelet serves containerLogs only\n")
                return
            path = log_file(*target)
            if path is None or not path.is_file():
                self._answer(404, f"no log for container {target[2]} of pod {target[1]}\n".encode())
                return
            query = urllib.parse.parse_qs(url.query)
            try:
                tail, limit = _number(query, "tailLines"), _number(query, "limitBytes")
            except ValueError:
                self._answer(400, b"tailLines and limitBytes take integers\n")
                return
            self._answer(200, select(path.read_bytes(), tail_lines=tail, limit_bytes=limit))

        def _answer(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the API server's requests need no line each."""

    client.settimeout(_IDLE_SECONDS)  # a handshake that never comes must not hold the thread
    with context.wrap_socket(client, server_side=True) as tls:
        Handler(tls, ("apiserver", 0), None)  # type: ignore[arg-type]
