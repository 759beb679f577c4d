"""Garbage collection: forget what no claim needs any more.

A round (:meth:`Collector.run`, periodic, and never before start-up has rebuilt the ledger)
forgets aborted entries past :data:`ABORTED_TTL`, forgets started *and* completed entries whose
claim is gone (deleted, or re-created under another UID: the kubelet never unprepares those).
What to do is decided by :func:`decide` from a snapshot and the claims' current UIDs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from computedomains.kube import client as kube_client
from computedomains.kube import resourceclaims
from computedomains.kubeletplugin import checkpoint, ledger

log = logging.getLogger(__name__)
ABORTED_TTL = 90.0
"""Seconds an aborted claim is remembered: two kubelet call timeouts."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """What one round removes."""

    expired: tuple[str, ...] = ()
    """UIDs of aborted entries past their TTL."""
    gone: tuple[checkpoint.ClaimEntry, ...] = ()
    """Started or completed entries whose claim no longer exists."""


def to_look_up(entries: Iterable[checkpoint.ClaimEntry]) -> list[checkpoint.ClaimEntry]:
    """The entries whose claim a round must look for: every one not aborted."""
    return [e for e in entries if e.state is not checkpoint.ClaimState.ABORTED]


def decide(
    entries: Iterable[checkpoint.ClaimEntry], *, now: float, present: Mapping[str, bool]
) -> Decision:
    """The round's decision.

    ``present`` says, for each entry of :func:`to_look_up` by UID, whether a claim with that
    UID still exists under the entry's name (one re-created under the name does not count).
    """
    expired, gone = [], []
    for entry in entries:
        if entry.state is checkpoint.ClaimState.ABORTED:
            if now - (entry.aborted_at if entry.aborted_at is not None else now) > ABORTED_TTL:
                expired.append(entry.uid)
        elif not present.get(entry.uid, True):
            gone.append(entry)
    return Decision(tuple(expired), tuple(gone))


class Collector:
    """Runs collection rounds over the ledger."""

    def __init__(
        self,
        *,
        api: kube_client.Client,
        book: ledger.Ledger,
        clock: Callable[[], float],
    ) -> None:
        self._api = api
        self._book = book
        self._clock = clock

    def run(self) -> Decision:
        """One round; returns what it removed."""
        entries = self._book.entries()
        present = {e.uid: self._present(e) for e in to_look_up(entries)}
        decision = decide(entries, now=self._clock(), present=present)
        self._book.forget(decision.expired)
        # A prepare of such a claim still waiting for IMEX sees its entry gone and gives up.
        for entry in self._book.forget(e.uid for e in decision.gone):
            log.info(
                "claim %s/%s (%s, %s) no longer exists; its devices are released",
                entry.namespace,
                entry.name,
                entry.uid,
                entry.state.value,
            )
        log.info(
            "collection round: %d claims, %d gone, %d expired aborted; claims held for %s",
            len(entries),
            len(decision.gone),
            len(decision.expired),
            self._book.held_domain() or "-",
        )
        return decision

    def _present(self, entry: checkpoint.ClaimEntry) -> bool:
        found = cast(
            dict[str, Any] | None, resourceclaims.read(self._api, entry.namespace, entry.name)
        )
        return found is not None and found["metadata"]["uid"] == entry.uid
