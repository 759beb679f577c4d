"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's Lease lock does it.

Replicas race for one Lease. The holder writes ``renewTime`` every retry period; the others
only read it. A standby judges expiry by its *own* clock: the lease is free once its content
has not changed for ``leaseDurationSeconds`` since this replica first saw that content, so
clock skew between machines cannot hand the lease to two holders. Every write carries the
resourceVersion it was computed from, so of two replicas taking a free lease at once, one
gets a 409 and stays standby.

The decision ("may I take or renew this lease?") is the pure :func:`decide`; the elector
only reads, writes and keeps time. A leader that cannot renew within the renew deadline
stops leading; on shutdown it releases the lease (empty holder) so a standby takes over at
once instead of waiting for expiry.

Fencing: client-go's elector stops its callers only when its renew loop notices, which a
slow API server or a paused process can delay past the lease's expiry. Here every writer
asks :meth:`LeaderElector.holds_lease` before it writes; the pure :func:`holds` answers from
the time this replica *sent* its last successful renewal and its own monotonic clock, with
no API call, so a replica that was paused or cut off stops writing the moment it resumes.
Every Lease request carries a timeout that never reaches past that same deadline
(:func:`request_timeout`), so the renew loop gives up, and stops the workers, before the
lease can expire, even when the API server stops answering.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import cast

from computedomains import flags, rfc3339
from computedomains.api import resources
from computedomains.kube import client, wire

log = logging.getLogger(__name__)


def lease_path(namespace: str, name: str = "") -> str:
    """The API path of the Leases in ``namespace``, or of Lease ``name``."""
    return resources.LEASES.path(name, namespace=namespace)


def identity(pod_name: str) -> str:
    """A holder identity ``<pod>-<random>``: unique even when a pod restarts under its name."""
    return f"{pod_name}-{uuid.uuid4()}"


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec, as far as election reads it."""

    holder: str
    duration: float
    """``leaseDurationSeconds``."""
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: wire.Lease) -> LeaseRecord:
        """The record of a Lease read from the API."""
        spec = lease.get("spec", {})
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime") or "",
            renew_time=spec.get("renewTime") or "",
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> wire.LeaseSpec:
        """The Lease spec that stores this record."""
        spec: wire.LeaseSpec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": max(int(self.duration), 1),
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class Action(enum.StrEnum):
    """What a replica does with the Lease it observed."""

    CREATE = "Create"
    """No Lease exists: create it, holding it."""
    TAKE = "Take"
    """Free (released or expired): take it over, one more transition."""
    RENEW = "Renew"
    """We hold it: renew it."""
    WAIT = "Wait"
    """Another replica holds a live lease."""


def decide(record: LeaseRecord | None, *, me: str, observed_at: float, now: float) -> Action:
    """Whether replica ``me`` may take or renew the lease described by ``record``.

    ``observed_at`` is when this replica first saw the record's current content, on the
    same clock as ``now``; expiry is measured from it, never from the remote ``renewTime``.
    """
    if record is None:
        return Action.CREATE
    if record.holder == me:
        return Action.RENEW
    if not record.holder or now >= observed_at + record.duration:
        return Action.TAKE
    return Action.WAIT


def next_record(
    current: LeaseRecord | None, action: Action, *, me: str, duration: float, now: str
) -> LeaseRecord:
    """The record to write for ``action`` (anything but WAIT), at wall time ``now``."""
    if action is Action.RENEW and current is not None:
        return dataclasses.replace(current, duration=duration, renew_time=now)
    transitions = current.transitions + 1 if current is not None else 0
    return LeaseRecord(me, duration, acquire_time=now, renew_time=now, transitions=transitions)


def holds(renewed_at: float | None, *, now: float, timing: Timing) -> bool:
    """Whether a replica that last took or renewed the lease at ``renewed_at`` may still write.

    ``renewed_at`` is when the replica *sent* that write, on its monotonic clock (None: it
    does not lead). Other replicas time expiry from when they *saw* the write, which is later,
    so the lease is surely ours until ``renewed_at + lease_duration``. Writing stops earlier,
    at the renew deadline: the rest of the lease duration is the safety margin for a write
    already in flight and for clocks that run at slightly different rates.
    """
    return renewed_at is not None and now - renewed_at < timing.renew_deadline


def request_timeout(renewed_at: float | None, *, now: float, timing: Timing) -> float:
    """Seconds the next Lease request may take (0: none may be sent, the leader gives up).

    A standby waits up to :attr:`Timing.request_timeout`; a leader never past the moment
    :func:`holds` turns false, so an answer that never comes cannot keep it leading.
    """
    if renewed_at is None:
        return timing.request_timeout
    left = renewed_at + timing.renew_deadline - now
    return max(min(timing.request_timeout, left), 0.0)


def pause(renewed_at: float | None, *, now: float, timing: Timing) -> float:
    """Seconds until the next attempt: the retry period, cut short by a leader's deadline."""
    if renewed_at is None:
        return timing.retry_period
    return max(min(timing.retry_period, renewed_at + timing.renew_deadline - now), 0.0)


def _wall_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Timing:
    """How long a lease lives, how long a leader tries to renew, how often replicas try.

    A flag group (``flags.group``): the controller's ``--lease-duration``, ``--renew-deadline``
    and ``--retry-period``.
    """

    lease_duration: float = flags.option(
        "--lease-duration",
        default="15",
        type=float,
        help="seconds before a standby takes a silent leader's Lease",
    )
    renew_deadline: float = flags.option(
        "--renew-deadline",
        default="10",
        type=float,
        help="seconds the leader keeps trying to renew before it stops leading",
    )
    retry_period: float = flags.option(
        "--retry-period",
        default="2",
        type=float,
        help="seconds between attempts to take or renew the Lease",
    )

    @property
    def request_timeout(self) -> float:
        """Seconds one Lease request may take: a third of the renew deadline.

        A renewal is two requests (read, write), so one slow attempt leaves time for another
        before the deadline.
        """
        return self.renew_deadline / 3

    def __post_init__(self) -> None:
        # As client-go requires: a standby must not take a lease the leader may still renew.
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2 > 0:
            raise ValueError(
                "leader election needs lease duration > renew deadline > 1.2 x retry period > 0, "
                f"got {self.lease_duration:g} / {self.renew_deadline:g} / {self.retry_period:g}"
            )


class LeaderElector:
    """Competes for one Lease and calls back when this replica starts and stops leading."""

    def __init__(
        self,
        api: client.Client,
        *,
        namespace: str,
        name: str,
        me: str,
        timing: Timing,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = _wall_now,
    ) -> None:
        self.identity = me
        self._api = api
        self._namespace = namespace
        self._name = name
        self._timing = timing
        self._started = on_started_leading
        self._stopped = on_stopped_leading
        self._clock = clock
        self._wall = wall
        self._observed: tuple[LeaseRecord | None, float] = (None, 0.0)
        self._renewed_at: float | None = None
        """When our last successful take or renewal was sent (None: not leading). Written
        by the elector's thread only, read by every writer (:meth:`holds_lease`)."""
        self._rng = random.Random()  # noqa: S311 - jitter, not secrecy

    @property
    def leading(self) -> bool:
        """True while this replica leads (it may be about to give up: see :meth:`holds_lease`)."""
        return self._renewed_at is not None

    def holds_lease(self) -> bool:
        """True while this replica may write: the fence every leader's write passes first."""
        return holds(self._renewed_at, now=self._clock(), timing=self._timing)

    def healthy(self) -> bool:
        """False when leading but renewing is overdue (the process is stuck)."""
        last = self._renewed_at
        return last is None or self._clock() - last < self._timing.lease_duration

    def run(self, stop: threading.Event) -> bool:
        """Acquire, lead, renew; return when ``stop`` is set (True) or leadership is lost (False).

        ``on_started_leading`` runs once the lease is ours; ``on_stopped_leading`` runs
        before returning, if it ever led, and must not return before this replica's writers
        have stopped: only then is the lease released (on ``stop``), so two leaders never
        write at once.
        """
        while not self._try():
            if stop.wait(self._timing.retry_period * (1 + 0.2 * self._rng.random())):
                return True
        log.info("%s became the leader (lease %s/%s)", self.identity, self._namespace, self._name)
        kept = False
        try:
            self._started()
            kept = self._renew_until(stop)
        finally:
            self._stopped()
            if kept:
                self._release()
        return kept

    def _renew_until(self, stop: threading.Event) -> bool:
        """Renew every retry period; False once the lease may no longer be ours.

        That is at the renew deadline when renewals keep failing (the writers' fence closes
        at the same moment), or at once when another replica is seen holding it.
        """
        while not stop.wait(self._pause()):
            self._try()
            if not self.holds_lease():
                log.error(
                    "%s may no longer hold its lease (not renewed within %gs, or "
                    "taken over); stopping",
                    self.identity,
                    self._timing.renew_deadline,
                )
                self._renewed_at = None
                return False
        return True

    def _pause(self) -> float:
        return pause(self._renewed_at, now=self._clock(), timing=self._timing)

    def _timeout(self) -> float:
        return request_timeout(self._renewed_at, now=self._clock(), timing=self._timing)

    def _try(self) -> bool:
        """One attempt to take or renew the lease; True when we hold it afterwards."""
        timeout = self._timeout()
        if timeout <= 0:
            return False
        try:
            lease = cast(
                wire.Lease,
                self._api.get(lease_path(self._namespace, self._name), timeout=timeout),
            )
        except client.ApiError as exc:
            if exc.failure is not client.Failure.NOT_FOUND:
                log.warning("reading lease %s failed: %s", self._name, exc)
                return False
            lease = None
        except client.API_ERRORS as exc:
            log.warning("reading lease %s failed: %s", self._name, exc)
            return False
        record = LeaseRecord.from_lease(lease) if lease is not None else None
        if record != self._observed[0]:
            self._observed = (record, self._clock())
        action = decide(record, me=self.identity, observed_at=self._observed[1], now=self._clock())
        if action is Action.WAIT:
            self._renewed_at = None  # another replica's live lease: we certainly do not lead
            return False
        wanted = next_record(
            record,
            action,
            me=self.identity,
            duration=self._timing.lease_duration,
            now=rfc3339.stamp(self._wall(), micro=True),
        )
        sent = self._clock()
        timeout = self._timeout()
        if timeout <= 0 or not self._write(lease, wanted, timeout=timeout):
            return False
        self._observed = (wanted, self._clock())
        self._renewed_at = sent
        return True

    def _write(self, lease: wire.Lease | None, record: LeaseRecord, *, timeout: float) -> bool:
        body: wire.Lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": record.to_spec(),
        }
        try:
            if lease is None:
                self._api.create(lease_path(self._namespace), body, timeout=timeout)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                self._api.replace(lease_path(self._namespace, self._name), body, timeout=timeout)
        except client.API_ERRORS as exc:
            # A 409 here is another replica winning the same free lease: we stay standby.
            log.info("lease %s not written (%s)", self._name, exc)
            return False
        return True

    def _release(self) -> None:
        """Give the lease up so that a standby need not wait for it to expire."""
        self._renewed_at = None
        timeout = self._timing.request_timeout
        try:
            lease = cast(
                wire.Lease,
                self._api.get(lease_path(self._namespace, self._name), timeout=timeout),
            )
            record = LeaseRecord.from_lease(lease)
            if record.holder != self.identity:
                return
            released = dataclasses.replace(
                record, holder="", duration=1, renew_time=rfc3339.stamp(self._wall(), micro=True)
            )
            self._write(lease, released, timeout=timeout)
            log.info("%s released the lease %s", self.identity, self._name)
        except client.API_ERRORS as exc:
            log.warning("releasing lease %s failed: %s", self._name, exc)
