"""The fake IMEX's wire format on peer and command connections: one framed message each way.

A message is a dict of plain values (str, int, float, bool, None, lists and dicts of them),
sent as ``marshal`` data behind a 4-byte big-endian length. ``marshal`` is built into the
interpreter: ``nvidia-imex-ctl``, a Python start for every check, imports nothing for it
(``json`` would pull in ``re``). Kept apart from :mod:`~cdsim.fakeimex.links`
so that the ctl imports only this and the config parser.
"""

from __future__ import annotations

import marshal

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping
    from typing import Any

MAX_MESSAGE = 65536
_LENGTH = 4


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed in the middle of a message")
        data += chunk
    return data


def read_message(sock: socket.socket) -> dict[str, Any]:
    """One message from ``sock`` (its timeout applies); raises OSError or ValueError."""
    size = int.from_bytes(_read_exactly(sock, _LENGTH), "big")
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes is too long")
    try:
        # Only the fake's own processes speak it, on loopback: bad data raises (or at worst
        # ends this fake), as it would end a real IMEX's connection.
        message = marshal.loads(_read_exactly(sock, size))  # noqa: S302
    except (EOFError, TypeError) as exc:  # what marshal raises on bad data
        raise ValueError(f"unreadable message: {exc}") from exc
    if not isinstance(message, dict):
        raise ValueError("message is not a dict")
    return message


def send_message(sock: socket.socket, message: Mapping[str, Any]) -> None:
    """One message to ``sock``."""
    data = marshal.dumps(dict(message))
    sock.sendall(len(data).to_bytes(_LENGTH, "big") + data)
