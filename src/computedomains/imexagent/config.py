"""The IMEX agent's settings: each field declares its flag (with its env twin) once."""

from __future__ import annotations

import dataclasses
import pathlib

from computedomains import flaggroups, flags
from computedomains.api import constants, fabricverdict, imex
from computedomains.imexagent import render


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Everything the agent needs to know about its node, its pod and its paths."""

    node_name: str = flags.field(flaggroups.NODE_NAME)
    namespace: str = flags.field(flaggroups.NAMESPACE)
    """The driver's namespace: the agent's pod and the ComputeDomainClique objects."""
    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    """None in a pod: the ServiceAccount is used."""
    api_budget: flaggroups.ApiBudget = flags.group(flaggroups.ApiBudget)
    """Its API request budget."""
    pod_name: str = flags.field(flaggroups.POD_NAME, required=True)
    pod_uid: str = flags.option("--pod-uid", default="", help="this agent pod's UID")
    """Guards the condition write against a newer pod of the same name; may be empty."""
    pod_ip: str = flags.option(
        "--pod-ip", required=True, type=flags.ip_address, help="this agent pod's IP"
    )
    """IMEX's address: its command port binds here and peers reach it here."""
    driver_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--driver-root"])
    """Where the driver is installed: ``usr/bin/nvidia-imex`` and ``nvidia-imex-ctl`` below it."""
    imex_dir: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--imex-dir"])
    fabric_verdict_file: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--fabric-verdict-file"])
    fault_grace: fabricverdict.Grace = flags.group(fabricverdict.Grace)
    """How long the last usable verdict outlives an unreadable one (as in the kubelet plugin):
    a verdict file torn for a moment must not stop IMEX under running pods."""
    hosts_file: pathlib.Path = flags.option(
        "--hosts-file", default="/etc/hosts", type=flags.path, help="hosts file IMEX reads"
    )
    max_nodes_per_clique: int = flags.field(flaggroups.MAX_NODES_PER_CLIQUE_FLAG)
    """Slots per clique, so lines of ``nodes.cfg``: the same on every node of a domain."""
    imex_start_timeout: float = flags.seconds(
        "--imex-start-timeout",
        default="60",
        help="seconds IMEX may take to answer READY before the node reports it failed",
    )
    imex_stop_timeout: float = flags.seconds(
        "--imex-stop-timeout",
        default="15",
        help="seconds from SIGTERM to SIGKILL when IMEX is stopped",
    )
    heartbeat_interval: float = flags.seconds(
        "--heartbeat-interval",
        default=f"{imex.HEARTBEAT_INTERVAL:g}",
        help="seconds between rewrites of the IMEX status file when nothing changed",
    )
    """Rewrites of an unchanged status file prove the agent alive to the kubelet plugin, which
    takes a status unchanged for longer than its bound as stale."""
    http_bind: str = flags.field(flaggroups.HTTP_BIND)

    @property
    def imex_binary(self) -> pathlib.Path:
        """``<driver root>/usr/bin/nvidia-imex``."""
        return self.driver_root / "usr/bin/nvidia-imex"

    @property
    def imex_ctl(self) -> pathlib.Path:
        """``<driver root>/usr/bin/nvidia-imex-ctl``."""
        return self.driver_root / "usr/bin/nvidia-imex-ctl"

    @property
    def config_file(self) -> pathlib.Path:
        """The rendered ``imexd.cfg``."""
        return self.imex_dir / render.CONFIG_FILE

    @property
    def nodes_file(self) -> pathlib.Path:
        """The rendered ``nodes.cfg``."""
        return self.imex_dir / render.NODES_FILE

    @property
    def status_file(self) -> pathlib.Path:
        """The ImexStatus node file the kubelet plugin reads."""
        return self.imex_dir / constants.IMEX_STATUS_FILE.name
