"""The documented upgrade from 0.1.0 on Helm 4, with OnDelete IMEX agents and a live domain.

Helm 4 waits with kstatus by default, which never sees OnDelete agents replaced: preflight
refuses that before anything is applied, and the documented commands (``--wait=legacy``, the
value ``preflight.helm4Wait``) complete both steps with the domain and its pods untouched. A
failure after everything was applied rolls back to 0.1.0 under Helm 4's server-side apply,
CRDs included (docs/upgrade.md, With Helm 4).
"""

from __future__ import annotations

import pathlib
import shutil

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains.api import constants
from tests.chart import rendering
from tests.support import clusters, lifecycle, previous

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

NODES = ["gb200-r0-n02", "gb200-r0-n03"]
V1, V2 = constants.VERSION, constants.VERSION_V1BETA2
FAILING_HOOK = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-forced-failure
  annotations:
    helm.sh/hook: post-upgrade
    helm.sh/hook-weight: "-10"
    helm.sh/hook-delete-policy: before-hook-creation
    helm.sh/hook-output-log-policy: hook-failed
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: fail
          image: IMAGE
          command: [sh, -c, "echo forced failure after everything was applied; exit 1"]
"""


def _failing_chart(folder: pathlib.Path, image: str) -> pathlib.Path:
    """This chart with a post-upgrade hook that fails once every object is applied, running
    ``image`` (one with a shell)."""
    chart = folder / "chart"
    shutil.copytree(rendering.CHART, chart)
    (chart / "templates" / "forced-failure.yaml").write_text(FAILING_HOOK.replace("IMAGE", image))
    return chart


def _crds_at(api: client.ApiClient, served: list[str], stored: list[str]) -> None:
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd) == (served, stored), crd


def test_the_documented_upgrade_from_0_1_0_completes_on_helm_4_and_a_failure_rolls_back(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
    tmp_path: pathlib.Path,
) -> None:
    old = previous.build()
    release = lifecycle.install_previous(releases, sim, api, old, "cd-h4", major="helm4")
    ns = release.namespace
    domain, _ = lifecycle.live_domain(api, namespace, NODES, num_nodes=2)
    before = lifecycle.observe(api, namespace, ns, domain, version=V1)
    step1 = [*rendering.sim_values(), "--set", "crds.storageVersion=v1beta1"]

    # Helm 4's default wait would wait for ever on the OnDelete agents: refused first.
    refused = release.helm.attempt(
        "upgrade", release.name, *cluster.chart(), *step1, "--namespace", ns,
        "--wait", "--rollback-on-failure", "--timeout", "8m",
    )  # fmt: skip
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    assert "--wait=legacy" in said and "preflight.helm4Wait=legacy" in said, said
    _crds_at(api, [V1], [V1])
    assert lifecycle.observe(api, namespace, ns, domain, version=V1) == before

    # A failure once everything is applied: rolled back to 0.1.0, CRDs included.
    failing = cluster.chart_from(
        _failing_chart(tmp_path, cluster.workload_image()), version=f"{cluster.version()}.f"
    )
    failed = release.helm.attempt(
        "upgrade", release.name, *failing, *step1, "--set", "preflight.helm4Wait=legacy",
        "--namespace", ns, "--wait=legacy", "--rollback-on-failure", "--timeout", "8m",
    )  # fmt: skip
    said = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "forced failure after everything" in said, said
    assert "rolled back" in said and "server-side apply failed" not in said, said
    _crds_at(api, [V1], [V1])
    assert "deployed" in release.run("status").lower()
    assert lifecycle.observe(api, namespace, ns, domain, version=V1) == before

    # The documented commands: both steps complete; the domain and its pods stay.
    release.upgrade_as_documented(*cluster.chart(), *step1)
    _crds_at(api, [V1, V2], [V1])
    release.upgrade_as_documented(
        *cluster.chart(), "--reuse-values", "--set", "crds.storageVersion=v1beta2"
    )
    _crds_at(api, [V1, V2], [V2])
    assert lifecycle.observe(api, namespace, ns, domain, version=V2) == before
