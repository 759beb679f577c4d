"""node-init's settings: one dataclass, built once from flags (each with an environment twin)."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from computedomains import settings as flags
from computedomains.api import constants, fabricverdict, flaggroups
from computedomains.fabric import classify, discovery


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything node-init is told."""

    node_name: str
    kubeconfig: pathlib.Path | None
    """None: the pod's ServiceAccount."""
    discovery: discovery.DiscoverySettings
    verdict_file: pathlib.Path = constants.FABRIC_VERDICT_FILE
    transitional_grace: float = classify.DEFAULT_GRACE
    fault_grace: fabricverdict.Grace = dataclasses.field(default_factory=fabricverdict.Grace)
    """How long a usable verdict is held through a fault that may pass, while the node is in
    a ComputeDomain (``node-init/hold.py``)."""
    taint_broken: bool = False
    watch: bool = False
    recheck_interval: float = 60.0
    poll_interval: float = 5.0
    """Seconds between looks while a registration is in progress (not a flag)."""
    api_budget: flaggroups.ApiBudget = flaggroups.NODE_BUDGET
    """Its API request budget (``--kube-api-qps``, ``--kube-api-burst``)."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add node-init's flags (``docs/node-side.md``)."""
    flaggroups.add_node(parser, required=False)  # checked in from_args, naming the env twin
    flaggroups.add_kube(parser, namespace=False)
    discovery.add_flags(parser)
    flaggroups.add_node_paths(parser, "--fabric-verdict-file")
    fabricverdict.add_grace_flags(parser)
    _add_check_flags(parser)
    flags.add_switch(
        parser,
        "--watch",
        default=Settings.watch,
        help="keep re-checking (what the plugin's re-check does)",
    )
    flags.add(
        parser,
        "--recheck-interval",
        default=f"{Settings.recheck_interval:g}",
        type=float,
        help="seconds between re-checks with --watch",
    )


def add_recheck_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags of a fabric re-check run inside the kubelet plugin.

    The plugin has its own node, kube, ``--proc-root``, ``--fabric-verdict-file`` and grace
    flags; these are the rest. ``--fabric-recheck-interval`` 0 (the default) runs none.
    """
    discovery.add_flags(parser, proc_root=False)
    _add_check_flags(parser)
    flags.add(
        parser,
        "--fabric-recheck-interval",
        default="0",
        type=float,
        help="seconds between fabric re-checks in this process (node-init's check; 0: none)",
    )


def recheck_from_args(args: argparse.Namespace) -> Settings | None:
    """The re-check :func:`add_recheck_flags` asks for, None when none."""
    if args.fabric_recheck_interval < 0 or args.transitional_grace < 0:
        raise SystemExit("--fabric-recheck-interval and --transitional-grace must not be negative")
    if not args.fabric_recheck_interval:
        return None
    return _settings(args, watch=True, interval=args.fabric_recheck_interval)


def _add_check_flags(parser: argparse.ArgumentParser) -> None:
    flags.add(
        parser,
        "--transitional-grace",
        default=f"{Settings.transitional_grace:g}",
        type=float,
        help="seconds a fabric registration may stay in progress before the node is broken",
    )
    flags.add_switch(
        parser,
        "--taint-broken",
        default=Settings.taint_broken,
        negatable=True,
        help=f"put the NoSchedule taint {constants.FABRIC_TAINT} on nodes with a broken fabric",
    )


def from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Settings:
    """The settings ``args`` hold; reports a missing node name through ``parser``."""
    if not args.node_name:
        parser.error("--node-name (or NODE_NAME) is required")
    if args.recheck_interval <= 0 or args.transitional_grace < 0:
        parser.error("--recheck-interval must be positive, --transitional-grace not negative")
    return _settings(args, watch=args.watch, interval=args.recheck_interval)


def _settings(args: argparse.Namespace, *, watch: bool, interval: float) -> Settings:
    return Settings(
        node_name=args.node_name,
        kubeconfig=args.kubeconfig,
        api_budget=flaggroups.api_budget(args),
        discovery=discovery.DiscoverySettings.from_args(args),
        verdict_file=args.fabric_verdict_file,
        transitional_grace=args.transitional_grace,
        fault_grace=fabricverdict.grace_from_args(args),
        taint_broken=args.taint_broken,
        watch=watch,
        recheck_interval=interval,
    )
