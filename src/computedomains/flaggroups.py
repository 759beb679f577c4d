"""Flags more than one component takes: one name, one default and one bound each.

Every flag has an environment twin (:mod:`computedomains.flags`). A component's config takes
one of these as a field with ``flags.field(NAME)``, or a whole group with ``flags.group``.
The node paths are a table, :data:`NODE_PATHS`, which the chart's path helper is checked
against (``tests/chart``), so the flags, their defaults and the chart cannot disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from computedomains import flags
from computedomains.api import constants

DEFAULT_NODES_PER_CLIQUE = 18
"""Compute trays in a GB200/GB300 NVL72 rack: the nodes of one NVLink domain."""
MAX_NODES_PER_CLIQUE = 9999
"""nodes.cfg names IMEX slots with four digits."""

KUBECONFIG = flags.Flag(
    "--kubeconfig", "kubeconfig (default: the pod's ServiceAccount)", None, flags.path,
    env="KUBECONFIG",
)  # fmt: skip
NAMESPACE = flags.Flag("--namespace", "the driver's namespace", "default")
NODE_NAME = flags.Flag("--node-name", "this node's name", None, required=True)
POD_NAME = flags.Flag("--pod-name", "this pod's name (the chart passes it, downward API)", None)
HTTP_BIND = flags.Flag("--http-bind", "metrics and probes host:port", "0.0.0.0:8080")


def _nodes_per_clique(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_NODES_PER_CLIQUE:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_NODES_PER_CLIQUE}, got {number}")
    return number


MAX_NODES_PER_CLIQUE_FLAG = flags.Flag(
    "--max-nodes-per-clique",
    f"IMEX slots per clique, 1..{MAX_NODES_PER_CLIQUE} "
    f"({DEFAULT_NODES_PER_CLIQUE} compute trays in an NVL72 rack)",
    str(DEFAULT_NODES_PER_CLIQUE),
    _nodes_per_clique,
)


def _node_path(name: str, default: pathlib.Path, help: str) -> flags.Flag:
    return flags.Flag(name, help, str(default), flags.path)


NODE_PATHS = {
    p.name: p
    for p in (
        _node_path(
            "--fabric-verdict-file", constants.FABRIC_VERDICT_FILE, "verdict node-init writes"
        ),
        _node_path("--imex-dir", constants.IMEX_DIR, "IMEX config, nodes file and IMEX status"),
        _node_path("--imex-status-file", constants.IMEX_STATUS_FILE, "the IMEX agent's status"),
        _node_path("--kubelet-registry-dir", constants.KUBELET_REGISTRY_DIR, "plugin registration"),
        _node_path("--kubelet-plugins-dir", constants.KUBELET_PLUGINS_DIR, "sockets, checkpoint"),
        _node_path("--cdi-root", constants.CDI_ROOT, "CDI spec directory"),
        _node_path("--proc-root", pathlib.Path("/proc"), "the host's /proc"),
        _node_path("--driver-root", pathlib.Path("/"), "where the NVIDIA driver is installed"),
    )
}
"""Every node path flag; the chart mounts each at the same path in the containers."""

BINDING_CONDITIONS = flags.Flag(
    "--binding-conditions",
    "have the controller confirm a first placement on a free node (binding conditions; "
    "value kubeletPlugin.bindingConditions)",
    True,
    switch=True,
    negatable=True,
)
"""The plugin publishes them; preflight checks the API server keeps them."""
GPU_NODE_SELECTOR = flags.Flag(
    "--gpu-node-selector",
    "label selector of the GPU nodes (value kubeletPlugin.nodeSelector)",
    "nvidia.com/gpu.present=true",
)
"""The nodes preflight and verify look at: where the chart runs its node components."""
ADOPT = flags.Flag(
    "--adopt",
    "take over an incumbent install (value adopt.enabled): preflight hands its objects to this "
    "release, migrate retires its per-domain objects once ours serve their nodes",
    False,
    switch=True,
)
AGENT_DAEMONSET = flags.Flag(
    "--agent-daemonset", "the IMEX agent DaemonSet of this release (its name, in --namespace)", ""
)
"""Preflight checks its update strategy; roll-agents replaces its pods (required there)."""
TIMEOUT_SECONDS = flags.Flag(
    "--timeout-seconds",
    "seconds the hook waits at most for what it waits on (its description says what), then "
    "reports what is left",
    "120",
    flags.positive,
)
"""Verify's, roll-agents' and uninstall's wait, each with its own default."""


@dataclasses.dataclass(frozen=True)
class ApiBudget:
    """A process's API request budget, client-go's QPS and burst (``kube/ratelimit.py``).

    A flag group (``--kube-api-qps``, ``--kube-api-burst``): each component takes it with its
    own defaults (:data:`CONTROL_BUDGET`).
    """

    qps: float = flags.option(
        "--kube-api-qps", default="20", type=flags.not_negative,
        help="API requests per second on average (0: no limit)"
    )  # fmt: skip
    """Requests per second on average; 0 limits nothing."""
    burst: int = flags.option(
        "--kube-api-burst", default="40", type=flags.at_least_one,
        help="API requests at once above the average"
    )  # fmt: skip
    """Requests at once above the average."""


CONTROL_BUDGET = {"qps": "50", "burst": "100"}
"""The controller's defaults (``flags.group(ApiBudget, **CONTROL_BUDGET)``): kube-scheduler's,
as it writes for every node of a domain. Every other component, one per node or a few, keeps
the group's own 20/40, near kube-controller-manager's 20/30."""
