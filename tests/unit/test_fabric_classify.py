"""Fabric verdicts from simulated nodes' host trees: every verdict, and the /proc checks."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from cdsim import hosttree, topology
from computedomains import nodefiles
from computedomains.api import fabricverdict
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks, classify, codec, discovery, fake, verdictfile
from computedomains.fabric.model import Reason, Verdict

NODE = "gb200-r0-n00"
Profile = topology.FabricProfile


def _tree(
    tmp_path: pathlib.Path,
    profile: topology.FabricProfile = Profile.HEALTHY,
    driver_version: str | None = None,
) -> tuple[hosttree.HostTree, topology.SimNode]:
    spec = topology.Topology(
        racks=1,
        nodes_per_rack=1,
        overrides={NODE: topology.NodeOverride(profile, driver_version)},
    )
    node = topology.expand(spec, cluster_name="unit", address_block=0)[0]
    return hosttree.write(tmp_path / NODE, node), node


def _replace_fake_nvml(tree: hosttree.HostTree, document: dict[str, object]) -> None:
    tmp = tree.fake_nvml.with_suffix(".tmp")
    tmp.write_text(json.dumps(document))
    tmp.replace(tree.fake_nvml)


def _verdict(tree: hosttree.HostTree, *, waited: float = 0.0, grace: float = 300.0) -> Verdict:
    report = fake.read_fake_nvml(tree.fake_nvml)
    host = checks.gather(tree.root / "proc")
    return classify.classify(report, host, waited=waited, grace=grace)


def test_healthy_node_is_in_its_racks_clique(tmp_path: pathlib.Path) -> None:
    tree, node = _tree(tmp_path)
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason) == (VerdictKind.HEALTHY, Reason.HEALTHY)
    assert verdict.clique == node.clique
    assert node.clique is not None and node.clique in verdict.message


def test_node_without_fabric_is_never_broken_for_missing_imex_bits(
    tmp_path: pathlib.Path,
) -> None:
    tree, _ = _tree(tmp_path, Profile.NO_FABRIC, driver_version="535.104.05")
    tree.proc_devices.write_text(hosttree.proc_devices_text(with_nvidia=False))
    tree.fabric_imex_mgmt.unlink()
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.NO_FABRIC,
        Reason.NO_FABRIC,
        "",
    )


def test_gpus_answering_not_supported_or_without_cluster_uuid_mean_no_fabric(
    tmp_path: pathlib.Path,
) -> None:
    tree, node = _tree(tmp_path)
    document = hosttree.fake_nvml_document(node)
    for gpu in document["gpus"]:
        gpu["fabric"] = None  # NVML's ERROR_NOT_SUPPORTED
    _replace_fake_nvml(tree, document)
    assert _verdict(tree).kind is VerdictKind.NO_FABRIC

    for gpu in document["gpus"]:
        gpu["fabric"] = {
            "state": "COMPLETED",
            "status": "SUCCESS",
            "clusterUuid": "00000000-0000-0000-0000-000000000000",
            "cliqueId": 0,
            "healthMask": 0,
        }
    _replace_fake_nvml(tree, document)
    assert _verdict(tree).kind is VerdictKind.NO_FABRIC


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_registration_in_progress_then_healthy_within_the_grace(tmp_path: pathlib.Path) -> None:
    tree, node = _tree(tmp_path, Profile.IN_PROGRESS)
    clock = _Clock()
    observer = discovery.Observer(
        fake.FakeBackend(tree.fake_nvml), tree.root / "proc", grace=120.0, clock=clock
    )
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
    _replace_fake_nvml(tree, hosttree.fake_nvml_document(healthy))
    clock.now += 30
    settled = observer.observe()
    assert settled.verdict.kind is VerdictKind.HEALTHY
    assert settled.verdict.clique == healthy.clique
    assert node.name == healthy.name


def test_registration_in_progress_past_the_grace_is_broken(tmp_path: pathlib.Path) -> None:
    tree, _ = _tree(tmp_path, Profile.IN_PROGRESS)
    assert _verdict(tree, waited=299, grace=300).kind is VerdictKind.TRANSITIONAL
    timed_out = _verdict(tree, waited=300, grace=300)
    assert (timed_out.kind, timed_out.reason) == (VerdictKind.BROKEN, Reason.TIMED_OUT)
    assert "IN_PROGRESS" in timed_out.message

    clock = _Clock()
    observer = discovery.Observer(
        fake.FakeBackend(tree.fake_nvml), tree.root / "proc", grace=10.0, clock=clock
    )
    assert observer.observe().verdict.kind is VerdictKind.TRANSITIONAL
    clock.now += 10
    assert observer.observe().verdict.reason is Reason.TIMED_OUT
    clock.now += 10
    assert observer.observe().verdict.reason is Reason.TIMED_OUT, "the grace does not restart"


def test_degraded_bandwidth_keeps_the_clique(tmp_path: pathlib.Path) -> None:
    tree, node = _tree(tmp_path, Profile.DEGRADED)
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason) == (VerdictKind.DEGRADED, Reason.DEGRADED)
    assert verdict.clique == node.clique
    assert verdict.usable
    assert "degraded bandwidth" in verdict.message


def test_failed_registration_is_broken(tmp_path: pathlib.Path) -> None:
    tree, _ = _tree(tmp_path, Profile.FAILED)
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.BROKEN,
        Reason.FAILED,
        "",
    )
    assert "ERROR_UNKNOWN" in verdict.message


def test_gpus_in_different_cliques_are_inconsistent(tmp_path: pathlib.Path) -> None:
    tree, node = _tree(tmp_path, Profile.MIXED_CLIQUES)
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason, verdict.clique) == (
        VerdictKind.INCONSISTENT,
        Reason.INCONSISTENT,
        "",
    )
    uuid = node.gpus[0].fabric.cluster_uuid
    assert f"{uuid}.32766" in verdict.message and f"{uuid}.32767" in verdict.message


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
    tmp_path: pathlib.Path, version: str, kind: VerdictKind
) -> None:
    tree, _ = _tree(tmp_path, driver_version=version)
    verdict = _verdict(tree)
    assert verdict.kind is kind
    if kind is VerdictKind.BROKEN:
        assert verdict.reason is Reason.DRIVER_TOO_OLD
        assert version in verdict.message and classify.MINIMUM_DRIVER in verdict.message


def test_missing_imex_majors_are_broken(tmp_path: pathlib.Path) -> None:
    tree, _ = _tree(tmp_path)
    tree.proc_devices.write_text(hosttree.proc_devices_text(with_nvidia=False))
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.IMEX_MAJORS_MISSING)
    assert "nvidia-caps-imex-channels" in verdict.message


def test_missing_imex_management_capability_is_broken(tmp_path: pathlib.Path) -> None:
    tree, _ = _tree(tmp_path)
    tree.fabric_imex_mgmt.unlink()
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.IMEX_MGMT_MISSING)
    assert str(tree.fabric_imex_mgmt) in verdict.message


def _process(proc: pathlib.Path, pid: int, comm: str, cgroup: str | None = None) -> None:
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "comm").write_text(f"{comm}\n")
    if cgroup is not None:
        (proc / str(pid) / "cgroup").write_text(cgroup)


def test_host_nvidia_imex_process_is_broken(tmp_path: pathlib.Path) -> None:
    tree, _ = _tree(tmp_path)
    proc = tree.root / "proc"
    _process(proc, 17, "nvidia-imex-ctl")
    _process(proc, 23, "nvidia-imex", "0::/kubepods.slice/kubepods-pod1.slice/cri-x.scope\n")
    assert _verdict(tree).kind is VerdictKind.HEALTHY, "only host processes conflict"

    _process(proc, 4242, "nvidia-imex", "0::/system.slice/nvidia-imex.service\n")
    verdict = _verdict(tree)
    assert (verdict.kind, verdict.reason) == (VerdictKind.BROKEN, Reason.HOST_IMEX_RUNNING)
    assert "4242" in verdict.message and "systemctl" in verdict.message
    assert checks.find_host_processes(proc) == (4242,)


def test_proc_parsers_give_typed_results(tmp_path: pathlib.Path) -> None:
    tree, _ = _tree(tmp_path)
    proc = tree.root / "proc"
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


def test_unusable_fake_nvml_file_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "absent.json"
    with pytest.raises(fake.FakeNvmlError, match=f"{missing} does not exist"):
        fake.read_fake_nvml(missing)
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    with pytest.raises(fake.FakeNvmlError, match="not valid JSON"):
        fake.read_fake_nvml(garbled)
    tree, node = _tree(tmp_path)
    document = hosttree.fake_nvml_document(node)
    document["gpus"][2]["fabric"]["cliqueId"] = "32766"
    _replace_fake_nvml(tree, document)
    with pytest.raises(fake.FakeNvmlError, match=r"gpus\[2\]\.fabric\.cliqueId"):
        fake.read_fake_nvml(tree.fake_nvml)
    document["format"] = "something/else"
    _replace_fake_nvml(tree, document)
    with pytest.raises(fake.FakeNvmlError, match="format"):
        fake.read_fake_nvml(tree.fake_nvml)


def test_observer_turns_discovery_failure_into_a_broken_verdict(tmp_path: pathlib.Path) -> None:
    observer = discovery.Observer(fake.FakeBackend(tmp_path / "absent.json"), tmp_path)
    observation = observer.observe()
    assert observation.report is None
    assert (observation.verdict.kind, observation.verdict.reason) == (
        VerdictKind.BROKEN,
        Reason.DISCOVERY_FAILED,
    )


def test_verdict_file_round_trips(tmp_path: pathlib.Path) -> None:
    tree, node = _tree(tmp_path)
    observation = discovery.Observer(fake.FakeBackend(tree.fake_nvml), tree.root / "proc").observe()
    path = tree.root / "var/run/compute-domains/fabric-verdict.json"
    verdict = verdictfile.build(
        NODE, observation.verdict, observation.report, observation.observed_at
    )
    fabricverdict.write(path, verdict)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    stored = fabricverdict.read(path)
    assert stored == verdict and observation.report is not None
    assert (stored.node, stored.verdict, stored.clique) == (NODE, VerdictKind.HEALTHY, node.clique)
    assert stored.reason == "FabricHealthy" and stored.usable
    assert stored.gpus == tuple(codec.gpu_entry(g) for g in observation.report.gpus)
    assert stored.imex_channel_count == 2048
    assert stored.observed_at.endswith("Z")
    assert fabricverdict.read(tmp_path / "none.json") is None

    document = json.loads(path.read_text())
    # The GPU entries are the fake-NVML file's: what the writer stored decodes to the report.
    assert (
        tuple(codec.gpu_from_json(g, f"$.gpus[{i}]") for i, g in enumerate(document["gpus"]))
        == observation.report.gpus
    )
    # A newer writer's extra field is ignored; an unknown verdict is not guessed at.
    path.write_text(json.dumps({**document, "since": "2026-11-30T07:30:00Z"}))
    assert fabricverdict.read(path) == verdict
    path.write_text(json.dumps({**document, "verdict": "fine"}))
    with pytest.raises(nodefiles.CorruptNodeFile, match='verdict: unsupported value "fine"'):
        fabricverdict.read(path)
    path.write_text(json.dumps({**document, "gpus": [{"index": "0"}]}))
    with pytest.raises(nodefiles.CorruptNodeFile, match=r"gpus\[0\]\.index"):
        fabricverdict.read(path)


def test_discovery_failure_is_written_without_gpus(tmp_path: pathlib.Path) -> None:
    observation = discovery.Observer(fake.FakeBackend(tmp_path / "absent.json"), tmp_path).observe()
    verdict = verdictfile.build(NODE, observation.verdict, None, observation.observed_at)
    document = verdict.to_dict()
    assert "gpus" not in document and "imexChannelCount" not in document
    assert document["verdict"] == "broken" and document["reason"] == "FabricDiscoveryFailed"
    path = tmp_path / "verdict.json"
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
