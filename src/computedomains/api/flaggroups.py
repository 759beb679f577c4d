"""Flags more than one component takes: one name, one default and one bound each.

Every flag has an environment twin (``computedomains.settings``). The node paths are a
table, :data:`NODE_PATHS`, which the chart's path helper is checked against
(``tests/chart``), so the flags, their defaults and the chart cannot disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from computedomains import settings as flags
from computedomains.api import constants

DEFAULT_NODES_PER_CLIQUE = 18
"""Compute trays in a GB200/GB300 NVL72 rack: the nodes of one NVLink domain."""
MAX_NODES_PER_CLIQUE = 9999
"""nodes.cfg names IMEX slots with four digits."""


@dataclasses.dataclass(frozen=True)
class NodePath:
    """A node-local path flag: its default and what it names."""

    flag: str
    default: pathlib.Path
    help: str


NODE_PATHS = {
    p.flag: p
    for p in (
        NodePath(
            "--fabric-verdict-file", constants.FABRIC_VERDICT_FILE, "verdict node-init writes"
        ),
        NodePath("--imex-dir", constants.IMEX_DIR, "IMEX config, nodes file and IMEX status"),
        NodePath("--imex-status-file", constants.IMEX_STATUS_FILE, "the IMEX agent's status"),
        NodePath("--kubelet-registry-dir", constants.KUBELET_REGISTRY_DIR, "plugin registration"),
        NodePath("--kubelet-plugins-dir", constants.KUBELET_PLUGINS_DIR, "sockets, checkpoint"),
        NodePath("--cdi-root", constants.CDI_ROOT, "CDI spec directory"),
        NodePath("--proc-root", pathlib.Path("/proc"), "the host's /proc"),
        NodePath("--driver-root", pathlib.Path("/"), "where the NVIDIA driver is installed"),
    )
}
"""Every node path flag; the chart mounts each at the same path in the containers."""


@dataclasses.dataclass(frozen=True)
class ApiBudget:
    """A process's API request budget, client-go's QPS and burst (``kube/ratelimit.py``)."""

    qps: float
    """Requests per second on average; 0 limits nothing."""
    burst: int
    """Requests at once above the average."""


CONTROL_BUDGET = ApiBudget(50, 100)
"""The controller's: kube-scheduler's defaults (it writes for every node of a domain)."""
NODE_BUDGET = ApiBudget(20, 40)
"""Every other component's, one per node or a few: near kube-controller-manager's 20/30."""


def add_kube(
    parser: argparse.ArgumentParser,
    *,
    namespace: bool = True,
    budget: ApiBudget | None = NODE_BUDGET,
) -> None:
    """``--kubeconfig`` and ``--namespace`` (the driver's).

    For a component with a ``budget`` also ``--kube-api-qps`` and ``--kube-api-burst``,
    defaulting to it.
    """
    flags.add(
        parser,
        "--kubeconfig",
        default=None,
        type=flags.path,
        help="kubeconfig (default: the pod's ServiceAccount)",
    )
    if namespace:
        flags.add(parser, "--namespace", default="default", help="the driver's namespace")
    if budget is not None:
        flags.add(parser, "--kube-api-qps", default=f"{budget.qps:g}", type=flags.not_negative,
                  help="API requests per second on average (0: no limit)")  # fmt: skip
        flags.add(parser, "--kube-api-burst", default=str(budget.burst), type=flags.at_least_one,
                  help="API requests at once above the average")  # fmt: skip


def api_budget(args: argparse.Namespace) -> ApiBudget:
    """The budget :func:`add_kube`'s flags parsed to."""
    return ApiBudget(args.kube_api_qps, args.kube_api_burst)


def add_node(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--node-name``: the node the component serves (downward API in the chart)."""
    flags.add(parser, "--node-name", default=None if required else "", required=required,
              help="this node's name")  # fmt: skip


def add_http(parser: argparse.ArgumentParser) -> None:
    """``--http-bind``: metrics and probes."""
    flags.add(parser, "--http-bind", default="0.0.0.0:8080", help="metrics and probes host:port")


def add_node_paths(parser: argparse.ArgumentParser, *names: str) -> None:
    """The node path flags ``names`` (keys of :data:`NODE_PATHS`)."""
    for name in names:
        path = NODE_PATHS[name]
        flags.add(parser, name, default=str(path.default), type=flags.path, help=path.help)


def add_max_nodes_per_clique(parser: argparse.ArgumentParser) -> None:
    """``--max-nodes-per-clique``: IMEX slots per clique, 1 to :data:`MAX_NODES_PER_CLIQUE`."""
    flags.add(
        parser,
        "--max-nodes-per-clique",
        default=str(DEFAULT_NODES_PER_CLIQUE),
        type=_nodes_per_clique,
        help=f"IMEX slots per clique, 1..{MAX_NODES_PER_CLIQUE} "
        f"({DEFAULT_NODES_PER_CLIQUE} compute trays in an NVL72 rack)",
    )


def _nodes_per_clique(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_NODES_PER_CLIQUE:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_NODES_PER_CLIQUE}, got {number}")
    return number
