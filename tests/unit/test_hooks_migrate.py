"""Migration decisions: snapshot chunks, structural schema → JSON Schema, checkpoint/resume,
CRD views, StorageVersionMigration bodies, restore steps."""

from __future__ import annotations

import base64
import random
import string
from typing import Any

import pytest

from computedomains.api import constants
from computedomains.api import crds as api_crds
from computedomains.hooks import crdview, restoreplan, rewriteplan, schemas, snapshotplan

V1BETA1 = api_crds.COMPUTE_DOMAIN.version(constants.VERSION)
"""The fixtures below are v1beta1 objects (incumbent-shaped, with numNodes)."""


def cd(name: str, namespace: str = "ns", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
        **extra,
    }


# -- snapshot chunks -----------------------------------------------------------------------


def test_saved_form_drops_managed_fields_only() -> None:
    saved = snapshotplan.saved_form(cd("a"))
    assert "managedFields" not in saved["metadata"]
    assert saved["metadata"]["uid"] == "uid-a" and saved["spec"] == cd("a")["spec"]


def test_pack_round_trips_in_order_and_is_deterministic() -> None:
    objects = [snapshotplan.saved_form(cd(f"d{i:04d}")) for i in range(300)]
    chunks = snapshotplan.pack(objects)
    assert [o for c in chunks for o in snapshotplan.unpack(c)] == objects
    assert snapshotplan.pack(objects) == chunks


def test_pack_splits_chunks_that_compress_past_the_limit() -> None:
    # Random payloads barely compress: a 40 KiB limit forces many chunks.
    rng = random.Random(7)
    objects = [
        {**cd(f"d{i}"), "x": "".join(rng.choices(string.ascii_letters, k=3000))} for i in range(100)
    ]
    limit = 40 * 1024
    chunks = snapshotplan.pack(objects, limit=limit)
    assert len(chunks) > 5
    for chunk in chunks:
        assert len(base64.b64encode(chunk)) <= limit
    assert [o for c in chunks for o in snapshotplan.unpack(c)] == objects


def test_one_object_larger_than_a_chunk_is_refused_by_name() -> None:
    rng = random.Random(1)
    big = {**cd("huge"), "x": "".join(rng.choices(string.ascii_letters, k=20000))}
    with pytest.raises(snapshotplan.SnapshotError, match="ns/huge"):
        snapshotplan.pack([big], limit=4096)


def test_chunk_configmaps_are_labelled_and_read_back() -> None:
    chunk = snapshotplan.pack([cd("a")])[0]
    cm = snapshotplan.chunk_configmap("snap", 0, chunk, namespace="rel")
    assert cm["metadata"]["name"] == "snap-0"
    assert cm["metadata"]["labels"][snapshotplan.SNAPSHOT_LABEL] == "snap"
    assert cm["metadata"]["labels"][snapshotplan.PART_LABEL] == "objects"
    assert snapshotplan.chunk_of(cm) == chunk


def test_manifest_round_trip_reuse_and_verification() -> None:
    chunks = snapshotplan.pack([cd("a"), cd("b")])
    manifest = snapshotplan.Manifest(
        migration="m1",
        taken_at="2026-01-01T00:00:00Z",
        crds=({"name": "computedomains.resource.nvidia.com", "resourceVersion": "5"},),
        counts={"computedomains.resource.nvidia.com": 2},
        chunks=tuple(snapshotplan.digest(c) for c in chunks),
    )
    cm = snapshotplan.manifest_configmap("snap", manifest, namespace="rel")
    assert cm["metadata"]["name"] == "snap-manifest"
    back = snapshotplan.manifest_of(cm)
    assert back == manifest and back.total == 2
    assert snapshotplan.reusable(back, "m1")
    assert not snapshotplan.reusable(back, "m2")
    assert not snapshotplan.reusable(None, "m1")
    snapshotplan.verify(manifest, chunks)
    with pytest.raises(snapshotplan.SnapshotError, match="hash"):
        snapshotplan.verify(manifest, [snapshotplan.pack([cd("c")])[0]])
    with pytest.raises(snapshotplan.SnapshotError, match="chunks"):
        snapshotplan.verify(manifest, [])


def test_a_corrupt_manifest_counts_as_no_snapshot() -> None:
    assert snapshotplan.manifest_of({"data": {snapshotplan.MANIFEST_KEY: "{"}}) is None
    assert snapshotplan.manifest_of({"data": {}}) is None


# -- schema conversion and validation ------------------------------------------------------


def test_kubernetes_extensions_become_json_schema() -> None:
    structural = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "port": {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
            },
            "weight": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            "cap": {"type": "integer", "maximum": 10, "exclusiveMaximum": False},
            "note": {"type": "string", "nullable": True},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        },
        "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
    }
    converted = schemas.to_json_schema(structural)
    assert not any(k.startswith("x-kubernetes-") for k in str(converted).split("'"))
    props = converted["properties"]
    assert "type" not in props["port"]
    assert props["weight"] == {"type": "number", "exclusiveMinimum": 0}
    assert props["cap"] == {"type": "integer", "maximum": 10}
    assert props["note"]["type"] == ["string", "null"]
    assert props["tags"]["uniqueItems"] is True


def test_the_real_crd_schemas_compile_and_accept_a_valid_domain() -> None:
    for resource in api_crds.RESOURCES:
        for version in resource.versions:
            schemas.Validator(resource.kind, api_crds.open_api_schema(version))
    validator = schemas.Validator("ComputeDomain", api_crds.open_api_schema(V1BETA1))
    obj = cd("good")
    assert validator.problems(obj) == []


def test_problems_name_the_object_and_the_field() -> None:
    validator = schemas.Validator("ComputeDomain", api_crds.open_api_schema(V1BETA1))
    bad = cd("bad", namespace="team")
    bad["spec"]["numNodes"] = -3
    del bad["spec"]["channel"]["resourceClaimTemplate"]["name"]
    bad["status"] = {
        "status": "Bogus",
        "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0},
            {"name": "n1", "ipAddress": "10.0.0.2", "cliqueID": "c.0", "index": "one"},
        ],
    }
    found = {(p.path, p.namespace, p.name, p.kind) for p in validator.problems(bad)}
    paths = {p[0] for p in found}
    assert {
        "spec.numNodes",
        "spec.channel.resourceClaimTemplate.name",
        "status.status",
        "status.nodes[1].index",
        "status.nodes[1]",
    } <= paths
    assert all(p[1:] == ("team", "bad", "ComputeDomain") for p in found)
    line = validator.problems(bad)[0].line()
    assert line.startswith("INVALID ComputeDomain team/bad: ")


def test_format_path() -> None:
    assert schemas.format_path(()) == "<root>"
    assert schemas.format_path(("status", "nodes", 2, "index")) == "status.nodes[2].index"


# -- CRD view ------------------------------------------------------------------------------


def crd(stored: list[str], storage: str = "v1beta2") -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    return {
        "metadata": {
            "name": "computedomains.resource.nvidia.com",
            "uid": "u1",
            "resourceVersion": "42",
        },
        "spec": {
            "group": "resource.nvidia.com",
            "scope": "Namespaced",
            "names": {"plural": "computedomains", "kind": "ComputeDomain"},
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": v == storage,
                    "schema": {"openAPIV3Schema": schema},
                    **({"subresources": {"status": {}}} if v == storage else {}),
                }
                for v in ("v1beta1", "v1beta2")
            ],
        },
        "status": {"storedVersions": stored},
    }


def test_view_reads_the_storage_version_from_the_crd() -> None:
    view = crdview.view(crd(["v1beta1", "v1beta2"]))
    assert view.storage_version == "v1beta2" and view.needs_rewrite
    assert view.resource.path() == "/apis/resource.nvidia.com/v1beta2/computedomains"
    assert view.status_subresource and view.namespaced
    assert not crdview.view(crd(["v1beta2"])).needs_rewrite
    assert crdview.view(crd(["v1beta1"], storage="v1beta1")).storage_version == "v1beta1"


def test_migration_id_is_stable_and_changes_with_stored_versions() -> None:
    a = crdview.migration_id([crdview.view(crd(["v1beta1", "v1beta2"]))])
    assert a == crdview.migration_id([crdview.view(crd(["v1beta1", "v1beta2"]))])
    assert a != crdview.migration_id([crdview.view(crd(["v1beta2"]))])


def test_pruned_status_keeps_the_resource_version() -> None:
    body = crdview.pruned_status(crd(["v1beta1", "v1beta2"]))
    assert body["status"]["storedVersions"] == ["v1beta2"]
    assert body["metadata"]["resourceVersion"] == "42"


def test_a_crd_without_one_storage_version_is_refused() -> None:
    broken = crd(["v1beta1"])
    for version in broken["spec"]["versions"]:
        version["storage"] = False
    with pytest.raises(crdview.CRDError, match="one storage version"):
        crdview.view(broken)


def test_object_key_sorts_like_the_api_server_lists() -> None:
    assert crdview.object_key(cd("x", "a")) == "a/x"
    assert crdview.object_key({"metadata": {"name": "n"}}) == "n"


# -- checkpoint and resume -----------------------------------------------------------------

CDS, CLIQUES = "computedomains.x", "computedomaincliques.x"


def test_no_checkpoint_or_another_migrations_starts_fresh() -> None:
    assert rewriteplan.start(None, migration="m", resource=CDS) == rewriteplan.Start(skip=False)
    other = rewriteplan.Checkpoint(migration="old", resource=CDS, continue_token="t", last="a/b")
    assert not rewriteplan.start(other, migration="m", resource=CDS).resumed


def test_resume_from_the_page_after_the_last_completed_one() -> None:
    cp = rewriteplan.Checkpoint(migration="m")
    cp = rewriteplan.after_page(cp, resource=CDS, continue_token="t1", last="a/d9", written=10)
    cp = rewriteplan.after_page(cp, resource=CDS, continue_token="t2", last="b/d3", written=10)
    back = rewriteplan.Checkpoint.from_data(cp.to_data())
    assert back == cp
    begin = rewriteplan.start(back, migration="m", resource=CDS)
    assert begin == rewriteplan.Start(skip=False, continue_token="t2", after="b/d3", count=20)
    assert begin.resumed
    # The other CRD was not started yet.
    assert not rewriteplan.start(back, migration="m", resource=CLIQUES).resumed


def test_a_finished_resource_is_skipped_and_the_next_starts_clean() -> None:
    cp = rewriteplan.after_page(
        rewriteplan.Checkpoint(migration="m"),
        resource=CDS,
        continue_token="",
        last="z/z",
        written=5,
    )
    cp = rewriteplan.finished(cp, resource=CDS)
    assert rewriteplan.start(cp, migration="m", resource=CDS).skip
    assert rewriteplan.start(cp, migration="m", resource=CLIQUES) == rewriteplan.Start(skip=False)
    cp = rewriteplan.after_page(cp, resource=CLIQUES, continue_token="t", last="a/c", written=3)
    assert cp.count == 3 and cp.done == (CDS,)


def test_without_a_token_skip_what_was_completed() -> None:
    keys = ["a/1", "a/2", "b/1", "b/2"]
    assert rewriteplan.remaining(keys, "a/2") == [2, 3]
    assert rewriteplan.remaining(keys, "") == [0, 1, 2, 3]
    assert rewriteplan.remaining(keys, "z/z") == []


def test_an_unreadable_checkpoint_is_no_checkpoint() -> None:
    assert rewriteplan.Checkpoint.from_data(None) is None
    assert rewriteplan.Checkpoint.from_data({"migration": "m", "count": "x"}) is None


# -- StorageVersionMigration ---------------------------------------------------------------


def test_svm_version_prefers_beta_and_the_body_fits_each() -> None:
    assert rewriteplan.pick_svm_version(["v1alpha1", "v1beta1"]) == "v1beta1"
    assert rewriteplan.pick_svm_version(["v1alpha1"]) == "v1alpha1"
    assert rewriteplan.pick_svm_version([]) is None
    beta = rewriteplan.svm_body(
        name="n", api_version="v1beta1", group="g", plural="p", storage_version="v2"
    )
    assert beta["spec"]["resource"] == {"group": "g", "resource": "p"}
    alpha = rewriteplan.svm_body(
        name="n", api_version="v1alpha1", group="g", plural="p", storage_version="v2"
    )
    assert alpha["apiVersion"] == "storagemigration.k8s.io/v1alpha1"
    assert alpha["spec"]["resource"]["version"] == "v2"


@pytest.mark.parametrize(
    ("conditions", "phase"),
    [
        ([], rewriteplan.Phase.PENDING),
        ([{"type": "Running", "status": "True"}], rewriteplan.Phase.RUNNING),
        (
            [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}],
            rewriteplan.Phase.SUCCEEDED,
        ),
        ([{"type": "Failed", "status": "True", "message": "boom"}], rewriteplan.Phase.FAILED),
    ],
)
def test_svm_phase(conditions: list[dict[str, str]], phase: rewriteplan.Phase) -> None:
    assert rewriteplan.svm_phase({"status": {"conditions": conditions}})[0] is phase


# -- restore -------------------------------------------------------------------------------


def test_restore_creates_a_missing_object_without_server_fields() -> None:
    saved = snapshotplan.saved_form(cd("a", status={"status": "Ready"}))
    saved["metadata"]["resourceVersion"] = "9"
    step = restoreplan.step(saved, None, status_subresource=True)
    assert step.action is restoreplan.Action.CREATE
    assert "resourceVersion" not in step.body["metadata"]
    assert "uid" not in step.body["metadata"]
    assert step.status == {"status": "Ready"}


def test_restore_puts_back_spec_labels_and_annotations_only() -> None:
    saved = snapshotplan.saved_form(cd("a", status={"status": "Ready"}))
    saved["metadata"]["labels"] = {"team": "x"}
    live = cd("a", status={"status": "NotReady"})
    live["metadata"]["finalizers"] = ["f"]
    live["metadata"]["annotations"] = {"stray": "1"}
    live["spec"]["numNodes"] = 4
    step = restoreplan.step(saved, live, status_subresource=True)
    assert step.action is restoreplan.Action.UPDATE
    assert step.body["spec"]["numNodes"] == 0
    assert step.body["metadata"]["labels"] == {"team": "x"}
    assert "annotations" not in step.body["metadata"]
    assert step.body["metadata"]["finalizers"] == ["f"]
    assert step.status == {"status": "Ready"}


def test_restore_of_an_unchanged_object_writes_nothing() -> None:
    saved = snapshotplan.saved_form(cd("a", status={"status": "Ready"}))
    step = restoreplan.step(saved, cd("a", status={"status": "Ready"}), status_subresource=True)
    assert step == restoreplan.Step(restoreplan.Action.UNCHANGED, None, None)


def test_restore_of_a_kind_without_status_subresource_writes_its_fields() -> None:
    saved = {
        "apiVersion": "g/v",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "u.c", "namespace": "d"},
        "daemons": [{"nodeName": "n"}],
    }
    live = {**saved, "daemons": []}
    step = restoreplan.step(saved, live, status_subresource=False)
    assert step.action is restoreplan.Action.UPDATE
    assert step.body["daemons"] == [{"nodeName": "n"}] and step.status is None
