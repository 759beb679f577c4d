"""Benchmark: the real controller against 1,000 nodes, the node side played by a light driver.

An API server and etcd of their own, the controller as a process (no leader election), 1,000
Node objects in cliques of 18 (56 cliques) and, for each, what its kubelet, plugin and agent
write (:mod:`tests.benchmarks.nodeside`). Two parts:

1. 100 domains of 10 nodes formed at once: reconcile p99 (the controller's histogram), API
   writes per formation (target ≤ 2N+5), writes while idle (target 0), slot moves (target 0),
   the controller's RSS and CPU.
2. One domain over all 1,000 nodes (56 cliques, a 4,000-GPU job): time to Ready, status
   writes and their rate, 409/429 answers (target 0), and object sizes: the domain's status
   (target ≤ 64 KiB) and the largest clique object.
"""

from __future__ import annotations

import json
import pathlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cdsim import controlplane
from computedomains import waiting
from computedomains.api import constants
from tests.benchmarks import nodeside, report
from tests.support import clusters, plugin
from tests.support.controller import WRITE_VERBS, ControllerProcess, G, V, custom, slots

pytestmark = pytest.mark.cluster

NODES = 1000
PER_CLIQUE = 18
DOMAINS = 100
PER_DOMAIN = NODES // DOMAINS
DRIVER_NS, WORKLOAD_NS = "cd-system", "bench-scale"
STATUS_LIMIT = 64 * 1024
FORMATION_TIMEOUT = 600.0


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    with clusters.api_server_alone(tmp_path_factory.mktemp("scale")) as started:
        yield started


@pytest.fixture(scope="module")
def api(plane: controlplane.ControlPlane) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        str(plane.admin_kubeconfig), client_configuration=configuration
    )
    configuration.connection_pool_maxsize = 2 * nodeside.WORKERS + 2  # the driver's threads
    typed = client.ApiClient(configuration)
    core = client.CoreV1Api(typed)
    for name in (DRIVER_NS, WORKLOAD_NS):
        core.create_namespace({"metadata": {"name": name}})
        # No controller-manager here: the namespaces' default ServiceAccounts are ours to make.
        core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    plugin.install_crds(typed)
    return typed


@pytest.fixture(scope="module")
def side(api: client.ApiClient) -> Iterator[nodeside.NodeSide]:
    played = nodeside.NodeSide(
        api, driver_ns=DRIVER_NS, workload_ns=WORKLOAD_NS,
        nodes=nodeside.nodes(NODES, per_clique=PER_CLIQUE),
    )  # fmt: skip
    played.create()
    played.start()
    yield played
    played.stop()


@pytest.fixture(scope="module")
def controller(
    plane: controlplane.ControlPlane, api: client.ApiClient, side: nodeside.NodeSide,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControllerProcess]:  # fmt: skip
    proc = ControllerProcess(
        kubeconfig=plane.admin_kubeconfig, namespace=DRIVER_NS,
        log_dir=tmp_path_factory.mktemp("controller"), args=("--no-leader-elect",),
    )  # fmt: skip
    proc.start()
    yield proc
    proc.stop()


# -- reading the controller and the cluster -------------------------------------------------


def _create_domain(api: client.ApiClient, name: str) -> str:
    body = {
        "apiVersion": constants.API_VERSION_V1BETA2, "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }  # fmt: skip
    created = custom(api).create_namespaced_custom_object(
        G, V, WORKLOAD_NS, constants.COMPUTE_DOMAIN_PLURAL, body
    )
    return str(created["metadata"]["uid"])


def _domains(api: client.ApiClient) -> list[dict[str, Any]]:
    listed = custom(api).list_namespaced_custom_object(
        G, V, WORKLOAD_NS, constants.COMPUTE_DOMAIN_PLURAL
    )
    return list(listed["items"])


def _ready(obj: dict[str, Any], nodes: int) -> bool:
    status = obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return ready and status.get("nodesReady") == f"{nodes}/{nodes}"


def _wait_all_ready(
    api: client.ApiClient, side: nodeside.NodeSide, count: int, nodes: int, what: str
) -> float:
    started = time.monotonic()
    waiting.until(
        what,
        lambda: sum(_ready(d, nodes) for d in _domains(api)) == count,
        timeout=FORMATION_TIMEOUT,
        interval=0.5,
        abort=side.check,
    )
    return time.monotonic() - started


def _histogram(ctl: ControllerProcess, name: str) -> dict[float, float]:
    """Upper bound → cumulative count of a histogram of the controller."""
    return {
        float(dict(labels)["le"]): count
        for (sample, labels), count in ctl.samples().items()
        if sample == f"{name}_bucket"
    }


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The ``q`` quantile of what was observed between two histogram readings.

    As Prometheus' ``histogram_quantile``: linear within the bucket the rank falls in.
    """
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return 0.0
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cumulative in zip(bounds, counts, strict=True):
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return bounds[-1]


def _writes(ctl: ControllerProcess) -> dict[str, float]:
    """API writes of the controller so far, by resource (leases left out)."""
    out: dict[str, float] = {}
    for (name, labels), count in ctl.samples().items():
        fields = dict(labels)
        counted = fields.get("verb") in WRITE_VERBS and fields.get("resource") != "leases"
        if name == "computedomains_controller_api_requests_total" and counted:
            out[fields["resource"]] = out.get(fields["resource"], 0.0) + count
    return out


def _refusals(ctl: ControllerProcess) -> float:
    """409 and 429 answers to the controller so far (leases left out)."""
    return sum(
        count
        for (name, labels), count in ctl.samples().items()
        if name == "computedomains_controller_api_requests_total"
        and dict(labels)["code"] in ("409", "429")
        and dict(labels)["resource"] != "leases"
    )


def _process(pid: int) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) of a process."""
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    found = re.search(r"VmRSS:\s+(\d+)", status)
    assert found is not None
    return int(found.group(1)) / 1024, (int(stat[11]) + int(stat[12])) / 100


def _quiet(ctl: ControllerProcess) -> None:
    """Wait until the controller's writes have stopped changing for 3 s (status flushes done)."""
    seen: list[float] = []

    def still() -> bool:
        seen.append(sum(_writes(ctl).values()))
        return len(seen) > 3 and len(set(seen[-4:])) == 1

    waiting.until("the controller to stop writing", still, timeout=120, interval=1.0)


def _all_slots(api: client.ApiClient, uids: list[str]) -> dict[str, dict[str, int]]:
    """(domain, clique) → node → slot, of every domain."""
    return {
        f"{uid}/{clique}": listed
        for uid in uids
        for clique, listed in slots(api, DRIVER_NS, uid).items()
    }


def _moves(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> int:
    return sum(
        1
        for key, listed in before.items()
        for node, slot in listed.items()
        if after.get(key, {}).get(node) != slot  # a lost slot is a move too
    )


# -- the benchmark ---------------------------------------------------------------------------


@pytest.mark.timeout(2400)
def test_controller_at_a_thousand_nodes(
    api: client.ApiClient, side: nodeside.NodeSide, controller: ControllerProcess
) -> None:
    names = list(side.nodes)
    rss0, cpu0 = _process(controller.pid)
    reconcile = "computedomains_controller_reconcile_duration_seconds"

    # 1. A hundred domains of ten nodes, formed at once.
    hist0, writes0, refused0 = (
        _histogram(controller, reconcile),
        _writes(controller),
        _refusals(controller),
    )
    uids = [_create_domain(api, f"cd-{d:03d}") for d in range(DOMAINS)]
    started = time.monotonic()
    for d, uid in enumerate(uids):
        side.join(uid, names[d * PER_DOMAIN : (d + 1) * PER_DOMAIN])
    joined = time.monotonic() - started
    formed = _wait_all_ready(api, side, DOMAINS, PER_DOMAIN, f"{DOMAINS} domains Ready")
    _quiet(controller)
    hist1, writes1, refused1 = (
        _histogram(controller, reconcile),
        _writes(controller),
        _refusals(controller),
    )
    rss1, cpu1 = _process(controller.pid)
    per_formation = (sum(writes1.values()) - sum(writes0.values())) / DOMAINS
    placed = _all_slots(api, uids)

    idle_started = time.monotonic()
    waiting.until("a 10 s idle window", lambda: time.monotonic() - idle_started >= 10, timeout=15)
    idle_writes = sum(_writes(controller).values()) - sum(writes1.values())
    # Half the domains end; the others' slots must not move.
    for d in range(0, DOMAINS, 2):
        side.leave(uids[d], names[d * PER_DOMAIN : (d + 1) * PER_DOMAIN])
    waiting.until(
        "the ended domains' cliques emptied",
        lambda: all(not slots(api, DRIVER_NS, uids[d]) for d in range(0, DOMAINS, 2)),
        timeout=FORMATION_TIMEOUT, interval=1.0,
    )  # fmt: skip
    kept = [uids[d] for d in range(1, DOMAINS, 2)]
    moves = _moves(
        {k: v for k, v in placed.items() if k.split("/")[0] in kept}, _all_slots(api, kept)
    )
    for d in range(1, DOMAINS, 2):
        side.leave(uids[d], names[d * PER_DOMAIN : (d + 1) * PER_DOMAIN])
    for obj in _domains(api):
        custom(api).delete_namespaced_custom_object(
            G, V, WORKLOAD_NS, constants.COMPUTE_DOMAIN_PLURAL, obj["metadata"]["name"]
        )
    waiting.until("every domain released", lambda: not _domains(api), timeout=FORMATION_TIMEOUT)

    # 2. One domain over every node.
    _quiet(controller)
    writes2, refused2 = _writes(controller), _refusals(controller)
    giant = _create_domain(api, "giant")
    started = time.monotonic()
    side.join(giant, names)
    giant_joined = time.monotonic() - started
    giant_formed = _wait_all_ready(api, side, 1, NODES, f"one domain of {NODES} nodes Ready")
    giant_window = time.monotonic() - started
    at_ready = _writes(controller)
    _quiet(controller)
    writes3, refused3 = _writes(controller), _refusals(controller)
    obj = next(d for d in _domains(api) if d["metadata"]["uid"] == giant)
    status_bytes = len(json.dumps(obj.get("status") or {}, separators=(",", ":")))
    clique_objects = custom(api).list_namespaced_custom_object(
        G, V, DRIVER_NS, constants.CLIQUE_PLURAL,
        label_selector=f"{constants.COMPUTE_DOMAIN_LABEL}={giant}",
    )["items"]  # fmt: skip
    clique_bytes = max(len(json.dumps(c, separators=(",", ":"))) for c in clique_objects)
    status_writes = writes3.get("computedomains/status", 0.0) - writes2.get(
        "computedomains/status", 0.0
    )
    rss2, cpu2 = _process(controller.pid)

    figures = {
        "nodes": NODES,
        "cliques": -(-NODES // PER_CLIQUE),
        "hundred_domains": {
            "domains": DOMAINS,
            "nodes_per_domain": PER_DOMAIN,
            "node_side_writes_s": round(joined, 1),
            "all_ready_after_node_side_s": round(formed, 1),
            "reconcile_p50_ms": round(quantile(0.5, hist0, hist1) * 1000, 1),
            "reconcile_p99_ms": round(quantile(0.99, hist0, hist1) * 1000, 1),
            "writes_per_formation": round(per_formation, 1),
            "writes_per_formation_target": 2 * PER_DOMAIN + 5,
            "writes_by_resource": {k: v - writes0.get(k, 0.0) for k, v in writes1.items()},
            "idle_writes_per_s": idle_writes / 10,
            "slot_moves": moves,
            "http_409_429": refused1 - refused0,
            "controller_cpu_s": round(cpu1 - cpu0, 1),
            "controller_rss_mib": round(rss1, 1),
        },
        "one_domain_all_nodes": {
            "node_side_writes_s": round(giant_joined, 1),
            "all_ready_after_node_side_s": round(giant_formed, 1),
            "status_writes": status_writes,
            "status_writes_per_s_until_ready": round(
                (
                    at_ready.get("computedomains/status", 0.0)
                    - writes2.get("computedomains/status", 0.0)
                )
                / giant_window,
                2,
            ),
            "http_409_429": refused3 - refused2,
            "domain_status_bytes": status_bytes,
            "domain_status_limit_bytes": STATUS_LIMIT,
            "largest_clique_object_bytes": clique_bytes,
            "clique_objects": len(clique_objects),
            "controller_rss_mib": round(rss2, 1),
            "controller_cpu_s": round(cpu2 - cpu1, 1),
        },
        "controller_rss_mib_at_start": round(rss0, 1),
    }
    report.save(
        "controller-scale",
        figures,
        plots=[
            report.Plot(
                name="writes",
                title=f"Controller writes per formation of {PER_DOMAIN} nodes ({DOMAINS} at once)",
                labels=["measured", "target 2N+5"],
                series={"writes": [per_formation, 2 * PER_DOMAIN + 5]},
                unit="writes",
            ),
            report.Plot(
                name="rss",
                title="Controller RSS, 1,000 nodes",
                labels=["start", "100 domains formed", "one 1,000-node domain"],
                series={"RSS": [rss0, rss1, rss2]},
                unit="MiB",
            ),
        ],
    )
    assert moves == 0 and idle_writes == 0
    assert refused1 == refused0 and refused3 == refused2
    assert status_bytes <= STATUS_LIMIT
