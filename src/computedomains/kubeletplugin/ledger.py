"""The node's claims in memory: one lock, and the checkpoint written before it is released.

Every change is made under the lock and saved before the lock is released, so the file never
lags behind what was answered. Nothing here calls the API server: the lock is held for a
dictionary update and a local file write only, so a prepare waiting for IMEX or for an API
answer never holds up another claim (the API calls live in ``prepare.py`` and
``collection.py``).
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import threading
from collections.abc import Callable, Iterable

from computedomains.kubeletplugin import cdi, checkpoint, devices, validate

ClaimState = checkpoint.ClaimState


def held_by(entries: Iterable[checkpoint.ClaimEntry]) -> str | None:
    """The domain the node's prepared claims hold it for (None: none).

    A fact the plugin reports (its slices show it), not a decision: the controller's record
    decides membership. Claims of two domains never hold a node together
    (``validate.other_holder``); should a rebuild find both, the choice is at least stable.
    """
    held = {e.domain_uid for e in entries if e.holds_node()}
    return min(held) if held else None


class Commit(enum.StrEnum):
    """What finishing a prepare does with the claim's entry."""

    COMPLETE = "Complete"
    ALREADY_COMPLETE = "AlreadyComplete"
    """A concurrent prepare of the same claim finished first: answer what it recorded."""
    ABANDONED = "Abandoned"
    """Unprepared or collected while it was being prepared: hand nothing out."""
    CLAIM_GONE = "ClaimGone"
    """The claim was deleted (or replaced) meanwhile: hand nothing out, remember nothing."""


def decide_commit(
    current: checkpoint.ClaimEntry | None, *, allocation: str, claim_present: bool
) -> Commit:
    """How a prepare of ``allocation`` that got this far ends, given the entry it finds now."""
    if current is None or current.state is ClaimState.ABORTED or current.allocation != allocation:
        return Commit.ABANDONED
    if current.state is ClaimState.COMPLETED:
        return Commit.ALREADY_COMPLETE
    if not claim_present:
        return Commit.CLAIM_GONE
    return Commit.COMPLETE


class Unprepared(Exception):
    """The kubelet unprepared the claim after this prepare read it: it must not start it."""


class Ledger:
    """The node's claims for this boot, and their checkpoint file and CDI specs."""

    def __init__(
        self, *, checkpoint_file: pathlib.Path, cdi_root: pathlib.Path, clock: Callable[[], float]
    ) -> None:
        self._file = checkpoint_file
        self._cdi_root = cdi_root
        self._clock = clock
        self._lock = threading.Lock()
        self._checkpoint = checkpoint.Checkpoint(boot_id="")

    def load(self, state: checkpoint.Checkpoint, *, persist: bool) -> None:
        """Take ``state`` as the node's claims (at start-up), saving it when ``persist``."""
        with self._lock:
            self._checkpoint = state
            if persist:
                self._save()

    def entry(self, uid: str) -> checkpoint.ClaimEntry | None:
        """The claim's entry, if any."""
        with self._lock:
            return self._checkpoint.claims.get(uid)

    def entries(self) -> tuple[checkpoint.ClaimEntry, ...]:
        """A snapshot of every entry."""
        with self._lock:
            return tuple(self._checkpoint.claims.values())

    def held_domain(self) -> str | None:
        """The domain the node's claims hold it for (None: the node is in no domain)."""
        with self._lock:
            return held_by(self._checkpoint.claims.values())

    def completed_devices(self) -> dict[str, int]:
        """Devices of completed claims by device type."""
        counts = dict.fromkeys(devices.DeviceType, 0)
        with self._lock:
            for entry in self._checkpoint.claims.values():
                if entry.state is ClaimState.COMPLETED and entry.device_type is not None:
                    counts[entry.device_type] += len(entry.devices)
        return {kind.value: count for kind, count in counts.items()}

    def now(self) -> float:
        """The ledger's clock: what a prepare notes as the time it read its claim."""
        return self._clock()

    def start(self, entry: checkpoint.ClaimEntry, *, read_at: float) -> str | None:
        """Record a prepare as started; returns the other domain holding the node instead.

        ``read_at`` is when the prepare read the claim (:meth:`now`): an unprepare since then
        (an aborted entry, or the mark :meth:`release` leaves for a claim it did not know)
        raises :class:`Unprepared`, so that a prepare already on its way cannot bring back what
        the kubelet has let go. A prepare that read the claim after the unprepare (a new pod of
        the same claim) starts it anew.

        Saved only when the claim makes the node join its domain, the one change that is
        visible outside (the slices show the holder); anything else a crash leaves (a CDI spec
        named by the claim UID) is found without it.
        """
        with self._lock:
            claims = self._checkpoint.claims
            aborted = claims.get(entry.uid)
            if (
                aborted is not None
                and aborted.state is ClaimState.ABORTED
                and (aborted.aborted_at is None or aborted.aborted_at >= read_at)
            ):
                raise Unprepared(entry.uid)
            other = validate.other_holder(entry, claims.values())
            if other is not None:
                return other
            current = claims.get(entry.uid)
            if current is not None and current.state is ClaimState.COMPLETED:
                return None  # a concurrent prepare finished it: its commit answers the same
            joins = entry.holds_node() and held_by(claims.values()) != entry.domain_uid
            claims[entry.uid] = entry
            if joins:
                self._save()
            return None

    def commit(
        self,
        uid: str,
        *,
        allocation: str,
        devices: tuple[checkpoint.PreparedDevice, ...],
        claim_present: bool,
    ) -> tuple[Commit, checkpoint.ClaimEntry | None]:
        """Finish a prepare whose CDI spec is written: completed, or undone (see :class:`Commit`).

        Returns the outcome and the entry as it stands afterwards.
        """
        with self._lock:
            claims = self._checkpoint.claims
            current = claims.get(uid)
            outcome = decide_commit(current, allocation=allocation, claim_present=claim_present)
            if outcome is Commit.COMPLETE:
                assert current is not None
                claims[uid] = dataclasses.replace(
                    current, state=ClaimState.COMPLETED, devices=devices
                )
                self._save()
            elif outcome is Commit.ABANDONED and (
                current is None or current.state is ClaimState.ABORTED
            ):
                # The spec written a moment ago is this prepare's alone: the unprepare or
                # collection removed the one before. (A live entry of a newer allocation owns
                # the spec path now, and its own prepare writes it.)
                cdi.remove(self._cdi_root, uid)
            elif outcome is Commit.CLAIM_GONE:
                del claims[uid]
                cdi.remove(self._cdi_root, uid)
                self._save()
            return outcome, claims.get(uid)

    def release(
        self, uid: str, *, namespace: str = "", name: str = ""
    ) -> checkpoint.ClaimEntry | None:
        """Unprepare: remove the spec, and the entry's devices; returns the entry released.

        The entry stays as a mark, aborted (with the time), as does one for a claim not known
        yet (its prepare may have read it and not recorded its start): a prepare already on
        its way, or a retry of one that finished, does not take the devices again
        (:meth:`start`). The mark holds no node and expires with the collection's TTL of
        aborted entries.
        """
        with self._lock:
            claims = self._checkpoint.claims
            entry = claims.get(uid)
            cdi.remove(self._cdi_root, uid)  # also for unknown claims: a crash may have left it
            if entry is None:
                claims[uid] = checkpoint.ClaimEntry(
                    uid, namespace, name, ClaimState.ABORTED, "", None, "",
                    aborted_at=self._clock(),
                )  # fmt: skip
                self._save()
                return None
            if entry.state is ClaimState.ABORTED:
                return None
            # Completed ones too: a retry of its prepare may have read the claim already.
            claims[uid] = dataclasses.replace(
                entry, state=ClaimState.ABORTED, devices=(), aborted_at=self._clock()
            )
            self._save()
            return entry

    def forget(self, uids: Iterable[str]) -> list[checkpoint.ClaimEntry]:
        """Drop these entries and their specs (claims gone, aborted ones expired)."""
        with self._lock:
            dropped = [e for uid in uids if (e := self._checkpoint.claims.pop(uid, None))]
            for entry in dropped:
                cdi.remove(self._cdi_root, entry.uid)
            if dropped:
                self._save()
            return dropped

    def _save(self) -> None:
        checkpoint.save(self._file, self._checkpoint)
