"""The fake ``nvidia-imex``: bind, connect to peers, answer the command port, reload, stop.

Like the real daemon it reads its config at start, is READY as soon as it listens (no quorum
is awaited on a clean start), re-reads ``nodes.cfg`` and the hosts entries on SIGUSR1 (at most
once per :data:`RELOAD_INTERVAL`; extra signals are ignored and logged) and exits 0 on
SIGTERM. Every socket is on the loopback pod address it is given.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import time
import types

from cdsim.fakeimex import config, links, log, wire

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: ``typing`` would cost every daemon start its import
    from collections.abc import Sequence
    from typing import Any

RELOAD_INTERVAL = 5.0
"""Seconds between processed SIGUSR1s; real IMEX ignores signals that come sooner."""
_TICK = 1.0
"""Longest wait of the main loop between checks of its stop and crash deadlines."""


class StartupError(Exception):
    """The daemon cannot run; the message is logged as IMEX's error and it exits 1."""


class Inputs(config.Record):
    """Everything the daemon reads from disk and the environment, parsed."""

    __slots__ = ("config_path", "faults", "imex")

    def __init__(self, config_path: str, imex: config.ImexConfig, faults: config.Faults) -> None:
        self.config_path = config_path
        self.imex = imex
        self.faults = faults


def load_faults(config_path: str, environ: dict[str, str]) -> config.Faults:
    """Faults from the environment and from the ``fail`` file next to the config."""
    faults = config.parse_faults(environ.get(config.FAIL_ENV, ""))
    fail_file = os.path.join(os.path.dirname(config_path), config.FAIL_FILE)
    if os.path.exists(fail_file):
        faults = faults.merged(config.parse_faults(config.read(fail_file)))
    return faults


def load_view(cfg: config.ImexConfig, faults: config.Faults, environ: dict[str, str]) -> links.View:
    """The node list of ``nodes.cfg``, resolved through the hosts file, and our own entry."""
    hosts_file = environ.get(config.HOSTS_ENV) or config.DEFAULT_HOSTS
    try:
        entries = config.parse_nodes(config.read(cfg.node_config_file))
        hosts = config.parse_hosts(config.read(hosts_file))
    except OSError as exc:
        raise StartupError(f"Failed to read node configuration: {exc}") from None
    nodes = config.resolve(entries, hosts)
    own = own_address(cfg)
    me = next((n for n in nodes if n.address == own), None)
    if me is None:
        raise StartupError(
            f"No entry of {cfg.node_config_file} resolves to this node's address {own} "
            f"(hosts file {hosts_file}): no matching network interface"
        )
    return links.View(
        self_node=me,
        nodes=nodes,
        server_port=cfg.server_port,
        tag=links.domain_tag(entries),
        refuse=faults.refuse,
    )


def own_address(cfg: config.ImexConfig) -> str:
    """The address this daemon binds: BIND_INTERFACE_IP, else the command address.

    Real IMEX finds its own entry of nodes.cfg among the host's interfaces; on one machine
    every loopback address is local, so the fake needs to be told which one is its own.
    """
    address = cfg.bind_ip or cfg.cmd_bind_ip
    if not config.dialable(address):
        raise StartupError(
            f"fake IMEX binds IPv4 loopback addresses only; got {address or 'none'} "
            "(set IMEX_CMD_BIND_INTERFACE_IP)"
        )
    return address


def listen(address: str, port: int, *, fail: bool) -> socket.socket:
    """A listening socket on ``address:port``; ``fail`` injects the bind error."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As real servers do: a restart must not wait for old connections in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if fail:
            raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))
        sock.bind((address, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise StartupError(f"Failed to bind to {address}:{port}: {exc.strerror}") from None
    return sock


class Daemon:
    """One fake IMEX process."""

    def __init__(self, inputs: Inputs, environ: dict[str, str]) -> None:
        self._inputs = inputs
        self._environ = environ
        self._links = links.Links()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._stop = False
        self._reload_asked = False
        self._last_reload: float | None = None
        self._reloads = 0
        self._state = "INITIALIZING"
        self._answering = threading.Event()
        """Set while the daemon answers: cleared by the ``hang`` fault."""
        self._answering.set()

    def run(self) -> int:
        """Serve until SIGTERM; returns the exit code."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_reload)
        cfg, faults = self._inputs.imex, self._inputs.faults
        delay = float(self._environ.get(config.START_DELAY_ENV) or 0)
        if delay > 0:
            time.sleep(delay)  # the simulated start-up work itself, not a wait for some state
        try:
            view = load_view(cfg, faults, self._environ)
            address = view.self_node.address or ""
            server = listen(address, cfg.server_port, fail=faults.bind)
            command = listen(cfg.cmd_bind_ip or address, cfg.cmd_port, fail=False)
        except StartupError as exc:
            log.emit("ERROR", str(exc))
            return 1
        self._links.apply(view)
        self._set_hang(faults.hang)
        _serve(server, self._peer, "peers", self._stopped)
        if cfg.cmd_enabled:
            _serve(command, self._command, "commands", self._stopped)
        self._state = "READY"
        me = view.self_node
        log.emit("INFO", f"IMEX daemon is READY as node {me.number} ({me.name}, {address}), "
                 f"{len(view.nodes)} nodes configured.")  # fmt: skip
        code = self._loop(started=time.monotonic(), crash_after=faults.crash_after)
        self._state = "SHUTTING_DOWN"
        self._stopped.set()
        self._links.close()
        server.close()
        command.close()
        return code

    def _loop(self, *, started: float, crash_after: float | None) -> int:
        while not self._stop:
            if crash_after is not None and time.monotonic() - started >= crash_after:
                log.emit("ERROR", f"Fatal error: crashing {crash_after:g}s after start "
                         "(an injected fault)")  # fmt: skip
                os._exit(1)  # a crash: no clean shutdown
            if self._reload_asked:
                self._reload_asked = False
                self._reload()
            self._look_for_hang()
            self._wake.wait(_TICK)
            self._wake.clear()
        log.emit("INFO", "Received a stop signal; shutting down.")
        return 0

    def _reload(self) -> None:
        now = time.monotonic()
        if self._last_reload is not None and now - self._last_reload < RELOAD_INTERVAL:
            log.emit("WARN", f"SIGUSR1 ignored: the last reload was {now - self._last_reload:.1f}s "
                     f"ago (at most one per {RELOAD_INTERVAL:g}s)")  # fmt: skip
            return
        self._last_reload = now
        try:
            faults = load_faults(self._inputs.config_path, self._environ)
            view = load_view(self._inputs.imex, faults, self._environ)
        except (StartupError, config.ConfigError, OSError) as exc:
            log.emit("ERROR", f"Reload failed: {exc}")
            os._exit(1)
        self._links.apply(view)
        self._reloads += 1
        log.emit("INFO", f"SIGUSR1: reloaded {len(view.nodes)} nodes; reconnecting to peers.")

    def _look_for_hang(self) -> None:
        """Hang, or answer again, as the ``fail`` file (or the environment) says now."""
        try:
            faults = load_faults(self._inputs.config_path, self._environ)
        except (OSError, config.ConfigError):
            return  # a file being rewritten, or a typo: keep the state until it reads well
        self._set_hang(faults.hang)

    def _set_hang(self, hang: bool) -> None:
        if hang and self._answering.is_set():
            self._answering.clear()
            log.emit("WARN", "Hanging: answering neither commands nor peers (an injected fault)")
        elif not hang and not self._answering.is_set():
            self._answering.set()
            log.emit("INFO", "Answering again: the hang fault was lifted.")

    def _wait_answering(self) -> bool:
        """Block while hung; False once the daemon stops meanwhile."""
        while not self._answering.wait(_TICK):
            if self._stopped.is_set() or self._stop:
                return False
        return True

    def _on_stop(self, signum: int, frame: types.FrameType | None) -> None:
        self._stop = True
        self._wake.set()

    def _on_reload(self, signum: int, frame: types.FrameType | None) -> None:
        self._reload_asked = True
        self._wake.set()

    def _peer(self, conn: socket.socket, source: str) -> None:
        if not self._wait_answering():
            return
        conn.settimeout(5)
        try:
            answer = self._links.answer(wire.read_message(conn), source)
            wire.send_message(conn, answer)
        except (OSError, ValueError):
            return
        if answer["ok"]:
            links.hold_open(conn)

    def _command(self, conn: socket.socket, source: str) -> None:
        conn.settimeout(5)
        try:
            request = wire.read_message(conn)
            if not self._wait_answering():
                return
            wire.send_message(conn, self._answer(str(request.get("cmd", ""))))
        except (OSError, ValueError):
            return

    def _answer(self, command: str) -> dict[str, Any]:
        if command == "query":
            return {"state": self._state}
        if command == "nodes":
            domain, rows = self._links.table()
            return {"state": self._state, "domain": domain, "pid": os.getpid(),
                    "reloads": self._reloads, "nodes": rows}  # fmt: skip
        return {"error": f"unknown command {command!r}"}


def _serve(listener: socket.socket, handle: Any, name: str, stopped: threading.Event) -> None:
    """Accept on ``listener`` in a daemon thread until ``stopped``, a thread per connection."""
    # A blocked accept() is not woken by closing its socket on Linux: wake up now and then.
    listener.settimeout(_TICK)

    def accept() -> None:
        while not stopped.is_set():
            try:
                conn, (source, _) = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed at shutdown
            threading.Thread(
                target=_handled, args=(handle, conn, source), name=f"{name}-{source}", daemon=True
            ).start()

    threading.Thread(target=accept, name=f"accept-{name}", daemon=True).start()


def _handled(handle: Any, conn: socket.socket, source: str) -> None:
    with conn:
        handle(conn, source)


def main(argv: Sequence[str]) -> int:
    """``nvidia-imex [-c CONFIG] [--nogpu]``: run in the foreground (the config says DAEMONIZE=0).

    ``--nogpu`` is accepted, as the real daemon's; the fake has no GPU either way.
    """
    try:
        line = config.parse_command_line(argv, {"--nogpu"})
    except config.UsageError as exc:
        log.emit("ERROR", f"Invalid command line: {exc}")
        return 2
    environ = dict(os.environ)
    try:
        cfg = config.parse_config(config.read(line.config))
        faults = load_faults(line.config, environ)
    except (OSError, config.ConfigError) as exc:
        log.emit("ERROR", f"Failed to load config {line.config}: {exc}")
        return 1
    return Daemon(Inputs(line.config, cfg, faults), environ).run()
