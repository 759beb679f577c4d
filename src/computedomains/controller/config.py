"""The controller's settings, resolved once from flags (each with an env twin)."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import socket

from computedomains import settings as flags
from computedomains.api import flaggroups
from computedomains.kube import leaderelection

DEFAULT_LEASE_NAME = "compute-domains-controller"


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    """Everything the controller needs to know, validated."""

    namespace: str
    """The driver's namespace: cliques, agent pods and the Lease live there."""
    kubeconfig: pathlib.Path | None
    """None in a pod: the ServiceAccount is used."""
    pod_name: str
    """This replica's pod name; the Lease holder identity is ``<pod>-<random>``."""
    leader_elect: bool
    """Compete for the Lease before acting (the chart runs two replicas)."""
    lease_name: str
    election: leaderelection.Timing
    """Lease duration, renew deadline and retry period, in seconds."""
    max_nodes_per_clique: int
    """Slots per clique: IMEX's limit on GB200/GB300 NVL72 is 18 nodes."""
    gc_interval: float
    """Seconds between collections of what vanished domains left behind."""
    placement_turns: bool
    """Give the one domain placing the turn on free nodes (``controller/turns.py``)."""
    http_bind: str
    api_budget: flaggroups.ApiBudget = flaggroups.CONTROL_BUDGET
    """Its API request budget (``--kube-api-qps``, ``--kube-api-burst``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the controller's flags."""
    flaggroups.add_kube(parser, budget=flaggroups.CONTROL_BUDGET)
    flags.add(parser, "--pod-name", default=None,
              help="this replica's pod name (default: the host name)")  # fmt: skip
    flags.add_switch(parser, "--leader-elect", default=True, negatable=True,
                     help="act only while holding the leader Lease")  # fmt: skip
    flags.add(parser, "--lease-name", default=DEFAULT_LEASE_NAME,
              help="name of the leader-election Lease in --namespace")  # fmt: skip
    flags.add(parser, "--lease-duration", default="15", type=float,
              help="seconds before a standby takes a silent leader's Lease")  # fmt: skip
    flags.add(parser, "--renew-deadline", default="10", type=float,
              help="seconds the leader keeps trying to renew before it stops leading")  # fmt: skip
    flags.add(parser, "--retry-period", default="2", type=float,
              help="seconds between attempts to take or renew the Lease")  # fmt: skip
    flaggroups.add_max_nodes_per_clique(parser)
    flags.add(parser, "--gc-interval", default="60", type=float,
              help="seconds between collections of deleted domains' leftovers")  # fmt: skip
    flags.add_switch(parser, "--placement-turns", default=True, negatable=True,
                     help="while one domain places, taint free nodes for it instead of making "
                     "its pods wait for binding conditions (docs/placement.md)")  # fmt: skip
    flaggroups.add_http(parser)


def from_args(args: argparse.Namespace) -> ControllerConfig:
    """Resolve parsed flags into the config, validating what argparse cannot."""
    if args.gc_interval <= 0:
        raise SystemExit(f"--gc-interval must be positive, got {args.gc_interval}")
    try:
        timing = leaderelection.Timing(
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    return ControllerConfig(
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        api_budget=flaggroups.api_budget(args),
        pod_name=args.pod_name or socket.gethostname(),
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        election=timing,
        max_nodes_per_clique=args.max_nodes_per_clique,
        gc_interval=args.gc_interval,
        placement_turns=args.placement_turns,
        http_bind=args.http_bind,
    )
