"""The controller's settings: each field declares its flag (with its env twin) once."""

from __future__ import annotations

import dataclasses
import pathlib
import socket

from computedomains import flaggroups, flags
from computedomains.kube import leaderelection

DEFAULT_LEASE_NAME = "compute-domains-controller"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """Everything the controller needs to know, validated."""

    namespace: str = flags.field(flaggroups.NAMESPACE)
    """The driver's namespace: cliques, agent pods and the Lease live there."""
    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    """None in a pod: the ServiceAccount is used."""
    api_budget: flaggroups.ApiBudget = flags.group(
        flaggroups.ApiBudget, **flaggroups.CONTROL_BUDGET
    )
    """Its API request budget."""
    pod_name: str = flags.field(flaggroups.POD_NAME)
    """This replica's pod name (none given: the host name); the Lease holder identity is
    ``<pod>-<random>``."""
    leader_elect: bool = flags.switch(
        "--leader-elect",
        default=True,
        negatable=True,
        help="act only while holding the leader Lease",
    )
    """Compete for the Lease before acting (the chart runs two replicas)."""
    lease_name: str = flags.option(
        "--lease-name",
        default=DEFAULT_LEASE_NAME,
        help="name of the leader-election Lease in --namespace",
    )
    election: leaderelection.Timing = flags.group(leaderelection.Timing)
    """Lease duration, renew deadline and retry period, in seconds."""
    max_nodes_per_clique: int = flags.field(flaggroups.MAX_NODES_PER_CLIQUE_FLAG)
    """Slots per clique: IMEX's limit on GB200/GB300 NVL72 is 18 nodes."""
    gc_interval: float = flags.seconds(
        "--gc-interval",
        default="60",
        help="seconds between collections of deleted domains' leftovers",
    )
    """Seconds between collections of what vanished domains left behind."""
    placement_turns: bool = flags.switch(
        "--placement-turns",
        default=True,
        negatable=True,
        help="while one domain places, taint free nodes for it instead of making its pods "
        "wait for binding conditions (docs/placement.md)",
    )
    """Give the one domain placing the turn on free nodes (``controller/turns.py``)."""
    http_bind: str = flags.field(flaggroups.HTTP_BIND)

    def __post_init__(self) -> None:
        if not self.pod_name:
            object.__setattr__(self, "pod_name", socket.gethostname())
