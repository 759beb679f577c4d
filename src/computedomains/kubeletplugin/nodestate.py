"""What the plugin reads from its node: the fabric verdict and the IMEX status (files only).

Both files are written by other components (node-init, the IMEX agent); the plugin never
queries NVML itself.
"""

from __future__ import annotations

import dataclasses
import pathlib

from computedomains import nodefiles

USABLE_VERDICTS = frozenset({"healthy", "degraded", "no-fabric"})


@dataclasses.dataclass(frozen=True)
class Fabric:
    """The node-init verdict as the plugin needs it."""

    verdict: str
    reason: str
    message: str
    clique: str
    channel_count: int

    @property
    def usable(self) -> bool:
        """Whether channels can be handed out (with or without an NVLink fabric)."""
        return self.verdict in USABLE_VERDICTS

    @property
    def has_fabric(self) -> bool:
        """Whether the node is in a clique (IMEX channels exist and IMEX must be ready)."""
        return bool(self.clique)


UNKNOWN = Fabric("unknown", "NoFabricVerdict", "node-init has not written a verdict yet", "", 0)


def read_fabric(path: pathlib.Path) -> Fabric:
    """The current verdict; :data:`UNKNOWN` (unusable) while there is none or it is corrupt."""
    try:
        document = nodefiles.read_json(path, kind="FabricVerdict")
    except nodefiles.CorruptNodeFile as exc:
        return dataclasses.replace(UNKNOWN, reason="FabricVerdictUnreadable", message=str(exc))
    if document is None:
        return UNKNOWN
    return Fabric(
        verdict=str(document.get("verdict", "unknown")),
        reason=str(document.get("reason", "")),
        message=str(document.get("message", "")),
        clique=str(document.get("clique") or ""),
        channel_count=int(document.get("imexChannelCount") or 0),
    )


@dataclasses.dataclass(frozen=True)
class Imex:
    """The IMEX agent's report for this node."""

    domain_uid: str
    state: str
    message: str

    def ready_for(self, domain_uid: str) -> bool:
        """True when IMEX runs READY for ``domain_uid``."""
        return self.domain_uid == domain_uid and self.state == "READY"


def read_imex(path: pathlib.Path) -> Imex | None:
    """The IMEX status, None while there is none (or it is being rewritten badly)."""
    try:
        document = nodefiles.read_json(path, kind="ImexStatus")
    except nodefiles.CorruptNodeFile:
        return None
    if document is None:
        return None
    return Imex(
        str(document.get("domainUID", "")),
        str(document.get("state", "")),
        str(document.get("message", "")),
    )
