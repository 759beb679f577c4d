"""The FabricVerdict file's content from one look at the node (the writer's half).

The document itself, and reading it back, are :mod:`computedomains.api.fabricverdict`.
"""

from __future__ import annotations

import datetime

from computedomains import rfc3339
from computedomains.api import fabricverdict
from computedomains.fabric import codec
from computedomains.fabric.model import NodeReport, Verdict


def build(
    node: str, verdict: Verdict, report: NodeReport | None, observed_at: datetime.datetime
) -> fabricverdict.FabricVerdict:
    """The FabricVerdict of ``node``; ``report`` is None when discovery itself failed."""
    return fabricverdict.FabricVerdict(
        node=node,
        verdict=verdict.kind,
        reason=verdict.reason.value,
        message=verdict.message,
        clique=verdict.clique,
        driver_version=report.driver_version if report else "",
        imex_channel_count=report.imex_channel_count if report else None,
        gpus=tuple(codec.gpu_entry(g) for g in report.gpus) if report else (),
        observed_at=rfc3339.stamp(observed_at),
    )
