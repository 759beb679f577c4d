"""Image pulls as the kubelet reports them: waiting reasons, back-off and Events."""

from __future__ import annotations

import pathlib
import threading
from typing import Any

from cdsim.kubelet import imagestore, pulls

IMAGE = imagestore.Image(
    digest="sha256:" + "0" * 64,
    image_id="127.0.0.1:5000/compute-domains@sha256:" + "0" * 64,
    rootfs=pathlib.Path("/nonexistent"),
    config=imagestore.ImageConfig(entrypoint=("computedomains",)),
    size=1234,
)


class Registry:
    """Answers pulls from a set of known references; each pull waits for ``release``."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.have: dict[str, imagestore.Image] = {}
        self.release = threading.Event()
        self.pulled: list[str] = []

    def present(self, ref: imagestore.Reference) -> imagestore.Image | None:
        return self.have.get(str(ref))

    def pull(
        self, ref: imagestore.Reference, *, credentials: tuple[str, str] | None = None
    ) -> imagestore.Image:
        self.release.wait(10)
        self.pulled.append(str(ref))
        if str(ref) not in self.known:
            raise imagestore.PullError(f"reading manifest {ref.tag}: manifest unknown")
        self.have[str(ref)] = IMAGE
        return IMAGE

    def close(self) -> None:
        self.release.set()


def _pod(image: str, policy: str = "IfNotPresent") -> dict[str, Any]:
    return {
        "metadata": {"uid": "u1", "name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": image, "imagePullPolicy": policy}]},
    }


def _setup(known: set[str]) -> tuple[pulls.Pulls, Registry, list[tuple[str, str, bool]]]:
    registry = Registry(known)
    seen: list[tuple[str, str, bool]] = []
    puller = pulls.Pulls(
        registry,
        on_event=lambda pod, reason, message, warning: seen.append((reason, message, warning)),
        credentials=lambda pod, ref: None,
    )
    return puller, registry, seen


def _settle(puller: pulls.Pulls, pod: dict[str, Any], now: float) -> Any:
    """Ask until the background pull has ended (the pool answers within the deadline)."""
    for _ in range(200):
        pulled, waiting = puller.images(pod, pod["spec"]["containers"], now)
        if waiting.get("c") != pulls.Waiting("ContainerCreating"):
            return pulled, waiting
        threading.Event().wait(0.01)
    raise AssertionError("the pull never ended")


def test_a_pull_waits_creating_then_gives_the_image_with_events() -> None:
    ref = "127.0.0.1:5000/compute-domains:1"
    puller, registry, seen = _setup({ref})
    pod = _pod(ref)
    pulled, waiting = puller.images(pod, pod["spec"]["containers"], 0.0)
    assert (pulled, waiting) == ({}, {"c": pulls.Waiting("ContainerCreating")})
    registry.release.set()
    pulled, waiting = _settle(puller, pod, 0.0)
    assert (pulled, waiting) == ({"c": IMAGE}, {})
    assert [r for r, _, _ in seen] == ["Pulling", "Pulled"]
    assert seen[1][1].startswith(f'Successfully pulled image "{ref}" in ')
    assert seen[1][1].endswith("Image size: 1234 bytes.")
    puller.close()


def test_a_missing_tag_ends_in_image_pull_back_off_then_retries() -> None:
    ref = "127.0.0.1:5000/compute-domains:nope"
    puller, registry, seen = _setup(set())
    registry.release.set()
    pod = _pod(ref)
    puller.images(pod, pod["spec"]["containers"], 0.0)
    _, waiting = _settle(puller, pod, 0.0)
    assert waiting["c"].reason == "ErrImagePull"
    assert "manifest unknown" in waiting["c"].message
    _, waiting = puller.images(pod, pod["spec"]["containers"], 1.0)
    assert waiting["c"] == pulls.Waiting("ImagePullBackOff", f'Back-off pulling image "{ref}"')
    reasons = [(r, m) for r, m, _ in seen]
    assert ("Failed", "Error: ErrImagePull") in reasons
    assert ("BackOff", f'Back-off pulling image "{ref}"') in reasons
    assert ("Failed", "Error: ImagePullBackOff") in reasons
    _, waiting = puller.images(pod, pod["spec"]["containers"], 10.0)  # the 10 s back-off ended
    assert waiting["c"] == pulls.Waiting("ContainerCreating")
    _settle(puller, pod, 10.0)
    assert registry.pulled == [ref, ref]
    puller.close()


def test_if_not_present_uses_the_image_the_node_has_and_never_refuses_a_missing_one() -> None:
    ref = "127.0.0.1:5000/compute-domains:1"
    puller, registry, seen = _setup({ref})
    registry.have[ref] = IMAGE
    pod = _pod(ref)
    pulled, waiting = puller.images(pod, pod["spec"]["containers"], 0.0)
    assert (pulled, waiting) == ({"c": IMAGE}, {})
    assert seen == [("Pulled", f'Container image "{ref}" already present on machine', False)]
    never = _pod("127.0.0.1:5000/other:1", policy="Never")
    never["metadata"]["uid"] = "u2"
    _, waiting = puller.images(never, never["spec"]["containers"], 0.0)
    assert waiting["c"].reason == "ErrImageNeverPull"
    assert registry.pulled == []
    puller.close()


def test_an_invalid_reference_is_named() -> None:
    puller, _, _ = _setup(set())
    pod = _pod("127.0.0.1:5000/Bad:1")
    _, waiting = puller.images(pod, pod["spec"]["containers"], 0.0)
    assert waiting["c"].reason == "InvalidImageName"
    assert "bad repository" in waiting["c"].message
    puller.close()


def test_a_changed_image_is_pulled_anew_and_any_failure_is_backed_off() -> None:
    good = "127.0.0.1:5000/compute-domains:1"
    puller, registry, seen = _setup({good})
    registry.release.set()
    pod = _pod("127.0.0.1:5000/compute-domains:typo")
    puller.images(pod, pod["spec"]["containers"], 0.0)
    _, waiting = _settle(puller, pod, 0.0)
    assert waiting["c"].reason == "ErrImagePull"
    pod["spec"]["containers"][0]["image"] = good  # fixed by the user: pulled now, no back-off
    puller.images(pod, pod["spec"]["containers"], 1.0)
    pulled, _ = _settle(puller, pod, 1.0)
    assert pulled == {"c": IMAGE}

    def broken(ref: imagestore.Reference, **_: object) -> imagestore.Image:
        raise OSError(28, "No space left on device")

    registry.pull = broken  # type: ignore[method-assign]
    other = _pod("127.0.0.1:5000/compute-domains:2")
    other["metadata"]["uid"] = "u3"
    puller.images(other, other["spec"]["containers"], 2.0)
    _, waiting = _settle(puller, other, 2.0)
    assert waiting["c"].reason == "ErrImagePull" and "No space left" in waiting["c"].message
    _, waiting = puller.images(other, other["spec"]["containers"], 3.0)
    assert waiting["c"].reason == "ImagePullBackOff"
    assert [r for r, _, _ in seen].count("Pulling") == 3
    puller.close()
