"""A leader whose writes were held back never changes a live member's slot once they land.

The old leader talks to the API server through a proxy that holds back what it sends (not
what it receives): it sees a node join, plans the clique write and sends it, and the write
waits in the proxy. Its lease renewals wait too, so the standby takes over, writes the same
join and then another one. Only then is the held write let through: planned from a clique
two versions old, it must be refused and never re-applied on top of the newer clique. A
paused process (SIGSTOP) cannot be timed to stop between a plan and its write; a held-back
connection can, so this is the deterministic form of "a delayed old leader". The old leader
then steps down without exiting, and leads again once the new one stops.

Nodes: rack 1 n09-n17, labels restored afterwards.
"""

from __future__ import annotations

import pathlib
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client import parser

from cdsim import cluster as sim_cluster
from cdsim import kubeconfig
from computedomains import waiting
from computedomains.api import constants
from tests.support import clusters, kube, plugin
from tests.support.controller import (
    Agents,
    ControllerProcess,
    G,
    NodeLabels,
    V,
    create_domain,
    custom,
    wait_slots,
    wait_status,
)
from tests.support.holdback import HoldBackProxy

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

LEASE = "ctl-fencing"
ELECTION = ("--leader-elect", f"--lease-name={LEASE}", "--lease-duration=10",
            "--renew-deadline=7", "--retry-period=0.5")  # fmt: skip
"""Short, but with time for the old leader to plan and send its write before its fence
closes (7 s after its last renewal), even on a busy machine."""
NODES = [f"gb200-r1-n{i:02d}" for i in range(9, 18)]


@pytest.fixture
def driver_ns(api: client.ApiClient) -> Iterator[str]:
    name = f"cd-fence-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(api, name)
    yield name
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def proxy(cluster: clusters.TestCluster) -> Iterator[HoldBackProxy]:
    server = urllib.parse.urlsplit(kubeconfig.current_cluster(cluster.kubeconfig)[1]["server"])
    assert server.hostname is not None and server.port is not None
    held = HoldBackProxy((server.hostname, server.port))
    yield held
    held.close()


def holder(api: client.ApiClient, namespace: str) -> str:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace)
    except ApiException:
        return ""
    return str(lease.spec.holder_identity or "")


def refused_clique_updates(api: client.ApiClient) -> float:
    """Clique updates the API server answered with 409 so far (its own request counter)."""
    serialized = api.param_serialize("GET", "/metrics", header_params={"Accept": "text/plain"},
                                     auth_settings=["BearerToken"])  # fmt: skip
    text = api.call_api(*serialized).read().decode()  # type: ignore[no-untyped-call]
    return sum(
        sample.value
        for family in parser.text_string_to_metric_families(text)
        if family.name == "apiserver_request"
        for sample in family.samples
        if sample.name == "apiserver_request_total"
        and sample.labels.get("resource") == constants.CLIQUE_PLURAL
        and sample.labels.get("verb") == "PUT"
        and sample.labels.get("code") == "409"
    )


class CliqueHistory:
    """Every version of the domain's cliques from now on, as node → slot (a watch)."""

    def __init__(self, api: client.ApiClient, driver_ns: str, uid: str) -> None:
        self.versions: list[dict[str, int]] = []
        self._stopped = threading.Event()
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        listing = custom(api).list_namespaced_custom_object(
            G, V, driver_ns, constants.CLIQUE_PLURAL
        )
        stream = self._watch.stream(  # type: ignore[no-untyped-call]
            custom(api).list_namespaced_custom_object, G, V, driver_ns,
            constants.CLIQUE_PLURAL, label_selector=f"{constants.COMPUTE_DOMAIN_LABEL}={uid}",
            resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=300,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._follow, args=(stream,), daemon=True)
        self._thread.start()

    def _follow(self, stream: Iterator[dict[str, Any]]) -> None:
        try:
            for event in stream:
                daemons = event["object"].get("daemons") or []
                self.versions.append({d["nodeName"]: d.get("index") for d in daemons})
        except urllib3.exceptions.HTTPError:
            if not self._stopped.is_set():
                raise

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()  # type: ignore[no-untyped-call]


def test_a_held_back_leaders_write_never_changes_a_live_members_slot(
    cluster: clusters.TestCluster, api: client.ApiClient, namespace: str, driver_ns: str,
    sim: sim_cluster.SimCluster, proxy: HoldBackProxy, tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    plugin.install_crds(cluster.api())
    old = ControllerProcess(
        kubeconfig=proxy.kubeconfig(cluster.kubeconfig, tmp_path / "held.kubeconfig"),
        namespace=driver_ns, log_dir=tmp_path, name="ctl-old", args=ELECTION,
    )  # fmt: skip
    new = ControllerProcess(kubeconfig=cluster.kubeconfig, namespace=driver_ns,
                            log_dir=tmp_path, name="ctl-new", args=ELECTION)  # fmt: skip
    clique = next(n.clique for n in sim.nodes if n.name == NODES[0])
    assert clique is not None
    labels, agents = NodeLabels(api, claims_namespace=namespace), Agents(api, driver_ns)
    history: CliqueHistory | None = None
    try:
        old.start()
        waiting.until("ctl-old to lead", lambda: holder(api, driver_ns).startswith("ctl-old-"),
                      timeout=30)  # fmt: skip
        new.start()
        agents.ensure(NODES)
        uid = create_domain(api, namespace)
        labels.set(NODES, clique=clique)
        # Each node's agent is there before its claim: a join is one change.
        agents.report(NODES, uid, "Ready")
        labels.set(NODES[:6], domain=uid)  # a claim of the domain allocated on each
        slot = {n: i for i, n in enumerate(NODES)}
        wait_slots(api, driver_ns, uid, {clique: {n: slot[n] for n in NODES[:6]}},
                   "six members in slots 0-5")  # fmt: skip
        # The old leader's status write for them is done too: the first write held back is
        # then the 7th join's clique write, not a late status flush.
        wait_status(api, namespace, "6/6")

        # The old leader plans the 7th join; its write and its renewals wait in the proxy.
        history = CliqueHistory(api, driver_ns, uid)
        refused = refused_clique_updates(api)
        proxy.hold()
        labels.set([NODES[6]], domain=uid)
        waiting.until("ctl-new to take the lease over",
                      lambda: holder(api, driver_ns).startswith("ctl-new-"),
                      timeout=30)  # fmt: skip
        wait_slots(api, driver_ns, uid, {clique: {n: slot[n] for n in NODES[:7]}},
                   "the new leader to write the 7th join")  # fmt: skip
        labels.set([NODES[7]], domain=uid)
        live = {n: slot[n] for n in NODES[:8]}
        wait_slots(api, driver_ns, uid, {clique: live}, "the new leader to write the 8th join")

        # Let the old leader's write through while it still runs: refused, never re-applied.
        assert old.child is not None
        old.child.check_running()
        proxy.release()
        waiting.until("the held-back clique write to arrive and be refused",
                      lambda: refused_clique_updates(api) > refused, timeout=30)  # fmt: skip
        # It lost the lease: it steps down and stays, a ready standby (an exit would cost the
        # kubelet's crash-loop backoff after a few API server outages).
        waiting.until(
            "the old leader to step down and stay a ready standby",
            lambda: old.sample("computedomains_controller_leader") == 0
            and old.probe("/readyz") == 200,
            timeout=60, abort=old.child.check_running,
        )  # fmt: skip

        # One more join, written by the new leader, marks the end of what the watch must see.
        labels.set([NODES[8]], domain=uid)
        waiting.until("the watch to see the 9th join",
                      lambda: any(NODES[8] in v for v in history.versions), timeout=60)  # fmt: skip
        formed = next(i for i, v in enumerate(history.versions) if v.keys() >= live.keys())
        for version in history.versions[formed:]:
            for node, index in live.items():
                assert version.get(node) == index, f"{node} lost slot {index}: {version}"
        assert new.conflicts() == 0

        # The new leader stops: the old one, competing all along, leads again in-process.
        new.stop()
        waiting.until("ctl-old to lead again",
                      lambda: holder(api, driver_ns).startswith("ctl-old-"),
                      timeout=60, abort=old.child.check_running)  # fmt: skip
        waiting.until("ctl-old's workers to run again",
                      lambda: old.sample("computedomains_controller_leader") == 1,
                      timeout=30)  # fmt: skip
    finally:
        if history is not None:
            history.stop()
        proxy.release()
        old.stop()
        new.stop()
        labels.restore()
        _drop_finalizer(api, namespace)


def _drop_finalizer(api: client.ApiClient, namespace: str) -> None:
    """So the namespace can go without a controller."""
    try:
        custom(api).patch_namespaced_custom_object(
            G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, "cd",
            {"metadata": {"finalizers": None}},
        )  # fmt: skip
    except ApiException as exc:
        if kube.status_of(exc) != 404:
            raise
