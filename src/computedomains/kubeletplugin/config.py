"""The kubelet plugin's settings: each field declares its flag (with its env twin) once."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from computedomains import flaggroups, flags
from computedomains.api import constants, fabricverdict, imex
from computedomains.fabric import discovery
from computedomains.nodeinit import settings as nodeinit_settings


def _channel_slots(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 63:
        raise argparse.ArgumentTypeError(
            "must be 1..63 (a slice with tainted devices holds 64, one of them the daemon "
            f"device), got {number}"
        )
    return number


@dataclasses.dataclass(frozen=True, kw_only=True)
class PluginConfig:
    """Everything the plugin needs to know about its node and its paths."""

    node_name: str = flags.field(flaggroups.NODE_NAME)
    namespace: str = flags.field(flaggroups.NAMESPACE)
    """The driver's namespace (where the chart runs the components)."""
    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    """None in a pod: the ServiceAccount is used."""
    api_budget: flaggroups.ApiBudget = flags.group(flaggroups.ApiBudget)
    """Its API request budget."""
    registry_dir: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--kubelet-registry-dir"])
    plugins_dir: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--kubelet-plugins-dir"])
    cdi_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--cdi-root"])
    proc_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--proc-root"])
    fabric_verdict_file: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--fabric-verdict-file"])
    imex_status_file: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--imex-status-file"])
    channel_slots: int = flags.option(
        "--channel-slots",
        default="16",
        type=_channel_slots,
        help="channel devices per node (pods of one ComputeDomain per node)",
    )
    """Channel devices published per node: how many pods of one domain a node can host."""
    imex_ready_timeout: float = flags.seconds(
        "--imex-ready-timeout",
        default="20",
        help="seconds a prepare waits for the IMEX domain before asking to retry",
    )
    """Seconds a prepare waits for the node's IMEX domain before answering "retry later"."""
    imex_status_max_age: float = flags.seconds(
        "--imex-status-max-age",
        default=f"{imex.MAX_AGE:g}",
        help="seconds after its last heartbeat that the IMEX agent's status is stale",
    )
    """Seconds after its last heartbeat that the IMEX status counts as stale (a dead agent's):
    well above the agent's heartbeat interval, so a slow agent loop is not taken for a dead one."""
    fault_grace: fabricverdict.Grace = flags.group(fabricverdict.Grace)
    """How long an unreadable verdict file keeps the last usable verdict (node-init's grace)."""
    binding_conditions: bool = flags.field(flaggroups.BINDING_CONDITIONS)
    """Channel devices of a node nobody holds carry binding conditions, so the scheduler waits
    for the controller to reserve the node for one domain (Kubernetes 1.36 beta; older API
    servers drop the field). Off: two domains' first pods can race for a free node, and the
    loser waits on it (docs/placement.md)."""
    collection_interval: float = flags.seconds(
        "--collection-interval",
        default="60",
        help="seconds between garbage collection rounds (claims deleted without an unprepare)",
    )
    """Seconds between garbage collection rounds (claims gone, aborted entries expired). 60: a
    leaked claim is released within a minute for a few claim reads; tests shorten it."""
    http_bind: str = flags.field(flaggroups.HTTP_BIND)
    fabric_recheck_interval: float = flags.option(
        "--fabric-recheck-interval",
        default="0",
        type=flags.not_negative,
        help="seconds between fabric re-checks in this process (node-init's check; 0: none)",
    )
    """node-init's fabric re-check in a thread of the plugin: its interval (0: none)."""
    discovery: discovery.DiscoverySettings = flags.group(discovery.DiscoverySettings)
    """The re-check's fabric discovery; its ``--proc-root`` is the plugin's own."""
    transitional_grace: float = flags.field(nodeinit_settings.TRANSITIONAL_GRACE)
    """The re-check's grace for a registration in progress."""
    taint_broken: bool = flags.field(nodeinit_settings.TAINT_BROKEN)
    """The re-check taints a node whose fabric is broken."""

    @property
    def fabric_recheck(self) -> nodeinit_settings.Settings | None:
        """node-init's check as the re-check thread runs it (None: not here)."""
        if not self.fabric_recheck_interval:
            return None
        return nodeinit_settings.Settings(
            node_name=self.node_name,
            namespace=self.namespace,
            kubeconfig=self.kubeconfig,
            api_budget=self.api_budget,
            discovery=dataclasses.replace(self.discovery, proc_root=self.proc_root),
            verdict_file=self.fabric_verdict_file,
            transitional_grace=self.transitional_grace,
            fault_grace=self.fault_grace,
            taint_broken=self.taint_broken,
            watch=True,
            recheck_interval=self.fabric_recheck_interval,
        )

    @property
    def plugin_dir(self) -> pathlib.Path:
        """``<plugins dir>/<driver>``: sockets and the checkpoint."""
        return self.plugins_dir / constants.DRIVER_NAME

    @property
    def registration_socket(self) -> pathlib.Path:
        """Where the kubelet finds us."""
        return self.registry_dir / f"{constants.DRIVER_NAME}-reg.sock"

    @property
    def dra_socket(self) -> pathlib.Path:
        """The DRA service socket announced at registration."""
        return self.plugin_dir / "dra.sock"

    @property
    def checkpoint_file(self) -> pathlib.Path:
        """The plugin checkpoint."""
        return self.plugin_dir / "checkpoint.json"
