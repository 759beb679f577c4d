"""Clique placement at pod admission: the JSONPatch for each shape a pod may have."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from computedomains.api import constants, domainview
from computedomains.api.models import CliquePlacement
from computedomains.webhook import podaffinity, review

NS = "team-a"
LABEL = podaffinity.DOMAIN_LABEL
TERM = {"labelSelector": {"matchLabels": {LABEL: "uid-1"}}, "topologyKey": constants.CLIQUE_LABEL}
PREFERRED = {"weight": 100, "podAffinityTerm": TERM}


def _domain(clique: CliquePlacement, *, template: str = "cd-channel", name: str = "cd",
            namespace: str = NS, uid: str = "uid-1") -> domainview.Domain:  # fmt: skip
    return domainview.Domain(
        namespace=namespace,
        name=name,
        uid=domainview.DomainUID(uid),
        template=template,
        clique=clique,
    )


def _pod(**spec: Any) -> dict[str, Any]:
    claims = [{"name": "ch", "resourceClaimTemplateName": "cd-channel"}]
    base = {"containers": [{"name": "c", "image": "i"}], "resourceClaims": claims}
    return {"metadata": {"name": "p"}, "spec": base | spec}


def _request(pod: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "r", "operation": "CREATE", "namespace": NS, "object": pod}


def _apply_add(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply RFC 6902 ``add`` operations (the only kind the webhook makes) as the API server."""
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target: Any = doc
        for part in parents:
            target = target[part]  # a missing parent is an invalid patch: KeyError
        value = copy.deepcopy(op["value"])  # the API server gets JSON: no shared objects
        if isinstance(target, list):
            assert last == "-", "the webhook only appends to lists"
            target.append(value)
        else:
            target[last] = value
    return doc


def _applied(pod: dict[str, Any], known: list[domainview.Domain]) -> dict[str, Any]:
    verdict = podaffinity.place(_request(pod), known)
    assert verdict.allowed
    return _apply_add(copy.deepcopy(pod), verdict.patch)


def test_required_adds_the_label_and_a_required_affinity_term() -> None:
    pod = _applied(_pod(), [_domain(CliquePlacement.REQUIRED)])
    assert pod["metadata"]["labels"] == {LABEL: "uid-1"}
    assert pod["spec"]["affinity"] == {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}
    }


def test_preferred_adds_a_preferred_term_of_weight_100() -> None:
    pod = _applied(_pod(), [_domain(CliquePlacement.PREFERRED)])
    assert pod["spec"]["affinity"] == {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [PREFERRED]}
    }


@pytest.mark.parametrize(
    "known",
    [
        [_domain(CliquePlacement.NONE)],
        [_domain(CliquePlacement.REQUIRED, template="other")],
        [_domain(CliquePlacement.REQUIRED, namespace="team-b")],
        [],
    ],
    ids=["placement-none", "other-template", "other-namespace", "no-domain"],
)
def test_pods_of_no_placed_domain_are_left_alone(known: list[domainview.Domain]) -> None:
    verdict = podaffinity.place(_request(_pod()), known)
    assert verdict.allowed and verdict.patch == [] and not verdict.warnings


def test_a_pod_without_template_claims_is_left_alone() -> None:
    pod = _pod(resourceClaims=[{"name": "x", "resourceClaimName": "made-by-hand"}])
    assert podaffinity.place(_request(pod), [_domain(CliquePlacement.REQUIRED)]).patch == []


def test_existing_labels_and_affinities_are_kept() -> None:
    node_affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
    }
    pod = _pod(affinity={"nodeAffinity": node_affinity})
    pod["metadata"]["labels"] = {"app": "train"}
    out = _applied(pod, [_domain(CliquePlacement.REQUIRED)])
    assert out["metadata"]["labels"] == {"app": "train", LABEL: "uid-1"}
    assert out["spec"]["affinity"]["nodeAffinity"] == node_affinity
    assert out["spec"]["affinity"]["podAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [TERM]
    }


def test_an_existing_term_list_is_appended_to() -> None:
    mine = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    pod = _pod(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [mine]}})
    out = _applied(pod, [_domain(CliquePlacement.REQUIRED)])
    assert out["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == [mine, TERM]


def test_an_existing_pod_affinity_of_the_other_kind_gets_the_list() -> None:
    mine = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    pod = _pod(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [mine]}})
    out = _applied(pod, [_domain(CliquePlacement.PREFERRED)])
    assert out["spec"]["affinity"]["podAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [mine],
        "preferredDuringSchedulingIgnoredDuringExecution": [PREFERRED],
    }


def test_a_pod_placed_already_gets_no_second_patch() -> None:
    once = _applied(_pod(), [_domain(CliquePlacement.REQUIRED)])
    assert podaffinity.place(_request(once), [_domain(CliquePlacement.REQUIRED)]).patch == []


def _two_domains(
    a: CliquePlacement, b: CliquePlacement
) -> tuple[dict[str, Any], list[domainview.Domain]]:
    """A pod claiming the channels of two domains, ``a`` and ``b``, and those domains."""
    pod = _pod(resourceClaims=[
        {"name": "a", "resourceClaimTemplateName": "a-channel"},
        {"name": "b", "resourceClaimTemplateName": "b-channel"},
    ])  # fmt: skip
    return pod, [
        _domain(a, name="a", template="a-channel", uid="u-a"),
        _domain(b, name="b", template="b-channel", uid="u-b"),
    ]


def test_a_pod_of_two_placed_domains_gets_a_warning_and_no_placement() -> None:
    pod, known = _two_domains(CliquePlacement.REQUIRED, CliquePlacement.PREFERRED)
    verdict = podaffinity.place(_request(pod), known)
    assert verdict.allowed and verdict.patch == []
    assert "a, b" in verdict.warnings[0]


def test_the_label_key_is_escaped_in_the_pointer() -> None:
    pod = _pod()
    pod["metadata"]["labels"] = {}
    [op, _] = podaffinity.patch(pod, _domain(CliquePlacement.REQUIRED))
    assert op["path"] == "/metadata/labels/computedomains.io~1domain"


# -- domains apart (--spread-domains) -------------------------------------------------------

SPREAD = {
    "labelSelector": {"matchExpressions": [
        {"key": LABEL, "operator": "Exists"},
        {"key": LABEL, "operator": "NotIn", "values": ["uid-1"]},
    ]},
    "namespaceSelector": {},  # every namespace: domains of other tenants too
    "topologyKey": "kubernetes.io/hostname",
}  # fmt: skip
ANTI = "requiredDuringSchedulingIgnoredDuringExecution"


def _spread(pod: dict[str, Any], known: list[domainview.Domain]) -> dict[str, Any]:
    verdict = podaffinity.place(_request(pod), known, spread=True)
    assert verdict.allowed and not verdict.warnings
    return _apply_add(copy.deepcopy(pod), verdict.patch)


def test_spread_labels_any_domains_pod_and_keeps_other_domains_off_its_node() -> None:
    pod = _spread(_pod(), [_domain(CliquePlacement.NONE)])
    assert pod["metadata"]["labels"] == {LABEL: "uid-1"}
    assert pod["spec"]["affinity"] == {"podAntiAffinity": {ANTI: [SPREAD]}}


def test_spread_and_clique_placement_both_land_in_one_affinity() -> None:
    pod = _spread(_pod(), [_domain(CliquePlacement.PREFERRED)])
    assert pod["spec"]["affinity"] == {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [PREFERRED]},
        "podAntiAffinity": {ANTI: [SPREAD]},
    }
    again = podaffinity.place(_request(pod), [_domain(CliquePlacement.PREFERRED)], spread=True)
    assert again.patch == [], "a pod placed already gets no second term"


def test_spread_appends_to_the_users_own_anti_affinity() -> None:
    mine = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}
    soft = {"weight": 5, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    node_affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
    }
    pod = _pod(affinity={"nodeAffinity": node_affinity,
                         "podAntiAffinity": {ANTI: [mine], preferred: [soft]}})  # fmt: skip
    out = _spread(pod, [_domain(CliquePlacement.REQUIRED)])
    assert out["spec"]["affinity"] == {
        "nodeAffinity": node_affinity,
        "podAntiAffinity": {ANTI: [mine, SPREAD], preferred: [soft]},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]},
    }


def test_spread_leaves_pods_of_no_domain_or_of_two_alone() -> None:
    assert podaffinity.place(_request(_pod()), [], spread=True).patch == []
    pod, known = _two_domains(CliquePlacement.NONE, CliquePlacement.NONE)
    verdict = podaffinity.place(_request(pod), known, spread=True)
    assert verdict.patch == [] and not verdict.warnings


def test_spread_and_clique_from_no_affinity_each_operation_adds_only_its_own_term() -> None:
    pod = _pod()
    ops = podaffinity.place(_request(pod), [_domain(CliquePlacement.REQUIRED)], spread=True).patch
    assert [op["path"] for op in ops] == [
        "/metadata/labels", "/spec/affinity", "/spec/affinity/podAntiAffinity",
    ]  # fmt: skip
    assert ops[1]["value"] == {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}
    }
    out = _apply_add(copy.deepcopy(pod), ops)
    assert out["spec"]["affinity"] == {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]},
        "podAntiAffinity": {ANTI: [SPREAD]},
    }


def test_the_warning_names_only_the_domains_that_ask_for_a_clique() -> None:
    pod, known = _two_domains(CliquePlacement.REQUIRED, CliquePlacement.NONE)
    verdict = podaffinity.place(_request(pod), known, spread=True)
    assert verdict.patch == [] and "(a)" in verdict.warnings[0]


# -- the domain label is the webhook's alone -----------------------------------------------


def _forged(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["labels"] = {LABEL: "uid-of-someone-else", "app": "x"}
    return pod


@pytest.mark.parametrize(
    "known",
    [[], [_domain(CliquePlacement.REQUIRED, template="other")],
     [_domain(CliquePlacement.NONE, uid="u-a", template="a-channel"),
      _domain(CliquePlacement.NONE, uid="u-b", template="a-channel", name="b")]],
    ids=["no-domain", "another-template", "two-domains"],
)  # fmt: skip
def test_a_forged_domain_label_is_removed_with_a_warning(known: list[domainview.Domain]) -> None:
    pod = _forged(_pod(resourceClaims=[{"name": "a", "resourceClaimTemplateName": "a-channel"}]))
    verdict = podaffinity.place(_request(pod), known, spread=True)
    assert verdict.allowed
    assert verdict.patch == [{"op": "remove", "path": "/metadata/labels/computedomains.io~1domain"}]
    assert any("removed the label" in w for w in verdict.warnings)


def test_a_forged_label_on_a_domains_pod_is_replaced_by_its_domains_uid() -> None:
    pod = _applied(_forged(_pod()), [_domain(CliquePlacement.NONE)])
    assert pod["metadata"]["labels"] == {LABEL: "uid-1", "app": "x"}


def test_a_domain_being_deleted_places_nothing() -> None:
    dying = dataclasses.replace(_domain(CliquePlacement.REQUIRED), deleting=True)
    assert podaffinity.place(_request(_pod()), [dying], spread=True) == review.Verdict()
