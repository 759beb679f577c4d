"""A TCP proxy in front of the API server that can hold back what one client sends.

A component whose kubeconfig points at the proxy keeps receiving (watch events, answers
already on their way) while everything it sends waits in the proxy until :meth:`release`:
a network that delays one replica's requests, as a congested link or a paused sidecar
would. TLS passes through untouched, so the component still authenticates to the real
API server and verifies its certificate (both listen on 127.0.0.1).

What is held is application data: a connection opened while holding still completes its
handshake (its TLS handshake records pass), so its first request is sent, from the
client's side, and waits here like one on a connection opened before. Holding the handshake
as well would make such a request a connect failure that never reaches the server.
"""

from __future__ import annotations

import contextlib
import pathlib
import queue
import socket
import threading
from typing import Any, TypeAlias

import yaml

_APPLICATION_DATA = 23
"""TLS record content type of everything encrypted (TLS 1.3 sends even its last handshake
message, the client's Finished, as one)."""
_RECORD_HEADER = 5
"""Content type (1 byte), legacy version (2), length (2)."""

Record: TypeAlias = tuple[int, bytes]
"""A TLS record as it goes up: its content type and its bytes, header included."""


class HoldBackProxy:
    """Forwards connections to ``target``; :meth:`hold` stops what clients send, only that."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="holdback-accept", daemon=True).start()

    @property
    def url(self) -> str:
        """The proxy's address, as an API server URL."""
        return f"https://127.0.0.1:{self.port}"

    def hold(self) -> None:
        """From now on, keep every byte clients send (answers still reach them)."""
        self._open.clear()

    def release(self) -> None:
        """Send on what was held, in order, and everything after it."""
        self._open.set()

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        self._open.set()
        with self._lock:
            sockets, self._sockets = [self._listener, *self._sockets], []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def kubeconfig(self, source: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
        """A copy of ``source`` (absolute file references) whose clusters are reached through
        the proxy."""
        document: dict[str, Any] = yaml.safe_load(source.read_text())
        for entry in document["clusters"]:
            entry["cluster"]["server"] = self.url
        dest.touch(mode=0o600)
        dest.write_text(yaml.safe_dump(document, sort_keys=False))
        return dest

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [downstream, upstream]
            held: queue.Queue[Record | None] = queue.Queue()
            for target, args in (
                (self._read, (downstream, held)),
                (self._send_when_open, (held, upstream)),
                (self._forward, (upstream, downstream)),
            ):
                threading.Thread(target=target, args=args, daemon=True).start()

    @staticmethod
    def _read(source: socket.socket, held: queue.Queue[Record | None]) -> None:
        """Read what the client sends as it comes, so the client never blocks on us, and cut
        it into TLS records."""
        pending = b""
        try:
            while data := source.recv(65536):
                pending += data
                while len(pending) >= _RECORD_HEADER:
                    end = _RECORD_HEADER + int.from_bytes(pending[3:_RECORD_HEADER], "big")
                    if len(pending) < end:
                        break
                    held.put((pending[0], pending[:end]))
                    pending = pending[end:]
        except OSError:
            pass
        if pending:
            held.put((_APPLICATION_DATA, pending))
        held.put(None)

    def _send_when_open(self, held: queue.Queue[Record | None], dest: socket.socket) -> None:
        """Send handshake records at once and application data once open, in order (a record
        behind a held one waits with it); a client that gave up meanwhile does not close the
        way up.

        The API server cancels a request whose connection it sees closed, so passing the
        client's close on would drop the held request it follows: a write delayed in the
        network still arrives whole. The way up closes with the proxy (:meth:`close`).
        """
        try:
            while (record := held.get()) is not None:
                kind, data = record
                if kind == _APPLICATION_DATA:
                    self._open.wait()
                dest.sendall(data)
        except OSError:
            pass

    @staticmethod
    def _forward(source: socket.socket, dest: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                dest.sendall(data)
            dest.shutdown(socket.SHUT_WR)
        except OSError:
            pass
