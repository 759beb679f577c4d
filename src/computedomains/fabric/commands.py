"""``computedomains fabric show``: the fabric verdict of this node, for an operator on it."""

from __future__ import annotations

import argparse
import json
import os
import socket
from typing import Any

from computedomains import flags
from computedomains.api import fabricverdict
from computedomains.fabric import discovery, verdictfile
from computedomains.fabric.model import ZERO_UUID, NodeReport

JSON = flags.Flag("--json", "print the FabricVerdict document", False, switch=True)


def add_parsers(subparsers: Any) -> None:
    """Register the ``fabric`` subcommands."""
    fabric = subparsers.add_parser("fabric", help="inspect this node's NVLink fabric")
    fabric_sub = fabric.add_subparsers(dest="fabric_command", required=True)
    show = fabric_sub.add_parser(
        "show",
        help="discover the fabric now and print the verdict with a per-GPU table",
        description="Exits 0 for healthy, degraded and no-fabric nodes, 1 otherwise.",
    )
    flags.register(show, JSON)
    flags.add_to(show, discovery.DiscoverySettings)
    show.set_defaults(func=_show)


def _node_name() -> str:
    # In a chart pod the hostname is the pod's; NODE_NAME (downward API) names the node.
    return os.environ.get("NODE_NAME") or socket.gethostname()


def _show(args: argparse.Namespace) -> int:
    settings = flags.build(discovery.DiscoverySettings, args)
    observation = discovery.Observer(settings.make_backend(), settings.proc_root).observe()
    verdict = verdictfile.build(
        _node_name(), observation.verdict, observation.report, observation.observed_at
    )
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2, sort_keys=True))
    else:
        print(render(verdict, observation.report))
    return 0 if verdict.usable else 1


def render(verdict: fabricverdict.FabricVerdict, report: NodeReport | None) -> str:
    """A FabricVerdict as text: summary lines, then one row per GPU."""
    lines = [
        f"node:     {verdict.node}",
        f"verdict:  {verdict.verdict} ({verdict.reason})",
        f"message:  {verdict.message}",
        f"clique:   {verdict.clique or '-'}",
    ]
    if report is None:
        return "\n".join(lines)
    channels = report.imex_channel_count if report.imex_channel_count is not None else "-"
    lines.append(f"driver:   {report.driver_version}   IMEX channels: {channels}")
    rows = [("GPU", "UUID", "NAME", "STATE", "STATUS", "CLIQUE", "HEALTH")]
    for gpu in report.gpus:
        f = gpu.fabric
        rows.append(
            (
                str(gpu.index),
                gpu.uuid,
                gpu.name,
                f.state.value if f else "NOT_SUPPORTED",
                f.status if f else "ERROR_NOT_SUPPORTED",
                f.clique if f and f.cluster_uuid != ZERO_UUID else "-",
                "-" if f is None or f.health_mask is None else f"{f.health_mask:#x}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines.append("")
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)
