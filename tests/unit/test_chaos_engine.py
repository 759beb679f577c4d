"""The chaos engine plays a whole run against a fake cluster, on a fake clock.

The fake (:class:`World`) keeps the objects the run creates and answers every list the
observer makes with a consistent cluster: pods Running on nodes chosen by layout, their claims
allocated there, domains Ready with their members, clique records, node labels, slices, chart
pods, and each node's CDI specs, checkpoint and IMEX status on disk. Its faults are switches (the
API server down, a node NotReady or its fabric failed); kills find no process, so they are
skipped. A healthy world must come out with no violation; a world that forgets to clean up
after a deleted domain must be told so, with the seed and the timeline.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import pathlib
import signal
from typing import Any

import pytest

from cdsim import hosttree, nodefaults, processes, topology
from cdsim.chaos import faults, invariants, manifests, run, schedule
from cdsim.topology import FabricProfile
from computedomains import waiting
from computedomains.api import constants, imex, placement
from computedomains.kube import client
from computedomains.kubeletplugin import cdi, checkpoint
from computedomains.kubeletplugin.devices import DeviceType

RELEASE = "cd-system"
BOOT = "boot-1"
NO_PID = 2**31 - 1
"""Above any pid_max: what the fake's processes are "found" as."""


@dataclasses.dataclass
class Signals:
    """The signals the run sent, instead of sending them."""

    sent: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    def append_kill(self, pid: int, sig: int) -> None:
        assert pid == NO_PID, f"the run tried to signal a real process: {pid}"
        self.sent.append((pid, sig))


class Clock:
    """``time`` for the engine and :mod:`computedomains.waiting`: sleeping moves it on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclasses.dataclass
class World:
    """A fake cluster: the API the run talks to and the nodes' files it reads."""

    nodes: list[topology.SimNode]
    trees: dict[str, hosttree.HostTree]
    objects: dict[str, dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    """kind → ``namespace/name`` → object."""
    placed: dict[str, str] = dataclasses.field(default_factory=dict)
    """pod ``namespace/name`` → node."""
    down: bool = False
    not_ready: set[str] = dataclasses.field(default_factory=set)
    failed_fabric: set[str] = dataclasses.field(default_factory=set)
    forget_cliques: bool = False
    """A bug to find: cliques of deleted domains stay."""
    kept_cliques: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    uids: itertools.count[int] = dataclasses.field(default_factory=itertools.count)
    policy: Any = None
    signals: Signals = dataclasses.field(default_factory=Signals)
    asked_while_down: int = 0
    refuse_pods: int = 0
    """The next pod creations fail (a webhook not answering)."""
    written: dict[str, dict[str, str]] | None = None
    """What the nodes' files say now: claim UID → domain UID by node."""

    # -- the API ----------------------------------------------------------------------------

    def _check(self) -> None:
        if self.down:
            self.asked_while_down += 1
            raise client.ApiError(503, "ServiceUnavailable", "the API server is away")

    @staticmethod
    def _parts(path: str) -> tuple[str, str, str]:
        """(kind, namespace, name) of a path; namespace and name may be empty."""
        words = path.strip("/").split("/")
        words = words[2:] if words[0] == "api" else words[3:]
        namespace = ""
        if words[0] == "namespaces" and len(words) > 2:
            namespace, words = words[1], words[2:]
        return words[0], namespace, words[1] if len(words) > 1 else ""

    def create(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._check()
        kind, namespace, _name = self._parts(path)
        if kind == "pods" and self.refuse_pods:
            self.refuse_pods -= 1
            raise client.ApiError(500, "InternalError", "a webhook did not answer")
        name = body["metadata"]["name"]
        store = self.objects.setdefault(kind, {})
        key = f"{namespace}/{name}"
        if key in store:
            raise client.ApiError(409, "AlreadyExists", key)
        made = {
            **body,
            "metadata": {
                **body["metadata"],
                "namespace": namespace,
                "uid": f"uid-{next(self.uids)}",
            },
        }
        store[key] = made
        return made

    def get(self, path: str, *, query: Any = None, **_: Any) -> dict[str, Any]:
        self._check()
        kind, namespace, name = self._parts(path)
        if name:
            found = self.objects.get(kind, {}).get(f"{namespace}/{name}")
            if found is None and kind != "serviceaccounts":
                raise client.ApiError(404, "NotFound", path)
            return found or {"metadata": {"name": name}}
        return {"items": self._list(kind, namespace)}

    def find(self, path: str, **kwargs: Any) -> dict[str, Any] | None:
        return self.get(path, **kwargs)

    def delete(self, path: str, **_: Any) -> dict[str, Any]:
        self._check()
        kind, namespace, name = self._parts(path)
        gone = self.objects.get(kind, {}).pop(f"{namespace}/{name}", None)
        if gone is None:
            raise client.ApiError(404, "NotFound", path)
        if kind == "computedomains" and self.forget_cliques:
            uid = gone["metadata"]["uid"]
            self.kept_cliques[uid] = self._clique(uid, [])
        if kind == "pods":
            self.placed.pop(f"{namespace}/{name}", None)
        return {}

    # -- what the cluster shows -----------------------------------------------------------------

    def _domains(self) -> dict[str, dict[str, Any]]:
        return self.objects.get("computedomains", {})

    def _pods(self) -> dict[str, dict[str, Any]]:
        return self.objects.get("pods", {})

    def _place(self) -> None:
        racked = [n.name for n in self.nodes if n.rack is not None]
        for key, pod in sorted(self._pods().items()):
            if key in self.placed:
                continue
            domain = pod["metadata"]["labels"][manifests.DOMAIN_LABEL]
            siblings = {
                n for k, n in self.placed.items() if k.rsplit("-p", 1)[0] == key.rsplit("-p", 1)[0]
            }
            spread = "podAntiAffinity" in pod["spec"]["affinity"]
            taken = {
                n
                for k, n in self.placed.items()
                if not k.startswith(f"{key.split('/')[0]}/{domain}-")
            }
            if not spread and siblings:
                self.placed[key] = next(iter(siblings))
                continue
            free = [
                n
                for n in racked
                if n not in taken and n not in siblings and n not in self.not_ready
            ]
            if free:
                self.placed[key] = free[0]

    def _claim(self, key: str, node: str, slot: int, uid: str) -> dict[str, Any]:
        namespace, name = key.split("/")
        config = {
            "opaque": {
                "driver": constants.DRIVER_NAME,
                "parameters": {
                    "apiVersion": constants.API_VERSION,
                    "kind": constants.CHANNEL_CONFIG_KIND,
                    "domainID": uid,
                },
            }
        }
        result = {
            "driver": constants.DRIVER_NAME,
            "pool": node,
            "request": "channel",
            "device": "channel-0" if slot == 0 else f"channel-0-s{slot}",
        }
        return {
            "metadata": {
                "namespace": namespace,
                "name": f"{name}-imex",
                "uid": f"claim.{namespace}.{name}",
            },
            "spec": {"devices": {"config": [config]}},
            "status": {"allocation": {"devices": {"results": [result], "config": [config]}}},
        }

    def _clique(self, uid: str, members: list[str]) -> dict[str, Any]:
        return {
            "metadata": {
                "name": f"{uid}.c0",
                "namespace": RELEASE,
                "labels": {constants.COMPUTE_DOMAIN_LABEL: uid, constants.CLIQUE_ID_LABEL: "c0"},
                "annotations": {constants.CLIQUE_MEMBERS_ANNOTATION: ",".join(sorted(members))},
            },
            "daemons": [
                {"nodeName": n, "index": i, "status": "Ready"}
                for i, n in enumerate(sorted(members))
            ],
        }

    def _world(self) -> dict[str, list[dict[str, Any]]]:
        """Every object the observer lists, derived from the domains and pods the run made."""
        self._place()
        domains, pods, claims, cliques, templates = [], [], [], [], []
        by_node: dict[str, dict[str, str]] = {}
        for key, domain in sorted(self._domains().items()):
            uid = domain["metadata"]["uid"]
            mine = sorted(k for k in self._pods() if k.startswith(f"{key}-p"))
            nodes = sorted({self.placed[k] for k in mine if k in self.placed})
            status = {
                "status": "Ready" if nodes else "NotReady",
                "nodes": [{"name": n, "status": "Ready", "index": i} for i, n in enumerate(nodes)],
            }
            domains.append({**domain, "status": status})
            templates.append(
                {
                    "metadata": {
                        "namespace": key.split("/")[0],
                        "name": f"{key.split('/')[1]}-channel",
                        "ownerReferences": [{"kind": "ComputeDomain", "uid": uid}],
                    }
                }
            )
            if nodes:
                cliques.append(self._clique(uid, nodes))
            for pod_key in mine:
                node = self.placed.get(pod_key)
                pod = self._pods()[pod_key]
                if node is None:
                    pods.append({**pod, "status": {"phase": "Pending"}})
                    continue
                slot = sum(1 for k in mine if self.placed.get(k) == node and k < pod_key)
                claim = self._claim(pod_key, node, slot, uid)
                claims.append(claim)
                by_node.setdefault(node, {})[claim["metadata"]["uid"]] = uid
                pods.append(
                    {
                        **pod,
                        "spec": {**pod["spec"], "nodeName": node},
                        "status": {
                            "phase": "Running",
                            "resourceClaimStatuses": [
                                {"name": "imex", "resourceClaimName": claim["metadata"]["name"]}
                            ],
                        },
                    }
                )
        cliques += self.kept_cliques.values()
        self._write_files(by_node)
        return {
            "computedomains": domains,
            "pods": pods,
            "resourceclaims": claims,
            "computedomaincliques": cliques,
            "resourceclaimtemplates": templates,
            **self._cluster(by_node),
        }

    def _cluster(self, by_node: dict[str, dict[str, str]]) -> dict[str, list[dict[str, Any]]]:
        nodes, slices, chart = [], [], []
        for node in self.nodes:
            held = sorted(set(by_node.get(node.name, {}).values()))
            conditions = [
                {"type": "Ready", "status": "False" if node.name in self.not_ready else "True"},
                {
                    "type": constants.FABRIC_CONDITION,
                    "status": "False" if node.name in self.failed_fabric else "True",
                },
            ]
            labels = {constants.COMPUTE_DOMAIN_LABEL: held[0]} if held else {}
            nodes.append(
                {
                    "metadata": {"name": node.name, "labels": labels},
                    "status": {"conditions": conditions},
                }
            )
            device = {
                "name": "channel-0",
                "attributes": {placement.HOLDER_ATTRIBUTE: {"string": held[0] if held else ""}},
            }
            slices.append(
                {
                    "spec": {
                        "driver": constants.DRIVER_NAME,
                        "nodeName": node.name,
                        "devices": [device],
                    }
                }
            )
            for component in ("kubelet-plugin", "imex-agent"):
                chart.append(self._chart_pod(f"{component}-{node.name}", component, node.name))
        chart += [
            self._chart_pod(f"controller-{i}", "controller", self.nodes[i].name) for i in range(2)
        ]
        chart.append(self._chart_pod("webhook-0", "webhook", self.nodes[2].name))
        leases = [{"spec": {"holderIdentity": "controller-0-1234"}}]
        return {"nodes": nodes, "resourceslices": slices, "chart": chart, "leases": leases}

    @staticmethod
    def _chart_pod(name: str, component: str, node: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "namespace": RELEASE,
                "uid": f"uid-{name}",
                "labels": {constants.COMPONENT_LABEL: component},
            },
            "spec": {"nodeName": node},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": component, "ready": True, "restartCount": 0}],
            },
        }

    def _list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        world = self._world()
        if kind == "pods" and namespace == RELEASE:
            return world["chart"]
        if kind in ("events", "namespaces", "serviceaccounts"):
            return []
        return world.get(kind, [])

    def _write_files(self, by_node: dict[str, dict[str, str]]) -> None:
        if by_node == self.written:
            return
        self.written = {node: dict(claims) for node, claims in by_node.items()}
        now = datetime.datetime.now(datetime.UTC)
        for node in self.nodes:
            tree = self.trees[node.name]
            claims = by_node.get(node.name, {})
            for path in tree.cdi.glob("*.yaml"):
                path.unlink()
            entries = {}
            for claim_uid, domain_uid in claims.items():
                info = cdi.SpecInfo(claim_uid, "ns", "c", domain_uid, DeviceType.CHANNEL)
                cdi.write(tree.cdi, claim_uid, cdi.spec(info=info, devices={}))
                entries[claim_uid] = checkpoint.ClaimEntry(
                    claim_uid,
                    "ns",
                    "c",
                    checkpoint.ClaimState.COMPLETED,
                    domain_uid,
                    DeviceType.CHANNEL,
                    "a",
                )
            tree.plugin_checkpoint.parent.mkdir(parents=True, exist_ok=True)
            checkpoint.save(tree.plugin_checkpoint, checkpoint.Checkpoint(BOOT, claims=entries))
            domain = next(iter(claims.values()), "")
            state = imex.State.READY if domain else imex.State.STOPPED
            status = imex.ImexStatus(node.name, domain, state, "", now, now, None)
            tree.imex_status.parent.mkdir(parents=True, exist_ok=True)
            imex.write_status(tree.imex_status, status)

    def imex_running(self, tree: hosttree.HostTree) -> bool:
        status = imex.read_status(tree.imex_status)
        return status is not None and status.state is imex.State.READY


@dataclasses.dataclass
class FakeSim:
    """What the engine asks of a :class:`cdsim.cluster.SimCluster`."""

    world: World
    nodes: list[topology.SimNode]
    host_trees: dict[str, hosttree.HostTree]
    layout: topology.Topology

    @property
    def topology(self) -> topology.Topology:
        return self.layout

    def api_client(self) -> World:
        return self.world

    def stop_component(self, name: str, **_: Any) -> None:
        self.world.down = True

    def start_component(self, name: str, **_: Any) -> None:
        self.world.down = False

    def signal_component(self, name: str, sig: signal.Signals) -> None:
        self.world.down = sig is signal.SIGSTOP

    def set_fabric_profile(self, node: str, profile: FabricProfile) -> None:
        if profile is FabricProfile.FAILED:
            self.world.failed_fabric.add(node)
        else:
            self.world.failed_fabric.discard(node)

    def set_node_ready(self, node: str, ready: bool, **_: Any) -> None:
        self.world._check()
        (self.world.not_ready.discard if ready else self.world.not_ready.add)(node)


@pytest.fixture
def sim(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> FakeSim:
    layout = topology.Topology(racks=2, nodes_per_rack=6)
    nodes = topology.expand(layout, cluster_name="t", address_block=0)
    trees = {n.name: hosttree.HostTree(tmp_path / n.name) for n in nodes}
    for tree in trees.values():
        tree.cdi.mkdir(parents=True)
    world = World(nodes, trees)
    clock = Clock()
    monkeypatch.setattr(run, "time", clock)
    monkeypatch.setattr(waiting, "time", clock)
    # No signal leaves this test: a "process" found is a PID no process can have.
    monkeypatch.setattr(
        nodefaults,
        "imex_pid",
        lambda tree, table=None: NO_PID if world.imex_running(tree) else None,
    )
    monkeypatch.setattr(processes, "scan", list)
    monkeypatch.setattr(os, "kill", world.signals.append_kill)
    return FakeSim(world, nodes, trees, layout)


def _play(sim: FakeSim, seed: int) -> tuple[run.Engine, Any]:
    config = run.Config(seed=seed, duration=90.0, bounds=invariants.Bounds(quiet=10.0))
    lines: list[str] = []
    engine = run.Engine(sim=sim, release_namespace=RELEASE, config=config, out=lines.append)
    return engine, engine.run()


@pytest.mark.parametrize("seed", [3, 17])
def test_a_healthy_world_goes_through_a_whole_run_without_a_violation(
    sim: FakeSim, seed: int
) -> None:
    _, result = _play(sim, seed)
    assert result.ok, result.render()
    timeline = schedule.build(seed, 90.0, schedule.ClusterShape(12, 2))
    assert sum(result.faults.values()) + sum(result.skipped.values()) == len(timeline.faults)
    kills = {k for k in schedule.FaultKind if k not in schedule.LASTING}
    assert set(result.skipped) <= {k.value for k in kills}, "no process to kill in a fake world"
    assert {k.value for k in schedule.LASTING} <= set(result.faults)
    assert result.domains_created == sum(isinstance(s, schedule.Create) for s in timeline.steps)
    assert len(result.domains_formed) == result.domains_created
    assert result.pods_run
    assert sim.world.asked_while_down == 0, "nothing is asked of a control plane down on purpose"
    assert set(result.recoveries) >= {k.value for k in schedule.LASTING}
    assert not sim.world.not_ready and not sim.world.failed_fabric and not sim.world.down
    assert not sim.world._domains() and not sim.world._pods(), "everything deleted at the end"
    assert any("nothing left of any deleted domain" in r.text for r in result.timeline)


def test_a_domain_that_leaves_its_clique_behind_is_reported_with_its_seed_and_timeline(
    sim: FakeSim,
) -> None:
    sim.world.forget_cliques = True
    _, result = _play(sim, 3)
    assert not result.ok
    found = [f for f in result.findings if f.violation.invariant == "leftover"]
    assert found and all(f.violation.subject.endswith(":cliques") for f in found)
    assert all(f.seed == 3 and f.timeline for f in found)
    assert "Replay: make chaos SEED=3 DURATION=90s" in result.render()


def test_refused_requests_are_sent_again_and_one_refused_too_long_is_a_violation(
    sim: FakeSim,
) -> None:
    sim.world.refuse_pods = 3
    _, result = _play(sim, 3)
    assert result.ok, result.render()
    assert result.actions_failed == 3
    sim.world.refuse_pods = 10**6
    _, result = _play(sim, 3)
    refused = {f.violation.invariant for f in result.findings}
    assert refused == {"request-refused"}, result.render()


def test_a_fault_left_applied_is_undone_when_the_run_stops(sim: FakeSim) -> None:
    fault = schedule.Fault(1, schedule.FaultKind.PAUSE_ETCD, 1.0, 5.0, 0.0)
    injector = faults.Injector(sim, RELEASE, lambda line: None)
    applied = injector.inject(fault, None)
    assert sim.world.down
    assert faults.undo_all(injector, [applied], lambda line: None) == []
    assert not sim.world.down
