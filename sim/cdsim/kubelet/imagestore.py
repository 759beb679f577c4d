"""Pull images from a registry and unpack them once per digest, as a node's runtime does.

A reference (``registry/repository:tag``, ``…@sha256:…``) is resolved against its registry
(``skopeo inspect --raw``: the digest is that of the manifest or index the registry serves),
the platform's manifest copied into an OCI layout (``skopeo copy``) and unpacked into a root
filesystem (``umoci unpack``), kept under the cache by digest: every container of that image,
on every node and in every simulated cluster, starts from the same unpacked files (each
container gets its own writable layer over them, :mod:`cdsim.kubelet.oci`). A tag is resolved
again whenever the pull policy asks for it; a digest never changes.

Pure parts (:func:`parse`, :func:`needs_pull`, :func:`image_config`) are unit-tested; the
rest runs the two tools.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import pathlib
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cdsim.image import arch as arches
from computedomains import parentdeath

DEFAULT_REGISTRY = "docker.io"
"""Where a reference without a registry host points (Docker's normalisation)."""
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_PATH = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_TIMEOUT = 300.0


class PullError(RuntimeError):
    """A pull failed; ``str()`` is what the kubelet's ``Failed`` Event says after the image."""


@dataclasses.dataclass(frozen=True)
class Reference:
    """An image reference, normalised as a container runtime reads it."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """``registry/repository``: what an image ID names before its digest."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def pinned(self, digest: str) -> str:
        """``registry/repository@digest``: the image ID a kubelet reports for it."""
        return f"{self.name}@{digest}"


def parse(image: str) -> Reference:
    """Read ``image`` as the runtime does; ``ValueError`` names what is wrong with it.

    The first path component is a registry when it has a ``.`` or ``:`` or is ``localhost``;
    otherwise the image is on Docker Hub (``library/`` for one-component names). Without a
    tag or digest, the tag is ``latest``.
    """
    rest, _, digest = image.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ValueError(f"invalid image reference {image!r}: bad digest {digest!r}")
    head, slash, tail = rest.partition("/")
    if slash and ("." in head or ":" in head or head == "localhost"):
        registry, path = head, tail
    else:
        registry, path = DEFAULT_REGISTRY, rest
    last = path.rpartition("/")[2]
    tag = ""
    if ":" in last:
        path, _, tag = path.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise ValueError(f"invalid image reference {image!r}: bad tag {tag!r}")
    if not path or not _PATH.fullmatch(path):
        raise ValueError(f"invalid image reference {image!r}: bad repository {path!r}")
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    if not tag and not digest:
        tag = "latest"
    return Reference(registry, path, tag, digest)


def needs_pull(policy: str, ref: Reference, *, present: bool) -> bool | None:
    """Whether a container start pulls first: True, False, or None (``Never`` and absent).

    The kubelet's default policy is ``Always`` for ``:latest`` or no tag, else
    ``IfNotPresent``; the API server fills it in, so ``policy`` is normally set.
    """
    if not policy:
        policy = "Always" if ref.tag == "latest" and not ref.digest else "IfNotPresent"
    if policy == "Always":
        return True
    if present:
        return False
    return None if policy == "Never" else True


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config a container's process is built from."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    """``NAME=value`` entries."""
    user: str = ""
    """``uid[:gid]`` or a name, empty for root."""
    working_dir: str = ""


def image_config(document: Mapping[str, Any]) -> ImageConfig:
    """The process defaults of an OCI image config document."""
    config = document.get("config") or {}
    return ImageConfig(
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        env=tuple(config.get("Env") or ()),
        user=str(config.get("User") or ""),
        working_dir=str(config.get("WorkingDir") or ""),
    )


@dataclasses.dataclass(frozen=True)
class Image:
    """A pulled image, unpacked."""

    digest: str
    """The digest of what the registry served for the reference (index or manifest)."""
    image_id: str
    """``registry/repository@digest``, as ``status.containerStatuses[].imageID``."""
    rootfs: pathlib.Path
    """The unpacked root filesystem: shared, never written (containers get their own layer)."""
    config: ImageConfig
    size: int
    """Bytes of the platform's layers, as the ``Pulled`` Event gives them."""


def host_arch() -> arches.Arch:
    """The image platform of this machine."""
    machine = platform.machine()
    for arch in arches.ARCHES:
        if arch.machine == machine:
            return arch
    raise PullError(f"no image platform for this machine ({machine})")


def registry_credentials(
    secrets: Sequence[Mapping[str, Any]], registry: str
) -> tuple[str, str] | None:
    """``(user, password)`` for ``registry`` from ``kubernetes.io/dockerconfigjson`` Secrets.

    The first Secret (in ``imagePullSecrets`` order) with an entry for the registry wins,
    as the kubelet tries them in order.
    """
    for secret in secrets:
        raw = (secret.get("data") or {}).get(".dockerconfigjson")
        if not raw:
            continue
        try:
            found = _credentials_in(json.loads(base64.b64decode(raw)), registry)
        except (ValueError, AttributeError, TypeError):
            continue  # not a docker config: the kubelet skips such a Secret too
        if found is not None:
            return found
    return None


def _credentials_in(config: Any, registry: str) -> tuple[str, str] | None:
    for host, entry in (config.get("auths") or {}).items():
        if str(host).removeprefix("https://").removeprefix("http://").rstrip("/") != registry:
            continue
        if entry.get("username"):
            return str(entry["username"]), str(entry.get("password", ""))
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return user, password
    return None


class Store:
    """Pulled images under ``cache`` (shared by every cluster), by digest.

    ``insecure``: registries spoken to over plain HTTP (the simulated cluster's own). Pulls of
    the same digest at once are unpacked once; another process unpacking it too renames its
    result into place only if none is there yet.
    """

    def __init__(self, cache: pathlib.Path, *, insecure: Sequence[str] = ()) -> None:
        self._cache = cache
        self._insecure = frozenset(insecure)
        self._arch = host_arch()
        self._lock = threading.Lock()
        self._tags: dict[str, str] = {}
        """``str(reference)`` → the digest it resolved to last."""
        self._unpacking: dict[str, threading.Lock] = {}
        self._children: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def close(self) -> None:
        """Stop every tool still running for a pull (their pulls fail) and take no more."""
        with self._lock:
            self._closed = True
            children = list(self._children)
        for child in children:
            child.kill()

    def present(self, ref: Reference) -> Image | None:
        """The image this node already has for ``ref`` (as last resolved), or None."""
        with self._lock:
            digest = ref.digest or self._tags.get(str(ref), "")
        return self._load(ref, digest) if digest else None

    def pull(self, ref: Reference, *, credentials: tuple[str, str] | None = None) -> Image:
        """Resolve ``ref`` at its registry and unpack what it names (once per digest).

        ``credentials`` reach skopeo in a private auth file, never on its command line.
        """
        self._cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".pull-", dir=self._cache) as scratch:
            auth = _auth_file(pathlib.Path(scratch), ref.registry, credentials)
            raw = self._tool(
                "skopeo", "inspect", *self._tls(ref, "--tls-verify"), *auth, "--raw",
                f"docker://{ref}",
            )  # fmt: skip
            digest = "sha256:" + hashlib.sha256(raw).hexdigest()  # of the bytes served, as is
            if ref.digest and ref.digest != digest:
                raise PullError(f"the registry served {digest} for {ref}")
            with self._lock:
                self._tags[str(ref)] = digest
                lock = self._unpacking.setdefault(digest, threading.Lock())
            with lock:
                found = self._load(ref, digest)
                if found is None:
                    self._unpack(ref, digest, pathlib.Path(scratch), auth)
                    found = self._load(ref, digest)
        if found is None:
            raise PullError(f"{ref} unpacked, but not found under {self._folder(digest)}")
        return found

    def prune(self, *, keep: int = 3, idle: float = 86400.0) -> list[pathlib.Path]:
        """Remove images and pull scratch folders unused for ``idle`` seconds; returns them.

        The ``keep`` images used last stay, whatever their age: each build is an image of
        its own (hundreds of MB unpacked). An image some container root on this machine
        still stands on stays too, however old.
        """
        now = time.time()

        def age(path: pathlib.Path) -> float | None:
            try:
                return now - path.stat().st_mtime
            except OSError:
                return None  # another kubelet removed it meanwhile

        try:
            entries = list(self._cache.iterdir())
        except OSError:
            return []
        lowers = _overlay_lowers()
        images = [(a, p) for p in entries if (a := age(p / "image.json")) is not None]
        images.sort(key=lambda pair: pair[0])
        gone = [
            p
            for a, p in images[keep:]
            if a > idle and not any(low.is_relative_to(p) for low in lowers)
        ]
        gone += [p for p in entries if p.name.startswith(".pull-") and (age(p) or 0.0) > idle]
        for folder in gone:
            shutil.rmtree(folder, ignore_errors=True)
        return gone

    def _folder(self, digest: str) -> pathlib.Path:
        return self._cache / f"{digest.removeprefix('sha256:')}-{self._arch.name}"

    def _load(self, ref: Reference, digest: str) -> Image | None:
        folder = self._folder(digest)
        try:
            meta = json.loads((folder / "image.json").read_text())
            (folder / "image.json").touch()  # used now: kept by :meth:`prune`
        except (OSError, ValueError):
            return None
        return Image(
            digest=digest,
            image_id=ref.pinned(digest),
            rootfs=folder / "rootfs",
            config=image_config(meta["config"]),
            size=int(meta["size"]),
        )

    def _unpack(
        self, ref: Reference, digest: str, scratch: pathlib.Path, auth: Sequence[str]
    ) -> None:
        layout = scratch / "layout"
        self._tool(
            "skopeo", "copy", "--quiet", *self._tls(ref, "--src-tls-verify"),
            *(a.replace("--authfile", "--src-authfile") for a in auth),
            "--override-arch", self._arch.name, "--override-os", "linux",
            f"docker://{ref.pinned(digest)}", f"oci:{layout}:image",
        )  # fmt: skip
        try:
            top = json.loads((layout / "index.json").read_text())["manifests"][0]
            manifest = _blob(layout, top["digest"])
            config = _blob(layout, manifest["config"]["digest"])
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise PullError(f"the copied image of {ref} is not an OCI layout: {exc}") from exc
        bundle = scratch / "bundle"
        self._tool("umoci", "unpack", "--image", f"{layout}:image", str(bundle))
        unpacked = scratch / "image"
        unpacked.mkdir()
        (bundle / "rootfs").rename(unpacked / "rootfs")
        size = sum(int(layer["size"]) for layer in manifest.get("layers", []))
        (unpacked / "image.json").write_text(json.dumps({"config": config, "size": size}))
        try:
            unpacked.rename(self._folder(digest))
        except OSError:
            if not (self._folder(digest) / "image.json").exists():
                raise  # not another puller's result already in place: a real failure

    def _tls(self, ref: Reference, flag: str) -> list[str]:
        return [f"{flag}=false"] if ref.registry in self._insecure else []

    def _tool(self, *argv: str) -> bytes:
        """Run skopeo or umoci; its output, or its own words as the :class:`PullError`."""
        what = " ".join(argv[:2])
        if shutil.which(argv[0]) is None:
            raise PullError(f"{argv[0]} not found on PATH (Debian package {argv[0]})")
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=parentdeath.die_with_parent(),  # noqa: PLW1509 - only prctl in the child
        )  # fmt: skip
        with self._lock:
            if self._closed:
                child.kill()
            self._children.add(child)
        try:
            out, err = child.communicate(timeout=_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise PullError(f"{what} did not finish in {_TIMEOUT:.0f}s") from None
        finally:
            with self._lock:
                self._children.discard(child)
        if child.returncode != 0:
            said = (err or out).decode(errors="replace").strip().splitlines()
            raise PullError(said[-1] if said else f"{what} failed ({child.returncode})")
        return out


def _auth_file(
    folder: pathlib.Path, registry: str, credentials: tuple[str, str] | None
) -> list[str]:
    """``--authfile <file>`` holding ``credentials`` for ``registry`` (mode 0600); none without."""
    if credentials is None:
        return []
    path = folder / "auth.json"
    token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
    path.touch(mode=0o600)
    path.write_text(json.dumps({"auths": {registry: {"auth": token}}}))
    return ["--authfile", str(path)]


def _overlay_lowers() -> list[pathlib.Path]:
    """The lower layers of every overlay mounted on this machine now."""
    try:
        table = pathlib.Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    found = []
    for line in table.splitlines():
        if " - overlay " not in line:
            continue
        for option in line.rpartition(" ")[2].split(","):
            if option.startswith("lowerdir="):
                found += [pathlib.Path(p) for p in option.removeprefix("lowerdir=").split(":")]
    return found


def _blob(layout: pathlib.Path, digest: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    )
    return loaded
