"""A rollback the API server would refuse half-way is refused before anything is applied.

A newer chart (made here from this one: its clique CRD also serves v1beta3 and stores it) runs
after this one; ``status.storedVersions`` then names v1beta3, which this chart's CRDs do not
serve. ``helm rollback`` to this chart's revision runs that revision's pre-rollback hook
(preflight), which refuses and prints the way back; done that way, the rollback succeeds.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains.api import constants
from tests.chart import rendering
from tests.support import clusters, kube, lifecycle

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

CLIQUES = lifecycle.CRD_NAMES[1]
V1, V2, V3 = constants.VERSION, constants.VERSION_V1BETA2, "v1beta3"
CLIQUE_TEMPLATE = "charts/crds/templates/resource.nvidia.com_computedomaincliques.yaml"


def _newer_chart(folder: pathlib.Path) -> pathlib.Path:
    """This chart with a clique CRD that also serves v1beta3 (the same schema: cliques convert
    without a webhook) and stores it by default (value crds.cliqueStorageVersion), as a later
    release might."""
    chart = folder / "chart"
    shutil.copytree(rendering.CHART, chart)
    template = chart / CLIQUE_TEMPLATE
    text = template.read_text().replace(".Values.storageVersion", ".Values.cliqueStorageVersion")
    newest = text[text.index(f"  - name: {V2}") :]
    newest = newest.replace(f"name: {V2}", f"name: {V3}").replace(f'"{V2}"', f'"{V3}"')
    template.write_text(text.rstrip("\n") + "\n" + newest)
    # Its own code would know v1beta3; this code does not, so its preflight is told.
    preflight = chart / "templates/hook-preflight.yaml"
    storage = '(printf "--storage-version=%s" .Values.crds.storageVersion)'
    served = f'"--served-versions={V1},{V2},{V3}"'
    preflight.write_text(preflight.read_text().replace(storage, f"{storage} {served}"))
    values = chart / "charts/crds/values.yaml"
    values.write_text(values.read_text() + f"cliqueStorageVersion: {V3}\n")
    knob = {"type": "string", "enum": [V1, V2, V3]}
    for schema_file, path in (
        (chart / "values.schema.json", ("properties", "crds", "properties")),
        (chart / "charts/crds/values.schema.json", ("properties",)),
    ):
        schema = json.loads(schema_file.read_text())
        node = schema
        for key in path:
            node = node[key]
        node["cliqueStorageVersion"] = knob
        schema_file.write_text(json.dumps(schema, indent=2))
    return chart


@pytest.mark.parametrize("major", rendering.MAJORS)
def test_a_rollback_to_crds_without_a_stored_version_is_refused_before_anything_changes(
    major: str,
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    releases: lifecycle.Releases,
    tmp_path: pathlib.Path,
) -> None:
    # Every step as docs/upgrade.md gives it with OnDelete agents (Helm 4: --wait=legacy).
    release = releases.new("cd-rb", major)
    ns = release.namespace
    release.install(*cluster.chart(), *rendering.sim_values())
    # A later release, published beside this one as a higher pre-release of the same line.
    newer = cluster.chart_from(_newer_chart(tmp_path), version=f"{cluster.version()}.newer")
    release.upgrade_as_documented(*newer, "--reuse-values")
    assert lifecycle.crd_versions(api, CLIQUES) == ([V1, V2, V3], [V3])

    refused = release.helm.attempt(
        "rollback", release.name, "1", "--namespace", ns, release.documented_wait(),
        "--timeout", "5m",
    )  # fmt: skip
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "hook-preflight failed" in said, said
    assert "must appear in spec.versions" not in said, "refused before the API server saw it"
    log = kube.job_log(cluster, ns, f"{release.name}-compute-domains-hook-preflight", "preflight")
    assert f"CRD {CLIQUES} holds objects stored at {V3}" in log, log
    assert f"--set crds.storageVersion=<one of {V1}, {V2}>" in log
    assert lifecycle.crd_versions(api, CLIQUES) == ([V1, V2, V3], [V3]), "nothing was applied"

    # The way it printed: Helm's pending rollback ended (a rollback to the deployed revision,
    # 2), the storage back with the newer chart, then the rollback.
    assert "changes nothing and ends that" in log
    release.rollback("2")
    release.upgrade_as_documented(
        *newer, "--reuse-values", "--set", f"crds.cliqueStorageVersion={V2}"
    )
    assert lifecycle.crd_versions(api, CLIQUES) == ([V1, V2, V3], [V2])
    release.rollback("1")
    assert lifecycle.crd_versions(api, CLIQUES) == ([V1, V2], [V2])
