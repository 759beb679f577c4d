"""Conflict-safe writes: updates on resourceVersion, fencing, and a cache of our own writes.

Every update carries the resourceVersion its content was computed from, so a write based on
a stale read is refused (409) instead of silently undoing someone else's change. What
happens then depends on where the change came from:

- :func:`read_modify_write` recomputes a change that derives from the object itself (add a
  finalizer) from a fresh copy and tries again;
- :func:`write_planned` writes a change that was planned from a whole snapshot (a clique's
  member list, a status) once: on a 409 the plan is void, since the object changed under
  it, and :class:`Stale` tells the caller to plan again from fresh state. Re-applying the
  old plan on the newer object is exactly the overwrite the resourceVersion exists to stop.

:class:`Fenced` is what a writer raises instead of writing when it may have lost the right
to write at all (a leader whose lease may have expired). :func:`fenced` gives a leader one
client for all its writes that checks its fence before every try of every write: a write
waiting in the client's retry loop (a 429's ``Retry-After``, a back-off after a 5xx) is not
sent by a replica that lost the lease meanwhile.

A controller computes its writes from an informer cache, which trails the API server by a
watch event. Without help, the write after our own write would start from the older cached
copy and earn a 409 every time. :class:`MutationCache` remembers what our writes returned
(and what we deleted) until the informer has caught up, so as a single writer we see our own
writes at once and never conflict with ourselves.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from computedomains.kube import client, retry

DEFAULT_ATTEMPTS = 5
"""Read-modify-write rounds before a conflict is given up (to the caller's retry)."""
DEFAULT_TTL = 120.0
"""Seconds a remembered write outlives a silent informer: longer than any watch gap."""

Mutation = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Given a copy of the current object, the object to write, or None when nothing changes."""


class Stale(client.ApiError):
    """A planned write was refused (409): the object changed since the plan was made."""

    @classmethod
    def from_conflict(cls, exc: client.ApiError) -> Stale:
        """The :class:`Stale` that a 409 answer to a planned write means."""
        return cls(exc.status, exc.reason, exc.message, exc.body)


class Fenced(Exception):
    """A write was not sent: this writer may no longer hold the right to write (its lease)."""


class FencedClient(client.Client):
    """A view of a client that runs a fence before every try of every write it sends.

    Reads go out unfenced: they change nothing. The connection, request budget, credential,
    retry policy and request metrics stay those of the wrapped client (set them there).
    """

    def __init__(self, api: client.Client, may_write: Callable[[], bool]) -> None:
        # Not client.Client.__init__: a view of ``api`` shares its connections, opens none.
        self._api = api
        self._may_write = may_write

    def __getattr__(self, name: str) -> Any:
        """The wrapped client's attributes (``server``, ``policy``, ``limiter``, ``observer``)."""
        if name in ("_api", "_may_write"):
            raise AttributeError(name)  # not set up (yet): no endless lookup through _api
        return getattr(self._api, name)

    def fence(self) -> None:
        """Raise :class:`Fenced` unless this replica may still write."""
        if not self._may_write():
            raise Fenced("not sent: this replica may no longer hold the leader lease")

    def _guard(self, guard: Callable[[], None] | None) -> Callable[[], None]:
        """The fence, then the caller's own guard, if any."""
        if guard is None:
            return self.fence

        def both() -> None:
            self.fence()
            guard()

        return both

    def request(
        self, method: str, path: str, *, guard: Callable[[], None] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """As :meth:`client.Client.request`; a write is fenced before every try."""
        if method.upper() not in retry.READS:
            guard = self._guard(guard)
        return self._api.request(method, path, guard=guard, **kwargs)

    # Each call goes to the wrapped client's own method, which may be a test's stand-in.
    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """GET ``path`` (unfenced)."""
        return self._api.get(path, **kwargs)

    def find(self, path: str, **kwargs: Any) -> dict[str, Any] | None:
        """GET ``path`` (unfenced); None when there is no such object."""
        return self._api.find(path, **kwargs)

    def create(
        self, path: str, body: Any, *, guard: Callable[[], None] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """POST ``body`` to ``path``, fenced."""
        return self._api.create(path, body, guard=self._guard(guard), **kwargs)

    def replace(
        self, path: str, body: Any, *, guard: Callable[[], None] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """PUT ``body`` to ``path``, fenced."""
        return self._api.replace(path, body, guard=self._guard(guard), **kwargs)

    def patch(
        self, path: str, body: Any, *, guard: Callable[[], None] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Patch ``path`` with ``body``, fenced."""
        return self._api.patch(path, body, guard=self._guard(guard), **kwargs)

    def delete(
        self, path: str, *, guard: Callable[[], None] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """DELETE ``path``, fenced."""
        return self._api.delete(path, guard=self._guard(guard), **kwargs)

    def stream(
        self, path: str, *, query: Mapping[str, str], timeout: float
    ) -> Iterator[dict[str, Any]]:
        """Watch ``path`` (unfenced)."""
        return self._api.stream(path, query=query, timeout=timeout)


def fenced(api: client.Client, may_write: Callable[[], bool]) -> FencedClient:
    """``api`` for a leader's writes: each try of each one first asks ``may_write``.

    A refusal raises :class:`Fenced` in place of the try, the first one included.
    """
    return FencedClient(api, may_write)


def read_modify_write(
    api: client.Client,
    path: str,
    mutate: Mutation,
    *,
    current: dict[str, Any] | None = None,
    subresource: str = "",
    attempts: int = DEFAULT_ATTEMPTS,
) -> dict[str, Any] | None:
    """Replace the object at ``path`` by ``mutate(object)``, retrying on conflicts.

    ``current`` is the caller's (cached) copy: the first attempt starts from it without a
    read. ``subresource`` (``"status"``) sends the PUT there. Returns the object the server
    stored, or None when ``mutate`` found nothing to change (nothing is written then).
    Raises :class:`client.ApiError` for anything but a conflict, or when conflicts persist.
    """
    obj = current if current is not None else api.get(path)
    target = f"{path}/{subresource}" if subresource else path
    for attempt in range(attempts):
        desired = mutate(copy.deepcopy(obj))
        if desired is None:
            return None
        desired.setdefault("metadata", {})["resourceVersion"] = obj["metadata"]["resourceVersion"]
        try:
            return api.replace(target, desired)
        except client.ApiError as exc:
            if exc.failure is not client.Failure.CONFLICT or attempt == attempts - 1:
                raise
        obj = api.get(path)
    raise AssertionError("unreachable: the last attempt returns or raises")


def write_planned(
    api: client.Client,
    path: str,
    mutate: Mutation,
    *,
    current: dict[str, Any],
    subresource: str = "",
) -> dict[str, Any] | None:
    """Replace the object at ``path`` by ``mutate(current)``, only if it is still ``current``.

    For a change planned from a snapshot that ``current`` was part of: one attempt, carrying
    ``current``'s resourceVersion. Returns what the server stored, or None when ``mutate``
    found nothing to change. Raises :class:`Stale` on a conflict (plan again from fresh
    state, never re-apply this plan) and :class:`client.ApiError` for any other refusal.
    """
    try:
        return read_modify_write(
            api, path, mutate, current=current, subresource=subresource, attempts=1
        )
    except client.ApiError as exc:
        if exc.failure is not client.Failure.CONFLICT:
            raise
        raise Stale.from_conflict(exc) from exc


def _version(obj: dict[str, Any]) -> int | None:
    """The resourceVersion as a number: etcd revisions, comparable for one object."""
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", ""))
    except ValueError:
        return None


def _uid(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


class MutationCache:
    """Our recent writes, overlaid on an informer's view until the informer catches up."""

    def __init__(self, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._written: dict[str, tuple[dict[str, Any], float]] = {}
        self._deleted: dict[str, float] = {}

    def wrote(self, obj: dict[str, Any]) -> None:
        """Remember an object as a create or update returned it."""
        with self._lock:
            self._written[_uid(obj)] = (obj, self._clock())
            self._deleted.pop(_uid(obj), None)

    def deleted(self, uid: str) -> None:
        """Remember that we deleted the object ``uid``."""
        with self._lock:
            self._written.pop(uid, None)
            self._deleted[uid] = self._clock()

    def clear(self) -> None:
        """Forget every write and deletion remembered."""
        with self._lock:
            self._written.clear()
            self._deleted.clear()

    def uids(self) -> set[str]:
        """UIDs of the objects we wrote (and not deleted) that are remembered now."""
        with self._lock:
            self._expire()
            return set(self._written)

    def overlay(self, cached: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """``cached`` with our newer writes in place, our creations added, our deletions gone.

        ``cached`` is everything an informer holds (filter afterwards): objects we created
        that it lacks are added as they are.
        """
        with self._lock:
            self._expire()
            seen: set[str] = set()
            out: list[dict[str, Any]] = []
            for obj in cached:
                uid = _uid(obj)
                seen.add(uid)
                if uid in self._deleted:
                    continue
                out.append(self._newer(uid, obj))
            out += [o for uid, (o, _) in self._written.items() if uid not in seen]
            return out

    def _newer(self, uid: str, cached: dict[str, Any]) -> dict[str, Any]:
        entry = self._written.get(uid)
        if entry is None:
            return cached
        ours, theirs = _version(entry[0]), _version(cached)
        if ours is not None and theirs is not None and ours > theirs:
            return entry[0]
        del self._written[uid]  # the informer has our write, or something newer
        return cached

    def _expire(self) -> None:
        limit = self._clock() - self._ttl
        for uid in [u for u, (_, at) in self._written.items() if at < limit]:
            del self._written[uid]
        for uid in [u for u, at in self._deleted.items() if at < limit]:
            del self._deleted[uid]
