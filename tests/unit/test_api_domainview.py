"""One ComputeDomain view: validated for the controller, peeked at for admission and hooks."""

from __future__ import annotations

import copy
from typing import Any

from computedomains.api import constants, domainview, models

V2 = {
    "apiVersion": constants.API_VERSION_V1BETA2,
    "kind": "ComputeDomain",
    "metadata": {"name": "cd", "namespace": "ns", "uid": "u1", "generation": 3,
                 "finalizers": [constants.FINALIZER, "other/x"]},
    "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"},
                         "allocationMode": "All"},
             "placement": {"clique": "Required"}},
}  # fmt: skip


def _with(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(V2)
    obj.update(changes)
    return obj


def test_parse_reads_the_spec_lifecycle_and_generation() -> None:
    domain = domainview.Domain.parse(V2)
    assert (domain.uid, domain.key, domain.template) == ("u1", "ns/cd", "cd-channel")
    assert domain.allocation_mode is models.AllocationMode.ALL
    assert domain.clique is models.CliquePlacement.REQUIRED
    assert domain.finalized and domain.generation == 3 and not domain.deleting


def test_a_status_the_model_cannot_read_costs_the_status_only() -> None:
    domain = domainview.Domain.parse(_with(status={"status": "FromTheFuture"}))
    assert domain.status is None
    assert (domain.template, domain.clique) == ("cd-channel", models.CliquePlacement.REQUIRED)


def test_a_spec_the_model_cannot_read_leaves_the_identity_and_no_template() -> None:
    spec = copy.deepcopy(V2["spec"])
    spec["channel"]["allocationMode"] = "FromTheFuture"
    domain = domainview.Domain.parse(_with(spec=spec))
    assert (domain.uid, domain.template, domain.finalized) == ("u1", "", True)
    # Admission still sees which template it names.
    assert domainview.Domain.peek(_with(spec=spec)).template == "cd-channel"


def test_peek_reads_what_admission_needs_and_tolerates_any_shape() -> None:
    peeked = domainview.Domain.peek(V2)
    assert (peeked.template, peeked.clique, peeked.finalized) == (
        "cd-channel", models.CliquePlacement.REQUIRED, True
    )  # fmt: skip
    assert peeked.status is None
    odd = domainview.Domain.peek(_with(spec="text"))
    assert (odd.template, odd.clique) == ("", models.CliquePlacement.NONE)
    bogus = domainview.Domain.peek(_with(spec={"placement": {"clique": "Bogus"}}))
    assert bogus.clique is models.CliquePlacement.NONE


def test_a_view_is_a_key_whatever_its_status() -> None:
    first = domainview.Domain.parse(V2)
    later = domainview.Domain.parse(_with(status={"status": "Ready", "nodes": []}))
    assert {first: 1}[later] == 1
