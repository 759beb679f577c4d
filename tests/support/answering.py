"""A loopback HTTP server that answers each request with the next of a list of answers.

For the API client's retries: a 429 or a 5xx (with the headers given), then an answer.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator


class Server(http.server.ThreadingHTTPServer):
    answers: list[tuple[int, dict[str, str]]]
    """(status, extra headers) per request in turn; the last repeats."""
    seen: list[str]
    auth: list[str]
    """The Authorization header of each request."""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Server

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
            document = {"kind": "ConfigMap", "metadata": {"name": "x", "resourceVersion": "8"}}
        body = json.dumps(document).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def serving(*answers: tuple[int, dict[str, str]]) -> Iterator[Server]:
    """Answer on a free loopback port while the block runs."""
    server = Server(("127.0.0.1", 0), _Handler)
    server.answers, server.seen, server.auth = list(answers), [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url(server: Server) -> str:
    """The server's address, as a kubeconfig names it."""
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"
