"""Topology expansion: names, addresses and fabric answers per profile."""

from __future__ import annotations

import ipaddress

import pytest

from cdsim import topology as t


def test_default_topology_is_two_racks_of_eighteen_with_four_gpus() -> None:
    nodes = t.expand(t.Topology(), cluster_name="c", address_block=0)
    assert len(nodes) == 36
    assert {n.rack for n in nodes} == {0, 1}
    assert all(len(n.gpus) == 4 for n in nodes)
    cliques = {n.clique for n in nodes}
    assert len(cliques) == 2 and None not in cliques
    assert {c.split(".")[1] for c in cliques if c} == {str(t.DEFAULT_CLIQUE_ID)}


def test_expansion_is_deterministic_per_cluster_name() -> None:
    a = t.expand(t.Topology(racks=1, nodes_per_rack=2), cluster_name="x", address_block=0)
    b = t.expand(t.Topology(racks=1, nodes_per_rack=2), cluster_name="x", address_block=0)
    c = t.expand(t.Topology(racks=1, nodes_per_rack=2), cluster_name="y", address_block=0)
    assert a == b
    assert a[0].gpus[0].uuid != c[0].gpus[0].uuid


@pytest.mark.parametrize(
    ("profile", "state", "status", "clique"),
    [
        (t.FabricProfile.HEALTHY, "COMPLETED", "SUCCESS", True),
        (t.FabricProfile.DEGRADED, "COMPLETED", "SUCCESS", True),
        (t.FabricProfile.IN_PROGRESS, "IN_PROGRESS", "SUCCESS", False),
        (t.FabricProfile.FAILED, "COMPLETED", "ERROR_UNKNOWN", False),
        (t.FabricProfile.NO_FABRIC, "NOT_SUPPORTED", "SUCCESS", False),
    ],
)
def test_profiles_set_nvml_fabric_answers(
    profile: t.FabricProfile, state: str, status: str, clique: bool
) -> None:
    spec = t.Topology(
        racks=1, nodes_per_rack=2, overrides={"gb200-r0-n01": t.NodeOverride(profile)}
    )
    node = t.expand(spec, cluster_name="c", address_block=0)[1]
    assert {(g.fabric.state, g.fabric.status) for g in node.gpus} == {(state, status)}
    assert (node.clique is not None) is clique
    assert all(
        g.fabric.health_mask == (1 if profile is t.FabricProfile.DEGRADED else 0) for g in node.gpus
    )


def test_mixed_cliques_profile_makes_the_last_gpu_disagree() -> None:
    spec = t.Topology(
        racks=1,
        nodes_per_rack=1,
        overrides={"gb200-r0-n00": t.NodeOverride(t.FabricProfile.MIXED_CLIQUES)},
    )
    gpus = t.expand(spec, cluster_name="c", address_block=0)[0].gpus
    assert len({g.fabric.clique_id for g in gpus[:-1]}) == 1
    assert gpus[-1].fabric.clique_id != gpus[0].fabric.clique_id


def test_non_fabric_nodes_and_driver_override() -> None:
    spec = t.Topology(
        racks=1,
        nodes_per_rack=1,
        non_fabric_nodes=1,
        overrides={"gb200-r0-n00": t.NodeOverride(driver_version="565.57.01")},
    )
    gb200, plain = t.expand(spec, cluster_name="c", address_block=0)
    assert gb200.driver_version == "565.57.01"
    assert plain.rack is None and plain.profile is t.FabricProfile.NO_FABRIC
    assert plain.driver_version == t.DEFAULT_DRIVER_VERSION


def test_address_blocks_do_not_overlap_and_stay_on_loopback() -> None:
    blocks = [t.address_block_network(b) for b in range(t.ADDRESS_BLOCKS)]
    for i, a in enumerate(blocks):
        assert a.is_loopback
        assert not any(a.overlaps(b) for b in blocks[i + 1 :])
    nodes = t.expand(t.Topology(), cluster_name="c", address_block=3)
    addresses = [ipaddress.ip_address(n.ip) for n in nodes]
    pods = [ipaddress.ip_network(n.pod_cidr) for n in nodes]
    assert len(set(addresses)) == len(nodes)
    assert all(a in blocks[3] for a in addresses)
    assert all(p.subnet_of(blocks[3]) for p in pods)
    assert not any(ip in p for ip in addresses for p in pods)
    assert len(set(pods)) == len(nodes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes_per_rack": 0}, "nodes-per-rack >= 1"),
        ({"gpus_per_node": 0}, "gpus-per-node >= 1"),
        ({"overrides": {"nope": t.NodeOverride()}}, "not in the topology: nope"),
    ],
)
def test_invalid_topologies_are_rejected_with_the_reason(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        t.Topology(**kwargs)
