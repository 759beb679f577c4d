"""The HTTP endpoint every long-running component serves: Prometheus metrics and probes.

Probes are functions returning ``(ok, detail)``; the liveness probe should exercise the
component's real sockets, not just answer.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Mapping

import prometheus_client

Probe = Callable[[], tuple[bool, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    registry: prometheus_client.CollectorRegistry
    probes: Mapping[str, Probe]

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(
                200,
                prometheus_client.generate_latest(self.registry),
                prometheus_client.CONTENT_TYPE_LATEST,
            )
            return
        probe = self.probes.get(path)
        if probe is None:
            self._send(404, b"not found\n", "text/plain")
            return
        try:
            ok, detail = probe()
        except Exception as exc:  # noqa: BLE001 - a failing probe is an unhealthy answer
            ok, detail = False, f"probe raised {exc!r}"
        self._send(200 if ok else 503, f"{detail}\n".encode(), "text/plain")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds would drown the component's own logs."""


def serve(
    bind: str, *, registry: prometheus_client.CollectorRegistry, probes: Mapping[str, Probe]
) -> http.server.ThreadingHTTPServer:
    """Serve ``/metrics`` and the probe paths on ``host:port`` in a daemon thread."""
    host, _, port = bind.rpartition(":")
    handler = type("Handler", (_Handler,), {"registry": registry, "probes": dict(probes)})
    server = http.server.ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), handler)  # noqa: S104
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"http-{bind}", daemon=True).start()
    return server
