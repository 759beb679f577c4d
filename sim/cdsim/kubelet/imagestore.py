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
            auths = json.loads(base64.b64decode(raw)).get("auths") or {}
        except (ValueError, AttributeError):
            continue
        for host, entry in auths.items():
            if host.removeprefix("https://").removeprefix("http://").rstrip("/") != registry:
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

    def present(self, ref: Reference) -> Image | None:
        """The image this node already has for ``ref`` (as last resolved), or None."""
        with self._lock:
            digest = ref.digest or self._tags.get(str(ref), "")
        return self._load(ref, digest) if digest else None

    def pull(self, ref: Reference, *, credentials: tuple[str, str] | None = None) -> Image:
        """Resolve ``ref`` at its registry and unpack what it names (once per digest)."""
        raw = self._skopeo(
            "inspect", *self._tls(ref, "--tls-verify"), *_creds("--creds", credentials),
            "--raw", f"docker://{ref}",
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
                self._unpack(ref, digest, credentials)
                found = self._load(ref, digest)
        if found is None:
            raise PullError(f"{ref} unpacked, but not found under {self._folder(digest)}")
        return found

    def prune(self, *, keep: int = 3, idle: float = 86400.0) -> list[pathlib.Path]:
        """Remove unpacked images unused for ``idle`` seconds, beyond the ``keep`` used last.

        Each build is an image of its own (hundreds of MB unpacked); one a running cluster
        still uses was used within the day (every container start marks it).
        """
        if not self._cache.is_dir():
            return []
        found = sorted(
            (p for p in self._cache.iterdir() if (p / "image.json").is_file()),
            key=lambda p: (p / "image.json").stat().st_mtime,
            reverse=True,
        )
        now = time.time()
        gone = [p for p in found[keep:] if now - (p / "image.json").stat().st_mtime > idle]
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

    def _unpack(self, ref: Reference, digest: str, credentials: tuple[str, str] | None) -> None:
        self._cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".pull-", dir=self._cache) as scratch:
            layout = pathlib.Path(scratch) / "layout"
            self._skopeo(
                "copy", "--quiet", *self._tls(ref, "--src-tls-verify"),
                *_creds("--src-creds", credentials),
                "--override-arch", self._arch.name, "--override-os", "linux",
                f"docker://{ref.pinned(digest)}", f"oci:{layout}:image",
            )  # fmt: skip
            manifest_digest = json.loads((layout / "index.json").read_text())["manifests"][0]
            manifest = _blob(layout, manifest_digest["digest"])
            config = _blob(layout, manifest["config"]["digest"])
            bundle = pathlib.Path(scratch) / "bundle"
            _run(["umoci", "unpack", "--image", f"{layout}:image", str(bundle)], "umoci unpack")
            unpacked = pathlib.Path(scratch) / "image"
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

    @staticmethod
    def _skopeo(*args: str) -> bytes:
        return _run(["skopeo", *args], f"skopeo {args[0]}")


def _creds(flag: str, credentials: tuple[str, str] | None) -> list[str]:
    return [flag, f"{credentials[0]}:{credentials[1]}"] if credentials else []


def _blob(layout: pathlib.Path, digest: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    )
    return loaded


def _run(argv: list[str], what: str) -> bytes:
    """Run a tool; its output, or its own words as the :class:`PullError`'s message."""
    if shutil.which(argv[0]) is None:
        raise PullError(f"{argv[0]} not found on PATH (Debian package {argv[0]})")
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=_TIMEOUT, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise PullError(f"{what} did not finish in {_TIMEOUT:.0f}s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise PullError(said[-1] if said else f"{what} failed ({done.returncode})")
    return done.stdout
