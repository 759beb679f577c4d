"""Fabric verdicts from simulated nodes: every verdict, and the /proc checks.

Each node's /proc is its own host tree's; its NVML is the fake library of the process's one
driver root (``nvml_node``), answering what the node's would (pynvml loads one library).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import uuid
from collections.abc import Callable

import pytest

from cdsim import fakenvml, hosttree, topology
from computedomains import nodefiles
from computedomains.api import fabricverdict
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks, classify, codec, discovery, verdictfile
from computedomains.fabric.model import Reason, Verdict
from tests.support import nvmlnode

NODE = "gb200-r0-n00"
Profile = topology.FabricProfile


@dataclasses.dataclass(frozen=True)
class Node:
    """A simulated node: its host tree, and the driver root answering as its NVML."""

    tree: hosttree.HostTree
    sim: topology.SimNode
    nvml: nvmlnode.NvmlNode

    @property
    def proc(self) -> pathlib.Path:
        return self.tree.root / "proc"

    def backend(self) -> discovery.Backend:
        return self.nvml.backend(self.proc)


@pytest.fixture
def make_node(
    tmp_path: pathlib.Path, nvml_node: nvmlnode.NvmlNode, nvml_library: pathlib.Path
) -> Callable[..., Node]:
    def make(
        profile: topology.FabricProfile = Profile.HEALTHY, driver_version: str | None = None
    ) -> Node:
        spec = topology.Topology(
            racks=1,
            nodes_per_rack=1,
            overrides={NODE: topology.NodeOverride(profile, driver_version)},
        )
        sim = topology.expand(spec, cluster_name="unit", address_block=0)[0]
        tree = hosttree.write(tmp_path / NODE, sim, nvml_library=nvml_library)
        nvml_node.answer(fakenvml.answers(sim))
        return Node(tree, sim, nvml_node)

    return make


def _verdict(node: Node, *, waited: float = 0.0, grace: float = 300.0) -> Verdict:
    report = node.backend().discover()
    host = checks.gather(node.proc)
    return classify.classify(report, host, waited=waited, grace=grace)


def test_healthy_node_is_in_its_racks_clique(make_node: Callable[..., Node]) -> None:
    node = make_node()
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason) == (VerdictKind.HEALTHY, Reason.HEALTHY)
    assert verdict.clique == node.sim.clique
    assert node.sim.clique is not None and node.sim.clique in verdict.message


def test_node_without_fabric_is_never_broken_for_missing_imex_bits(
    make_node: Callable[..., Node],
) -> None:
    node = make_node(Profile.NO_FABRIC, driver_version="535.104.05")
    node.tree.proc_devices.write_text(hosttree.proc_devices_text(with_nvidia=False))
    node.tree.fabric_imex_mgmt.unlink()
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.NO_FABRIC,
        Reason.NO_FABRIC,
        "",
    )


def test_gpus_answering_not_supported_or_without_cluster_uuid_mean_no_fabric(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    model = fakenvml.answers(node.sim)
    node.nvml.answer(
        dataclasses.replace(
            model, gpus=tuple(dataclasses.replace(g, fabric=None) for g in model.gpus)
        )
    )  # NVML's ERROR_NOT_SUPPORTED
    assert _verdict(node).kind is VerdictKind.NO_FABRIC

    unregistered = topology.FabricInfo("COMPLETED", "SUCCESS", str(uuid.UUID(int=0)), 0, 0)
    node.nvml.answer(
        dataclasses.replace(
            model, gpus=tuple(dataclasses.replace(g, fabric=unregistered) for g in model.gpus)
        )
    )
    assert _verdict(node).kind is VerdictKind.NO_FABRIC


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_registration_in_progress_then_healthy_within_the_grace(
    make_node: Callable[..., Node],
) -> None:
    node = make_node(Profile.IN_PROGRESS)
    clock = _Clock()
    observer = discovery.Observer(node.backend(), node.proc, grace=120.0, clock=clock)
    first = observer.observe()
    assert (first.verdict.kind, first.verdict.reason) == (
        VerdictKind.TRANSITIONAL,
        Reason.IN_PROGRESS,
    )
    assert first.verdict.clique == ""
    clock.now += 60
    assert observer.observe().verdict.kind is VerdictKind.TRANSITIONAL

    healthy = topology.expand(
        topology.Topology(racks=1, nodes_per_rack=1), cluster_name="unit", address_block=0
    )[0]
    node.nvml.answer(fakenvml.answers(healthy))
    clock.now += 30
    settled = observer.observe()
    assert settled.verdict.kind is VerdictKind.HEALTHY
    assert settled.verdict.clique == healthy.clique
    assert node.sim.name == healthy.name


def test_registration_in_progress_past_the_grace_is_broken(
    make_node: Callable[..., Node],
) -> None:
    node = make_node(Profile.IN_PROGRESS)
    assert _verdict(node, waited=299, grace=300).kind is VerdictKind.TRANSITIONAL
    timed_out = _verdict(node, waited=300, grace=300)
    assert (timed_out.kind, timed_out.reason) == (VerdictKind.BROKEN, Reason.TIMED_OUT)
    assert "IN_PROGRESS" in timed_out.message

    clock = _Clock()
    observer = discovery.Observer(node.backend(), node.proc, grace=10.0, clock=clock)
    assert observer.observe().verdict.kind is VerdictKind.TRANSITIONAL
    clock.now += 10
    assert observer.observe().verdict.reason is Reason.TIMED_OUT
    clock.now += 10
    assert observer.observe().verdict.reason is Reason.TIMED_OUT, "the grace does not restart"


def test_degraded_bandwidth_keeps_the_clique(make_node: Callable[..., Node]) -> None:
    node = make_node(Profile.DEGRADED)
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason) == (VerdictKind.DEGRADED, Reason.DEGRADED)
    assert verdict.clique == node.sim.clique
    assert verdict.usable
    assert "degraded bandwidth" in verdict.message


def test_failed_registration_is_broken(make_node: Callable[..., Node]) -> None:
    verdict = _verdict(make_node(Profile.FAILED))
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.BROKEN,
        Reason.FAILED,
        "",
    )
    assert "ERROR_UNKNOWN" in verdict.message


def test_gpus_in_different_cliques_are_inconsistent(make_node: Callable[..., Node]) -> None:
    node = make_node(Profile.MIXED_CLIQUES)
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.INCONSISTENT,
        Reason.INCONSISTENT,
        "",
    )
    cluster_uuid = node.sim.gpus[0].fabric.cluster_uuid
    assert f"{cluster_uuid}.32766" in verdict.message
    assert f"{cluster_uuid}.32767" in verdict.message


@pytest.mark.parametrize(
    ("version", "kind"),
    [
        ("565.57.01", VerdictKind.BROKEN),
        # 86 < 158 as numbers, though not as strings: versions compare field by field.
        ("570.86.15", VerdictKind.BROKEN),
        ("570.158.01", VerdictKind.HEALTHY),
        ("580.95.05", VerdictKind.HEALTHY),
    ],
)
def test_driver_older_than_the_dns_name_minimum_is_broken(
    make_node: Callable[..., Node], version: str, kind: VerdictKind
) -> None:
    verdict = _verdict(make_node(driver_version=version))
    assert verdict.kind is kind
    if kind is VerdictKind.BROKEN:
        assert verdict.reason is Reason.DRIVER_TOO_OLD
        assert version in verdict.message and classify.MINIMUM_DRIVER in verdict.message


def test_missing_imex_majors_are_broken(make_node: Callable[..., Node]) -> None:
    node = make_node()
    node.tree.proc_devices.write_text(hosttree.proc_devices_text(with_nvidia=False))
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.IMEX_MAJORS_MISSING)
    assert "nvidia-caps-imex-channels" in verdict.message


def test_missing_imex_management_capability_is_broken(make_node: Callable[..., Node]) -> None:
    node = make_node()
    node.tree.fabric_imex_mgmt.unlink()
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.IMEX_MGMT_MISSING)
    assert str(node.tree.fabric_imex_mgmt) in verdict.message


def _process(proc: pathlib.Path, pid: int, comm: str, cgroup: str | None = None) -> None:
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "comm").write_text(f"{comm}\n")
    if cgroup is not None:
        (proc / str(pid) / "cgroup").write_text(cgroup)


def test_host_nvidia_imex_process_is_broken(make_node: Callable[..., Node]) -> None:
    node = make_node()
    _process(node.proc, 17, "nvidia-imex-ctl")
    _process(node.proc, 23, "nvidia-imex", "0::/kubepods.slice/kubepods-pod1.slice/cri-x.scope\n")
    assert _verdict(node).kind is VerdictKind.HEALTHY, "only host processes conflict"

    _process(node.proc, 4242, "nvidia-imex", "0::/system.slice/nvidia-imex.service\n")
    verdict = _verdict(node)
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.HOST_IMEX_RUNNING)
    assert "4242" in verdict.message and "systemctl" in verdict.message
    assert checks.find_host_processes(node.proc) == (4242,)


def test_proc_parsers_give_typed_results(
    make_node: Callable[..., Node], tmp_path: pathlib.Path
) -> None:
    proc = make_node().proc
    devices = checks.read_proc_devices(proc)
    assert devices.char_major(checks.IMEX_CHANNELS_DEVICE) == hosttree.IMEX_CHANNELS_MAJOR
    assert devices.char_major(checks.CAPS_DEVICE) == hosttree.NVIDIA_CAPS_MAJOR
    assert devices.char_major("tty") == 4 and devices.block["sd"] == 8
    assert checks.read_capability(proc) == checks.DeviceCapability(minor=1, mode=0o666, modify=True)
    assert checks.read_imex_channel_count(proc) == 2048
    empty = tmp_path / "empty-proc"
    empty.mkdir()
    assert checks.read_proc_devices(empty).character == {}
    assert checks.read_capability(empty) is None
    assert checks.read_imex_channel_count(empty) is None
    with pytest.raises(ValueError, match="DeviceFileMode"):
        checks.parse_capability("DeviceFileMinor: 1\nDeviceFileModify: 1\n")
    parsed = checks.parse_proc_devices(
        "Character devices:\n garbage\n 235 nvidia-caps-imex-channels\n"
    )
    assert parsed.char_major("nvidia-caps-imex-channels") == 235
    with pytest.raises(ValueError, match="not a driver version"):
        checks.parse_driver_version("580.95.05-beta")


def test_observer_turns_a_failing_nvml_into_a_broken_verdict(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    nodefiles.write_bytes(node.nvml.topology, b"{NVML_ERROR_UNKNOWN")
    observation = discovery.Observer(node.backend(), node.proc).observe()
    assert observation.report is None
    assert (observation.verdict.kind, observation.verdict.reason) == (
        VerdictKind.BROKEN,
        Reason.DISCOVERY_FAILED,
    )
    assert "ERROR_UNKNOWN" in observation.verdict.message


def test_verdict_file_round_trips(make_node: Callable[..., Node]) -> None:
    node = make_node()
    observation = discovery.Observer(node.backend(), node.proc).observe()
    path = node.tree.root / "var/run/compute-domains/fabric-verdict.json"
    verdict = verdictfile.build(
        NODE, observation.verdict, observation.report, observation.observed_at
    )
    fabricverdict.write(path, verdict)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    stored = fabricverdict.read(path)
    assert stored == verdict and observation.report is not None
    assert (stored.node, stored.verdict, stored.clique) == (
        NODE,
        VerdictKind.HEALTHY,
        node.sim.clique,
    )
    assert stored.reason == "FabricHealthy" and stored.usable
    assert stored.gpus == tuple(codec.gpu_entry(g) for g in observation.report.gpus)
    assert [(g.uuid, g.fabric.clique_id if g.fabric else None) for g in stored.gpus] == [
        (g.uuid, g.fabric.clique_id) for g in node.sim.gpus
    ]
    assert stored.imex_channel_count == 2048
    assert stored.observed_at.endswith("Z")
    assert fabricverdict.read(node.tree.root / "none.json") is None

    document = json.loads(path.read_text())
    # A newer writer's extra field is ignored; an unknown verdict is not guessed at.
    path.write_text(json.dumps({**document, "since": "2026-11-30T07:30:00Z"}))
    assert fabricverdict.read(path) == verdict
    path.write_text(json.dumps({**document, "verdict": "fine"}))
    with pytest.raises(nodefiles.CorruptNodeFile, match='verdict: unsupported value "fine"'):
        fabricverdict.read(path)
    path.write_text(json.dumps({**document, "gpus": [{"index": "0"}]}))
    with pytest.raises(nodefiles.CorruptNodeFile, match=r"gpus\[0\]\.index"):
        fabricverdict.read(path)


def test_discovery_failure_is_written_without_gpus(make_node: Callable[..., Node]) -> None:
    node = make_node()
    node.nvml.answer(
        dataclasses.replace(fakenvml.answers(node.sim), init="ERROR_DRIVER_NOT_LOADED")
    )
    observation = discovery.Observer(node.backend(), node.proc).observe()
    verdict = verdictfile.build(NODE, observation.verdict, None, observation.observed_at)
    document = verdict.to_dict()
    assert "gpus" not in document and "imexChannelCount" not in document
    assert document["verdict"] == "broken" and document["reason"] == "FabricDiscoveryFailed"
    assert "ERROR_DRIVER_NOT_LOADED" in document["message"]
    path = node.tree.root / "verdict.json"
    fabricverdict.write(path, verdict)
    stored = fabricverdict.read(path)
    assert stored is not None and not stored.usable and stored.gpus == ()


@pytest.mark.parametrize(
    ("verdict", "usable"),
    [
        *((kind.value, kind in {VerdictKind.HEALTHY, VerdictKind.DEGRADED, VerdictKind.NO_FABRIC})
          for kind in VerdictKind),
        ("unknown", False),
        ("", False),
    ],
)  # fmt: skip
def test_one_usable_rule_for_every_verdict(verdict: str, usable: bool) -> None:
    assert fabricverdict.usable(verdict) is usable
