"""Record Kubernetes Events (core/v1) on objects users look at: pods, claims, nodes, CDs.

Events are correlated the way client-go's ``EventCorrelator`` does it, so a failure that is
retried (a stuck prepare, every kubelet retry) grows one Event's ``count`` instead of adding
an object per retry:

- identical Events (same object, type, reason and message) with no gap longer than the
  window form one *series*: one Event object whose ``count`` and ``lastTimestamp`` are
  patched (``firstTimestamp`` kept); one that expired or was deleted is created again;
- once an object collects ``similar`` different messages for one reason within the window,
  further ones join a single "(combined from similar events): ..." series;
- a token bucket per involved object bounds the writes (burst, then one per refill period);
  Events over budget are not written but still counted, so the next write carries them.

The correlation (:class:`Correlator`) decides, :class:`Recorder` writes. One series is
written by one thread at a time: an occurrence that arrives while its series is being
written is left to that writer, which writes again with the newest count, so writes of a
series never overtake each other and no lock is held across an API call.
"""
# size: the event recorder: series, aggregation and the spam budget, as client-go's

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from computedomains import rfc3339
from computedomains.api import resources
from computedomains.kube import client, writes

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 1024
"""Characters of a message kept, as the API server's validation of Events allows."""
COMBINED_PREFIX = "(combined from similar events): "
"""client-go's prefix for the message of an aggregated Event."""


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


class EventType(enum.StrEnum):
    """``Event.type``."""

    NORMAL = "Normal"
    WARNING = "Warning"


@dataclasses.dataclass(frozen=True)
class Policy:
    """How Events are correlated; the defaults are client-go's."""

    window: float = 600.0
    """Seconds: a longer gap between two occurrences starts a new series (and a new object)."""
    burst: int = 25
    """Writes per involved object before the spam filter throttles them."""
    refill: float = 300.0
    """Seconds per write regained after the burst is spent (client-go: 1/300 qps)."""
    similar: int = 10
    """Different messages of one object and reason after which they are combined."""
    cache_size: int = 4096
    """Entries remembered per table (series, similar messages, buckets); least recent go."""


class Action(enum.StrEnum):
    """What becomes of one occurrence."""

    CREATE = "Create"
    """Write a new Event object for the series."""
    PATCH = "Patch"
    """Patch the series' object: count, lastTimestamp, message."""
    DEFER = "Defer"
    """Another thread is writing the series; it writes this occurrence's count as well."""
    DROP = "Drop"
    """Over the spam budget: counted, not written."""


WRITES = (Action.CREATE, Action.PATCH)


@dataclasses.dataclass(frozen=True)
class Occurrence:
    """One call of :meth:`Recorder.emit`."""

    ref: ObjectRef
    type: EventType
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class SeriesKey:
    """What makes Events one series; ``message`` is None for the combined series."""

    ref: ObjectRef
    type: EventType
    reason: str
    message: str | None


@dataclasses.dataclass(frozen=True)
class Series:
    """One Event object as this recorder knows it."""

    name: str
    count: int
    first: float
    last: float
    message: str
    written: bool = False
    """A write of the object was started (so the next write is a patch)."""
    writing: bool = False
    """A thread is writing the object now."""
    pending: bool = False
    """Occurrences came while it was writing: it writes once more when done."""


@dataclasses.dataclass(frozen=True)
class Similar:
    """The different messages seen for one (object, type, reason)."""

    messages: frozenset[str]
    last: float


@dataclasses.dataclass(frozen=True)
class Bucket:
    """The spam filter's token bucket of one involved object."""

    tokens: float
    at: float


@dataclasses.dataclass(frozen=True)
class Decision:
    """The correlator's answer: what to do, and the series as it then stands."""

    action: Action
    key: SeriesKey
    series: Series


def aggregate(
    record: Similar | None, message: str, *, now: float, policy: Policy
) -> tuple[Similar, bool]:
    """The record after ``message``, and whether it joins the combined series."""
    if record is None or now - record.last > policy.window:
        record = Similar(frozenset(), now)
    messages = record.messages
    if message not in messages and len(messages) < policy.similar:
        messages |= {message}  # never more than `similar`: the record stays small
    return Similar(messages, now), len(messages) >= policy.similar


def observe(
    series: Series | None, *, name: str, message: str, now: float, policy: Policy
) -> Series:
    """The series after one more occurrence; a new one (named ``name``) after a long gap."""
    if series is None or now - series.last > policy.window:
        return Series(name=name, count=1, first=now, last=now, message=message)
    return dataclasses.replace(series, count=series.count + 1, last=now, message=message)


def spend(bucket: Bucket | None, *, now: float, policy: Policy) -> tuple[Bucket, bool]:
    """The bucket after asking for one write, and whether the write may happen."""
    if bucket is None:
        bucket = Bucket(float(policy.burst), now)
    elapsed = max(now - bucket.at, 0.0)  # a wall clock stepped back refills nothing
    tokens = min(float(policy.burst), bucket.tokens + elapsed / policy.refill)
    if tokens >= 1:
        return Bucket(tokens - 1, now), True
    return Bucket(tokens, now), False


def decide(series: Series, *, allowed: bool) -> Action:
    """What to do with the occurrence that made ``series``, given the spam filter's answer."""
    if not allowed:
        return Action.DROP
    if series.writing:
        return Action.DEFER
    return Action.PATCH if series.written else Action.CREATE


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A mapping that forgets its least recently used entries beyond ``size``."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)


class Correlator:
    """The state of one event source (component and host), without I/O; thread-safe."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._series: _Lru[SeriesKey, Series] = _Lru(policy.cache_size)
        self._similar: _Lru[tuple[ObjectRef, EventType, str], Similar] = _Lru(policy.cache_size)
        self._buckets: _Lru[ObjectRef, Bucket] = _Lru(policy.cache_size)

    def correlate(self, occurrence: Occurrence, *, now: float, name: str) -> Decision:
        """Decide about ``occurrence`` at ``now``; ``name`` names the object if one is new.

        A CREATE or PATCH makes the caller the series' writer until :meth:`written` (or
        :meth:`abandon`) is called with the decision.
        """
        ref, policy = occurrence.ref, self.policy
        similar_key = (ref, occurrence.type, occurrence.reason)
        with self._lock:
            record, combined = aggregate(
                self._similar.get(similar_key), occurrence.message, now=now, policy=policy
            )
            self._similar.put(similar_key, record)
            message = COMBINED_PREFIX + occurrence.message if combined else occurrence.message
            key = SeriesKey(
                ref, occurrence.type, occurrence.reason, None if combined else occurrence.message
            )
            series = observe(
                self._series.get(key), name=name, message=message, now=now, policy=policy
            )
            bucket, allowed = spend(self._buckets.get(ref), now=now, policy=policy)
            self._buckets.put(ref, bucket)
            action = decide(series, allowed=allowed)
            if action in WRITES:
                series = dataclasses.replace(series, written=True, writing=True)
            elif action is Action.DEFER:
                series = dataclasses.replace(series, pending=True)
            self._series.put(key, series)
        return Decision(action, key, series)

    def written(self, decision: Decision) -> Decision | None:
        """The writer finished ``decision``: the follow-up PATCH to write, if any came."""
        with self._lock:
            series = self._series.get(decision.key)
            if series is None or series.name != decision.series.name:
                return None  # forgotten, or a new series that its own writer writes
            if series.pending:
                series = dataclasses.replace(series, pending=False)
                self._series.put(decision.key, series)
                return Decision(Action.PATCH, decision.key, series)
            self._series.put(decision.key, dataclasses.replace(series, writing=False))
            return None

    def abandon(self, decision: Decision) -> None:
        """The writer of ``decision`` failed unexpectedly: the next occurrence writes."""
        with self._lock:
            series = self._series.get(decision.key)
            if series is not None and series.name == decision.series.name:
                self._series.put(
                    decision.key, dataclasses.replace(series, writing=False, pending=False)
                )


def _timestamp(seconds: float) -> str:
    return rfc3339.stamp(datetime.datetime.fromtimestamp(seconds, datetime.UTC))


@dataclasses.dataclass
class Recorder:
    """Writes Events as ``component`` on ``host``; failures are logged, never raised."""

    api: client.Client
    component: str
    host: str = ""
    clock: Callable[[], float] = time.time
    """Wall-clock seconds, for timestamps and the policy's windows; tests step a fake one."""
    policy: Policy = Policy()
    _correlator: Correlator = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._correlator = Correlator(self.policy)

    def emit(
        self,
        ref: ObjectRef,
        *,
        reason: str,
        message: str,
        warning: bool = False,
        at: float | None = None,
    ) -> None:
        """Record an Event about ``ref`` (namespaced objects get it in their namespace).

        ``at``: when it happened (wall-clock seconds), for an Event written later; default now.
        """
        kind = EventType.WARNING if warning else EventType.NORMAL
        occurrence = Occurrence(ref, kind, reason, message[:MESSAGE_LIMIT])
        name = f"{ref.name}.{uuid.uuid4().hex[:12]}"
        decision: Decision | None = self._correlator.correlate(
            occurrence, now=self.clock() if at is None else at, name=name
        )
        if decision is not None and decision.action is Action.DROP:
            log.debug("event %s on %s %s over the spam budget, not written (count %d)",
                      reason, ref.kind, ref.name, decision.series.count)  # fmt: skip
        while decision is not None and decision.action in WRITES:
            try:
                self._write(decision)
            except BaseException:
                self._correlator.abandon(decision)
                raise
            decision = self._correlator.written(decision)

    def _write(self, decision: Decision) -> None:
        ref, series = decision.key.ref, decision.series
        collection = resources.EVENTS.path(namespace=ref.namespace or "default")
        try:
            if decision.action is Action.PATCH:
                try:
                    self.api.patch(f"{collection}/{series.name}", _patch(series))
                    return
                except client.ApiError as exc:
                    if exc.failure is not client.Failure.NOT_FOUND:
                        raise
                    # Expired (Events live an hour) or deleted: write it again, same name.
            self.api.create(collection, self._body(decision))
        except client.API_ERRORS as exc:
            log.warning("could not record event %s on %s %s: %s",
                        decision.key.reason, ref.kind, ref.name, exc)  # fmt: skip

    def _body(self, decision: Decision) -> dict[str, Any]:
        ref, series = decision.key.ref, decision.series
        involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        involved |= {"namespace": ref.namespace} if ref.namespace else {}
        involved |= {"uid": ref.uid} if ref.uid else {}
        return {
            "metadata": {"name": series.name, "namespace": ref.namespace or "default"},
            "involvedObject": involved,
            "reason": decision.key.reason,
            "type": str(decision.key.type),
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
            "firstTimestamp": _timestamp(series.first),
            **_patch(series),
        }


def _patch(series: Series) -> dict[str, Any]:
    """The fields a repeated occurrence changes."""
    return {
        "count": series.count,
        "lastTimestamp": _timestamp(series.last),
        "message": series.message[:MESSAGE_LIMIT],
    }


class Emitter(Protocol):
    """What records Events: a :class:`Recorder`, or a :class:`BackgroundRecorder` before one."""

    def emit(self, ref: ObjectRef, *, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event about ``ref``."""


@dataclasses.dataclass(frozen=True)
class _Pending:
    ref: ObjectRef
    reason: str
    message: str
    warning: bool
    at: float


class BackgroundRecorder:
    """Hands Events to one writer thread, so whoever emits one never waits for the API server.

    The controller's reconciles and binder answers lie on every formation's critical path and
    Events do not. Events are best effort: with ``capacity`` waiting, more are dropped (and
    counted in the log), as client-go's broadcaster drops them too. Each keeps the time it was
    emitted. ``may_write`` is asked before each write: a replica that lost its lease writes
    none of what it queued before (a recorder with a fenced client, :func:`writes.fenced`,
    also sends no retry of an Event after that).
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        may_write: Callable[[], bool] = lambda: True,
        capacity: int = 1000,
    ) -> None:
        self._recorder = recorder
        self._may_write = may_write
        self._pending: queue.Queue[_Pending | threading.Event | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._write, name="events", daemon=True)
        self._lock = threading.Lock()
        self._dropped = 0

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def emit(self, ref: ObjectRef, *, reason: str, message: str, warning: bool = False) -> None:
        """Queue an Event about ``ref``; returns at once."""
        try:
            self._pending.put_nowait(
                _Pending(ref, reason, message, warning, self._recorder.clock())
            )
        except queue.Full:
            with self._lock:
                self._dropped += 1
                dropped = self._dropped
            if dropped % 100 == 1:  # the first, then every hundredth: not a line per drop
                log.warning("event queue full: %d events dropped so far (now %s on %s %s)",
                            dropped, reason, ref.kind, ref.name)  # fmt: skip

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for what is queued now to be written; True if it was."""
        done = threading.Event()
        deadline = time.monotonic() + timeout
        try:
            self._pending.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(max(0.0, deadline - time.monotonic()))

    def discard(self) -> int:
        """Drop the Events queued now (a lost leadership term's); returns how many.

        A flush waiting meanwhile is released, and a close is kept.
        """
        dropped, closing = 0, False
        while True:
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Pending):
                dropped += 1
            elif isinstance(item, threading.Event):
                item.set()
            else:
                closing = True  # None: a close asked for meanwhile
        if closing:
            self._pending.put_nowait(None)
        if dropped:
            log.info("%d queued events dropped: this replica's term ended", dropped)
        return dropped

    def close(self, timeout: float) -> None:
        """Write what is queued, then end the writer thread; ``timeout`` bounds both."""
        if not self._thread.is_alive():
            return
        deadline = time.monotonic() + timeout
        try:
            self._pending.put(None, timeout=timeout)
        except queue.Full:
            log.warning("event writer still busy after %gs: queued Events not written", timeout)
            return  # a daemon thread: it ends with the process
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            log.warning("event writer still busy after %gs: %d Events not written",
                        timeout, self._pending.qsize())  # fmt: skip

    def _write(self) -> None:
        while (item := self._pending.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()  # a flush: everything queued before it is written
                continue
            if not self._may_write():
                log.debug("event %s on %s %s not written: this replica may no longer write",
                          item.reason, item.ref.kind, item.ref.name)  # fmt: skip
                continue
            try:
                self._recorder.emit(item.ref, reason=item.reason, message=item.message,
                                    warning=item.warning, at=item.at)  # fmt: skip
            except writes.Fenced:  # the lease went while the Event waited (a retry, the budget)
                log.debug("event %s on %s %s not written: this replica may no longer write",
                          item.reason, item.ref.kind, item.ref.name)  # fmt: skip
            except Exception:  # one bad Event must not end the writer
                log.exception(
                    "writing event %s on %s %s", item.reason, item.ref.kind, item.ref.name
                )
