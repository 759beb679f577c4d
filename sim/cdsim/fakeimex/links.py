"""Connections between fake IMEX daemons: dial every loopback peer, answer their dials.

Each daemon dials every other node of its ``nodes.cfg`` whose address is an IPv4 loopback
address (never anything else) from its own address, and holds the connection open, so a
peer's death shows as a lost connection. The first line each way is a handshake: the dialer
says who it is, whom it means to reach and which node list (domain) it has; the answering
side refuses a different domain, a wrong addressee, a sender whose address differs from its
own view of it (a stale hosts entry) and names it was told to refuse.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import socket
import threading

from cdsim.fakeimex import config, log, wire

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: ``typing`` would cost every daemon start its import
    from collections.abc import Mapping
    from typing import Any

PROTOCOL = "fake-imex/1"
_CONNECT_TIMEOUT = 2.0
_HANDSHAKE_TIMEOUT = 5.0
_RETRY_FIRST = 0.2
_RETRY_CAP = 2.0
"""Seconds between dials of a missing peer; real IMEX backs off much further (15 s, 31 s…)."""


class PeerState(enum.StrEnum):
    """What one node of ``nodes.cfg`` looks like from here."""

    SELF = "SELF"
    CONNECTED = "CONNECTED"
    CONNECTING = "CONNECTING"
    REFUSED = "REFUSED"
    UNRESOLVED = "UNRESOLVED"
    """The name is in no hosts entry."""
    UNAVAILABLE = "UNAVAILABLE"
    """Not a loopback address (an unused slot): never dialed."""


class View(config.Record):
    """One configuration generation: this node, its peers, the port, the domain."""

    __slots__ = ("nodes", "refuse", "self_node", "server_port", "tag")

    def __init__(
        self, *, self_node: config.Node, nodes: tuple[config.Node, ...], server_port: int,
        tag: str, refuse: frozenset[str],
    ) -> None:  # fmt: skip
        self.self_node = self_node
        self.nodes = nodes
        self.server_port = server_port
        self.tag = tag
        self.refuse = refuse


def domain_tag(entries: tuple[str, ...]) -> str:
    """A short digest of the node list: two daemons with different lists are different domains."""
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


def initial_state(view: View, node: config.Node) -> PeerState:
    """The state of ``node`` before any dial."""
    if node.number == view.self_node.number:
        return PeerState.SELF
    if node.address is None:
        return PeerState.UNRESOLVED
    if not config.dialable(node.address):
        return PeerState.UNAVAILABLE
    if node.name in view.refuse:
        return PeerState.REFUSED
    return PeerState.CONNECTING


def hello(view: View, target: config.Node) -> dict[str, str]:
    """The dialer's first line."""
    return {"proto": PROTOCOL, "from": view.self_node.name, "to": target.name, "domain": view.tag}


def check_hello(view: View, message: Mapping[str, Any], source: str) -> str | None:
    """Why the answering side refuses a dial (None: accepted)."""
    problem = _addressing_problem(view, message)
    if problem is not None:
        return problem
    sender = next((n for n in view.nodes if n.name == message.get("from")), None)
    if sender is None:
        return f"{message.get('from')!r} is not in our node list"
    if sender.name in view.refuse:
        return f"connections from {sender.name} are refused (fault injection)"
    if sender.address != source:
        return (
            f"address mismatch: {sender.name} is {sender.address} here, the dial came from {source}"
        )
    return None


def _addressing_problem(view: View, message: Mapping[str, Any]) -> str | None:
    """A dial meant for another protocol, domain or node."""
    if message.get("proto") != PROTOCOL:
        return f"unknown protocol {message.get('proto')!r}"
    if message.get("domain") != view.tag:
        return "domain mismatch: the peer's node list differs from ours"
    if message.get("to") != view.self_node.name:
        return f"addressed to {message.get('to')!r}, but this node is {view.self_node.name!r}"
    return None


def domain_state(states: list[PeerState]) -> str:
    """UP when every reachable peer is connected, DEGRADED when some are, else DOWN."""
    peers = [s for s in states if s not in (PeerState.SELF, PeerState.UNAVAILABLE)]
    connected = sum(s == PeerState.CONNECTED for s in peers)
    if connected == len(peers):
        return "UP"
    return "DEGRADED" if connected else "DOWN"


class Links:
    """The outgoing connections of the current view, and the answers to incoming ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._view: View | None = None
        self._states: dict[int, tuple[PeerState, str]] = {}
        self._stop = threading.Event()
        self._held: set[socket.socket] = set()

    def apply(self, view: View) -> None:
        """Drop every outgoing connection and dial the peers of ``view`` afresh."""
        stop = threading.Event()
        with self._lock:
            old_stop, held = self._stop, self._held
            self._stop.set()
            self._view, self._stop, self._held = view, stop, set()
            self._states = {n.number: (initial_state(view, n), "") for n in view.nodes}
            dial = [n for n in view.nodes if self._states[n.number][0] == PeerState.CONNECTING]
        old_stop.set()
        _shut(held)
        for node in dial:
            threading.Thread(
                target=self._dial, args=(view, node, stop), name=f"dial-{node.name}", daemon=True
            ).start()

    def close(self) -> None:
        """Drop every outgoing connection."""
        with self._lock:
            self._stop.set()
            held, self._held = self._held, set()
        _shut(held)

    def answer(self, message: Mapping[str, Any], source: str) -> dict[str, Any]:
        """The answer to a dialer's first line."""
        with self._lock:
            view = self._view
        if view is None:
            return {"ok": False, "error": "not configured yet"}
        error = check_hello(view, message, source)
        if error is not None:
            log.emit("WARN", f"Refused connection from {source}: {error}")
            return {"ok": False, "error": error}
        return {"ok": True, "name": view.self_node.name}

    def table(self) -> tuple[str, list[dict[str, Any]]]:
        """The domain state and one row per node (index, name, address, state, detail)."""
        with self._lock:
            view, states = self._view, dict(self._states)
        if view is None:
            return "DOWN", []
        rows = [
            {"index": n.number, "name": n.name, "address": n.address or "",
             "state": states[n.number][0].value, "detail": states[n.number][1]}
            for n in view.nodes
        ]  # fmt: skip
        return domain_state([s for s, _ in states.values()]), rows

    def _set(self, view: View, node: config.Node, state: PeerState, detail: str) -> None:
        with self._lock:
            if self._view is view:
                self._states[node.number] = (state, detail)

    def _dial(self, view: View, node: config.Node, stop: threading.Event) -> None:
        """Keep one peer connected until ``stop``: dial, hand-shake, hold, redial on loss."""
        assert node.address is not None and view.self_node.address is not None
        delay = _RETRY_FIRST
        while not stop.is_set():
            try:
                with socket.create_connection(
                    (node.address, view.server_port),
                    timeout=_CONNECT_TIMEOUT,
                    source_address=(view.self_node.address, 0),
                ) as sock:
                    sock.settimeout(_HANDSHAKE_TIMEOUT)
                    wire.send_message(sock, hello(view, node))
                    reply = wire.read_message(sock)
                    if not reply.get("ok"):
                        self._set(view, node, PeerState.REFUSED, str(reply.get("error", "")))
                    else:
                        self._set(view, node, PeerState.CONNECTED, "")
                        log.emit("INFO", f"Connection established to node {node.number} "
                                 f"with ip address {node.address}.")  # fmt: skip
                        delay = _RETRY_FIRST
                        self._hold(sock, stop)
                        if not stop.is_set():
                            log.emit("WARN", f"Connection to node {node.number} lost.")
                            self._set(view, node, PeerState.CONNECTING, "connection lost")
            except (OSError, ValueError) as exc:
                self._set(view, node, PeerState.CONNECTING, str(exc))
            stop.wait(delay)
            delay = min(delay * 2, _RETRY_CAP)

    def _hold(self, sock: socket.socket, stop: threading.Event) -> None:
        """Block until the peer closes the connection or this generation ends."""
        with self._lock:
            if stop.is_set():
                return
            self._held.add(sock)
        try:
            hold_open(sock)
        finally:
            with self._lock:
                self._held.discard(sock)


def hold_open(sock: socket.socket) -> None:
    """Keep a peer connection until the peer closes it (or it is shut down here)."""
    sock.settimeout(None)
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass


def _shut(sockets: set[socket.socket]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
