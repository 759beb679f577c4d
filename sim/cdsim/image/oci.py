"""OCI image documents (config, manifest, index) and the layout and archive that hold them.

The builders are pure and produce canonical JSON (sorted keys, no spaces), so a document's
digest depends on its content only. :func:`write_archive` packs a layout folder into the
``oci-archive`` tar that ``skopeo copy --all oci-archive:…`` pushes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any

from cdsim.image import arch as arch_
from cdsim.image import layer, spec

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a blob is, its digest and size (and platform, for indexes)."""

    media_type: str
    digest: str
    size: int
    platform: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The descriptor as the OCI documents spell it."""
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest}
        out["size"] = self.size
        if self.platform:
            out["platform"] = dict(self.platform)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def canonical(document: Mapping[str, Any]) -> bytes:
    """The bytes a document is stored (and digested) as."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def digest(data: bytes) -> str:
    """``sha256:…`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def platform(arch: arch_.Arch) -> dict[str, str]:
    """The platform object of ``arch``."""
    out = {"architecture": arch.name, "os": "linux"}
    if arch.variant:
        out["variant"] = arch.variant
    return out


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What a container of the image runs unless its pod says otherwise."""

    user: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = "/"


PRODUCT = Defaults(
    user=f"{spec.UID}:{spec.UID}",
    entrypoint=spec.ENTRYPOINT,
    env=spec.ENV,
    working_dir=spec.WORKING_DIR,
)
"""The product image's defaults."""


def image_config(
    arch: arch_.Arch,
    blobs: Sequence[layer.Blob],
    *,
    created: str,
    defaults: Defaults,
    labels: Mapping[str, str],
    layer_names: Sequence[str],
) -> dict[str, Any]:
    """The image configuration of ``arch``: user, entrypoint, environment, labels, layers."""
    config: dict[str, Any] = {
        "User": defaults.user,
        "Env": list(defaults.env),
        "WorkingDir": defaults.working_dir,
        "Labels": dict(labels),
    }
    if defaults.entrypoint:
        config["Entrypoint"] = list(defaults.entrypoint)
    if defaults.cmd:
        config["Cmd"] = list(defaults.cmd)
    return {
        **platform(arch),
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in blobs]},
        "history": [
            {"created": created, "created_by": f"cdsim image: {name}"} for name in layer_names
        ],
    }


def manifest(
    config: Descriptor, layers: Sequence[Descriptor], *, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The image manifest naming one config and its layers."""
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config.to_json(),
        "layers": [d.to_json() for d in layers],
        "annotations": dict(labels),
    }


def index(manifests: Sequence[Descriptor], *, labels: Mapping[str, str]) -> dict[str, Any]:
    """The image index: one manifest per platform."""
    return {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [d.to_json() for d in manifests],
        "annotations": dict(labels),
    }


class Layout:
    """An OCI image layout folder being written: ``oci-layout``, ``index.json``, ``blobs/``."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))

    def add_document(self, media_type: str, document: Mapping[str, Any]) -> Descriptor:
        """Store a JSON document as a blob; returns its descriptor."""
        data = canonical(document)
        name = digest(data)
        (self.blobs / name.removeprefix("sha256:")).write_bytes(data)
        return Descriptor(media_type, name, len(data))

    def add_layer(self, blob: layer.Blob) -> Descriptor:
        """Move a written layer into the blobs; returns its descriptor."""
        shutil.move(blob.path, self.blobs / blob.digest.removeprefix("sha256:"))
        return Descriptor(LAYER, blob.digest, blob.size)

    def tag(self, target: Descriptor, name: str) -> None:
        """Write ``index.json`` pointing at ``target`` under the reference ``name``."""
        named = dataclasses.replace(target, annotations={REF_NAME: name})
        document = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [named.to_json()]}
        (self.root / "index.json").write_bytes(canonical(document))


def read_json(layout: pathlib.Path, name: str) -> dict[str, Any]:
    """A JSON blob of a layout by its digest."""
    data = (layout / "blobs" / "sha256" / name.removeprefix("sha256:")).read_bytes()
    if digest(data) != name:
        raise ValueError(f"blob {name} of {layout} does not match its digest")
    loaded: dict[str, Any] = json.loads(data)
    return loaded


def top(layout: pathlib.Path) -> tuple[str, str]:
    """``(reference name, index digest)`` of a layout written by :class:`Layout`."""
    (entry,) = json.loads((layout / "index.json").read_bytes())["manifests"]
    return entry["annotations"][REF_NAME], entry["digest"]


def manifests(layout: pathlib.Path) -> dict[str, dict[str, Any]]:
    """``architecture → manifest`` of the layout's index."""
    index_doc = read_json(layout, top(layout)[1])
    return {
        m["platform"]["architecture"]: read_json(layout, m["digest"])
        for m in index_doc["manifests"]
    }


def layer_paths(layout: pathlib.Path, arch: str) -> list[pathlib.Path]:
    """The layer blobs of ``arch``'s manifest, bottom first."""
    return [
        layout / "blobs" / "sha256" / d["digest"].removeprefix("sha256:")
        for d in manifests(layout)[arch]["layers"]
    ]


def write_archive(layout: pathlib.Path, out: pathlib.Path, *, epoch: int) -> None:
    """Pack ``layout`` into an ``oci-archive`` tar (deterministic, like every layer)."""
    paths = layer.tree(layout)
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            info = layer.tarinfo(layout, path, epoch=epoch)
            if info.isfile():
                with (layout / path).open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
