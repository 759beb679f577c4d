"""ComputeDomains form, span racks, stay isolated and dissolve, with every component real.

The chart runs the controller, the IMEX agents, node-init and the kubelet plugins; the fake
nvidia-imex daemons really connect to their peers over loopback. Workload pods are placed on
chosen nodes and reference the claim template the controller creates for their domain.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim import processes
from computedomains import nodefiles, waiting
from computedomains.api import constants
from tests.support import domains, kube

pytestmark = pytest.mark.cluster

RACK1 = [f"gb200-r1-n{i:02d}" for i in range(18)]
CDS = f"/apis/{constants.API_VERSION}"


def test_eighteen_node_domain_forms_with_unique_slots_and_full_mesh(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    domain = domains.create_domain(api, namespace)
    pods = domains.workers(api, namespace, domain, RACK1)
    ready = domains.wait_ready(api, namespace, domain, pods)
    uid = domain["metadata"]["uid"]
    (clique,) = domains.cliques(api, chart, uid)
    members = clique["daemons"]
    assert sorted(m["nodeName"] for m in members) == RACK1
    assert sorted(m["index"] for m in members) == list(range(18))
    assert all(m["status"] == "Ready" for m in members)
    assert {n["name"] for n in ready["status"]["nodes"]} == set(RACK1)
    prefix = f"cd-{uid.replace('-', '')[:8]}"

    def full_mesh() -> bool:
        # IMEX is READY on its own at once; the links to the peers come up after.
        answers = [domains.imex_nodes(sim, node) for node in RACK1]
        assert all(n["name"].startswith(prefix) for a in answers for n in a["nodes"])
        return all(sum(n.get("state") == "CONNECTED" for n in a["nodes"]) == 17 for a in answers)

    waiting.until("every IMEX daemon to connect to its 17 peers", full_mesh, timeout=60, interval=1)

    domains.delete_pods(api, namespace, domain["metadata"]["name"])
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        constants.GROUP,
        constants.VERSION,
        namespace,
        constants.COMPUTE_DOMAIN_PLURAL,
        domain["metadata"]["name"],
    )

    def cleaned() -> bool:
        labelled = (
            client.CoreV1Api(api)
            .list_node(label_selector=f"{constants.COMPUTE_DOMAIN_LABEL}={uid}")
            .items
        )
        templates = (
            client.ResourceV1Api(api).list_namespaced_resource_claim_template(namespace).items
        )
        try:
            domains.get_domain(api, namespace, domain["metadata"]["name"])
            exists = True
        except ApiException as exc:
            exists = kube.status_of(exc) != 404
        return not (labelled or templates or domains.cliques(api, chart, uid) or exists)

    waiting.until(
        "the domain, its cliques, template and node labels to be gone",
        cleaned,
        timeout=120,
        interval=1,
    )
    status = json.loads(
        (sim.host_trees[RACK1[0]].root / "var/run/compute-domains/imex/status.json").read_text()
    )
    assert status["state"] in ("STOPPED", "IDLE") or status["domainUID"] != uid


def test_domain_across_two_racks_has_twocliques_with_their_own_slots(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    nodes = ["gb200-r0-n00", "gb200-r0-n01", "gb200-r1-n00", "gb200-r1-n01"]
    domain = domains.create_domain(api, namespace)
    pods = domains.workers(api, namespace, domain, nodes, per_node=4)
    domains.wait_ready(api, namespace, domain, pods)
    cliques = domains.cliques(api, chart, domain["metadata"]["uid"])
    assert len(cliques) == 2
    assert len({c["daemons"][0]["cliqueID"] for c in cliques}) == 2
    for clique in cliques:
        assert sorted(m["index"] for m in clique["daemons"]) == [0, 1]
    domains.delete_pods(api, namespace, domain["metadata"]["name"])


def test_two_domains_on_one_clique_stay_isolated(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    first_nodes, second_nodes = RACK1[2:5], RACK1[5:8]
    first, second = domains.create_domain(api, namespace), domains.create_domain(api, namespace)
    first_pods = domains.workers(api, namespace, first, first_nodes)
    second_pods = domains.workers(api, namespace, second, second_nodes)
    domains.wait_ready(api, namespace, first, first_pods)
    domains.wait_ready(api, namespace, second, second_pods)

    def meshed(nodes: list[str]) -> bool:
        return all(
            sum(n.get("state") == "CONNECTED" for n in domains.imex_nodes(sim, m)["nodes"]) == 2
            for m in nodes
        )

    waiting.until(
        "both domains to be fully meshed",
        lambda: meshed(first_nodes) and meshed(second_nodes),
        timeout=60,
        interval=1,
    )
    addresses = {}
    for node in first_nodes + second_nodes:
        answer = domains.imex_nodes(sim, node)
        addresses[node] = {n["address"] for n in answer["nodes"] if n.get("state") == "CONNECTED"}
        prefix = (
            "cd-"
            + (first if node in first_nodes else second)["metadata"]["uid"].replace("-", "")[:8]
        )
        assert all(n["name"].startswith(prefix) for n in answer["nodes"])
    first_peers = set().union(*(addresses[n] for n in first_nodes))
    second_peers = set().union(*(addresses[n] for n in second_nodes))
    assert first_peers and second_peers and not first_peers & second_peers
    for domain in (first, second):
        domains.delete_pods(api, namespace, domain["metadata"]["name"])


@pytest.mark.parametrize(
    ("component", "allowed", "denied"),
    [
        (
            "controller",
            [
                ("", "nodes", "", "patch"),
                (constants.GROUP, constants.CLIQUE_PLURAL, "", "create"),
                ("resource.k8s.io", "resourceclaimtemplates", "", "create"),
                (constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL, "status", "update"),
            ],
            [
                ("", "secrets", "", "get"),
                ("", "pods", "", "create"),
                ("", "nodes", "", "delete"),
                ("resource.k8s.io", "resourceslices", "", "create"),
                ("apps", "daemonsets", "", "create"),
                ("", "nodes", "status", "patch"),
            ],
        ),
        (
            "imex-agent",
            [
                ("", "nodes", "", "get"),
                (constants.GROUP, constants.CLIQUE_PLURAL, "", "watch"),
                ("", "pods", "status", "patch"),
            ],
            [
                (constants.GROUP, constants.CLIQUE_PLURAL, "", "update"),
                ("", "nodes", "", "patch"),
                ("", "pods", "", "list"),
                ("", "secrets", "", "get"),
                (constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL, "", "update"),
                ("resource.k8s.io", "resourceslices", "", "create"),
            ],
        ),
    ],
)
def test_controller_and_agent_rbac_is_least_privilege(
    chart: str,
    api: client.ApiClient,
    component: str,
    allowed: list[tuple[str, ...]],
    denied: list[tuple[str, ...]],
) -> None:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        chart, label_selector=f"app.kubernetes.io/component={component}"
    )
    account = pods.items[0].spec.service_account_name

    def may(*rule: str) -> bool:
        return kube.service_account_may(api, chart, account, rule, in_namespace=chart)

    assert [a for a in allowed if not may(*a)] == []
    assert [d for d in denied if may(*d)] == []


def _members(api: client.ApiClient, driver_ns: str, uid: str) -> dict[str, tuple[int, str]]:
    return {
        m["nodeName"]: (m["index"], m["status"])
        for c in domains.cliques(api, driver_ns, uid)
        for m in c["daemons"]
    }


def _agent_pid(sim: sim_cluster.SimCluster, node: str) -> int | None:
    return kube.find_process("imex-agent", f"--node-name={node}", under=sim.host_trees[node].root)


def test_churn_frees_slots_safely_and_survivors_stay_ready(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    nodes = RACK1[10:14]
    domain = domains.create_domain(api, namespace)
    uid, name = domain["metadata"]["uid"], domain["metadata"]["name"]
    pods = domains.workers(api, namespace, domain, nodes)
    domains.wait_ready(api, namespace, domain, pods)
    before = _members(api, chart, uid)
    assert sorted(i for i, _ in before.values()) == [0, 1, 2, 3]

    # Scale down: the pod on the slot-1 node goes; its slot is freed once its IMEX stopped.
    leaving = next(n for n, (i, _) in before.items() if i == 1)
    client.CoreV1Api(api).delete_namespaced_pod(
        next(p for p in pods if p.endswith(f"{leaving[-6:]}-0")), namespace
    )
    waiting.until(
        f"{leaving} to leave the clique",
        lambda: leaving not in _members(api, chart, uid),
        timeout=90,
        interval=1,
    )
    after = _members(api, chart, uid)
    assert {n: i for n, (i, _) in after.items()} == {
        n: i for n, (i, _) in before.items() if n != leaving
    }  # nobody moved
    status = json.loads(
        (sim.host_trees[leaving].root / "var/run/compute-domains/imex/status.json").read_text()
    )
    assert status["state"] == "STOPPED" and status["domainUID"] == uid

    # Scale up on a new node: it takes the lowest free slot, 1; survivors stayed Ready throughout.
    newcomer = RACK1[14]
    domains.workers(api, namespace, domain, [newcomer])
    waiting.until(
        f"{newcomer} to join with slot 1 and the domain to be Ready again",
        lambda: (
            _members(api, chart, uid).get(newcomer) == (1, "Ready")
            and domains.get_domain(api, namespace, name)["status"]["status"] == "Ready"
        ),
        timeout=120,
        interval=1,
    )

    # Kill one member's IMEX agent: the simulated kubelet restarts it and the domain recovers.
    victim = nodes[0]
    pid = _agent_pid(sim, victim)
    assert pid is not None
    processes.stop_pids([pid], grace=0)
    waiting.until(
        "the agent to be restarted",
        lambda: (p := _agent_pid(sim, victim)) is not None and p != pid,
        timeout=60,
    )
    waiting.until(
        "the domain to be Ready with all members again",
        lambda: (
            len(_members(api, chart, uid)) == 4
            and all(s == "Ready" for _, s in _members(api, chart, uid).values())
            and domains.get_domain(api, namespace, name)["status"]["status"] == "Ready"
        ),
        timeout=120,
        interval=1,
    )
    domains.delete_pods(api, namespace, name)


FORGED_NODE = "gb200-r0-n03"


def test_a_forged_node_label_gets_no_slot_and_no_imex_start(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    """The node label is a copy: the controller's clique record alone makes a member.

    The forger keeps putting the label back, since the controller takes it away in every round.
    """
    domain = domains.create_domain(api, namespace)
    uid, name = domain["metadata"]["uid"], domain["metadata"]["name"]
    core = client.CoreV1Api(api)
    status_file = sim.host_trees[FORGED_NODE].root / "var/run/compute-domains/imex/status.json"

    def label() -> str | None:
        value = (core.read_node(FORGED_NODE).metadata.labels or {}).get(
            constants.COMPUTE_DOMAIN_LABEL
        )
        return str(value) if value is not None else None

    def set_label(value: str | None) -> None:
        labels = {constants.COMPUTE_DOMAIN_LABEL: value}
        core.patch_node(FORGED_NODE, {"metadata": {"labels": labels}})

    def forging(check: Callable[[], Any]) -> Callable[[], Any]:
        def poll() -> Any:
            if label() != uid:
                set_label(uid)
            return check()

        return poll

    def taken_away() -> bool:
        return label() is None

    try:
        waiting.until(
            "the controller's warning that the label has no claim",
            forging(lambda: kube.events_for(
                api, namespace, constants.COMPUTE_DOMAIN_KIND, name, reason="NodeLabelWithoutClaim"
            )),
            timeout=60,
        )  # fmt: skip
        # The controller takes it away again and again, and the agent never follows it.
        for attempt in range(3):
            set_label(uid)
            waiting.until(f"the controller to take forged label {attempt + 1} away", taken_away,
                          timeout=30)  # fmt: skip
        status = nodefiles.read_json(status_file, kind="ImexStatus")
        assert status is not None and status["state"] == "STOPPED", status
        assert status["domainUID"] != uid, status
        assert domains.cliques(api, chart, uid) == []  # no slot, on this node or any
        assert domains.imex_pid(sim, FORGED_NODE) is None  # and so no IMEX

    finally:
        set_label(None)
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            constants.GROUP, constants.VERSION, namespace, constants.COMPUTE_DOMAIN_PLURAL, name
        )
