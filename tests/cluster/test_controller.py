"""The controller as a process against the simulated cluster; the tests play plugin and agents.

One controller (no leader election) serves the whole module, as the chart's leader would: the
tests label nodes as the kubelet plugin and node-init do, and create agent pods and set their
IMEXReady condition as the IMEX agent does. Nodes used: rack 1 n00-n13 and rack 0 n00-n09;
every label a test touches is put back.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants, placement
from tests.support import clusters, kube, plugin
from tests.support.controller import (
    Agents,
    ControllerProcess,
    G,
    NodeLabels,
    V,
    cliques,
    create_domain,
    custom,
    delete_domain,
    event_reasons,
    read_domain,
    slots,
    touch,
    wait_event,
    wait_slots,
    wait_status,
)

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

RACK1 = [f"gb200-r1-n{i:02d}" for i in range(14)]
RACK0 = [f"gb200-r0-n{i:02d}" for i in range(10)]


@pytest.fixture(scope="module")
def driver_ns(cluster: clusters.TestCluster) -> Iterator[str]:
    """The driver's namespace of this module's controller."""
    api = cluster.api()
    name = f"cd-ctl-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(api, name)
    yield name
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture(scope="module")
def controller(
    cluster: clusters.TestCluster, sim: sim_cluster.SimCluster, driver_ns: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControllerProcess]:  # fmt: skip
    plugin.install_crds(cluster.api())
    proc = ControllerProcess(
        kubeconfig=cluster.kubeconfig, namespace=driver_ns, log_dir=tmp_path_factory.mktemp("ctl"),
        args=("--no-leader-elect", "--gc-interval=2"),
    )  # fmt: skip
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def agents(cluster: clusters.TestCluster, driver_ns: str) -> Agents:
    """Agent pods, long-lived like the agent DaemonSet's: created once per node, then kept."""
    return Agents(cluster.api(), driver_ns)


@pytest.fixture
def labels(api: client.ApiClient, namespace: str) -> Iterator[NodeLabels]:
    """Node labels as the plugin and node-init set them (a domain label with its claim),
    restored after the test."""
    touched = NodeLabels(api, claims_namespace=namespace)
    yield touched
    touched.restore()


@pytest.fixture
def clique_of(sim: sim_cluster.SimCluster) -> dict[str, str]:
    """Each rack node's clique label value (what node-init would set)."""
    return {n.name: n.clique for n in sim.nodes if n.clique}


# -- tests ----------------------------------------------------------------------------------


def test_a_domain_gets_its_finalizer_template_and_status(
    controller: ControllerProcess, api: client.ApiClient, namespace: str
) -> None:
    uid = create_domain(api, namespace, mode="All")
    resource = client.ResourceV1Api(api)

    def read_template() -> dict[str, Any]:
        obj = custom(api).get_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", "cd-channel"
        )
        return cast(dict[str, Any], obj)

    template = waiting.until(
        "the workload ResourceClaimTemplate", read_template, timeout=60, retry_on=(ApiException,)
    )
    assert template["metadata"]["labels"] == {
        constants.COMPUTE_DOMAIN_LABEL: uid,
        constants.COMPUTE_DOMAIN_TARGET_LABEL: "Workload",
    }
    devices = template["spec"]["spec"]["devices"]
    assert devices["requests"] == [
        {"name": "channel", "exactly": {
            "deviceClassName": constants.CHANNEL_DEVICE_CLASS, "allocationMode": "ExactCount",
            "count": 1, "selectors": [{"cel": {"expression": placement.selector(uid)}}],
            "tolerations": [placement.toleration(uid)]}},
    ]  # fmt: skip
    assert devices["config"] == [{
        "requests": ["channel"],
        "opaque": {"driver": constants.DRIVER_NAME, "parameters": {
            "apiVersion": constants.API_VERSION, "kind": constants.CHANNEL_CONFIG_KIND,
            "domainID": uid, "allocationMode": "All"}},
    }]  # fmt: skip
    owner = template["metadata"]["ownerReferences"][0]
    assert (owner["uid"], owner["apiVersion"]) == (uid, constants.API_VERSION_V1BETA2)
    status = wait_status(api, namespace, "0/0", "NotReady")  # nobody has joined
    assert status.get("nodes", []) == []
    conditions = {c["type"]: c for c in status["conditions"]}
    assert {t: (c["status"], c["reason"]) for t, c in conditions.items()} == {
        "Ready": ("False", "NoMembers"), "Formed": ("False", "NoMembers"),
        "Degraded": ("False", "NoMembers"),
    }  # fmt: skip
    generation = read_domain(api, namespace)["metadata"]["generation"]
    assert {c["observedGeneration"] for c in conditions.values()} == {generation}
    assert constants.FINALIZER in read_domain(api, namespace)["metadata"]["finalizers"]
    wait_event(api, namespace, "ResourceClaimTemplateCreated")
    delete_domain(api, namespace)
    waiting.until(
        "the template to be deleted with its domain",
        lambda: not resource.list_namespaced_resource_claim_template(namespace).items,
        timeout=60,
    )


def test_eighteen_nodes_form_one_clique_in_few_writes_and_idle_costs_none(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    agents: Agents, labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    nodes = RACK1 + RACK0[:4]
    clique = clique_of[RACK1[0]]
    ips = agents.ensure(nodes)  # long-lived agents: running before the domain exists
    writes_before, conflicts_before = controller.writes(), controller.conflicts()
    events_before = controller.writes(resources=("events",))
    labels_before = controller.writes(resources=("nodes",))
    uid = create_domain(api, namespace)
    wait_status(api, namespace, "0/0", "NotReady")
    labels.set(nodes, clique=clique, domain=uid)  # as node-init and the scheduler would

    def placed() -> dict[str, int] | None:
        held = slots(api, driver_ns, uid).get(clique, {})
        return held if set(held) == set(nodes) else None

    # Slots go in arrival order (name order within one batch): only uniqueness is fixed.
    held = waiting.until("18 nodes in one clique", placed, timeout=60)
    assert sorted(held.values()) == list(range(18))
    daemons = cliques(api, driver_ns, uid)[clique]["daemons"]
    assert {d["nodeName"]: d["ipAddress"] for d in daemons} == ips
    assert {d["status"] for d in daemons} == {"NotReady"}
    agents.report(nodes, uid, "Ready", detail="READY")
    status = wait_status(api, namespace, "18/18")
    assert {(n["name"], n["index"], n["status"]) for n in status["nodes"]} == {
        (n, i, "Ready") for n, i in held.items()
    }
    assert {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]} == {
        "Ready": ("True", "AllNodesReady"), "Formed": ("True", "AllDaemonsReady"),
        "Degraded": ("False", "NotDegraded"),
    }  # fmt: skip
    assert status["cliques"] == [{"id": clique, "nodes": 18, "readyNodes": 18}]
    waiting.until("every daemon Ready in the clique", lambda: {
        d["status"] for d in cliques(api, driver_ns, uid)[clique]["daemons"]} == {"Ready"},
        timeout=30)  # fmt: skip
    wait_event(api, namespace, "DomainReady")
    formed = controller.writes() - writes_before
    events = controller.writes(resources=("events",)) - events_before
    labelled = controller.writes(resources=("nodes",)) - labels_before
    print(f"\nforming an 18-node domain (claims in a burst) took {formed:.0f} API writes, "
          f"{events:.0f} of them Events, {labelled:.0f} node labels")  # fmt: skip
    assert formed - labelled <= 2 * 18 + 5
    # One per member, and again where the node changed since the cache (the clique labels
    # above land in the same burst): a conflict, then the write.
    assert labelled <= 2 * 18
    assert controller.conflicts() == conflicts_before
    reasons = event_reasons(api, namespace)
    for reason in ("MemberJoined", "IMEXReady", "DomainReady"):
        assert reason in reasons, reasons
    assert f"(slot 0 in {clique})" in " ".join(reasons["MemberJoined"])

    # The label copies go out after the status and its Events: the idle count starts once
    # every member carries its copy.
    waiting.until("every member's label copy", lambda: all(
        (client.CoreV1Api(api).read_node(n).metadata.labels or {}).get(
            constants.COMPUTE_DOMAIN_LABEL) == uid
        for n in nodes), timeout=30)  # fmt: skip

    # The placement turn's ConfigMap is renewed on a timer while the domain places (every
    # placement.TURN_RENEW_SECONDS), as the leases are: no reaction to the touch, not counted.
    def reacting_writes() -> dict[tuple[str, str, str], float]:
        return {k: v for k, v in controller.write_counts().items() if k[1] != "configmaps"}

    idle_writes, reconciles = reacting_writes(), controller.reconciles()
    touch(api, namespace)
    waiting.until("a reconcile of the touched domain",
                  lambda: controller.reconciles() > reconciles, timeout=30)  # fmt: skip
    agents.report(nodes[:1], uid, "Ready", detail="READY (unchanged)")
    waiting.until("a reconcile after an agent's unchanged report",
                  lambda: controller.reconciles() > reconciles + 1, timeout=30)  # fmt: skip
    assert reacting_writes() == idle_writes
    labels.set(nodes, domain=None)
    agents.report(nodes, uid, "Stopped")
    wait_slots(api, driver_ns, uid, {}, "every slot freed")
    delete_domain(api, namespace)


def test_nodes_joining_one_by_one_still_form_within_the_write_budget(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    agents: Agents, labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    nodes = RACK1 + RACK0[:4]
    clique = clique_of[RACK1[0]]
    agents.ensure(nodes)
    writes_before, conflicts_before = controller.writes(), controller.conflicts()
    events_before = controller.writes(resources=("events",))
    labels_before = controller.writes(resources=("nodes",))
    duration_before = (
        controller.sample("computedomains_controller_reconcile_duration_seconds_sum"),
        controller.sample("computedomains_controller_reconcile_duration_seconds_count"),
    )
    uid = create_domain(api, namespace)
    labels.set(nodes, clique=clique)

    def placed(node: str) -> bool:
        return node in slots(api, driver_ns, uid).get(clique, {})

    for node in nodes:  # the slowest arrival: one at a time, each placed before the next
        labels.set([node], domain=uid)
        waiting.until(f"{node} placed", functools.partial(placed, node), timeout=30)
    for node in nodes:
        agents.report([node], uid, "Ready")
    wait_status(api, namespace, "18/18")
    formed = controller.writes() - writes_before
    events = controller.writes(resources=("events",)) - events_before
    labelled = controller.writes(resources=("nodes",)) - labels_before
    seconds = controller.sample("computedomains_controller_reconcile_duration_seconds_sum")
    rounds = controller.sample("computedomains_controller_reconcile_duration_seconds_count")
    mean = (seconds - duration_before[0]) / max(rounds - duration_before[1], 1)
    print(f"\nforming an 18-node domain one node at a time took {formed:.0f} API writes "
          f"({events:.0f} Events, {labelled:.0f} node labels) in "
          f"{rounds - duration_before[1]:.0f} reconciles of "
          f"{mean * 1000:.1f} ms on average")  # fmt: skip
    assert formed - labelled <= 2 * 18 + 5
    assert labelled <= 2 * 18
    assert controller.conflicts() == conflicts_before
    labels.set(nodes, domain=None)
    agents.report(nodes, uid, "Stopped")
    wait_slots(api, driver_ns, uid, {}, "every slot freed")
    delete_domain(api, namespace)


def test_two_racks_form_two_cliques_with_independent_slots(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    uid = create_domain(api, namespace)
    rack0, rack1 = RACK0[:4], RACK1[:4]
    for node in rack0 + rack1:
        labels.set([node], clique=clique_of[node])
    labels.set(rack0 + rack1, domain=uid)
    want = {
        clique_of[rack0[0]]: {n: i for i, n in enumerate(rack0)},
        clique_of[rack1[0]]: {n: i for i, n in enumerate(rack1)},
    }
    wait_slots(api, driver_ns, uid, want, "two cliques of four")
    for clique, obj in cliques(api, driver_ns, uid).items():
        assert obj["metadata"]["name"] == f"{uid}.{clique}"
        assert obj["metadata"]["labels"] == {
            constants.COMPUTE_DOMAIN_LABEL: uid, constants.CLIQUE_ID_LABEL: clique,
        }  # fmt: skip
    wait_status(api, namespace, "0/8", "NotReady")  # no agents there: nothing is ready
    labels.set(rack0 + rack1, domain=None)  # no agent pods: the slots go at once
    wait_slots(api, driver_ns, uid, {}, "no clique left")
    delete_domain(api, namespace)


def test_a_forged_label_gets_no_slot_and_a_warning(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    uid = create_domain(api, namespace)
    real, forged = RACK1[4], RACK1[5]
    labels.set([real, forged], clique=clique_of[real])
    labels.set([real], domain=uid)  # with a claim of the domain allocated there
    NodeLabels(api, original=labels.original).set([forged], domain=uid)  # the label alone
    wait_slots(api, driver_ns, uid, {clique_of[real]: {real: 0}}, "a slot for the claimed node")
    (message,) = wait_event(api, namespace, "NodeLabelWithoutClaim")
    assert forged in message and real not in message
    assert slots(api, driver_ns, uid) == {clique_of[real]: {real: 0}}  # still none for it
    # The label is the controller's copy of its record: on the claimed node, off the forged one.
    core = client.CoreV1Api(api)

    def domain_labels() -> dict[str, str | None]:
        return {n: (core.read_node(n).metadata.labels or {}).get(constants.COMPUTE_DOMAIN_LABEL)
                for n in (real, forged)}  # fmt: skip

    waiting.until("the forged label taken away, the claimed node labelled",
                  lambda: domain_labels() == {real: uid, forged: None}, timeout=30)  # fmt: skip
    labels.set([real, forged], domain=None)
    wait_slots(api, driver_ns, uid, {}, "no clique left")
    delete_domain(api, namespace)


def test_churn_frees_a_slot_only_when_released_and_reuses_the_lowest(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    agents: Agents, labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    nodes = RACK1[:6]
    clique = clique_of[nodes[0]]
    agents.ensure(nodes)
    uid = create_domain(api, namespace)
    labels.set(nodes, clique=clique)
    labels.set(nodes[:5], domain=uid)
    agents.report(nodes[:5], uid, "Ready")
    wait_status(api, namespace, "5/5")
    held = {n: i for i, n in enumerate(nodes[:5])}
    wait_slots(api, driver_ns, uid, {clique: held}, "five slots")

    # n02 leaves (its last pod went), but its IMEX still runs: the slot stays.
    leaver = nodes[2]
    labels.set([leaver], domain=None)
    wait_status(api, namespace, "4/4")  # reconciled: no longer a member...
    assert slots(api, driver_ns, uid) == {clique: held}  # ...yet its slot is still held
    agents.report([leaver], uid, "Starting")  # not a release either
    wait_event(api, namespace, "MemberLeft")
    assert slots(api, driver_ns, uid) == {clique: held}
    agents.report([leaver], uid, "Stopped")
    del held[leaver]
    wait_slots(api, driver_ns, uid, {clique: held}, "the slot freed once the agent stopped")

    # A newcomer takes the lowest free slot; the leaver, back, the next one.
    labels.set([nodes[5]], domain=uid)
    held[nodes[5]] = 2
    wait_slots(api, driver_ns, uid, {clique: held}, "the newcomer in slot 2")
    labels.set([leaver], domain=uid)
    held[leaver] = 5
    wait_slots(api, driver_ns, uid, {clique: held}, "the returning node in slot 5")

    # A member whose Node object is deleted loses its slot at once.
    extra = f"ctl-extra-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": extra, "labels": {
        constants.CLIQUE_LABEL: clique, constants.COMPUTE_DOMAIN_LABEL: uid}}})  # fmt: skip
    plugin.allocated_claim(api, namespace, node=extra, device="channel-0",
                           parameters=plugin.channel_parameters(uid))  # fmt: skip
    try:
        held[extra] = 6
        wait_slots(api, driver_ns, uid, {clique: held}, "the extra node in slot 6")
    finally:
        core.delete_node(extra)
    del held[extra]
    wait_slots(api, driver_ns, uid, {clique: held}, "the deleted node's slot freed")
    wait_event(api, namespace, "SlotFreed")
    labels.set(nodes, domain=None)
    agents.report(nodes, uid, "Stopped")
    wait_slots(api, driver_ns, uid, {}, "every slot freed")
    delete_domain(api, namespace)


def test_a_full_clique_reports_the_node_left_without_a_slot(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    nodes = sorted(RACK1 + RACK0[:5])  # 19 nodes in one clique: one too many
    clique = clique_of[RACK1[0]]
    uid = create_domain(api, namespace)
    labels.set(nodes, clique=clique)
    labels.set(nodes[:18], domain=uid)
    waiting.until("18 slots given out", lambda: len(slots(api, driver_ns, uid).get(clique, {}))
                  == 18, timeout=60)  # fmt: skip
    full = slots(api, driver_ns, uid)
    labels.set(nodes[18:], domain=uid)
    status = wait_status(api, namespace, "0/19", "NotReady")
    overflow = [n for n in status["nodes"] if n["name"] == nodes[18]]
    assert len(overflow) == 1
    assert "index" not in overflow[0]  # listed, without a slot
    assert (overflow[0]["cliqueID"], overflow[0]["status"]) == (clique, "NotReady")
    messages = wait_event(api, namespace, "CliqueFull")
    assert nodes[18] in messages[0]
    assert "18" in messages[0]
    assert slots(api, driver_ns, uid) == full  # nobody was moved to make room
    # A member leaves; its agent never ran IMEX for this domain, so the slot goes at once
    # and the waiting node gets it.
    leaver = next(n for n, i in full[clique].items() if i == 5)
    labels.set([leaver], domain=None)
    expected = {n: i for n, i in full[clique].items() if n != leaver} | {nodes[18]: 5}
    wait_slots(api, driver_ns, uid, {clique: expected}, "the waiting node in the freed slot")
    assert nodes[18] in wait_event(api, namespace, "SlotAssigned")[0]
    labels.set(nodes, domain=None)
    wait_slots(api, driver_ns, uid, {}, "every slot freed")
    delete_domain(api, namespace)


def test_deleting_a_domain_waits_for_its_nodes_then_removes_everything(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    agents: Agents, labels: NodeLabels, clique_of: dict[str, str],
) -> None:  # fmt: skip
    nodes = RACK0[4:7]
    agents.ensure(nodes)
    uid = create_domain(api, namespace)
    for node in nodes:
        labels.set([node], clique=clique_of[node])
    labels.set(nodes, domain=uid)
    agents.report(nodes, uid, "Ready")
    wait_status(api, namespace, "3/3")
    custom(api).delete_namespaced_custom_object(
        G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, "cd"
    )
    resource = client.ResourceV1Api(api)
    waiting.until("the template to go first",
                  lambda: not resource.list_namespaced_resource_claim_template(namespace).items,
                  timeout=60)  # fmt: skip
    messages = wait_event(api, namespace, "DeletionWaiting")
    assert all(n in messages[0] for n in nodes)
    domain = read_domain(api, namespace)  # still there: pods of the domain still run
    assert domain["metadata"]["deletionTimestamp"]
    assert set(slots(api, driver_ns, uid)) == {clique_of[nodes[0]]}
    labels.set(nodes, domain=None)  # the last pods went
    delete_domain(api, namespace)  # already deleting: waits for it to go
    assert cliques(api, driver_ns, uid) == {}


def test_a_foreign_template_is_reported_and_left_alone(
    controller: ControllerProcess, api: client.ApiClient, namespace: str
) -> None:
    resource = client.ResourceV1Api(api)
    foreign = resource.create_namespaced_resource_claim_template(namespace, {
        "metadata": {"name": "cd-channel", "labels": {"owner": "someone"}},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
    })  # fmt: skip
    create_domain(api, namespace)
    messages = wait_event(api, namespace, "ResourceClaimTemplateConflict")
    assert f"{namespace}/cd-channel" in messages[0]
    wait_status(api, namespace, "0/0", "NotReady")
    after = resource.read_namespaced_resource_claim_template("cd-channel", namespace)
    assert after.metadata.uid == foreign.metadata.uid
    assert after.metadata.resource_version == foreign.metadata.resource_version
    assert len(event_reasons(api, namespace)["ResourceClaimTemplateConflict"]) == 1

    resource.delete_namespaced_resource_claim_template("cd-channel", namespace)
    touch(api, namespace)
    ours = waiting.until(
        "our template in place of the foreign one",
        lambda: resource.read_namespaced_resource_claim_template("cd-channel", namespace),
        timeout=60, retry_on=(ApiException,),
    )  # fmt: skip
    assert ours.metadata.labels[constants.COMPUTE_DOMAIN_TARGET_LABEL] == "Workload"
    delete_domain(api, namespace)


def test_an_invalid_domain_is_refused_by_the_api_naming_the_field(
    controller: ControllerProcess, api: client.ApiClient, namespace: str
) -> None:
    body = {
        "apiVersion": constants.API_VERSION_V1BETA2, "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "bad"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Some"}},
    }  # fmt: skip
    with pytest.raises(ApiException) as refused:
        custom(api).create_namespaced_custom_object(
            G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, body
        )
    assert kube.status_of(refused.value) == 422
    assert "spec.channel.allocationMode" in str(refused.value.body)


def test_leftovers_of_vanished_domains_are_collected(
    controller: ControllerProcess, api: client.ApiClient, namespace: str, driver_ns: str,
    labels: NodeLabels,
) -> None:  # fmt: skip
    ghost = str(uuid.uuid4())
    custom(api).create_namespaced_custom_object(G, V, driver_ns, constants.CLIQUE_PLURAL, {
        "apiVersion": constants.API_VERSION_V1BETA2, "kind": constants.CLIQUE_KIND,
        "metadata": {"name": f"{ghost}.c", "labels": {constants.COMPUTE_DOMAIN_LABEL: ghost,
                                                      constants.CLIQUE_ID_LABEL: "c"}},
        "daemons": [],
    })  # fmt: skip
    ours = {
        constants.COMPUTE_DOMAIN_LABEL: ghost,
        constants.COMPUTE_DOMAIN_TARGET_LABEL: "Workload",
    }
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(namespace, {
        "metadata": {"name": "left-over", "labels": ours},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "channel", "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}]}}},
    })  # fmt: skip
    labels.set([RACK0[9]], domain=ghost)
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)

    def collected() -> bool:
        node_labels = core.read_node(RACK0[9]).metadata.labels or {}
        return (
            constants.COMPUTE_DOMAIN_LABEL not in node_labels
            and not cliques(api, driver_ns, ghost)
            and not resource.list_namespaced_resource_claim_template(namespace).items
        )

    waiting.until("the vanished domain's clique, template and node label to go", collected,
                  timeout=60)  # fmt: skip


def test_metrics_and_probes_are_served(controller: ControllerProcess) -> None:
    assert controller.probe("/healthz") == 200
    assert controller.probe("/readyz") == 200
    names = {name for name, _ in controller.samples()}
    for name in (
        "computedomains_controller_domains", "computedomains_controller_queue_depth",
        "computedomains_controller_reconcile_duration_seconds_count",
        "computedomains_controller_reconcile_errors_total",
        "computedomains_controller_formation_seconds_count",
        "computedomains_controller_api_requests_total", "computedomains_controller_leader",
    ):  # fmt: skip
        assert name in names, name
    assert controller.sample("computedomains_controller_leader") == 1
