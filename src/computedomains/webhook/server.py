"""The HTTPS endpoint: reviews in, answers out, with a certificate that can change under it.

Each accepted connection is wrapped with the TLS context current at that moment, so a
reloaded certificate serves the next connection while open ones finish with the one they
started with: nothing is dropped. The handshake happens in the connection's own thread,
never in the accept loop.
"""

from __future__ import annotations

import http.server
import json
import logging
import pathlib
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any

from computedomains import certificates
from computedomains.webhook import certs, metrics, review

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024 * 1024
"""Largest review accepted: a ConversionReview of a full list page stays far below."""
CONNECTION_TIMEOUT = 30.0
"""Seconds a connection may stay silent (handshake, request) before it is closed."""

Route = Callable[[Any], review.Answer]
"""Given the decoded request body, the answer (raises :class:`review.BadReview`)."""


class Certificates:
    """The TLS context in use; :meth:`load` replaces it when the bundle changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._loaded: tuple[bytes, bytes] | None = None
        self._not_after: float | None = None

    def load(self, bundle: certs.Bundle) -> bool:
        """Serve ``bundle``'s certificate from the next connection on; False if unchanged."""
        pems = (certificates.cert_pem(bundle.cert), certificates.key_pem(bundle.key))
        with self._lock:
            if self._loaded == pems:
                return False
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # ssl loads certificates from files only: a private folder, gone right after.
        with tempfile.TemporaryDirectory(prefix="webhook-tls-") as folder:
            cert, key = pathlib.Path(folder, "tls.crt"), pathlib.Path(folder, "tls.key")
            cert.write_bytes(pems[0])
            key.touch(mode=0o600)
            key.write_bytes(pems[1])
            context.load_cert_chain(str(cert), str(key))
        with self._lock:
            self._context, self._loaded = context, pems
            self._not_after = bundle.cert.not_valid_after_utc.timestamp()
        return True

    def context(self) -> ssl.SSLContext | None:
        """The context new connections get (None before the first load)."""
        with self._lock:
            return self._context

    def not_after(self) -> float | None:
        """When the certificate in use ends (Unix time), None before the first load."""
        with self._lock:
            return self._not_after


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    certificates: Certificates

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        context = self.certificates.context()
        if context is None:
            sock.close()
            raise OSError("no serving certificate loaded yet")  # the accept loop skips it
        wrapped = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed handshake or a dropped connection is the client's problem: log one line."""
        log.debug("connection from %s failed", client_address, exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the API server keeps connections open
    # Headers and body leave in one write: sent apart, the second waits for the client's
    # delayed ACK (40 ms on Linux) on a kept-alive connection, ten times the whole review.
    wbufsize = 1 << 16
    routes: Mapping[str, Route]
    stats: metrics.WebhookMetrics
    draining: Callable[[], bool]

    def setup(self) -> None:
        self.request.settimeout(CONNECTION_TIMEOUT)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.do_handshake()
        super().setup()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        route = self.routes.get(path)
        if route is None:
            self.stats.answered(path, "error")
            self._send(404, {"error": f"no such path {path}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self.stats.answered(path, "error")
            self._send(400 if length == 0 else 413, {"error": "bad Content-Length"})
            return
        body = self.rfile.read(length)
        with self.stats.timing(path):
            try:
                answer = route(json.loads(body))
            except (ValueError, review.BadReview) as exc:
                self.stats.answered(path, "error")
                self._send(400, {"error": str(exc)})
                return
            except review.NotReady as exc:
                self.stats.answered(path, "not-ready")
                self._send(503, {"error": str(exc)})
                return
            except Exception:
                log.exception("%s failed", path)
                self.stats.answered(path, "error")
                self._send(500, {"error": "internal error (see the webhook's log)"})
                return
            self.stats.answered(path, answer.outcome.value)
            self._send(200, answer.body)

    def _send(self, code: int, document: dict[str, Any]) -> None:
        payload = json.dumps(document, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if self.draining():
            # Stopping: the API server must not keep this connection for a later request
            # that would find the process gone.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """Every review would be a line; the metrics count them instead."""


def serve(
    bind: str,
    *,
    certificates: Certificates,
    routes: Mapping[str, Route],
    stats: metrics.WebhookMetrics,
    draining: Callable[[], bool] = lambda: False,
) -> http.server.ThreadingHTTPServer:
    """Serve ``routes`` over HTTPS on ``host:port`` in a daemon thread.

    Once ``draining()`` says so, every answer closes its connection.
    """
    host, _, port = bind.rpartition(":")
    handler = type(
        "Handler", (_Handler,), {"routes": dict(routes), "stats": stats,
                                 "draining": staticmethod(draining)},
    )  # fmt: skip
    host = host.strip("[]") or "0.0.0.0"  # noqa: S104
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class: type[_Server] = type("Server", (_Server,), {"address_family": family})
    server = server_class((host, int(port)), handler)
    server.certificates = certificates
    threading.Thread(target=server.serve_forever, name=f"https-{bind}", daemon=True).start()
    return server
