"""The kubelet plugin's settings, resolved once from flags (each with an env twin)."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from computedomains import settings as flags
from computedomains.api import constants, fabricverdict, flaggroups, imex
from computedomains.nodeinit import settings as nodeinit_settings


@dataclasses.dataclass(frozen=True)
class PluginConfig:
    """Everything the plugin needs to know about its node and its paths."""

    node_name: str
    namespace: str
    """The driver's namespace (where the chart runs the components)."""
    kubeconfig: pathlib.Path | None
    """None in a pod: the ServiceAccount is used."""
    registry_dir: pathlib.Path
    plugins_dir: pathlib.Path
    cdi_root: pathlib.Path
    proc_root: pathlib.Path
    fabric_verdict_file: pathlib.Path
    imex_status_file: pathlib.Path
    channel_slots: int
    """Channel devices published per node: how many pods of one domain a node can host."""
    imex_ready_timeout: float
    """Seconds a prepare waits for the node's IMEX domain before answering "retry later"."""
    collection_interval: float
    """Seconds between garbage collection rounds (claims gone, aborted entries expired, the
    node label verified and put back). 60: a lost label or a leaked claim is fixed within a
    minute for one node read and a few cache lookups; tests shorten it."""
    imex_status_max_age: float
    """Seconds after its last heartbeat that the IMEX status counts as stale (a dead agent's):
    well above the agent's heartbeat interval, so a slow agent loop is not taken for a dead one."""
    fault_grace: fabricverdict.Grace
    """How long an unreadable verdict file keeps the last usable verdict (node-init's grace)."""
    binding_conditions: bool
    """Channel devices of a node nobody holds carry binding conditions, so the scheduler waits
    for the controller to reserve the node for one domain (Kubernetes 1.36 beta; older API
    servers drop the field). Off: two domains' first pods can race for a free node, and the
    loser waits on it (docs/placement.md)."""
    http_bind: str
    fabric_recheck: nodeinit_settings.Settings | None = None
    """node-init's fabric re-check, run in a thread of the plugin (None: not here)."""
    api_budget: flaggroups.ApiBudget = flaggroups.NODE_BUDGET
    """Its API request budget (``--kube-api-qps``, ``--kube-api-burst``)."""

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the plugin's flags."""
    flaggroups.add_node(parser)
    flaggroups.add_kube(parser)
    flaggroups.add_node_paths(
        parser, "--kubelet-registry-dir", "--kubelet-plugins-dir", "--cdi-root", "--proc-root",
        "--fabric-verdict-file", "--imex-status-file",
    )  # fmt: skip
    flags.add(
        parser,
        "--channel-slots",
        default="16",
        type=int,
        help="channel devices per node (pods of one ComputeDomain per node)",
    )
    flags.add(
        parser,
        "--imex-ready-timeout",
        default="20",
        type=float,
        help="seconds a prepare waits for the IMEX domain before asking to retry",
    )
    flags.add(
        parser,
        "--imex-status-max-age",
        default=f"{imex.MAX_AGE:g}",
        type=float,
        help="seconds after its last heartbeat that the IMEX agent's status is stale",
    )
    fabricverdict.add_grace_flags(parser)
    flags.add_switch(
        parser,
        "--binding-conditions",
        default=True,
        negatable=True,
        help="have the controller confirm a first placement on a free node (binding conditions)",
    )
    flags.add(
        parser,
        "--collection-interval",
        default="60",
        type=float,
        help="seconds between garbage collection rounds (which also verify the node label)",
    )
    flaggroups.add_http(parser)
    nodeinit_settings.add_recheck_flags(parser)


def from_args(args: argparse.Namespace) -> PluginConfig:
    """Resolve parsed flags into the config, validating what argparse cannot."""
    if not 1 <= args.channel_slots <= 63:
        raise SystemExit(
            "--channel-slots must be 1..63 (a slice with tainted devices holds 64, one of them "
            f"the daemon device), got {args.channel_slots}"
        )
    if args.imex_ready_timeout <= 0:
        raise SystemExit(f"--imex-ready-timeout must be positive, got {args.imex_ready_timeout}")
    if args.collection_interval <= 0:
        raise SystemExit(f"--collection-interval must be positive, got {args.collection_interval}")
    if args.imex_status_max_age <= 0:
        raise SystemExit(f"--imex-status-max-age must be positive, got {args.imex_status_max_age}")
    return PluginConfig(
        node_name=args.node_name,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        api_budget=flaggroups.api_budget(args),
        registry_dir=args.kubelet_registry_dir,
        plugins_dir=args.kubelet_plugins_dir,
        cdi_root=args.cdi_root,
        proc_root=args.proc_root,
        fabric_verdict_file=args.fabric_verdict_file,
        imex_status_file=args.imex_status_file,
        channel_slots=args.channel_slots,
        imex_ready_timeout=args.imex_ready_timeout,
        collection_interval=args.collection_interval,
        imex_status_max_age=args.imex_status_max_age,
        fault_grace=fabricverdict.grace_from_args(args),
        binding_conditions=args.binding_conditions,
        http_bind=args.http_bind,
        fabric_recheck=nodeinit_settings.recheck_from_args(args),
    )
