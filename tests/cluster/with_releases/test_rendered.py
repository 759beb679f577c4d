"""The chart rendered with ``helm template`` and applied with ``kubectl apply --server-side``.

That is what a GitOps pipeline without hook support does (kustomize's helmCharts without
``skipHooks``, a CI job piping the render to kubectl): every hook Job is an ordinary Job that
starts at once. The uninstall hook must then change nothing; the migrate Job must wait for the
webhook it needs and migrate; nothing that runs may be deleted. With ``hooks.enabled=false``
only migrate is left, as an ordinary Job per chart version.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import tools
from computedomains import waiting
from computedomains.api import constants
from tests.chart import rendering
from tests.support import clusters, domains, kube, lifecycle, migration, previous

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

NODES = ["gb200-r0-n00", "gb200-r0-n01"]
V1, V2 = constants.VERSION, constants.VERSION_V1BETA2


def _kubectl(cluster: clusters.TestCluster, *args: str) -> str:
    kubectl = tools.ToolBox.from_env().path("kubectl")
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _apply(cluster: clusters.TestCluster, objects: list[dict[str, Any]], path: pathlib.Path) -> str:
    """``kubectl apply --server-side`` of a render, as a pipeline would."""
    path.write_text(yaml.safe_dump_all(objects))
    return _kubectl(cluster, "apply", "--server-side", "-f", str(path))


def _remove(
    cluster: clusters.TestCluster, namespace: str, release: str, applied: list[pathlib.Path]
) -> None:
    """What docs/upgrade.md says to do before deleting a rendered install: the uninstall
    program by hand, then every applied object but the CRDs (the fixture removes those)."""
    done = subprocess.run(
        [sys.executable, "-m", "computedomains", "hooks", "uninstall", "--release", release,
         "--namespace", namespace, "--force",
         "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for path in applied:
        kept = [
            o for o in yaml.safe_load_all(path.read_text())
            if o and o["kind"] != "CustomResourceDefinition"
        ]  # fmt: skip
        path.write_text(yaml.safe_dump_all(kept))
        _kubectl(cluster, "delete", "--ignore-not-found", "--wait=false", "-f", str(path))


def _job_done(api: client.ApiClient, namespace: str, name: str) -> str:
    """``Complete`` or ``Failed`` once the Job is decided (waits up to 5 minutes)."""

    def decided() -> str | None:
        job = client.BatchV1Api(api).read_namespaced_job_status(name, namespace)
        for condition in job.status.conditions or []:
            if condition.type in ("Complete", "Failed") and condition.status == "True":
                return str(condition.type)
        return None

    return str(waiting.until(f"Job {namespace}/{name} to finish", decided, timeout=300))


def _workloads(api: client.ApiClient, namespace: str) -> set[str]:
    apps = client.AppsV1Api(api)
    return {
        f"DaemonSet/{d.metadata.name}" for d in apps.list_namespaced_daemon_set(namespace).items
    } | {f"Deployment/{d.metadata.name}" for d in apps.list_namespaced_deployment(namespace).items}


def test_rendered_with_hooks_and_applied_by_kubectl_nothing_is_deleted_and_it_migrates(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
    tmp_path: pathlib.Path,
) -> None:
    app = releases.new("cd-render")  # no Helm release is made: only its namespace and helm
    ns = app.namespace
    applied = [tmp_path / name for name in ("previous.yaml", "current.yaml", "plain.yaml")]
    try:
        _render_apply_and_migrate(cluster, sim, api, namespace, app, applied)
    finally:
        if any(path.exists() for path in applied):
            _remove(cluster, ns, app.name, [path for path in applied if path.exists()])


def _render_apply_and_migrate(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    app: lifecycle.Release,
    applied: list[pathlib.Path],
) -> None:
    ns = app.namespace
    old = previous.build()
    _apply(cluster, rendering.template(
        app.helm, "--include-crds", *lifecycle.previous_values(old),
        release=app.name, namespace=ns, chart=cluster.previous_chart(old),
    ), applied[0])  # fmt: skip
    lifecycle.wait_plugins(api, {n.name for n in sim.nodes})
    domain, _ = lifecycle.live_domain(api, namespace, NODES, num_nodes=2)
    before = lifecycle.observe(api, namespace, ns, domain, version=V1)

    # The next version, hooks and all, applied the same way.
    _apply(cluster, rendering.template(
        app.helm, "--include-crds", *rendering.sim_values(), release=app.name, namespace=ns,
        chart=cluster.chart(),
    ), applied[1])  # fmt: skip
    fullname = f"{app.name}-compute-domains"
    assert _job_done(api, ns, f"{fullname}-hook-uninstall") == "Complete"
    log = kube.job_log(cluster, ns, f"{fullname}-hook-uninstall", "uninstall")
    assert "not an uninstall" in log, log
    assert "removed finalizer" not in log and "stopping" not in log
    assert _job_done(api, ns, f"{fullname}-hook-migrate") == "Complete"

    # Nothing that runs was deleted; the domain kept its finalizer, its nodes their labels.
    assert {f"DaemonSet/{fullname}-imex-agent", f"DaemonSet/{fullname}-kubelet-plugin",
            f"Deployment/{fullname}-controller"} <= _workloads(api, ns)  # fmt: skip
    current = domains.get_domain(api, namespace, domain["metadata"]["name"], version=V2)
    assert constants.FINALIZER in current["metadata"]["finalizers"]
    for node in NODES:
        labels = client.CoreV1Api(api).read_node(node).metadata.labels
        assert labels[constants.COMPUTE_DOMAIN_LABEL] == domain["metadata"]["uid"]
    assert lifecycle.observe(api, namespace, ns, domain, version=V2) == before
    # Migrated: every object stored at v1beta2, storedVersions pruned.
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd) == ([V1, V2], [V2])
    for plural in (constants.COMPUTE_DOMAIN_PLURAL, constants.CLIQUE_PLURAL):
        stored = {v for _, v in migration.stored(migration.etcd_url(sim), plural,
                                                 group=constants.GROUP)}  # fmt: skip
        assert stored == {constants.API_VERSION_V1BETA2}, plural

    # Without hooks only migrate is rendered, as an ordinary Job of this chart version; it
    # finds nothing left to do.
    plain = rendering.template(
        app.helm, "--include-crds", *rendering.sim_values(), "--set", "hooks.enabled=false",
        release=app.name, namespace=ns, chart=cluster.chart(),
    )  # fmt: skip
    jobs = [o["metadata"]["name"] for o in plain if o["kind"] == "Job"]
    assert jobs == [f"{fullname}-migrate-{cluster.version().replace('.', '-')}"]
    assert not any("helm.sh/hook" in (o["metadata"].get("annotations") or {}) for o in plain)
    _apply(cluster, plain, applied[2])
    assert _job_done(api, ns, jobs[0]) == "Complete"
    # A new domain forms on what the render installed, once the API server admits one.
    domains.wait_admitted(api, namespace)
    fresh = domains.create_domain(api, namespace)
    domains.wait_ready(
        api, namespace, fresh, domains.workers(api, namespace, fresh, ["gb200-r0-n02"])
    )
