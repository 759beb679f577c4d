"""Who gets a free node when claims of several domains were allocated on it: pure.

The channel devices of a node nobody holds carry binding conditions (``api/placement.py``),
so the scheduler waits in PreBind until the controller answers each claim allocated there.
The controller is the single writer of membership, so it is the one that decides: the domain
that holds the node (its record) keeps it; a free node goes to the domain of the claim that was
allocated first, and every claim of another domain is refused, which makes the scheduler
deallocate it and place it again (by then the node's devices are tainted for the winner).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from computedomains.api import placement


@dataclasses.dataclass(frozen=True)
class Answer:
    """The binding-condition answer to write for one pending claim."""

    allocation: placement.ChannelAllocation
    granted: bool
    reason: str
    message: str


def decide(
    *,
    node: str,
    recorded: str,
    allocations: Sequence[placement.ChannelAllocation],
    domains: Mapping[str, str],
    foreign: Sequence[placement.ChannelAllocation] = (),
) -> list[Answer]:
    """Answer every pending claim on ``node``.

    ``recorded`` is the domain the membership record names for the node ("" none,
    ``placement.recorded_holder``); ``allocations`` are the channel allocations on the node
    that count for their domain; ``foreign`` those whose domain is in another namespace, which
    are answered as if it did not exist (and learn nothing of it); ``domains`` maps the UID
    of every live (not deleting) domain to how messages name it.
    """
    holder = placement.holder(recorded=recorded, allocations=allocations)
    answers = []
    pending = [(a, a.domain_uid in domains) for a in allocations if a.pending]
    pending += [(a, False) for a in foreign if a.pending]
    for claim, known in sorted(pending, key=lambda p: (p[0].allocated_at, p[0].uid)):
        if claim.domain_uid and known and not holder:
            holder = claim.domain_uid  # first come, first served
        answers.append(_answer(claim, known=known, holder=holder, node=node, domains=domains))
    return answers


def _answer(
    claim: placement.ChannelAllocation,
    *,
    known: bool,
    holder: str,
    node: str,
    domains: Mapping[str, str],
) -> Answer:
    """The answer to one pending claim on ``node``, whose holder is now ``holder``."""
    where = f"node {node}"
    if not claim.domain_uid:
        # No readable ComputeDomainChannelConfig: nothing to place by. The pod is bound and
        # the kubelet plugin refuses the claim at prepare, naming the field that is wrong.
        return Answer(
            claim,
            granted=True,
            reason=placement.RESERVED_REASON,
            message=f"{where}: the claim names no ComputeDomain; the kubelet plugin "
            "reports why at prepare",
        )
    if not known:
        return Answer(
            claim,
            granted=False,
            reason=placement.RefusalReason.DOMAIN_NOT_FOUND,
            message=f"no ComputeDomain {claim.domain_uid} in namespace "
            f"{claim.namespace}: none exists there, or it is being deleted",
        )
    if claim.domain_uid == holder:
        return Answer(
            claim,
            granted=True,
            reason=placement.RESERVED_REASON,
            message=f"{where} is reserved for {domains[holder]}",
        )
    return Answer(
        claim,
        granted=False,
        reason=placement.RefusalReason.NODE_IN_ANOTHER_DOMAIN,
        message=f"{where} is held by another ComputeDomain; the scheduler places "
        f"the pod of {domains[claim.domain_uid]} on another node",
    )
