"""The fake ``nvidia-imex-ctl``: ask the local daemon over its command port.

``-q`` prints the daemon state (``READY`` once it listens) and exits 0 only then; ``-N`` lists
the nodes of ``nodes.cfg`` with their connection state, ``-N -j`` as JSON. A daemon that does
not answer is ``UNAVAILABLE`` (exit 1), the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import socket
import sys
from collections.abc import Sequence
from typing import Any

from computedomains.sim.fakeimex import config, links

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
        links.send_line(sock, {"cmd": command})
        return links.read_line(sock)


def nodes_text(answer: dict[str, Any]) -> str:
    """The ``-N`` table."""
    lines = [f"Domain State: {answer.get('domain', 'DOWN')}", "Nodes:"]
    for row in answer.get("nodes", []):
        lines.append(
            f"Node #{row['index']:<3} - {row['name']:<20} - {row['address'] or '-':<15} - "
            f"{row['state']}" + (f" ({row['detail']})" if row.get("detail") else "")
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``nvidia-imex-ctl [-c CONFIG] (-q | -N [-j])``."""
    parser = argparse.ArgumentParser(prog="nvidia-imex-ctl", description="fake IMEX control")
    parser.add_argument("-c", "--config", type=pathlib.Path, default=config.DEFAULT_CONFIG)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("-q", action="store_true", help="print the local daemon's state")
    mode.add_argument("-N", action="store_true", help="list the nodes and their connections")
    parser.add_argument("-j", action="store_true", help="JSON output (with -N)")
    args = parser.parse_args(argv)
    try:
        cfg = config.parse_config(args.config.read_text())
        answer = ask(cfg, "query" if args.q else "nodes")
    except (OSError, ValueError) as exc:
        print("UNAVAILABLE")
        print(f"nvidia-imex-ctl: cannot reach the IMEX daemon: {exc}", file=sys.stderr)
        return 1
    if args.q:
        print(answer.get("state", "UNAVAILABLE"))
        return 0 if answer.get("state") == "READY" else 1
    print(json.dumps(answer, indent=2) if args.j else nodes_text(answer))
    return 0
