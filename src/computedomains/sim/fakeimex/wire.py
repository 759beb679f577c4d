"""The fake IMEX's line protocol: one JSON object per line, on peer and command connections.

Kept apart from :mod:`~computedomains.sim.fakeimex.links` so that ``nvidia-imex-ctl``, which
starts for every check, imports only this and the config parser.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any

MAX_LINE = 65536


def read_line(sock: socket.socket) -> dict[str, Any]:
    """One JSON line from ``sock`` (its timeout applies); raises OSError or ValueError."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed during the handshake")
        data += chunk
        if len(data) > MAX_LINE:
            raise ValueError("handshake line too long")
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("handshake is not a JSON object")
    return message


def send_line(sock: socket.socket, message: Mapping[str, Any]) -> None:
    """One JSON line to ``sock``."""
    sock.sendall(json.dumps(message).encode() + b"\n")
