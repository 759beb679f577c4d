"""node-init's settings: each field declares its flag (with its env twin) once."""

from __future__ import annotations

import dataclasses
import pathlib

from computedomains import flaggroups, flags
from computedomains.api import constants, fabricverdict
from computedomains.fabric import classify, discovery

TRANSITIONAL_GRACE = flags.Flag(
    "--transitional-grace",
    "seconds a fabric registration may stay in progress before the node is broken",
    f"{classify.DEFAULT_GRACE:g}",
    flags.not_negative,
)
TAINT_BROKEN = flags.Flag(
    "--taint-broken",
    f"put the NoSchedule taint {constants.FABRIC_TAINT} on nodes with a broken fabric",
    False,
    switch=True,
    negatable=True,
)
"""Flags of the check itself, which the kubelet plugin's re-check takes too."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything node-init is told (``docs/node-side.md``)."""

    node_name: str = flags.field(flaggroups.NODE_NAME)
    namespace: str = flags.field(flaggroups.NAMESPACE)
    """The driver's namespace, where the controller writes the clique objects: the membership
    record the fault grace asks whether the node is in a domain (``hold.in_domain``)."""
    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    """None: the pod's ServiceAccount."""
    api_budget: flaggroups.ApiBudget = flags.group(flaggroups.ApiBudget)
    """Its API request budget."""
    discovery: discovery.DiscoverySettings = flags.group(discovery.DiscoverySettings)
    verdict_file: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--fabric-verdict-file"])
    transitional_grace: float = flags.field(TRANSITIONAL_GRACE)
    fault_grace: fabricverdict.Grace = flags.group(fabricverdict.Grace)
    """How long a usable verdict is held through a fault that may pass, while the node is in
    a ComputeDomain (``node-init/hold.py``)."""
    taint_broken: bool = flags.field(TAINT_BROKEN)
    watch: bool = flags.switch("--watch", help="keep re-checking (what the plugin's re-check does)")
    recheck_interval: float = flags.seconds(
        "--recheck-interval", default="60", help="seconds between re-checks with --watch"
    )
    poll_interval: float = 5.0
    """Seconds between looks while a registration is in progress (not a flag)."""
