"""Turn a node's fabric report and host checks into a verdict. Pure: no I/O, no clock.

Order matters: a node without a fabric is never judged on IMEX prerequisites (it does not
need them); permanent problems (failed registration, host prerequisites) win over
"registration still running", since waiting would not fix them; only a fully registered node
is checked for agreement between its GPUs and then for degraded health.
"""

from __future__ import annotations

from collections.abc import Sequence

from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks as host_checks
from computedomains.fabric.model import (
    ZERO_UUID,
    FabricState,
    Gpu,
    GpuFabric,
    NodeReport,
    Reason,
    Verdict,
)

MINIMUM_DRIVER = "570.158.01"
"""Oldest driver whose IMEX daemon resolves peers by DNS name, which ComputeDomains rely on."""
DEFAULT_GRACE = 300.0
"""Seconds a registration may stay in progress after boot before the node counts as broken."""

# NVML health-mask fields (shift, what it means); each is 2 bits and the value 1 means "true".
_HEALTH_FIELDS = (
    (0, "degraded bandwidth"),
    (2, "route recovery in progress"),
    (4, "unhealthy route"),
    (6, "access-timeout recovery in progress"),
)
_SMI_HINT = "`nvidia-smi -q -d FABRIC` on the node shows the per-GPU fabric state"


def classify(
    report: NodeReport,
    checks: host_checks.HostChecks,
    *,
    waited: float = 0.0,
    grace: float = DEFAULT_GRACE,
    minimum_driver: str = MINIMUM_DRIVER,
) -> Verdict:
    """The verdict for ``report``; ``waited`` is how long registration has been in progress."""
    fabric = [
        (g, g.fabric)
        for g in report.gpus
        if g.fabric is not None and g.fabric.state is not FabricState.NOT_SUPPORTED
    ]
    if not fabric:
        return Verdict(
            VerdictKind.NO_FABRIC,
            Reason.NO_FABRIC,
            f"none of the {len(report.gpus)} GPUs supports a multi-node NVLink fabric; "
            "ComputeDomains place no IMEX channels here and other GPU work is unaffected",
        )
    failed = [(g, f) for g, f in fabric if f.status != "SUCCESS"]
    if failed:
        return _failed(failed)
    if all(f.state is FabricState.COMPLETED and f.cluster_uuid == ZERO_UUID for _, f in fabric):
        return Verdict(
            VerdictKind.NO_FABRIC,
            Reason.NO_FABRIC,
            f"fabric registration completed on {_gpus(fabric)} without an NVLink cluster UUID: "
            "the node is not part of a multi-node NVLink domain",
        )
    problem = _host_problem(report, checks, minimum_driver)
    if problem is not None:
        return problem
    pending = [(g, f) for g, f in fabric if f.state is not FabricState.COMPLETED]
    if pending:
        return _pending(pending, waited, grace)
    return _registered(fabric)


_FabricGpus = Sequence[tuple[Gpu, GpuFabric]]
"""GPUs that have a fabric, each with its (non-None) fabric info."""


def _gpus(gpus: _FabricGpus) -> str:
    indexes = ", ".join(str(g.index) for g, _ in gpus)
    return f"GPU {indexes}" if len(gpus) == 1 else f"GPUs {indexes}"


def _failed(failed: _FabricGpus) -> Verdict:
    statuses = ", ".join(f"GPU {g.index}: {f.status}" for g, f in failed)
    return Verdict(
        VerdictKind.BROKEN,
        Reason.FAILED,
        f"NVLink fabric registration failed ({statuses}); check the NVLink switch trays and "
        f"their fabric manager, then reboot the node if it persists ({_SMI_HINT})",
    )


def _host_problem(
    report: NodeReport, checks: host_checks.HostChecks, minimum_driver: str
) -> Verdict | None:
    # A broken verdict when the host cannot run IMEX for a fabric node.
    try:
        recent = host_checks.driver_at_least(report.driver_version, minimum_driver)
    except ValueError:
        return _broken(
            Reason.DRIVER_UNKNOWN,
            f"NVML reports driver version {report.driver_version!r}, which is not a version "
            "number; check the driver installation",
        )
    if not recent:
        return _broken(
            Reason.DRIVER_TOO_OLD,
            f"driver {report.driver_version} is older than {minimum_driver}, the minimum for "
            "IMEX daemons that find their peers by DNS name; upgrade the GPU driver",
        )
    missing = [
        name
        for name, major in (
            (host_checks.IMEX_CHANNELS_DEVICE, checks.imex_channels_major),
            (host_checks.CAPS_DEVICE, checks.caps_major),
        )
        if major is None
    ]
    if missing:
        return _broken(
            Reason.IMEX_MAJORS_MISSING,
            f"{checks.proc_root / 'devices'} lists no {' or '.join(missing)} major: the NVIDIA "
            "kernel module did not register the IMEX devices; check that nvidia.ko is loaded "
            "and comes from the same driver as the user-space libraries",
        )
    if checks.imex_mgmt is None:
        return _broken(
            Reason.IMEX_MGMT_MISSING,
            f"{checks.imex_mgmt_path} is missing or unreadable: the driver does not expose the "
            "IMEX management capability; use a driver with IMEX support and make sure the "
            "pod sees the host's /proc",
        )
    if checks.host_imex_pids:
        pids = ", ".join(str(p) for p in checks.host_imex_pids)
        return _broken(
            Reason.HOST_IMEX_RUNNING,
            f"a host nvidia-imex process is running (pid {pids}) and would clash with the "
            "ComputeDomain IMEX daemons; stop and mask it on the host "
            "(systemctl disable --now nvidia-imex && systemctl mask nvidia-imex)",
        )
    return None


def _broken(reason: Reason, message: str) -> Verdict:
    return Verdict(VerdictKind.BROKEN, reason, message)


def _pending(pending: _FabricGpus, waited: float, grace: float) -> Verdict:
    states = sorted({f.state.value for _, f in pending})
    if waited >= grace:
        return _broken(
            Reason.TIMED_OUT,
            # No running clock in the text: a periodic re-check must not rewrite the condition.
            f"fabric registration of {_gpus(pending)} is still {'/'.join(states)} after the "
            f"{grace:.0f}s grace; check that the NVLink fabric manager on the switch trays is "
            f"up and the node's partition is active ({_SMI_HINT})",
        )
    return Verdict(
        VerdictKind.TRANSITIONAL,
        Reason.IN_PROGRESS,
        f"fabric registration of {_gpus(pending)} is {'/'.join(states)} "
        f"({waited:.0f}s of a {grace:.0f}s grace); waiting for it to complete",
    )


def _registered(fabric: _FabricGpus) -> Verdict:
    cliques: dict[str, list[tuple[Gpu, GpuFabric]]] = {}
    for gpu, f in fabric:
        key = f.clique if f.cluster_uuid != ZERO_UUID else "no cluster UUID"
        cliques.setdefault(key, []).append((gpu, f))
    if len(cliques) > 1:
        detail = "; ".join(f"{_gpus(gpus)} in {key}" for key, gpus in cliques.items())
        return Verdict(
            VerdictKind.INCONSISTENT,
            Reason.INCONSISTENT,
            f"the node's GPUs disagree on their NVLink clique ({detail}); check the NVLink "
            f"partition configuration of the rack ({_SMI_HINT})",
        )
    clique = next(iter(cliques))
    degraded: dict[tuple[str, ...], list[tuple[Gpu, GpuFabric]]] = {}
    for gpu, f in fabric:
        problems = _health_problems(f.health_mask)
        if problems:
            degraded.setdefault(problems, []).append((gpu, f))
    if degraded:
        detail = "; ".join(f"{_gpus(gpus)}: {', '.join(p)}" for p, gpus in degraded.items())
        return Verdict(
            VerdictKind.DEGRADED,
            Reason.DEGRADED,
            f"{len(fabric)} GPUs registered in NVLink clique {clique}, but NVML reports "
            f"{detail}; workloads run, possibly slower; check NVLink cables and switch trays "
            f"({_SMI_HINT})",
            clique=clique,
        )
    return Verdict(
        VerdictKind.HEALTHY,
        Reason.HEALTHY,
        f"{len(fabric)} GPUs registered in NVLink clique {clique}",
        clique=clique,
    )


def _health_problems(mask: int | None) -> tuple[str, ...]:
    if mask is None:
        return ()  # only the V1 call answered: no health information, nothing to report
    return tuple(what for shift, what in _HEALTH_FIELDS if (mask >> shift) & 0x3 == 1)
