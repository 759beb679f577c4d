"""Preflight's CRD version checks: what the API server would refuse half-way through a change.

The API server refuses a CRD whose ``status.storedVersions`` names a version its ``spec`` no
longer lists. Two changes run into that once Helm has begun applying, so preflight (before
install, upgrade and rollback; Argo CD: before every sync) refuses them first, with the way
round (docs/upgrade.md):

- **going to CRDs that lack a stored version** (a rollback or downgrade to an older chart after
  a newer one stored objects at a version the older one does not know): the storage must move
  back first, with the chart now installed;
- **an upgrade that stores a version the cluster's CRDs do not serve yet** (0.1.x, which knows
  only v1beta1, straight to v1beta2 storage): from then on no rollback can return, not even
  ``--atomic``'s own; two steps keep it possible, or the user accepts a one-way upgrade.

Pure: preflight reads the CRDs, these functions decide (``tests/unit/test_hooks_crdversions.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from computedomains.api import constants

from .report import Finding, Severity

SERVED = (constants.VERSION, constants.VERSION_V1BETA2)
"""The versions this chart's CRDs serve (its crds subchart, generated from the same code)."""
DOCS = "docs/upgrade.md#rollback"


@dataclasses.dataclass(frozen=True)
class LiveCRD:
    """One of our CRDs as the cluster has it now."""

    name: str
    served: tuple[str, ...]
    stored: tuple[str, ...]
    """``status.storedVersions``."""


def _listed(versions: Sequence[str]) -> str:
    return ", ".join(versions) or "none"


def check_stored(
    crds: Sequence[LiveCRD], *, release: str, namespace: str, served: Sequence[str] = SERVED
) -> list[Finding]:
    """Every stored version of every CRD is one this chart serves."""
    findings = []
    for crd in crds:
        unknown = [v for v in crd.stored if v not in served]
        if not unknown:
            findings.append(Finding(
                Severity.OK, f"CRD {crd.name}: stored versions {_listed(crd.stored)} are served "
                f"by this chart ({_listed(served)})",
            ))  # fmt: skip
            continue
        findings.append(
            Finding(
                Severity.FAIL,
                f"CRD {crd.name} holds objects stored at {_listed(unknown)} "
                f"(status.storedVersions), which this chart's CRDs ({_listed(served)}) do not "
                "serve: the API server would refuse them half-way through the change",
                fix=(
                    "Helm leaves a refused rollback pending: helm rollback "
                    f"{release} <the revision deployed now> -n {namespace} changes nothing and "
                    "ends that; then move the storage back, with the chart installed now: "
                    f"helm upgrade {release} <that chart> -n {namespace} --reuse-values --set "
                    f"crds.storageVersion=<one of {_listed(served)}> --wait (its migrate hook "
                    "rewrites every object and prunes storedVersions); then roll back or "
                    f"downgrade: helm rollback {release} <revision> -n {namespace} --wait "
                    f"({DOCS})"
                ),
            )
        )
    return findings


def check_one_way(
    crds: Sequence[LiveCRD],
    *,
    storage: str,
    upgrade: bool,
    allowed: bool,
    release: str,
    namespace: str,
) -> list[Finding]:
    """An upgrade stores ``storage`` only where the cluster's CRDs already serve it.

    Only upgrades: an install has nothing to roll back to, and ``helm template`` (Argo CD)
    renders every sync as an install. ``allowed`` (value preflight.allowOneWayUpgrade) turns
    the refusal into a warning.
    """
    findings = []
    for crd in crds:
        if not upgrade or storage in crd.served:
            continue
        message = (
            f"this upgrade stores {storage}, which CRD {crd.name} does not serve yet (it serves "
            f"{_listed(crd.served)}): once applied, status.storedVersions names {storage} and "
            "the API server refuses the previous revision's CRD, so neither helm rollback nor "
            "--atomic could go back"
        )
        if allowed:
            findings.append(Finding(Severity.WARN, f"{message} (preflight.allowOneWayUpgrade)"))
            continue
        findings.append(
            Finding(
                Severity.FAIL,
                message,
                fix=(
                    f"upgrade in two steps: helm upgrade {release} <chart> -n {namespace} "
                    f"--reuse-values --set crds.storageVersion={_listed(crd.served[-1:])} "
                    f"--wait (serves {storage} and stores {_listed(crd.served[-1:])}: the "
                    "previous revision stays reachable), then once it works the same with "
                    f"crds.storageVersion={storage}; or accept a one-way upgrade with --set "
                    f"preflight.allowOneWayUpgrade=true ({DOCS})"
                ),
            )
        )
    return findings
