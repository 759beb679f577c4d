"""The ``FabricVerdict`` node file (``docs/node-side.md``).

node-init writes it; the kubelet plugin, the IMEX agent and ``fabric show --json`` share its
shape.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
from typing import Any

from computedomains import nodefiles
from computedomains.fabric import codec
from computedomains.fabric.model import Gpu, NodeReport, Verdict, VerdictKind

KIND = "FabricVerdict"


@dataclasses.dataclass(frozen=True)
class FabricVerdictFile:
    """A FabricVerdict document, decoded."""

    node: str
    verdict: VerdictKind
    reason: str
    """Kept as text: a newer writer may use a reason this reader does not know yet."""
    message: str
    clique: str
    driver_version: str
    imex_channel_count: int | None
    gpus: tuple[Gpu, ...]
    observed_at: str
    """RFC 3339 UTC time of the discovery the verdict rests on."""


def rfc3339(moment: datetime.datetime) -> str:
    """``moment`` as ``2026-11-30T07:30:00Z`` (UTC, whole seconds)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_document(
    node: str, verdict: Verdict, report: NodeReport | None, observed_at: datetime.datetime
) -> dict[str, Any]:
    """The FabricVerdict document; ``report`` is None when discovery itself failed."""
    return nodefiles.document(
        KIND,
        {
            "node": node,
            "verdict": verdict.kind.value,
            "reason": verdict.reason.value,
            "message": verdict.message,
            "clique": verdict.clique,
            "driverVersion": report.driver_version if report else "",
            "imexChannelCount": report.imex_channel_count if report else None,
            "gpus": [codec.gpu_to_json(g) for g in report.gpus] if report else [],
            "observedAt": rfc3339(observed_at),
        },
    )


def write(path: pathlib.Path, document: dict[str, Any]) -> None:
    """Replace the verdict file atomically."""
    nodefiles.write_json(path, document)


def read(path: pathlib.Path) -> FabricVerdictFile | None:
    """The verdict at ``path``; None when absent, :class:`nodefiles.CorruptNodeFile` if bad."""
    document = nodefiles.read_json(path, kind=KIND)
    if document is None:
        return None
    try:
        return _decode(document)
    except ValueError as exc:
        raise nodefiles.CorruptNodeFile(path, str(exc)) from None


def _decode(document: dict[str, Any]) -> FabricVerdictFile:
    kind = codec.field(document, "verdict", str, "$")
    if kind not in {k.value for k in VerdictKind}:
        raise ValueError(f"$.verdict: unknown verdict {kind!r}")
    gpus = codec.field(document, "gpus", list, "$")
    return FabricVerdictFile(
        node=codec.field(document, "node", str, "$"),
        verdict=VerdictKind(kind),
        reason=codec.field(document, "reason", str, "$"),
        message=codec.field(document, "message", str, "$"),
        clique=codec.field(document, "clique", str, "$"),
        driver_version=codec.field(document, "driverVersion", str, "$"),
        imex_channel_count=codec.optional_field(document, "imexChannelCount", int, "$"),
        gpus=tuple(codec.gpu_from_json(g, f"$.gpus[{i}]") for i, g in enumerate(gpus)),
        observed_at=codec.field(document, "observedAt", str, "$"),
    )
