"""The product image as it ships: two platforms, reproducible, the product alone, and runnable.

The build goes through the image cache, so it is quick after `make image`; one more build,
into a temporary folder and past the cache, proves the digest is reproducible. The amd64 root
filesystem then runs under runc the way the chart runs a container: uid/gid 65532, a read-only
root, no capabilities, no new privileges, a tmpfs /tmp. Missing tools fail the test (their
install is `make prereqs`), never skip it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import subprocess
import tomllib
from typing import Any

import pytest

from cdsim import fakenvml, hosttree, tools, topology
from cdsim.image import arch, cache, checks, layer, oci, recipe, runc, source, spec, wheels

ROOT = pathlib.Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
AMD64_COMPRESSED_LIMIT = 80 * MIB

pytestmark = pytest.mark.timeout(900)


def _require(*commands: str) -> None:
    missing = [c for c in commands if shutil.which(c) is None]
    assert not missing, f"{missing} not found: run `make prereqs` (sim/install-debian-prereqs.sh)"


@pytest.fixture(scope="module")
def src() -> source.Source:
    return source.resolve(ROOT)


@pytest.fixture(scope="module")
def image_cache() -> cache.ImageCache:
    _require("mmdebstrap", "runc", "skopeo")
    return cache.ImageCache.from_env(ROOT)


@pytest.fixture(scope="module")
def built(image_cache: cache.ImageCache, src: source.Source) -> recipe.Build:
    build, _ = image_cache.ensure()  # the working tree's, as make image builds it
    assert build.revision == src.commit
    return build


@pytest.fixture(scope="module")
def rootfs(
    built: recipe.Build, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, pathlib.Path]:
    """Each architecture's root filesystem, unpacked from the layout's layers."""
    trees = {}
    for target in arch.ARCHES:
        tree = tmp_path_factory.mktemp(f"rootfs-{target.name}")
        layer.unpack(oci.layer_paths(built.layout, target.name), tree)
        trees[target.name] = tree
    return trees


def test_index_holds_an_amd64_and_an_arm64_manifest(built: recipe.Build) -> None:
    tag, index_digest = oci.top(built.layout)
    assert (tag, index_digest) == (built.tag, built.index)
    index = oci.read_json(built.layout, index_digest)
    platforms = [m["platform"] for m in index["manifests"]]
    assert platforms == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux", "variant": "v8"},
    ]
    for manifest in oci.manifests(built.layout).values():
        assert manifest["mediaType"] == oci.MANIFEST
        assert [d["mediaType"] for d in manifest["layers"]] == [oci.LAYER] * len(recipe.LAYERS)


def test_the_same_revision_builds_to_the_same_digest(
    built: recipe.Build, image_cache: cache.ImageCache, src: source.Source, tmp_path: pathlib.Path
) -> None:
    again = image_cache.build(src, out=tmp_path / "again")
    assert again.index == built.index, (
        "a second build of the same revision gave another index digest: "
        + json.dumps(
            {a: (built.arches[a].manifest, again.arches[a].manifest) for a in built.arches}
        )
    )
    assert again.archive.read_bytes() == built.archive.read_bytes()


def test_skopeo_reads_the_archive_as_one_index(built: recipe.Build) -> None:
    reference = f"oci-archive:{built.archive}:{built.tag}"
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", reference], capture_output=True, check=True, timeout=120
    ).stdout
    assert oci.digest(raw) == built.index
    for target in arch.ARCHES:
        shown = subprocess.run(
            ["skopeo", "inspect", "--override-arch", target.name, reference],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert json.loads(shown.stdout)["Architecture"] == target.name


@pytest.mark.parametrize("target", arch.ARCHES, ids=lambda a: a.name)
def test_every_elf_file_is_built_for_its_architecture(
    target: arch.Arch, rootfs: dict[str, pathlib.Path]
) -> None:
    files = list(checks.elf_files(rootfs[target.name]))
    assert len(files) > 50, "the tree holds too few ELF files to be the image"
    assert checks.machine_problems(files, target) == []
    assert checks.library_problems(rootfs[target.name], files, arch=target) == []
    assert {f.info.machine for f in files} == {target.elf_machine}


@pytest.mark.parametrize("target", arch.ARCHES, ids=lambda a: a.name)
def test_every_wheel_is_tagged_for_its_architecture(
    target: arch.Arch, rootfs: dict[str, pathlib.Path]
) -> None:
    assert checks.wheel_problems(rootfs[target.name], target) == []
    platforms = {
        t.platform
        for tags in wheels.installed_tags(rootfs[target.name] / spec.SITE_PACKAGES).values()
        for t in tags
    }
    assert any(p.endswith(target.machine) for p in platforms), platforms


@pytest.mark.parametrize("target", arch.ARCHES, ids=lambda a: a.name)
def test_the_image_ships_the_product_alone(
    target: arch.Arch, rootfs: dict[str, pathlib.Path], built: recipe.Build
) -> None:
    tree = rootfs[target.name]
    assert checks.go_problems(list(checks.elf_files(tree))) == []
    assert checks.product_problems(tree) == []
    site = tree / spec.SITE_PACKAGES
    assert (site / "computedomains/hooks").is_dir()
    assert (site / "computedomains/nodeinit").is_dir()
    assert not (tree / "usr/share/man").exists()
    # The record scanners read: exactly the Debian packages the build unpacked.
    recorded = sorted(p.name for p in (tree / "var/lib/dpkg/status.d").iterdir())
    assert recorded == sorted(built.arches[target.name].debian)


def test_image_config(built: recipe.Build, src: source.Source) -> None:
    for target in arch.ARCHES:
        manifest = oci.manifests(built.layout)[target.name]
        document = oci.read_json(built.layout, manifest["config"]["digest"])
        config = document["config"]
        assert (document["architecture"], document["os"]) == (target.name, "linux")
        assert document.get("variant") == target.variant
        assert config["User"] == "65532:65532"
        assert config["Entrypoint"] == ["computedomains"]
        assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
        assert "PYTHONUNBUFFERED=1" in config["Env"]
        assert any(e.startswith("PATH=/usr/local/bin:") for e in config["Env"])
        labels = config["Labels"]
        expected = spec.labels(spec.Identity(src.version, src.commit, src.epoch))
        assert labels == expected
        assert labels["org.opencontainers.image.revision"] == src.commit
        assert document["created"] == labels["org.opencontainers.image.created"]
        assert len(document["rootfs"]["diff_ids"]) == len(recipe.LAYERS)


def test_amd64_image_is_small(built: recipe.Build) -> None:
    compressed = built.arches["amd64"].compressed
    assert compressed <= AMD64_COMPRESSED_LIMIT, f"amd64 image is {compressed / MIB:.1f} MiB"


COMMANDS = (
    ("--version",),
    ("controller", "--help"),
    ("kubelet-plugin", "--help"),
    ("imex-agent", "--help"),
    ("webhook", "--help"),
    ("node-init", "--help"),
    ("hooks", "preflight", "--help"),
)


def _run(
    tree: pathlib.Path, bundle: pathlib.Path, args: list[str]
) -> subprocess.CompletedProcess[str]:
    _require("runc")
    return runc.run(bundle, tree, args=args)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_each_entrypoint_starts_under_runc_as_the_chart_runs_it(
    args: tuple[str, ...],
    rootfs: dict[str, pathlib.Path],
    tmp_path: pathlib.Path,
    src: source.Source,
) -> None:
    done = _run(rootfs["amd64"], tmp_path, [*spec.ENTRYPOINT, *args])
    assert done.returncode == 0, f"computedomains {' '.join(args)}:\n{done.stdout}{done.stderr}"
    if args == ("--version",):
        # The wheel's own version (PEP 440); the image's labels and tag carry the build's.
        wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
        assert done.stdout.strip() == f"computedomains {wheel}"
    else:
        assert done.stdout.startswith("usage: computedomains"), done.stdout[:300]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("init", "verdict", "code"),
    [("SUCCESS", "healthy", 0), ("ERROR_DRIVER_NOT_LOADED", "broken", 1)],
)
def test_node_inits_discovery_loads_the_driver_roots_nvml_under_runc(
    rootfs: dict[str, pathlib.Path], tmp_path: pathlib.Path, init: str, verdict: str, code: int
) -> None:
    """The production path as node-init runs it in the image (root, no capability, read-only
    root): the image's pynvml loads the driver root's libnvidia-ml.so.1, here the simulated
    node's fake, mounted as the chart mounts the driver root."""
    (node,) = topology.expand(
        topology.Topology(racks=1, nodes_per_rack=1), cluster_name="image", address_block=0
    )
    tree = hosttree.write(
        tmp_path / "host", node, nvml_library=tools.ToolBox.from_env().nvml_library()
    )
    hosttree.write_nvml_answers(tree, dataclasses.replace(fakenvml.answers(node), init=init))
    done = runc.run(
        tmp_path / "bundle",
        rootfs["amd64"],
        args=[*spec.ENTRYPOINT, "fabric", "show", "--json", "--driver-root=/host",
              "--proc-root=/host/proc"],
        uid=0, gid=0, binds=[(tree.root, "/host")],
    )  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    found = json.loads(done.stdout)
    assert found["verdict"] == verdict, found
    if init == "SUCCESS":
        assert found["clique"] == node.clique and len(found["gpus"]) == len(node.gpus)
        assert found["driverVersion"] == node.driver_version
    else:
        assert "ERROR_DRIVER_NOT_LOADED" in found["message"], found


PROBE = """
import errno, json, os
try:
    open("/written-at-run-time", "w")
    root = "writable"
except OSError as exc:
    root = errno.errorcode[exc.errno]
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
with open("/tmp/scratch", "w") as scratch:
    scratch.write("tmpfs")
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "root": root,
    "cap_eff": status["CapEff"], "cap_bnd": status["CapBnd"], "no_new_privs": status["NoNewPrivs"],
}))
"""


def test_the_container_runs_unprivileged_on_a_read_only_root(
    rootfs: dict[str, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    done = _run(rootfs["amd64"], tmp_path, [spec.PYTHON, "-c", PROBE])
    assert done.returncode == 0, done.stdout + done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    assert seen == {
        "uid": spec.UID,
        "gid": spec.UID,
        "root": "EROFS",
        "cap_eff": "0000000000000000",
        "cap_bnd": "0000000000000000",
        "no_new_privs": "1",
    }
