"""What the placement turn decides from (:mod:`turns`), read off the controller's caches.

Per live domain, its claims waiting for a node and those allocated one; and the gone (or
deleting) domains that still have a claim waiting. An allocation counts as waiting until its
node is recorded (or labelled) for its domain: then it has landed, which the reader remembers
from one reading to the next, so that its pod ending is no placement.
"""

from __future__ import annotations

from typing import Any

from computedomains.api import placement
from computedomains.controller import turns
from computedomains.controller.caches import Caches


def _generated(claim: dict[str, Any]) -> bool:
    """The claim was made for one pod from a template (it goes when the pod goes)."""
    owners = claim["metadata"].get("ownerReferences") or []
    return any(o.get("kind") == "Pod" and o.get("controller") for o in owners)


class Reader:
    """Reads each live domain's placement activity, remembering which allocations landed."""

    def __init__(self, caches: Caches) -> None:
        self._caches = caches
        self._landed: dict[str, tuple[str, str]] = {}
        """Claim UID → (node, allocation time) of its allocation whose node has been seen
        recorded (or labelled) for its domain since (``turns``)."""

    def read(self) -> tuple[dict[str, turns.Activity], frozenset[str]]:
        """What the turn decides from (``turns``): live domains' activity, gone ones waiting.

        Per live domain, its claims waiting for a node and those allocated one; and the gone
        (or deleting) domains that still have a claim waiting.

        A waiting channel claim whose config names no readable domain (or one of another
        namespace, ``Caches.counts``) counts as a domain of its own that cannot use any turn.
        One thread reads (the turn keeper's).
        """
        live: set[str] = {d.uid for d in self._caches.domain_views() if not d.deleting}
        seen: list[turns.ClaimState] = []
        landed: dict[str, tuple[str, str]] = {}
        for claim in self._caches.claims.items():
            if claim["metadata"].get("deletionTimestamp"):
                continue
            allocation = placement.parse_claim(claim)
            state = (
                self._unallocated(claim, landed=landed, live=live) if allocation is None
                else self._allocated(allocation, landed=landed)
            )  # fmt: skip
            if state is not None:
                seen.append(state)
        self._landed = landed
        found = turns.activity(seen)
        gone_waiting = frozenset(uid for uid, a in found.items() if uid not in live and a.waiting)
        return {uid: found.get(uid, turns.Activity(0, 0)) for uid in live}, gone_waiting

    def _unallocated(
        self, claim: dict[str, Any], *, landed: dict[str, tuple[str, str]], live: set[str]
    ) -> turns.ClaimState | None:
        """A claim without an allocation as the turn sees it (None: it waits for nothing).

        Adds to ``landed`` a claim that has landed before, and to ``live`` the placer of its
        own that a claim naming no readable domain counts as.
        """
        if not placement.asks_for_a_channel(claim):
            return None
        claim_uid = str(claim["metadata"].get("uid", ""))
        if claim_uid in self._landed and _generated(claim):
            # Deallocated once its pod ended, on its way to deletion: waits for nothing.
            landed[claim_uid] = self._landed[claim_uid]
            return None
        uid = placement.domain_of(claim)
        if not self._caches.counts(uid, str(claim["metadata"].get("namespace", ""))):
            uid = ""  # another namespace's domain: to this claim, none exists
        if not uid:
            # Its config names no domain it could read (the plugin refuses it at prepare,
            # saying why): it needs free nodes open, so it counts as a placer of its own that
            # no turn fits.
            uid = f"claim/{claim_uid}"
            live.add(uid)
        tolerant = placement.tolerates_own_hold(claim, uid)
        return turns.ClaimState(uid, allocated=False, waiting=True, tolerant=tolerant)

    def _allocated(
        self, allocation: placement.ChannelAllocation, *, landed: dict[str, tuple[str, str]]
    ) -> turns.ClaimState | None:
        """An allocated claim as the turn sees it (None: refused, or it does not count).

        A node it took counts as waiting until the record (or its copy, the label, for a node
        without a clique) names it for the domain: until then its plugin may still show it
        free. Once so named the allocation has landed (added to ``landed``): its pod ending,
        which takes the node out of the record, is no placement.
        """
        if allocation.refused or not self._caches.counts(
            allocation.domain_uid, allocation.namespace
        ):
            return None
        where = (allocation.node, allocation.allocated_at)
        if self._landed.get(allocation.uid) == where or allocation.domain_uid in (
            self._caches.recorded(allocation.node),
            self._caches.node_label(allocation.node),
        ):
            landed[allocation.uid] = where
        waiting = allocation.pending or allocation.uid not in landed
        return turns.ClaimState(allocation.domain_uid, allocated=True, waiting=waiting)
