"""The recipe: one revision in, one OCI index (amd64 + arm64) out.

For each architecture: Debian packages (:mod:`~cdsim.image.debian`), the user's files, the
locked wheels and the product's wheel (:mod:`~cdsim.image.wheels`), pruning, bytecode
(:mod:`~cdsim.image.bytecode`), the checks
(:mod:`~cdsim.image.checks`, which fail the build), then three layers — Debian, Python
dependencies, the product — so an upgrade pulls only the small top layer.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import zipfile
from collections.abc import Callable
from typing import Any

from cdsim.image import arch as arch_
from cdsim.image import bytecode, checks, debian, errors, layer, oci, prune, source, spec, wheels

LAYERS = ("debian", "python-dependencies", "compute-domains")
"""The layers of every manifest, bottom first."""
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
"""Name lookups from files first, so the pod's ``/etc/hosts`` wins over DNS."""


class RecipeError(errors.ImageError):
    """The revision's wheel and lock do not fit together; the message says how."""


@dataclasses.dataclass(frozen=True)
class ArchBuild:
    """One architecture of a build, as ``build.json`` records it."""

    manifest: str
    """Digest of the manifest."""
    compressed: int
    """Bytes of the layers as pushed and pulled."""
    unpacked: int
    """Bytes of the layers' tars (the unpacked root filesystem, about)."""
    debian: dict[str, str]
    """Unpacked Debian packages: name → version."""
    dropped: dict[str, str]
    """Packages apt resolved that the image leaves out: name → version."""


@dataclasses.dataclass(frozen=True)
class Build:
    """A finished build: where it is and what it is."""

    directory: pathlib.Path
    tag: str
    index: str
    """Digest of the image index: the image's identity across architectures."""
    revision: str
    version: str
    python: dict[str, str]
    """The locked wheels: name → version."""
    arches: dict[str, ArchBuild]
    recipe: str
    """Fingerprint of the recipe and mirror that built it (see :mod:`cdsim.image.cache`)."""
    waived: tuple[str, ...] = ()
    """Checks it was built without (:attr:`Recipe.waived`)."""

    @property
    def layout(self) -> pathlib.Path:
        """The OCI image layout folder (``oci:LAYOUT:TAG``)."""
        return self.directory / "layout"

    @property
    def archive(self) -> pathlib.Path:
        """The ``oci-archive`` tar of the layout."""
        return self.directory / f"compute-domains-{self.tag}.oci.tar"

    def to_json(self) -> dict[str, Any]:
        """What ``build.json`` holds (the directory is where it lies)."""
        out = dataclasses.asdict(self)
        del out["directory"]
        return out

    @classmethod
    def load(cls, directory: pathlib.Path) -> Build:
        """Read a build's ``build.json``."""
        data = json.loads((directory / "build.json").read_text())
        data["arches"] = {k: ArchBuild(**v) for k, v in data["arches"].items()}
        data["waived"] = tuple(data.get("waived", ()))
        return cls(directory=directory, **data)

    def describe(self) -> str:
        """What ``cdsim image build`` prints: digest, sizes, where the image lies."""
        mib = 1024 * 1024
        lines = [
            f"image {self.tag} (revision {self.revision[:12]})",
            f"  index digest  {self.index}",
        ]
        lines += [
            f"  {name:<13} {a.compressed / mib:6.1f} MiB compressed, "
            f"{a.unpacked / mib:6.1f} MiB unpacked  (manifest {a.manifest[:19]}…)"
            for name, a in self.arches.items()
        ]
        if self.waived:
            lines.append(f"  built without the checks of: {', '.join(self.waived)}")
        lines += [
            f"  oci-archive   {self.archive}",
            f"  oci layout    {self.layout}  (tag {self.tag})",
        ]
        return "\n".join(lines)

    def save(self) -> None:
        """Write ``build.json`` into the build's directory."""
        text = json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"
        (self.directory / "build.json").write_text(text)


def classify(path: pathlib.PurePosixPath) -> int:
    """Which of :data:`LAYERS` a path of the root filesystem goes into."""
    text = str(path)
    site = spec.SITE_PACKAGES + "/"
    product = (f"{site}computedomains", f"{site}compute_domains-")
    if text == f"{spec.SCRIPTS}/computedomains" or text.startswith(product):
        return 2
    return 1 if text.startswith("usr/local/") else 0


def normalize_modes(root: pathlib.Path) -> None:
    """Folders 0755, files 0755 or 0644: what pip wrote no longer depends on the umask."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o755)
        else:
            path.chmod(0o755 if path.stat().st_mode & 0o111 else 0o644)


def write_accounts(root: pathlib.Path) -> None:
    """``/etc/passwd``, ``/etc/group`` and ``/etc/nsswitch.conf`` (0644)."""
    for name, text in (
        ("passwd", spec.passwd()),
        ("group", spec.group()),
        ("nsswitch.conf", NSSWITCH),
    ):
        path = root / "etc" / name
        path.write_text(text)
        path.chmod(0o644)


def read_requires(wheel: pathlib.Path) -> list[str]:
    """``Requires-Dist`` of the product's wheel."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return wheels.requires_dist(archive.read(name).decode())


def check_lock(lock_text: str, requires: list[str]) -> dict[str, str]:
    """The lock's pins, once they are known to satisfy the wheel on every architecture."""
    wheels.marker_free(lock_text)
    pins = wheels.locked(lock_text)
    for arch in arch_.ARCHES:
        unmet = wheels.unmet(requires, pins, arch=arch)
        if unmet:
            raise RecipeError(
                f"{wheels.LOCK} does not satisfy the product's dependencies ({arch.name}): "
                + "; ".join(unmet)
                + " — regenerate it with `make lock`"
            )
    return pins


@dataclasses.dataclass
class Recipe:
    """Builds one revision; every I/O seam is a field."""

    mirror: debian.Mirror
    recipe: str
    """Fingerprint recorded in ``build.json``."""
    fallback_lock: pathlib.Path
    """The lock used for a revision that predates the lock file."""
    log: Callable[[str], None]
    waived: tuple[str, ...] = ()
    """Checks of :data:`checks.FORBIDDEN` (their ``what``) a release older than the check is
    built without, as it shipped (the previous release carried the simulator)."""

    def build(self, src: source.Source, *, out: pathlib.Path, work: pathlib.Path) -> Build:
        """Build ``src`` into ``out`` (a new folder), using ``work`` for scratch files."""
        identity = spec.Identity(version=src.version, revision=src.commit, epoch=src.epoch)
        tree = work / "source"
        source.export(src, tree)
        self.log(f"[image] building the wheel of {src.version} ({src.commit[:12]})")
        wheel = source.build_wheel(tree, work / "dist", epoch=src.epoch)
        lock = tree / wheels.LOCK
        if not lock.exists():
            self.log(f"[image] {src.commit[:12]} has no {wheels.LOCK}; using {self.fallback_lock}")
            lock = self.fallback_lock
        pins = check_lock(lock.read_text(), read_requires(wheel))
        out.mkdir(parents=True)
        layout = oci.Layout(out / "layout")
        descriptors: list[oci.Descriptor] = []
        arches: dict[str, ArchBuild] = {}
        for arch in arch_.ARCHES:
            descriptor, built = self._arch(
                arch, identity=identity, lock=lock, wheel=wheel, layout=layout, work=work
            )
            descriptors.append(descriptor)
            arches[arch.name] = built
        index = layout.add_document(oci.INDEX, oci.index(descriptors, labels=spec.labels(identity)))
        layout.tag(index, identity.tag)
        result = Build(
            directory=out,
            tag=identity.tag,
            index=index.digest,
            revision=src.commit,
            version=src.version,
            python=pins,
            arches=arches,
            recipe=self.recipe,
            waived=self.waived,
        )
        oci.write_archive(layout.root, result.archive, epoch=src.epoch)
        result.save()
        return result

    def _arch(
        self,
        arch: arch_.Arch,
        *,
        identity: spec.Identity,
        lock: pathlib.Path,
        wheel: pathlib.Path,
        layout: oci.Layout,
        work: pathlib.Path,
    ) -> tuple[oci.Descriptor, ArchBuild]:
        root = work / f"rootfs-{arch.name}"
        self.log(f"[image] {arch.name}: Debian packages ({debian.SUITE})")
        packages = debian.download(
            arch, self.mirror, debs=work / f"debs-{arch.name}", epoch=identity.epoch
        )
        kept = debian.kept(packages)
        debian.assemble(kept, root)
        write_accounts(root)
        self.log(f"[image] {arch.name}: wheels from {wheels.LOCK} and the product")
        wheels.install(arch, lock=lock, wheel=wheel, root=root)
        prune.prune_tree(root)
        bytecode.compile_tree(root)
        for folder in ("usr/local", "usr/lib/python3.11", "var/lib/dpkg"):
            normalize_modes(root / folder)
        waived = f" (waived for this revision: {', '.join(self.waived)})" if self.waived else ""
        self.log(f"[image] {arch.name}: checks{waived}")
        checks.verify(root, arch, waived=self.waived)
        blobs = []
        for number, paths in enumerate(layer.split(layer.tree(root), classify, count=len(LAYERS))):
            blobs.append(
                layer.write(
                    root, paths, out=work / f"layer-{arch.name}-{number}", epoch=identity.epoch
                )
            )
        layer_descriptors = [layout.add_layer(b) for b in blobs]
        labels = spec.labels(identity)
        config = layout.add_document(
            oci.CONFIG,
            oci.image_config(
                arch, blobs, created=identity.created, defaults=oci.PRODUCT, labels=labels,
                layer_names=LAYERS,
            ),
        )  # fmt: skip
        manifest = layout.add_document(
            oci.MANIFEST, oci.manifest(config, layer_descriptors, labels=labels)
        )
        built = ArchBuild(
            manifest=manifest.digest,
            compressed=sum(b.size for b in blobs),
            unpacked=sum(b.unpacked for b in blobs),
            debian=debian.versions(kept),
            dropped=debian.versions([p for p in packages if p not in kept]),
        )
        return dataclasses.replace(manifest, platform=oci.platform(arch)), built
