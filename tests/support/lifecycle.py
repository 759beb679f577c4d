"""Lifecycle scenarios (install, upgrade, rollback, adoption, Argo CD): releases, comparisons.

The tests of tests/cluster/with_releases install and remove whole releases, CRDs included, so
they start from a cluster without our CRDs (:func:`remove_crds`) and compare the workload before
and after a lifecycle step with :func:`observe`: a step passes only if no workload pod was
replaced or restarted and no node moved to another IMEX slot.
"""

from __future__ import annotations

import dataclasses
import pathlib
import uuid
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomains import waiting
from computedomains.api import constants
from tests.chart import rendering
from tests.support import clusters, domains, helm, kube

CRD_NAMES = (
    f"{constants.COMPUTE_DOMAIN_PLURAL}.{constants.GROUP}",
    f"{constants.CLIQUE_PLURAL}.{constants.GROUP}",
)


def remove_crds(api: client.ApiClient) -> None:
    """Delete our CRDs and every object of theirs (finalizers dropped first: no controller may
    be left to remove them), and wait until they are gone."""
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    for name in CRD_NAMES:
        try:
            crd = ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        plural = crd.spec.names.plural
        version = next(v.name for v in crd.spec.versions if v.storage)
        for item in custom.list_cluster_custom_object(constants.GROUP, version, plural)["items"]:
            meta = item["metadata"]
            if meta.get("finalizers"):
                custom.patch_namespaced_custom_object(
                    constants.GROUP,
                    version,
                    meta["namespace"],
                    plural,
                    meta["name"],
                    {"metadata": {"finalizers": None}},
                )
        ext.delete_custom_resource_definition(name)

    def gone() -> bool:
        names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        return not names & set(CRD_NAMES)

    waiting.until("our CRDs to be deleted", gone, timeout=120, interval=1)


def crd_versions(api: client.ApiClient, name: str = CRD_NAMES[0]) -> tuple[list[str], list[str]]:
    """``(served versions, status.storedVersions)`` of one of our CRDs."""
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    return [v.name for v in crd.spec.versions], list(crd.status.stored_versions or [])


@dataclasses.dataclass(frozen=True)
class Observed:
    """What must not change across a lifecycle step."""

    pods: dict[str, tuple[str, int, str, str]]
    """Workload pod name → (uid, restarts, node, phase)."""
    slots: dict[str, int]
    """Node → the IMEX slot (clique index) of the domain's daemon there."""


def observe(
    api: client.ApiClient,
    namespace: str,
    driver_namespace: str,
    domain: dict[str, Any],
    *,
    version: str,
) -> Observed:
    """The domain's workload pods and slots, read at ``version``."""
    name = domain["metadata"]["name"]
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"domain={name}")
    by_name = {
        p.metadata.name: (
            p.metadata.uid,
            _restarts(p),
            p.spec.node_name,
            p.status.phase,
        )
        for p in pods.items
    }
    slots = {
        d["nodeName"]: d["index"]
        for clique in domains.cliques(
            api, driver_namespace, domain["metadata"]["uid"], version=version
        )
        for d in clique.get("daemons") or []
    }
    return Observed(by_name, slots)


def _restarts(pod: Any) -> int:
    return sum(int(s.restart_count) for s in pod.status.container_statuses or [])


@dataclasses.dataclass
class Release:
    """One Helm release of the chart in its own namespace."""

    helm: helm.Helm
    name: str
    namespace: str
    major: str = "helm3"

    def run(self, verb: str, *args: str, timeout: float = 600) -> str:
        """``helm <verb> <release> args... --namespace <ns>``."""
        return self.helm.run(verb, self.name, *args, "--namespace", self.namespace, timeout=timeout)

    def install(self, chart: str, *args: str) -> str:
        """Install and wait (hooks included) up to 8 minutes."""
        return self.run("install", chart, *args, "--wait", "--timeout", "8m")

    def upgrade(self, chart: str, *args: str, wait: str = "--wait") -> str:
        """Upgrade and wait (hooks included) up to 8 minutes; ``wait`` as Helm takes it (Helm 4
        with OnDelete agents: ``--wait=legacy``, docs/upgrade.md)."""
        return self.run("upgrade", chart, *args, wait, "--timeout", "8m")

    def documented_wait(self) -> str:
        """The ``--wait`` docs/upgrade.md gives with OnDelete agents: Helm 4's ``legacy`` (its
        default would wait for agents only the roll-agents hook replaces)."""
        return "--wait=legacy" if self.major == "helm4" else "--wait"

    def rollback(self, revision: str) -> str:
        """``helm rollback`` to ``revision`` with the documented wait, up to 5 minutes."""
        return self.run("rollback", revision, self.documented_wait(), "--timeout", "5m")

    def take_ownership(self) -> tuple[str, ...]:
        """Helm's flags to adopt objects another install made, as docs/upgrade.md says: Helm 4
        also needs ``--force-conflicts`` (its server-side apply conflicts with the fields the
        other installer's field manager owns)."""
        if self.major == "helm4":
            return ("--take-ownership", "--force-conflicts")
        return ("--take-ownership",)

    def upgrade_as_documented(self, chart: str, *args: str) -> str:
        """Upgrade as docs/upgrade.md says with OnDelete agents, rolled back if it fails: Helm 3
        ``--wait --atomic``; Helm 4 ``--wait=legacy --rollback-on-failure``, preflight told so
        (its default wait would never see the OnDelete agents updated)."""
        if self.major == "helm4":
            legacy = ("--set", "preflight.helm4Wait=legacy", "--rollback-on-failure")
            return self.upgrade(chart, *args, *legacy, wait=self.documented_wait())
        return self.upgrade(chart, *args, "--atomic")


@dataclasses.dataclass
class Releases:
    """Makes releases and removes them (and their namespaces) at the end."""

    cluster: clusters.TestCluster
    home: pathlib.Path
    made: list[Release] = dataclasses.field(default_factory=list)

    def new(self, prefix: str, major: str = "helm3") -> Release:
        """A release named ``<prefix>`` in a fresh namespace ``<prefix>-<random>``."""
        namespace = f"{prefix}-{uuid.uuid4().hex[:4]}"
        client.CoreV1Api(self.cluster.api()).create_namespace({"metadata": {"name": namespace}})
        kube.wait_for_default_service_account(self.cluster.api(), namespace)
        h = rendering.helm_for(major, self.home / namespace, kubeconfig=self.cluster.kubeconfig)
        release = Release(h, prefix, namespace, major)
        self.made.append(release)
        return release

    def cleanup(self) -> None:
        """Uninstall every release made (hooks off: a failed test must not block cleanup)."""
        core = client.CoreV1Api(self.cluster.api())
        for release in reversed(self.made):
            # `helm status`, not `helm list`: a refused uninstall leaves the release
            # "uninstalling", which list hides (and its flag to show it differs in Helm 4).
            known = release.helm.attempt("status", release.name, "--namespace", release.namespace)
            if known.returncode == 0:
                release.run("uninstall", "--no-hooks", "--wait", "--timeout", "3m")
            core.delete_namespace(release.namespace)


def wait_plugins(api: client.ApiClient, nodes: set[str]) -> None:
    """Every node of ``nodes`` has its plugin's ResourceSlice with devices."""
    waiting.until(
        "every simulated node's plugin to publish its ResourceSlice",
        lambda: {s.spec.node_name for s in kube.driver_slices(api) if s.spec.devices} >= nodes,
        timeout=240,
        interval=1,
    )


def previous_values(old: Any) -> list[str]:
    """Helm arguments for a previous release: its gb200-nvl72 profile under its own simulation
    profile without the update strategies that profile set (it rolled every node at once), so
    those of the production profile apply."""
    overlay = yaml.safe_load(old.profile("sim").read_text())
    for component in ("kubeletPlugin", "imexAgent"):
        (overlay.get(component) or {}).pop("updateStrategy", None)
    path = old.directory / "sim-production-strategies.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return ["--values", str(old.profile("gb200-nvl72")), "--values", str(path)]


def install_previous(
    releases: Releases, sim: Any, api: client.ApiClient, old: Any, prefix: str,
    major: str = "helm3",
) -> Release:  # fmt: skip
    """A previous release (``tests.support.previous``) installed with its production profile
    (:func:`previous_values`) by Helm ``major`` from the cluster's registry, its image pulled
    and run, every plugin publishing."""
    release = releases.new(prefix, major)
    release.install(*releases.cluster.previous_chart(old), *previous_values(old))
    wait_plugins(api, {n.name for n in sim.nodes})
    return release


def live_domain(
    api: client.ApiClient, namespace: str, nodes: list[str], *, num_nodes: int
) -> tuple[dict[str, Any], list[str]]:
    """A v1beta1 ComputeDomain (as the previous release's users wrote them) with one Running
    pod on each of ``nodes``, Ready."""
    domain = domains.create_domain(api, namespace, version=constants.VERSION, num_nodes=num_nodes)
    pods = domains.workers(api, namespace, domain, nodes)
    domains.wait_ready(api, namespace, domain, pods, version=constants.VERSION)
    return domain, pods


def condition(domain: dict[str, Any], kind: str) -> dict[str, Any]:
    """The v1beta2 status condition ``kind`` of a ComputeDomain (empty when absent)."""
    for c in (domain.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}
