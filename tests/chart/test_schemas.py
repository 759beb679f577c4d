"""Every object each profile renders is valid for the real API server (server-side dry run).

The API server checks what no offline linter does: the built-in types' OpenAPI schemas with
unknown fields refused (fieldValidation=Strict), CEL in DeviceClasses and admission policies,
RBAC rule shapes, CRD structural schemas. A dry run persists nothing, so it is safe to repeat
on any cluster. Objects that already exist (the kept CRDs of an earlier install) are checked
with a dry-run server-side apply instead of a create.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from kubernetes import client, dynamic

from tests.chart import rendering as r
from tests.support import clusters, dryrun

pytestmark = pytest.mark.cluster

DynamicClient: Any = dynamic.DynamicClient
"""The dynamic client (untyped upstream)."""


@pytest.mark.parametrize("profile", list(r.PROFILES))
def test_every_rendered_object_passes_server_side_validation(
    profile: str,
    cluster: clusters.TestCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    version = client.VersionApi(api).get_code().git_version
    objects = r.template(
        r.helm_for("helm4", tmp_path),
        "--values",
        str(r.PROFILES[profile]),
        "--kube-version",
        version,
        release="schemas",
        namespace=namespace,
    )
    # CRDs first, as an install orders them, so objects of their kinds would resolve.
    objects.sort(key=lambda o: o["kind"] != "CustomResourceDefinition")
    dyn = DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))

    failures = {
        f"{o['kind']} {o['metadata']['name']}": failure
        for o in objects
        if (failure := dryrun.dry_run(dyn, o, namespace)) is not None
    }

    assert sorted(o["kind"] for o in objects) == r.expected_kinds(profile)
    assert not failures, "\n".join(f"{what}: {why}" for what, why in failures.items())


def test_optional_objects_pass_server_side_validation(
    cluster: clusters.TestCluster, api: client.ApiClient, namespace: str, tmp_path: pathlib.Path
) -> None:
    """What no profile turns on (the ServiceMonitor's CRD is absent, so it is left out)."""
    version = client.VersionApi(api).get_code().git_version
    objects = r.template(
        r.helm_for("helm4", tmp_path),
        *r.set_args(
            {
                "criticalPodsQuota.enabled": "true",
                "nodePods.securityContextConstraints": "privileged",
                "nodePods.seLinuxType": "spc_t",
                "crds.enabled": "false",
            }
        ),
        "--set-json",
        "controller.runAsUser=null",
        "--kube-version",
        version,
        release="optional",
        namespace=namespace,
    )
    dyn = DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    failures = {
        f"{o['kind']} {o['metadata']['name']}": failure
        for o in objects
        if (failure := dryrun.dry_run(dyn, o, namespace)) is not None
    }
    assert {"ResourceQuota", "Role"} <= {o["kind"] for o in objects}
    assert not failures, "\n".join(f"{what}: {why}" for what, why in failures.items())
