"""Image pulls of a node's pods, in the background, with the kubelet's back-off and Events.

:meth:`Pulls.images` never blocks: it starts what must be pulled (per the pull policy) on a
worker thread and answers, per container, the pulled image or why the container still waits:
``ContainerCreating`` while pulling, ``ErrImagePull`` after a failure, ``ImagePullBackOff``
until the next attempt (10 s doubling to 300 s, the kubelet's image back-off),
``ErrImageNeverPull`` and ``InvalidImageName``. Events as the kubelet words them: ``Pulling``,
``Pulled`` (with the time taken and the size, or "already present"), ``Failed`` and
``BackOff``. Every image of a pod is pulled before its first container starts (the kubelet
pulls each just before that container starts; the chart's pods use one image throughout).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from cdsim.kubelet import backoff, imagestore
from computedomains.kube import wire

PULL_BACKOFF_INITIAL = 10.0
PULL_BACKOFF_CAP = 300.0

EventSink = Callable[[wire.Pod, str, str, bool], None]
"""``(pod, reason, message, warning)``."""
Credentials = Callable[[wire.Pod, imagestore.Reference], tuple[str, str] | None]
"""The pod's ``imagePullSecrets`` entry for a reference's registry, if any."""


class ImageSource(Protocol):
    """Where images come from: :class:`imagestore.Store`."""

    def present(self, ref: imagestore.Reference) -> imagestore.Image | None:
        """The image the node has for ``ref``, if any."""

    def pull(
        self, ref: imagestore.Reference, *, credentials: tuple[str, str] | None = None
    ) -> imagestore.Image:
        """Pull ``ref`` (blocking); :class:`imagestore.PullError` when it fails."""

    def close(self) -> None:
        """End the pulls running now (they fail) and take no more."""


@dataclasses.dataclass(frozen=True)
class Waiting:
    """Why a container has not started: its ``state.waiting``."""

    reason: str
    message: str = ""


@dataclasses.dataclass
class _Pull:
    image: str
    ref: imagestore.Reference | None
    retry: backoff.Backoff = dataclasses.field(
        default_factory=lambda: backoff.Backoff(initial=PULL_BACKOFF_INITIAL, cap=PULL_BACKOFF_CAP)
    )
    future: concurrent.futures.Future[imagestore.Image] | None = None
    started: float = 0.0
    done: imagestore.Image | None = None
    error: str = ""
    told_backoff: bool = False


class Pulls:
    """What the pods of every node wait for: their images."""

    def __init__(
        self,
        store: ImageSource,
        *,
        on_event: EventSink,
        credentials: Credentials,
        workers: int = 2,
    ) -> None:
        self._store = store
        self._on_event = on_event
        self._credentials = credentials
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="pull")
        self._pulls: dict[str, dict[str, _Pull]] = {}
        """Pod UID → container name → its pull."""

    def close(self) -> None:
        """Stop taking pulls and end those running (their tools are killed)."""
        self._store.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def forget(self, keep: set[str]) -> None:
        """Drop the pulls of pods not in ``keep`` (UIDs)."""
        for uid in set(self._pulls) - keep:
            del self._pulls[uid]

    def images(
        self, pod: wire.Pod, containers: Sequence[wire.Container], now: float
    ) -> tuple[dict[str, imagestore.Image], dict[str, Waiting]]:
        """``(pulled, waiting)`` by container name: every container is in one of the two."""
        uid = pod["metadata"]["uid"]
        mine = self._pulls.setdefault(uid, {})
        pulled: dict[str, imagestore.Image] = {}
        waiting: dict[str, Waiting] = {}
        for container in containers:
            name = container.get("name", "")
            pull = mine.get(name)
            if pull is None or pull.image != container.get("image", ""):
                pull = mine[name] = self._new(pod, container)  # new, or its image was changed
            outcome = self._advance(pod, container, pull, now)
            if isinstance(outcome, Waiting):
                waiting[name] = outcome
            else:
                pulled[name] = outcome
        return pulled, waiting

    def _new(self, pod: wire.Pod, container: wire.Container) -> _Pull:
        image = container.get("image", "")
        try:
            return _Pull(image, imagestore.parse(image))
        except ValueError as exc:
            self._on_event(pod, "InspectFailed", f"Failed to apply default image tag: {exc}", True)
            return _Pull(image, None, error=str(exc))

    def _advance(
        self, pod: wire.Pod, container: wire.Container, pull: _Pull, now: float
    ) -> imagestore.Image | Waiting:
        if pull.done is not None:
            return pull.done
        if pull.ref is None:
            return Waiting("InvalidImageName", pull.error)
        if pull.future is not None:
            if not pull.future.done():
                return Waiting("ContainerCreating")
            return self._finished(pod, pull, now)
        if pull.error and not pull.retry.ready(now):
            if not pull.told_backoff:
                pull.told_backoff = True
                self._on_event(pod, "BackOff", f'Back-off pulling image "{pull.image}"', False)
                self._on_event(pod, "Failed", "Error: ImagePullBackOff", True)
            return Waiting("ImagePullBackOff", f'Back-off pulling image "{pull.image}"')
        return self._begin(pod, container, pull, pull.ref)

    def _begin(
        self,
        pod: wire.Pod,
        container: wire.Container,
        pull: _Pull,
        ref: imagestore.Reference,
    ) -> imagestore.Image | Waiting:
        """Use the image this node has, or start pulling it, as the pull policy says."""
        present = self._store.present(ref)
        policy = str(cast(Mapping[str, Any], container).get("imagePullPolicy") or "")
        decision = imagestore.needs_pull(policy, ref, present=present is not None)
        if decision is None:
            message = f'Container image "{pull.image}" is not present with pull policy of Never'
            if pull.error != message:
                pull.error = message
                self._on_event(pod, "ErrImageNeverPull", message, True)
            return Waiting("ErrImageNeverPull", message)
        if not decision and present is not None:
            message = f'Container image "{pull.image}" already present on machine'
            self._on_event(pod, "Pulled", message, False)
            pull.done = present
            return present
        self._on_event(pod, "Pulling", f'Pulling image "{pull.image}"', False)
        pull.started = time.monotonic()
        pull.told_backoff = False
        pull.future = self._pool.submit(self._pull, pod, ref)
        return Waiting("ContainerCreating")

    def _pull(self, pod: wire.Pod, ref: imagestore.Reference) -> imagestore.Image:
        """On a worker: the pod's credentials for the registry, then the pull."""
        return self._store.pull(ref, credentials=self._credentials(pod, ref))

    def _finished(self, pod: wire.Pod, pull: _Pull, now: float) -> imagestore.Image | Waiting:
        future, pull.future = pull.future, None
        assert future is not None
        took = time.monotonic() - pull.started
        try:
            image = future.result()
        except Exception as exc:  # noqa: BLE001 - any failure (a full cache disk, say) is a failed pull, backed off
            pull.error = str(exc)
            pull.retry.failed(now)
            self._on_event(pod, "Failed", f'Failed to pull image "{pull.image}": {exc}', True)
            self._on_event(pod, "Failed", "Error: ErrImagePull", True)
            return Waiting("ErrImagePull", f'failed to pull image "{pull.image}": {exc}')
        pull.done = image
        pull.retry.reset()
        self._on_event(
            pod,
            "Pulled",
            f'Successfully pulled image "{pull.image}" in {took:.3f}s ({took:.3f}s including '
            f"waiting). Image size: {image.size} bytes.",
            False,
        )
        return image


def pull_secret_names(pod: wire.Pod) -> list[str]:
    """The pod's ``imagePullSecrets``, in order."""
    spec = cast(Mapping[str, Any], pod.get("spec", {}))
    return [str(s.get("name", "")) for s in spec.get("imagePullSecrets") or []]


def waiting_reasons(waiting: Mapping[str, Waiting]) -> str:
    """One line for a log: which container waits for what."""
    return ", ".join(f"{name}: {w.reason}" for name, w in sorted(waiting.items()))
