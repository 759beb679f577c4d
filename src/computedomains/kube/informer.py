"""A list+watch cache of one resource type, as raw JSON keyed by UID.

List, then watch from the list's resourceVersion with bookmarks (so a quiet watch still
advances); a 410 Gone or a broken stream means list again. Readers get a consistent snapshot
under a lock; ``refresh()`` lists synchronously for a caller that must not trust a lagging
watch (a cache miss on an object created a moment ago).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from computedomains import waiting
from computedomains.kube import client

log = logging.getLogger(__name__)
_WATCH_SECONDS = 240


class Informer:
    """Caches every object under ``path`` (e.g. ``/apis/<group>/<version>/<plural>``)."""

    def __init__(
        self,
        api: client.Client,
        *,
        path: str,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
        label_selector: str = "",
        field_selector: str = "",
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        on_relist: Callable[[], None] | None = None,
        indexes: Mapping[str, Callable[[dict[str, Any]], Iterable[str]]] | None = None,
        fallback_paths: tuple[str, ...] = (),
    ) -> None:
        """Cache the objects under ``path``, optionally narrowed and trimmed.

        ``label_selector`` and ``field_selector`` narrow what is cached; ``transform`` trims
        each object before it is stored (a controller caching every Node needs only its
        labels); ``on_relist`` runs after every full list, since changes that happened while
        no watch was open (deletions above all) reach nobody through ``on_change``.
        ``indexes`` name functions from a stored object to its keys; :meth:`by_index` then
        finds the objects of one key without looking at the others (a controller reconciling
        one domain among thousands of nodes). ``fallback_paths`` are the same objects at other
        API versions, taken in turn while the API server serves none at ``path`` (a 404 on the
        list): a CRD rolled back to a release that serves only an older version.
        """
        self._api = api
        self._path = path
        self._paths = (path, *fallback_paths)
        self._on_change = on_change
        self._query = {"labelSelector": label_selector} if label_selector else {}
        # One node's agent watches its own Node: metadata.name is a field, not a label.
        self._query |= {"fieldSelector": field_selector} if field_selector else {}
        self._transform = transform
        self._on_relist = on_relist
        self._objects: dict[str, dict[str, Any]] = {}
        self._index_keys = dict(indexes or {})
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._index_keys}
        """Index name → key → UIDs (guarded by the lock, as the objects)."""
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer{path}", daemon=True)

    def start(self) -> None:
        """Start listing and watching in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the thread ends when its current watch request returns)."""
        self._stop.set()

    def wait_synced(self, timeout: float) -> None:
        """Block until the first list has been stored."""
        waiting.until(f"the first list of {self._path}", self._synced.is_set, timeout=timeout)

    def synced(self) -> bool:
        """Whether the first list has been stored."""
        return self._synced.is_set()

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        """The cached object with ``uid``, if any."""
        with self._lock:
            return self._objects.get(uid)

    def items(self) -> list[dict[str, Any]]:
        """A snapshot of every cached object."""
        with self._lock:
            return list(self._objects.values())

    def by_index(self, index: str, key: str) -> list[dict[str, Any]]:
        """The cached objects whose ``index`` function gave ``key``."""
        with self._lock:
            return [self._objects[uid] for uid in self._indexes[index].get(key, ())]

    def _put(self, uid: str, obj: dict[str, Any] | None) -> None:
        """Store (or with None drop) one object and its index entries; the lock is held."""
        old = self._objects.pop(uid, None)
        for name, keys_of in self._index_keys.items():
            index = self._indexes[name]
            for key in keys_of(old) if old is not None else ():
                uids = index.get(key)
                if uids is not None:
                    uids.discard(uid)
                    if not uids:
                        del index[key]
            for key in keys_of(obj) if obj is not None else ():
                index.setdefault(key, set()).add(uid)
        if obj is not None:
            self._objects[uid] = obj

    def refresh(self) -> str:
        """List now and replace the cache; returns the list's resourceVersion."""
        listing = self._api.get(self._path, query=self._query)
        objects = {o["metadata"]["uid"]: self._stored(o) for o in listing.get("items", [])}
        with self._lock:
            self._objects = {}
            self._indexes = {name: {} for name in self._index_keys}
            for uid, obj in objects.items():
                self._put(uid, obj)
        self._synced.set()
        if self._on_relist is not None:
            self._on_relist()
        return str(listing["metadata"]["resourceVersion"])

    def _stored(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._transform(obj) if self._transform is not None else obj

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                version = self.refresh()
                self._watch(version)
                backoff = 0.2
            except Exception as exc:  # noqa: BLE001 - the cache must outlive any bad answer
                if client.failure(exc) is client.Failure.NOT_FOUND and len(self._paths) > 1:
                    # The version is not served: the next one may be (a rolled-back CRD). Once
                    # every one was tried (no CRD at all yet), wait as after any failure.
                    following = self._paths[(self._paths.index(self._path) + 1) % len(self._paths)]
                    log.warning("%s is not served; listing %s", self._path, following)
                    self._path = following
                    if following != self._paths[0]:
                        continue
                log.warning(
                    "watch of %s failed (%s); listing again in %.1fs", self._path, exc, backoff
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _watch(self, version: str) -> None:
        """Follow changes until the stream ends or says the version is too old (410)."""
        while not self._stop.is_set():
            query = {
                **self._query,
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(_WATCH_SECONDS),
            }
            for event in self._api.stream(self._path, query=query, timeout=_WATCH_SECONDS + 30):
                kind, obj = event.get("type"), event.get("object", {})
                if kind == "ERROR":
                    return  # usually 410 Gone: the caller lists again
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if kind == "BOOKMARK":
                    continue
                uid = obj["metadata"]["uid"]
                obj = self._stored(obj)
                with self._lock:
                    self._put(uid, None if kind == "DELETED" else obj)
                if self._on_change is not None:
                    self._on_change(str(kind), obj)
