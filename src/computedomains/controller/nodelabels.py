"""The node label ``resource.nvidia.com/computeDomain``: a copy of the membership record.

The controller alone decides membership and records it in the clique objects; the label is
kept for the incumbent's manifests and tools, which select nodes by it. It names the domain
on every member (a member without a clique too) and is absent elsewhere. :func:`plan` says,
per domain round, which labels to write (pure); each write carries the node's resourceVersion,
so a label another writer changed meanwhile is never overwritten blind (``kube/nodes``).
"""

from __future__ import annotations

import dataclasses

from computedomains.controller.views import NodeName, Snapshot


@dataclasses.dataclass(frozen=True)
class LabelWrite:
    """Make node ``node``'s label ``value`` ("": remove it) while it still reads ``expected``."""

    node: NodeName
    expected: str
    value: str
    resource_version: str = ""
    """The cached Node's (a conflict reads the node again)."""


def plan(snapshot: Snapshot, *, release: bool = False) -> tuple[LabelWrite, ...]:
    """The label writes that make the snapshot's nodes carry the domain's record.

    Members get the label; nodes labelled for the domain that are not members lose it. With
    ``release`` (the domain object goes now) every label of the domain goes.
    """
    uid = snapshot.domain.uid
    writes = []
    for info in sorted(snapshot.nodes.values(), key=lambda n: n.name):
        member = info.member and not release
        if member and info.domain != uid:
            writes.append(LabelWrite(info.name, info.domain, uid, info.resource_version))
        elif not member and info.domain == uid:
            writes.append(LabelWrite(info.name, uid, "", info.resource_version))
    return tuple(writes)
