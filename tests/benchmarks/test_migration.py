"""Benchmark: the migrate hook on 10,000 ComputeDomains stored at the old version.

Measures the whole hook as Helm runs it (snapshot, validation, paged rewrite, prune) with its
default page size and workers: total seconds (target ≤ 60), objects per second of the rewrite
and, as the baseline from the same run, of creating the same objects, and objects lost (must be
0: every name and uid still there, every object encoded at the new version in etcd itself).

The hook talks to the API server only, and every write it makes is one update the API server
must do; on two cores that server is the bottleneck (about 1.4 cores while the rewrite runs).
So it runs on an API server and etcd of its own, as on a real control plane's dedicated cores,
not beside the simulated nodes, which would measure their share of the two cores instead.
"""

from __future__ import annotations

import pathlib
import re
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from cdsim import controlplane
from tests.benchmarks import report
from tests.support import clusters
from tests.support import migration as mig

pytestmark = pytest.mark.cluster

DOMAINS = 10_000
NAMESPACES = 10
TARGET_SECONDS = 60.0


@pytest.fixture
def plane(tmp_path: pathlib.Path) -> Iterator[controlplane.ControlPlane]:
    with clusters.api_server_alone(tmp_path) as started:
        yield started


@pytest.mark.timeout(1200)
def test_migrate_ten_thousand_domains(plane: controlplane.ControlPlane) -> None:
    api = clusters.typed_client(plane.admin_kubeconfig)
    namespaces = [f"bench-mig-{i}" for i in range(NAMESPACES)]
    for name in namespaces:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    mig.install_crds(api, storage=mig.OLD)
    began = time.monotonic()
    objects = [
        mig.compute_domain(f"cd-{i:05d}", namespaces[i % NAMESPACES]) for i in range(DOMAINS)
    ]
    mig.create_domains(api, objects, workers=8)
    create_seconds = time.monotonic() - began
    before = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["uid"]
        for o in mig.list_all(api, mig.CD_PLURAL, mig.OLD)
    }
    assert len(before) == DOMAINS
    mig.install_crds(api, storage=mig.NEW)

    started = time.monotonic()
    result = mig.run_hook(
        mig.hook(
            plane.admin_kubeconfig,
            "migrate",
            "--namespace",
            namespaces[0],
            "--snapshot-prefix",
            "bench",
            "--crds",
            f"{mig.CD_CRD},{mig.CLIQUE_CRD}",
            "--method",
            "rewrite",
        ),
        timeout=600,
    )
    total = time.monotonic() - started
    print(result.stdout[-4000:], result.stderr[-4000:])
    assert result.returncode == 0

    after = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["uid"]
        for o in mig.list_all(api, mig.CD_PLURAL)
    }
    lost = len(set(before.items()) - set(after.items()))
    stored_versions = dict(mig.stored(plane.etcd_url, mig.CD_PLURAL))
    not_migrated = sum(1 for v in stored_versions.values() if v != f"{mig.GROUP}/{mig.NEW}")
    rewrite = re.search(
        rf"rewrite: {re.escape(mig.CD_CRD)}: (\d+) written, .* in ([\d.]+)s", result.stdout
    )
    assert rewrite is not None, result.stdout
    written, rewrite_seconds = int(rewrite.group(1)), float(rewrite.group(2))
    report.save(
        "migration",
        {
            "domains": DOMAINS,
            "create_seconds": round(create_seconds, 1),
            "create_objects_per_second": round(DOMAINS / create_seconds, 1),
            "hook_total_seconds": round(total, 1),
            "target_seconds": TARGET_SECONDS,
            "rewrite_seconds": rewrite_seconds,
            "rewrite_objects_per_second": round(written / rewrite_seconds, 1),
            "hook_objects_per_second": round(DOMAINS / total, 1),
            "rewrite_rate_vs_create_rate": round(
                written / rewrite_seconds / (DOMAINS / create_seconds), 2
            ),
            "lost": lost,
            "stored_at_old_version_after": not_migrated,
            "etcd_objects_checked": len(stored_versions),
        },
    )
    assert lost == 0 and not_migrated == 0 and len(stored_versions) == DOMAINS
    ext = client.ApiextensionsV1Api(api)
    assert ext.read_custom_resource_definition(mig.CD_CRD).status.stored_versions == [mig.NEW]
    assert total <= TARGET_SECONDS, f"{total:.1f}s > {TARGET_SECONDS}s"
