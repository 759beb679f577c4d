"""The IMEX agent's settings, resolved once from flags (each with an env twin)."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import pathlib

from computedomains import settings as flags
from computedomains.api import constants, flaggroups, imex
from computedomains.imexagent import render


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs to know about its node, its pod and its paths."""

    node_name: str
    namespace: str
    """The driver's namespace: the agent's pod and the ComputeDomainClique objects."""
    pod_name: str
    pod_uid: str
    """Guards the condition write against a newer pod of the same name; may be empty."""
    pod_ip: str
    """IMEX's address: its command port binds here and peers reach it here."""
    kubeconfig: pathlib.Path | None
    """None in a pod: the ServiceAccount is used."""
    driver_root: pathlib.Path
    """Where the driver is installed: ``usr/bin/nvidia-imex`` and ``nvidia-imex-ctl`` below it."""
    imex_dir: pathlib.Path
    hosts_file: pathlib.Path
    fabric_verdict_file: pathlib.Path
    max_nodes_per_clique: int
    """Slots per clique, so lines of ``nodes.cfg``: the same on every node of a domain."""
    imex_start_timeout: float
    """Seconds IMEX may take to answer READY before the node reports it failed."""
    imex_stop_timeout: float
    """Seconds between SIGTERM and SIGKILL when IMEX is stopped."""
    heartbeat_interval: float
    """Seconds between rewrites of an unchanged status file: it proves the agent alive to the
    kubelet plugin, which takes a status unchanged for longer than its bound as stale."""
    http_bind: str
    api_budget: flaggroups.ApiBudget = flaggroups.NODE_BUDGET
    """Its API request budget (``--kube-api-qps``, ``--kube-api-burst``)."""

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the agent's flags."""
    flaggroups.add_node(parser)
    flaggroups.add_kube(parser)
    flags.add(parser, "--pod-name", default=None, required=True, help="this agent's pod")
    flags.add(parser, "--pod-uid", default="", help="this agent pod's UID")
    flags.add(parser, "--pod-ip", default=None, required=True, help="this agent pod's IP")
    flaggroups.add_node_paths(parser, "--driver-root", "--imex-dir", "--fabric-verdict-file")
    flags.add(parser, "--hosts-file", default="/etc/hosts", type=flags.path,
              help="hosts file IMEX reads")  # fmt: skip
    flaggroups.add_max_nodes_per_clique(parser)
    flags.add(
        parser,
        "--imex-start-timeout",
        default="60",
        type=float,
        help="seconds IMEX may take to answer READY before the node reports it failed",
    )
    flags.add(
        parser,
        "--imex-stop-timeout",
        default="15",
        type=float,
        help="seconds from SIGTERM to SIGKILL when IMEX is stopped",
    )
    flags.add(
        parser,
        "--heartbeat-interval",
        default=f"{imex.HEARTBEAT_INTERVAL:g}",
        type=float,
        help="seconds between rewrites of the IMEX status file when nothing changed",
    )
    flaggroups.add_http(parser)


def from_args(args: argparse.Namespace) -> AgentConfig:
    """Resolve parsed flags into the config, validating what argparse cannot."""
    try:
        pod_ip = str(ipaddress.ip_address(args.pod_ip))
    except ValueError:
        raise SystemExit(f"--pod-ip must be an IP address, got {args.pod_ip!r}") from None
    for flag in ("imex_start_timeout", "imex_stop_timeout", "heartbeat_interval"):
        if getattr(args, flag) <= 0:
            name = flag.replace("_", "-")
            raise SystemExit(f"--{name} must be positive, got {getattr(args, flag)}")
    return AgentConfig(
        node_name=args.node_name,
        namespace=args.namespace,
        pod_name=args.pod_name,
        pod_uid=args.pod_uid,
        pod_ip=pod_ip,
        kubeconfig=args.kubeconfig,
        api_budget=flaggroups.api_budget(args),
        driver_root=args.driver_root,
        imex_dir=args.imex_dir,
        hosts_file=args.hosts_file,
        fabric_verdict_file=args.fabric_verdict_file,
        max_nodes_per_clique=args.max_nodes_per_clique,
        imex_start_timeout=args.imex_start_timeout,
        imex_stop_timeout=args.imex_stop_timeout,
        heartbeat_interval=args.heartbeat_interval,
        http_bind=args.http_bind,
    )
