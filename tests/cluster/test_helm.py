"""Both helm major versions install, upgrade and uninstall a chart in the cluster."""

from __future__ import annotations

import pathlib

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import tools
from computedomains import waiting
from tests.support import clusters, helm, kube

pytestmark = pytest.mark.cluster

TINY_CHART = pathlib.Path(__file__).parent.parent / "data" / "charts" / "tiny"


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_helm_installs_upgrades_and_uninstalls(
    major: str,
    cluster: clusters.TestCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    binary = tools.ToolBox.from_env().path(major)
    h = helm.Helm(binary=binary, kubeconfig=cluster.kubeconfig, home=tmp_path)
    version = h.run("version", "--short")
    assert version.startswith("v3." if major == "helm3" else "v4."), version

    h.run("install", "tiny", str(TINY_CHART), "-n", namespace, "--wait", "--timeout", "2m")
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    assert core.read_namespaced_config_map("tiny-tiny", namespace).data == {"message": "hello"}
    assert apps.read_namespaced_deployment("tiny-tiny", namespace).status.ready_replicas == 1

    h.run(
        "upgrade",
        "tiny",
        str(TINY_CHART),
        "-n",
        namespace,
        "--wait",
        "--timeout",
        "2m",
        "--set",
        "message=upgraded",
        "--set",
        "replicas=2",
    )
    assert core.read_namespaced_config_map("tiny-tiny", namespace).data == {"message": "upgraded"}
    assert apps.read_namespaced_deployment("tiny-tiny", namespace).status.ready_replicas == 2
    history = h.run("history", "tiny", "-n", namespace, "-o", "json")
    assert '"revision":2' in history.replace(" ", "")

    h.run("uninstall", "tiny", "-n", namespace, "--wait", "--timeout", "2m")

    def gone() -> bool:
        try:
            core.read_namespaced_config_map("tiny-tiny", namespace)
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    waiting.until("the uninstalled release's ConfigMap to be deleted", gone, timeout=30)
    assert apps.list_namespaced_deployment(namespace).items == []
    assert h.run("list", "-n", namespace, "-q").strip() == ""


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_a_failing_pre_install_hook_fails_the_install_and_a_passing_one_lets_it_through(
    major: str,
    cluster: clusters.TestCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    h = helm.Helm(binary=tools.ToolBox.from_env().path(major), kubeconfig=cluster.kubeconfig,
                  home=tmp_path)  # fmt: skip
    hook = ["--set", "preInstallHook.enabled=true", "--set",
            f"preInstallHook.image={cluster.workload_image()}", "-n", namespace, "--wait",
            "--timeout", "2m"]  # fmt: skip

    failed = h.attempt("install", "broken", str(TINY_CHART), *hook,
                       "--set", "preInstallHook.exitCode=1", timeout=180)  # fmt: skip
    assert failed.returncode != 0, failed.stdout
    assert "pre-install" in failed.stderr, failed.stderr
    assert kube.job_log(cluster, namespace, "broken-tiny-pre-install", "hook") == (
        "pre-install hook exits 1\n"
    )
    assert "failed" in h.run("status", "broken", "-n", namespace).lower()
    core = client.CoreV1Api(api)
    assert (
        core.list_namespaced_config_map(
            namespace, label_selector="app.kubernetes.io/instance=broken"
        ).items
        == []
    )

    h.run("install", "fine", str(TINY_CHART), *hook, timeout=180)
    assert core.read_namespaced_config_map("fine-tiny", namespace).data == {"message": "hello"}
    assert kube.job_log(cluster, namespace, "fine-tiny-pre-install", "hook") == (
        "pre-install hook exits 0\n"
    )
    h.run("uninstall", "fine", "-n", namespace, "--wait", "--timeout", "2m")
    h.run("uninstall", "broken", "-n", namespace, "--wait", "--timeout", "2m")
