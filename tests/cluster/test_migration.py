"""The migrate hook on a real control plane: interrupted half-way, resumed, nothing lost, every
object stored at the new version (read from etcd itself), storedVersions pruned, an object
invalid at the new version reported by field and kept, and the snapshot restored.

The hook runs as a local process with the admin kubeconfig, against two-version copies of our
CRDs in a test group (tests/support/migration.py). The interruption is observed, not timed:
the test watches the checkpoint ConfigMap and kills the process once it records a third of
the objects.
"""

from __future__ import annotations

import functools
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from computedomains import waiting
from tests.support import clusters
from tests.support import migration as mig

pytestmark = pytest.mark.cluster

DOMAINS = 300
PREFIX = "mig-test"
INVALID = "too-many-nodes"


@pytest.fixture
def crds(cluster: clusters.TestCluster) -> Iterator[None]:
    with mig.installed_crds(cluster.api(), storage=mig.OLD):
        yield


@pytest.fixture
def tenant(api: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def still_running(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        assert process.stdout is not None
        pytest.fail(f"the hook ended before it could be interrupted:\n{process.stdout.read()}")


def checkpoint(api: client.ApiClient, namespace: str) -> dict[str, str]:
    try:
        cm = client.CoreV1Api(api).read_namespaced_config_map(f"{PREFIX}-checkpoint", namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return cm.data or {}


def test_interrupted_migration_resumes_and_loses_nothing(
    cluster: clusters.TestCluster, api: client.ApiClient, crds: None, namespace: str, tenant: str
) -> None:
    custom = client.CustomObjectsApi(api)
    objects = [
        mig.compute_domain(f"cd-{i:04d}", (namespace, tenant)[i % 2]) for i in range(DOMAINS - 1)
    ]
    objects.append(mig.compute_domain(INVALID, tenant, num_nodes=500))
    mig.create_domains(api, objects, workers=4)
    for i in range(4):
        custom.create_namespaced_custom_object(
            mig.GROUP,
            mig.OLD,
            namespace,
            mig.CLIQUE_PLURAL,
            {
                "apiVersion": f"{mig.GROUP}/{mig.OLD}",
                "kind": "ComputeDomainClique",
                "metadata": {"name": f"uid{i}.clique"},
                "daemons": [
                    {
                        "nodeName": f"n{i}",
                        "ipAddress": "10.0.0.1",
                        "cliqueID": "c.1",
                        "index": 0,
                        "status": "Ready",
                    }
                ],
            },
        )
    listed = mig.list_all(api, mig.CD_PLURAL, mig.OLD)
    before = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["uid"] for o in listed
    }
    specs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"] for o in listed}
    assert len(before) == DOMAINS
    # The new version becomes the storage one, stricter: numNodes at most 100.
    mig.install_crds(api, storage=mig.NEW, new_max_nodes=100)
    ext = client.ApiextensionsV1Api(api)
    assert ext.read_custom_resource_definition(mig.CD_CRD).status.stored_versions == [
        mig.OLD,
        mig.NEW,
    ]

    argv = mig.hook(
        cluster.kubeconfig,
        "migrate",
        "--namespace",
        namespace,
        "--snapshot-prefix",
        PREFIX,
        "--crds",
        f"{mig.CD_CRD},{mig.CLIQUE_CRD}",
        "--page-size",
        "10",
        "--workers",
        "2",
        "--method",
        "rewrite",
    )
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = waiting.until(
            "the checkpoint to record a third of the domains",
            lambda: (
                (cp := checkpoint(api, namespace))
                and int(cp.get("count") or 0) >= DOMAINS // 3
                and cp
            ),
            timeout=120,
            interval=0.02,
            abort=functools.partial(still_running, first),
        )
    finally:
        first.kill()
        first.wait()
    interrupted = checkpoint(api, namespace)
    assert interrupted["resource"] == mig.CD_CRD and int(interrupted["count"]) < DOMAINS, seen
    stored = dict(mig.stored(mig.etcd_url(cluster.sim), mig.CD_PLURAL)) if cluster.sim else {}
    if stored:
        # Killed half-way: some objects already at the new version, some not yet.
        assert set(stored.values()) == {f"{mig.GROUP}/{mig.OLD}", f"{mig.GROUP}/{mig.NEW}"}

    second = mig.run_hook(argv)
    print(second.stdout, second.stderr)
    assert "snapshot: reusing" in second.stdout
    assert f"rewrite: {mig.CD_CRD}: resuming after" in second.stdout
    # The invalid object fails the hook (after everything else), named by field, kept.
    assert second.returncode == 1
    assert f"INVALID ComputeDomain {tenant}/{INVALID}: spec.numNodes:" in second.stdout
    assert ext.read_custom_resource_definition(mig.CD_CRD).status.stored_versions == [mig.NEW]
    assert ext.read_custom_resource_definition(mig.CLIQUE_CRD).status.stored_versions == [mig.NEW]

    after = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["uid"]
        for o in mig.list_all(api, mig.CD_PLURAL)
    }
    assert after == before, "objects lost or recreated"
    assert (
        custom.get_namespaced_custom_object(mig.GROUP, mig.NEW, tenant, mig.CD_PLURAL, INVALID)[
            "spec"
        ]["numNodes"]
        == 500
    )
    if cluster.sim is not None:
        # What etcd holds, not what the API server shows: every object encoded at the new
        # version (the API server would convert on read and hide an old encoding).
        etcd = mig.etcd_url(cluster.sim)
        for plural, count in ((mig.CD_PLURAL, DOMAINS), (mig.CLIQUE_PLURAL, 4)):
            versions = dict(mig.stored(etcd, plural))
            assert len(versions) == count
            assert set(versions.values()) == {f"{mig.GROUP}/{mig.NEW}"}, plural

    # Restore: deleted objects come back, changed labels are put back.
    gone = [objects[i] for i in (0, 1, 2)]
    for obj in gone:
        custom.delete_namespaced_custom_object(
            mig.GROUP, mig.NEW, obj["metadata"]["namespace"], mig.CD_PLURAL, obj["metadata"]["name"]
        )
    relabelled = objects[3]["metadata"]
    custom.patch_namespaced_custom_object(
        mig.GROUP,
        mig.NEW,
        relabelled["namespace"],
        mig.CD_PLURAL,
        relabelled["name"],
        {"metadata": {"labels": {"batch": "changed"}}},
    )
    restored = mig.run_hook(
        mig.hook(
            cluster.kubeconfig, "restore", "--namespace", namespace, "--snapshot-prefix", PREFIX
        )
    )
    print(restored.stdout, restored.stderr)
    assert restored.returncode == 0
    assert "3 create" in restored.stdout
    for obj in gone:
        back = custom.get_namespaced_custom_object(
            mig.GROUP, mig.NEW, obj["metadata"]["namespace"], mig.CD_PLURAL, obj["metadata"]["name"]
        )
        meta = obj["metadata"]
        assert back["spec"] == specs[meta["namespace"], meta["name"]]
    assert custom.get_namespaced_custom_object(
        mig.GROUP, mig.NEW, relabelled["namespace"], mig.CD_PLURAL, relabelled["name"]
    )["metadata"]["labels"] == {"batch": "migration"}
    snapshot_maps = (
        client.CoreV1Api(api)
        .list_namespaced_config_map(
            namespace, label_selector=f"computedomains.io/snapshot={PREFIX}"
        )
        .items
    )
    assert {m.metadata.name for m in snapshot_maps} >= {f"{PREFIX}-0", f"{PREFIX}-manifest"}
