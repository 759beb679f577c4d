"""The fake ``nvidia-imex-ctl``: ask the local daemon over its command port.

``-q`` prints the daemon state (``READY`` once it listens) and exits 0 only then; ``-N`` lists
the nodes of ``nodes.cfg`` with their connection state, ``-N -j`` as JSON. A daemon that does
not answer is ``UNAVAILABLE`` (exit 1), the reason on stderr.

The agent runs it for every health check, so it starts lean: no ``argparse``, ``pathlib``,
``typing`` or ``json`` (``-j`` alone loads it), only the config parser and the wire format
(their imports cost more than the rest of a run).
"""

from __future__ import annotations

import socket
import sys

from cdsim.fakeimex import config, wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

USAGE = "usage: nvidia-imex-ctl [-c CONFIG] (-q | -N [-j])"

_TIMEOUT = 5.0


def ask(cfg: config.ImexConfig, command: str) -> dict[str, Any]:
    """One request to the daemon's command port; raises OSError or ValueError."""
    if not cfg.cmd_enabled:
        raise ConnectionError("the IMEX command service is disabled (IMEX_CMD_ENABLED=0)")
    address = cfg.cmd_bind_ip or cfg.bind_ip
    if not config.dialable(address):
        raise ConnectionError(f"fake IMEX talks to loopback addresses only, got {address!r}")
    with socket.create_connection((address, cfg.cmd_port), timeout=_TIMEOUT) as sock:
        sock.settimeout(_TIMEOUT)
        wire.send_message(sock, {"cmd": command})
        return wire.read_message(sock)


def nodes_text(answer: dict[str, Any]) -> str:
    """The ``-N`` table."""
    lines = [f"Domain State: {answer.get('domain', 'DOWN')}", "Nodes:"]
    for row in answer.get("nodes", []):
        lines.append(
            f"Node #{row['index']:<3} - {row['name']:<20} - {row['address'] or '-':<15} - "
            f"{row['state']}" + (f" ({row['detail']})" if row.get("detail") else "")
        )
    return "\n".join(lines)


class Options(config.Record):
    """The command line: which config, which question (``-q``; otherwise ``-N``), which output."""

    __slots__ = ("config", "json", "query")

    def __init__(self, *, config: str, query: bool, json: bool) -> None:
        self.config = config
        self.query = query
        self.json = json


def parse_args(argv: Sequence[str]) -> Options:
    """``[-c CONFIG] (-q | -N [-j])``; raises :class:`~.config.UsageError`."""
    line = config.parse_command_line(argv, {"-q", "-N", "-j"})
    modes = line.switches - {"-j"}
    if len(modes) != 1:
        raise config.UsageError("give exactly one of -q and -N")
    return Options(config=line.config, query=modes == {"-q"}, json="-j" in line.switches)


def main(argv: Sequence[str]) -> int:
    """``nvidia-imex-ctl [-c CONFIG] (-q | -N [-j])``; exit 2 on a wrong command line."""
    try:
        options = parse_args(argv)
    except config.UsageError as exc:
        print(f"{USAGE}\nnvidia-imex-ctl: {exc}", file=sys.stderr)
        return 2
    try:
        cfg = config.parse_config(config.read(options.config))
        answer = ask(cfg, "query" if options.query else "nodes")
    except (OSError, ValueError) as exc:
        print("UNAVAILABLE")
        print(f"nvidia-imex-ctl: cannot reach the IMEX daemon: {exc}", file=sys.stderr)
        return 1
    if options.query:
        print(answer.get("state", "UNAVAILABLE"))
        return 0 if answer.get("state") == "READY" else 1
    if options.json:
        import json  # noqa: PLC0415 - only -j needs it; every -q run would pay its import

        print(json.dumps(answer, indent=2))
    else:
        print(nodes_text(answer))
    return 0
