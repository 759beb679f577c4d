"""A small workload image for the simulated cluster: Debian's static busybox, both platforms.

The examples' and the tests' workload pods run it, so a test can look from inside a pod at
what its claims gave it (``ls /dev/nvidia-caps-imex-channels``, as the incumbent's own test
does). Built like the product image (:mod:`cdsim.image.recipe`: Debian packages fetched by
mmdebstrap, one layer per platform, one OCI index), once per recipe, kept in the image cache
under ``workload-<fingerprint>``, and pushed to each cluster's registry as
``<registry>/compute-domains-workload:busybox``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import shutil
import tempfile
from collections.abc import Callable

from cdsim.image import arch as arch_
from cdsim.image import cache, deb, debian, layer, oci

PACKAGE = "busybox-static"
REPOSITORY = "compute-domains-workload"
TAG = "busybox"
APPLETS = (
    "sh", "ls", "cat", "echo", "printf", "sleep", "env", "id", "test", "[", "true", "false",
    "stat", "mkdir", "touch", "rm", "wc", "grep", "head", "tail", "sort", "tr", "ps", "find",
    "readlink", "hostname", "date",
)  # fmt: skip
"""The busybox commands linked in ``/usr/bin`` (``/bin`` links there)."""
DEFAULTS = oci.Defaults(
    user="0:0", cmd=("sh",), env=("PATH=/usr/local/bin:/usr/bin:/bin",), working_dir="/"
)
CREATED = "1970-01-01T00:00:00Z"
"""Fixed, like every file's mtime: one recipe, one digest."""
LABELS = {
    "org.opencontainers.image.title": REPOSITORY,
    "org.opencontainers.image.description": "busybox for the simulated cluster's workload pods",
}


RECIPE = ("workload.py", "arch.py", "deb.py", "debian.py", "layer.py", "oci.py")
"""The modules of this package that decide the image's bytes."""


def fingerprint(mirror: debian.Mirror) -> str:
    """What decides the image's bytes: this recipe and the parts it uses, the Debian mirror."""
    digest = hashlib.sha256()
    for name in RECIPE:
        digest.update(name.encode() + b"\0" + (pathlib.Path(__file__).parent / name).read_bytes())
    digest.update(repr(mirror).encode())
    return digest.hexdigest()[:16]


def rootfs(busybox: deb.Package, root: pathlib.Path) -> None:
    """The image's files: ``/bin/busybox``, its applet links, the accounts."""
    wanted = {"usr", "usr/bin", "usr/bin/busybox"}  # merged /usr, as the product image
    deb.unpack(busybox, root, keep=lambda path: path.as_posix() in wanted)
    if not (root / "usr/bin/busybox").is_file():
        raise debian.DebianError(f"{busybox.path.name} has no /bin/busybox")
    for applet in APPLETS:
        (root / "usr/bin" / applet).symlink_to("busybox")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"
    )
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    for folder in ("tmp", "root", "dev", "proc", "sys"):
        (root / folder).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)


@dataclasses.dataclass(frozen=True)
class Workload:
    """A built workload image."""

    archive: pathlib.Path
    """Its OCI archive (every platform), as :func:`cdsim.publish.publish_image` takes it."""
    index: str


def ensure(
    images: pathlib.Path, mirror: debian.Mirror, *, log: Callable[[str], None] = print
) -> Workload:
    """The workload image in the cache ``images``, built first when missing."""
    final = images / f"workload-{fingerprint(mirror)}"
    with cache.turn(images, final.name):
        if not (final / "index").is_file():
            _build(final, mirror, log)
    return Workload(final / "workload.oci.tar", (final / "index").read_text().strip())


def _build(final: pathlib.Path, mirror: debian.Mirror, log: Callable[[str], None]) -> None:
    staging = final.with_name(f".{final.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    layout = oci.Layout(staging / "layout")
    descriptors = []
    with tempfile.TemporaryDirectory(prefix="cd-workload-") as scratch:
        work = pathlib.Path(scratch)
        for arch in arch_.ARCHES:
            log(f"[image] workload {arch.name}: {PACKAGE} ({debian.SUITE})")
            packages = debian.download(
                arch, mirror, debs=work / f"debs-{arch.name}", epoch=0, include=(PACKAGE,)
            )
            (busybox,) = [p for p in packages if p.name == PACKAGE]
            root = work / f"rootfs-{arch.name}"
            root.mkdir()
            rootfs(busybox, root)
            blob = layer.write(root, layer.tree(root), out=work / f"layer-{arch.name}", epoch=0)
            layer_descriptor = layout.add_layer(blob)
            config = layout.add_document(
                oci.CONFIG,
                oci.image_config(
                    arch, [blob], created=CREATED, defaults=DEFAULTS, labels=LABELS,
                    layer_names=[PACKAGE],
                ),
            )  # fmt: skip
            manifest = layout.add_document(
                oci.MANIFEST, oci.manifest(config, [layer_descriptor], labels=LABELS)
            )
            descriptors.append(dataclasses.replace(manifest, platform=oci.platform(arch)))
    index = layout.add_document(oci.INDEX, oci.index(descriptors, labels=LABELS))
    layout.tag(index, TAG)
    oci.write_archive(layout.root, staging / "workload.oci.tar", epoch=0)
    (staging / "index").write_text(index.digest + "\n")
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    log(f"[image] workload {TAG}: {index.digest}")
