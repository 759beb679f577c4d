"""The simulated kubelet's DRA decisions: what to prepare with whom, what to accept, unprepare."""

from __future__ import annotations

from typing import Any

from cdsim import controlplane
from cdsim.kubelet import dra
from computedomains.kube import wire

POD = "pod-uid"
A = dra.ClaimRef("ns", "a", "uid-a")
B = dra.ClaimRef("ns", "b", "uid-b")


def _claim(
    ref: dra.ClaimRef,
    drivers: list[str] | None = None,
    *,
    reserved: list[str] | None = None,
    owner: str | None = None,
) -> wire.ResourceClaim:
    claim: dict[str, Any] = {
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "status": {},
    }
    if owner:
        claim["metadata"]["ownerReferences"] = [{"kind": "Pod", "uid": owner}]
    if drivers is not None:
        results = [{"driver": d, "pool": "p", "device": f"d{i}"} for i, d in enumerate(drivers)]
        claim["status"]["allocation"] = {"devices": {"results": results}}
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": "p", "uid": uid} for uid in (reserved or [])
    ]
    return claim  # type: ignore[return-value]


def test_claim_view_reads_drivers_reservations_and_owners() -> None:
    view = dra.claim_view(_claim(A, ["y.example", "x.example", "x.example"], reserved=[POD]))
    assert view.ref == A
    assert view.drivers == ("x.example", "y.example")
    assert view.allocated
    assert view.reserved_for == {POD}
    unallocated = dra.claim_view(_claim(B))
    assert not unallocated.allocated and unallocated.drivers == ()


def _pod(**status: Any) -> wire.Pod:
    pod = {
        "metadata": {"uid": POD, "namespace": "ns", "name": "p"},
        "spec": {
            "resourceClaims": [
                {"name": "direct", "resourceClaimName": "a"},
                {"name": "made", "resourceClaimTemplateName": "t"},
                {"name": "pending", "resourceClaimTemplateName": "t"},
                {"name": "unneeded", "resourceClaimTemplateName": "t"},
            ]
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": "made", "resourceClaimName": "b"},
                {"name": "unneeded"},
            ],
            **status,
        },
    }
    return pod  # type: ignore[return-value]


def test_pod_claims_resolve_templates_through_the_pod_status() -> None:
    assert dra.pod_claims(_pod()) == (
        dra.PodClaim("direct", "a", generated=False),
        dra.PodClaim("made", "b", generated=True),
        dra.PodClaim("pending", None, generated=True),
    )


def test_is_active() -> None:
    assert dra.is_active(_pod(phase="Running"))
    assert not dra.is_active(_pod(phase="Succeeded"))
    assert not dra.is_active(_pod(phase="Failed"))
    deleted = _pod(phase="Running")
    deleted["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert not dra.is_active(deleted)


ENTRIES = (
    dra.PodClaim("direct", "a", generated=False),
    dra.PodClaim("made", "b", generated=True),
)


def _views(**claims: wire.ResourceClaim | None) -> dict[str, dra.ClaimView | None]:
    return {name: dra.claim_view(c) if c else None for name, c in claims.items()}


def test_one_call_per_driver_with_only_the_claims_it_has_not_prepared() -> None:
    views = _views(
        a=_claim(A, ["x.example", "y.example"], reserved=[POD]),
        b=_claim(B, ["x.example"], reserved=[POD], owner=POD),
    )
    plan = dra.plan_prepare(
        POD,
        "ns",
        ENTRIES,
        views,
        prepared={"uid-a": {"y.example"}},
        registered={"x.example", "y.example"},
    )
    assert plan.errors == []
    assert plan.calls == {"x.example": [A, B]}
    assert plan.claims == {"direct": A, "made": B}
    done = dra.plan_prepare(
        POD,
        "ns",
        ENTRIES,
        views,
        prepared={"uid-a": {"x.example", "y.example"}, "uid-b": {"x.example"}},
        registered=set(),
    )
    assert done.done and done.calls == {}


def test_problems_with_any_claim_stop_every_call() -> None:
    cases = {
        "ResourceClaim ns/a not found": _views(
            a=None, b=_claim(B, ["x"], reserved=[POD], owner=POD)
        ),
        "ResourceClaim ns/a is not allocated": _views(
            a=_claim(A, None, reserved=[POD]), b=_claim(B, ["x"], reserved=[POD], owner=POD)
        ),
        "pod is not in the reservedFor list of ResourceClaim ns/a": _views(
            a=_claim(A, ["x"], reserved=["other"]), b=_claim(B, ["x"], reserved=[POD], owner=POD)
        ),
        "ResourceClaim ns/b was not created for this pod": _views(
            a=_claim(A, ["x"], reserved=[POD]), b=_claim(B, ["x"], reserved=[POD], owner="other")
        ),
        "DRA driver y is not registered": _views(
            a=_claim(A, ["x"], reserved=[POD]), b=_claim(B, ["y"], reserved=[POD], owner=POD)
        ),
    }
    for message, views in cases.items():
        plan = dra.plan_prepare(POD, "ns", ENTRIES, views, prepared={}, registered={"x"})
        assert plan.errors == [message]
        assert plan.calls == {} and not plan.done
    waiting = dra.plan_prepare(
        POD, "ns", [dra.PodClaim("t", None, generated=True)], {}, prepared={}, registered={"x"}
    )
    assert waiting.errors == ["ResourceClaim for pod claim 't' has not been created yet"]


DEVICE = dra.Device(("req",), "pool", "dev", ("v.example/c=uid-a-dev",))


def test_prepare_answers_are_checked_strictly() -> None:
    ok, errors = dra.check_prepare(
        "x",
        [A, B],
        {"uid-a": dra.ClaimResult((DEVICE,)), "uid-b": dra.ClaimResult(error="jammed")},
    )
    assert ok == {"uid-a": (DEVICE,)}
    assert errors == ["NodePrepareResources of x failed for ResourceClaim ns/b: jammed"]
    ok, errors = dra.check_prepare("x", [A, B], {"uid-a": dra.ClaimResult((DEVICE,))})
    assert ok == {"uid-a": (DEVICE,)}
    assert errors == ["NodePrepareResources of x skipped ResourceClaim ns/b"]
    ok, errors = dra.check_prepare(
        "x", [A], {"uid-a": dra.ClaimResult((DEVICE,)), "uid-z": dra.ClaimResult()}
    )
    assert ok == {}
    assert errors == ["NodePrepareResources of x returned unexpected claim UIDs ['uid-z']"]


def test_unprepare_answers_are_checked_strictly() -> None:
    assert dra.check_unprepare("x", [A, B], {"uid-a": "", "uid-b": ""}) == (
        ["uid-a", "uid-b"],
        [],
    )
    done, errors = dra.check_unprepare("x", [A, B], {"uid-a": "busy"})
    assert done == []
    assert errors == [
        "NodeUnprepareResources of x failed for ResourceClaim ns/a: busy",
        "NodeUnprepareResources of x skipped ResourceClaim ns/b",
    ]
    assert dra.check_unprepare("x", [A], {"uid-a": "", "uid-q": ""})[0] == []


def test_claims_are_unprepared_per_driver_once_no_active_pod_uses_them() -> None:
    prepared = {
        "uid-a": dra.PreparedClaim(A, {"x": (DEVICE,), "y": ()}, {"p1", "p2"}),
        "uid-b": dra.PreparedClaim(B, {"x": ()}, {"p3"}),
    }
    assert dra.plan_unprepare(prepared, {"p1", "p3"}) == {}
    assert dra.plan_unprepare(prepared, {"p2"}) == {"x": [B]}
    assert dra.plan_unprepare(prepared, set()) == {"x": [A, B], "y": [A]}


def test_containers_get_the_cdi_ids_of_the_claims_and_requests_they_list() -> None:
    shared = dra.Device((), "pool", "all", ("v.example/c=common",))
    other = dra.Device(("other",), "pool", "o", ("v.example/c=other",))
    prepared = {"uid-a": dra.PreparedClaim(A, {"x": (DEVICE, shared, other)})}
    claims = {"direct": A}
    whole: wire.Container = {"resources": {"claims": [{"name": "direct"}]}}
    one: wire.Container = {"resources": {"claims": [{"name": "direct", "request": "req"}]}}
    none: wire.Container = {"resources": {"claims": [{"name": "unknown"}]}}
    assert dra.container_cdi_ids(whole, claims, prepared) == [
        "v.example/c=uid-a-dev",
        "v.example/c=common",
        "v.example/c=other",
    ]
    assert dra.container_cdi_ids(one, claims, prepared) == [
        "v.example/c=uid-a-dev",
        "v.example/c=common",
    ]
    assert dra.container_cdi_ids(none, claims, prepared) == []
    assert dra.pod_cdi_ids(["uid-a", "uid-missing"], prepared) == [
        "v.example/c=uid-a-dev",
        "v.example/c=common",
        "v.example/c=other",
    ]


def test_kwok_marks_claim_pods_ready_only_after_the_annotation_the_kubelet_sets() -> None:
    stages = controlplane.STAGES_FILE.read_text()
    assert f'.metadata.annotations["{dra.PREPARED_ANNOTATION}"] == "true"' in stages
