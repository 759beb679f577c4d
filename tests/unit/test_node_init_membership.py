"""node-init's fault grace reads membership from the record, not from the label copy.

A node is in a ComputeDomain when the clique objects of its clique name it (the record the
controller writes first), or when the kubelet plugin's prepared claims hold it; the node's
domain label is the controller's copy, written after the status and possibly refused. Against
the in-memory API (``FakeApi``).
"""

from __future__ import annotations

import datetime
import pathlib
from collections.abc import Callable
from typing import Any, cast

from computedomains.api import constants, fabricverdict, models, resources
from computedomains.api.fabricverdict import Grace, VerdictKind
from computedomains.fabric import discovery, verdictfile
from computedomains.fabric.model import Reason, Verdict
from computedomains.kube import client, events
from computedomains.nodeinit import run, settings
from tests.support.fakeapi import FakeApi

NODE = "n1"
NAMESPACE = "drv"
CLIQUE = "386b0bf3-73f0-5054-949b-d5b6149cb09f.32766"
DOMAIN = "d0d0d0d0-0000-4000-8000-000000000001"
HEALTHY = Verdict(VerdictKind.HEALTHY, Reason.HEALTHY, "4 GPUs registered", clique=CLIQUE)
NVML_ERROR = Verdict(VerdictKind.BROKEN, Reason.DISCOVERY_FAILED, "NVML query failed: Unknown")
OBSERVED = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
CLIQUES = resources.CLIQUES.path(namespace=NAMESPACE)


def _node(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": NODE, "uid": "node-1", "resourceVersion": "1",
                         "labels": {constants.CLIQUE_LABEL: CLIQUE, **labels}}}  # fmt: skip


def _clique_object(*members: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": models.clique_name(DOMAIN, CLIQUE),
            "namespace": NAMESPACE,
            "labels": {constants.COMPUTE_DOMAIN_LABEL: DOMAIN, constants.CLIQUE_ID_LABEL: CLIQUE},
            "annotations": {constants.CLIQUE_MEMBERS_ANNOTATION: ",".join(members)},
        },
        "daemons": [],
    }


def _publisher(
    tmp_path: pathlib.Path,
    *,
    labels: dict[str, str],
    record: list[dict[str, Any]],
    held: Callable[[], bool] = lambda: False,
) -> tuple[run.Publisher, FakeApi, pathlib.Path]:
    """A publisher of node n1 whose published verdict is usable (healthy, in CLIQUE)."""
    api = FakeApi()
    api.objects[resources.NODES.path(NODE)] = _node(labels)
    api.objects[CLIQUES] = {"metadata": {"resourceVersion": "1"}, "items": record}
    verdict_file = tmp_path / "fabric-verdict.json"
    fabricverdict.write(verdict_file, verdictfile.build(NODE, HEALTHY, None, OBSERVED))
    config = settings.Settings(
        node_name=NODE, namespace=NAMESPACE, discovery=discovery.DiscoverySettings(),
        verdict_file=verdict_file, fault_grace=Grace(checks=3, seconds=180),
    )  # fmt: skip
    kube = cast(client.Client, api)
    publisher = run.Publisher(
        kube, config, recorder=events.Recorder(kube, component="test", host=NODE),
        log=lambda _: None, clock=lambda: 1000.0, held=held,
    )  # fmt: skip
    return publisher, api, verdict_file


def _published(verdict_file: pathlib.Path) -> VerdictKind | None:
    stored = fabricverdict.read(verdict_file)
    return None if stored is None else stored.verdict


def _fault() -> discovery.Observation:
    return discovery.Observation(report=None, verdict=NVML_ERROR, observed_at=OBSERVED)


def test_a_node_the_record_names_holds_its_verdict_without_the_label(
    tmp_path: pathlib.Path,
) -> None:
    """The controller's label write was refused (or is late): the record alone says."""
    publisher, api, verdict_file = _publisher(tmp_path, labels={}, record=[_clique_object(NODE)])
    publisher.check(_fault())
    assert _published(verdict_file) is VerdictKind.HEALTHY  # held, not degraded
    assert api.writes() == []  # nothing on the Node, no Event
    assert ("GET", CLIQUES) in api.calls  # the record was read, in the driver's namespace


def test_a_label_the_record_does_not_back_holds_nothing(tmp_path: pathlib.Path) -> None:
    """A label left behind (the node left the domain, its removal refused) keeps no fault."""
    publisher, api, verdict_file = _publisher(
        tmp_path, labels={constants.COMPUTE_DOMAIN_LABEL: DOMAIN}, record=[_clique_object("n2")]
    )
    publisher.check(_fault())
    assert _published(verdict_file) is VerdictKind.BROKEN
    assert (
        api.objects[resources.NODES.path(NODE)]["metadata"]["labels"].get(constants.CLIQUE_LABEL)
        is None
    )  # the clique label is withdrawn: the fault shows at once


def test_the_plugins_prepared_claims_hold_the_node_without_asking_the_record(
    tmp_path: pathlib.Path,
) -> None:
    publisher, api, verdict_file = _publisher(tmp_path, labels={}, record=[], held=lambda: True)
    publisher.check(_fault())
    assert _published(verdict_file) is VerdictKind.HEALTHY
    assert ("GET", CLIQUES) not in api.calls


def test_the_record_is_read_only_during_a_fault_over_a_usable_verdict(
    tmp_path: pathlib.Path,
) -> None:
    publisher, api, _ = _publisher(tmp_path, labels={}, record=[_clique_object(NODE)])
    publisher.check(discovery.Observation(report=None, verdict=HEALTHY, observed_at=OBSERVED))
    assert ("GET", CLIQUES) not in api.calls  # a healthy check costs no list
