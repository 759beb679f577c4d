"""Adoption of an incumbent install, the migrate hook's last step (``--adopt``).

Each round gathers the ComputeDomains, the nodes, our IMEX agent pods and the incumbent's
per-domain DaemonSets and daemon claim templates, lets :func:`.adoptplan.plan` decide, retires
what it allows (the incumbent's finalizer first: its controller is gone and would never
remove it) and prints one line per domain that changed. It stops when nothing is left to wait
for or at the deadline, naming the domains and nodes still not served.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from computedomains import flaggroups, flags, waiting
from computedomains.api import constants, crds, resources
from computedomains.hooks import adoptplan, crdview, kubeio, report

INCUMBENT_NAMESPACE = "nvidia-dra-driver-gpu"
"""The namespace the incumbent's chart is usually installed in."""
KINDS = {
    "DaemonSet": resources.DAEMON_SETS,
    "ResourceClaimTemplate": resources.RESOURCE_CLAIM_TEMPLATES,
}
_AGENTS = f"{constants.COMPONENT_LABEL}={constants.IMEX_AGENT_COMPONENT}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Adoption settings: a flag group of the migrate hook."""

    enabled: bool = flags.field(flaggroups.ADOPT)
    incumbent_namespace: str = flags.option(
        "--incumbent-namespace",
        default=INCUMBENT_NAMESPACE,
        help="the incumbent driver's namespace",
    )
    """Where the incumbent's per-domain DaemonSets and daemon templates live."""
    timeout: float = flags.seconds(
        "--adopt-timeout",
        default="600",
        help="seconds to wait for our IMEX agent to serve the adopted domains",
    )
    """Seconds to wait for our agent to serve every adopted domain's nodes."""
    interval: float = 2.0
    """Seconds between rounds (not a flag)."""


def _items(api: kubeio.Api, path: str, *, label_selector: str = "") -> list[dict[str, Any]]:
    return list(api.list_items(path, label_selector=label_selector))


def gather(
    api: kubeio.Api, settings: Settings, *, namespace: str, cds: crdview.CRDView
) -> tuple[list[adoptplan.Adoptee], list[adoptplan.Incumbent], dict[str, str]]:
    """The facts of one round: domains, incumbent objects, node → domain our agent serves."""
    domains = adoptplan.domains(
        _items(api, cds.resource.path()), _items(api, resources.NODES.path())
    )
    objects = [
        o
        for kind, resource in KINDS.items()
        for o in adoptplan.incumbents(
            kind,
            _items(
                api,
                resource.path(namespace=settings.incumbent_namespace),
                label_selector=constants.COMPUTE_DOMAIN_LABEL,
            ),
        )
    ]
    serving = adoptplan.served(
        _items(api, resources.PODS.path(namespace=namespace), label_selector=_AGENTS)
    )
    return domains, objects, serving


def retire(api: kubeio.Api, obj: adoptplan.Incumbent, *, namespace: str) -> None:
    """Delete one incumbent object, its finalizer removed first."""
    path = KINDS[obj.kind].path(obj.name, namespace=namespace)
    try:
        api.merge_patch(path, {"metadata": {"finalizers": None}})
    except kubeio.NotFound:
        return
    api.delete(path)


def adopt(
    api: kubeio.Api,
    settings: Settings,
    *,
    namespace: str,
    out: report.Report,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Retire the incumbent's per-domain objects as our agent takes over; whether all went."""
    cds = crdview.view(api.get(resources.CRDS.path(crds.COMPUTE_DOMAIN.name)))
    reported: dict[str, tuple[str, ...]] = {}
    last: list[adoptplan.Plan] = []

    def round_done() -> bool:
        domains, objects, serving = gather(api, settings, namespace=namespace, cds=cds)
        plan = adoptplan.plan(domains, objects, serving)
        for obj in plan.retire:
            retire(api, obj, namespace=settings.incumbent_namespace)
            out.step(
                f"adopt: retired incumbent {obj.kind} {settings.incumbent_namespace}/"
                f"{obj.name} (domain {obj.uid})"
            )
        for key, nodes in plan.waiting.items():
            if reported.get(key) != nodes:
                out.step(
                    f"adopt: {key}: waiting for our IMEX agent on {len(nodes)} nodes "
                    f"({', '.join(nodes[:5])}{' …' if len(nodes) > 5 else ''})"
                )
                reported[key] = nodes
        last[:] = [plan]
        return plan.done

    began = clock()
    try:
        waiting.until(
            "our IMEX agent to serve every adopted domain",
            round_done,
            timeout=settings.timeout,
            interval=settings.interval,
        )
    except waiting.WaitTimeout:
        plan = last[-1] if last else None
        pending = dict(plan.waiting) if plan else {}
        out.step(
            f"FAILED: adopt: after {settings.timeout:.0f}s {len(pending)} domains still "
            "run on the incumbent's daemons (kept):"
        )
        for key, nodes in pending.items():
            out.step(f"  {key}: not served by our IMEX agent on {', '.join(nodes)}")
        out.step(
            f"  fix: check the imex-agent pods in {namespace} on those nodes (kubectl -n "
            f"{namespace} get pods -l {_AGENTS} -o wide), then rerun the hook with --adopt"
        )
        return False
    plan = last[-1]
    out.step(f"adopt: {len(plan.adopted)} domains served by this install ({clock() - began:.1f}s)")
    return True
