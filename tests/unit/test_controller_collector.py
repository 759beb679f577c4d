"""What the collector picks: objects and labels naming a domain that does not exist."""

from __future__ import annotations

from typing import Any

from computedomains.api import constants
from computedomains.controller import collector


def labelled(name: str, uid: str, namespace: str = "") -> dict[str, Any]:
    labels = {constants.COMPUTE_DOMAIN_LABEL: uid} if uid else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"obj-{name}",
                         "resourceVersion": "7", "labels": labels}}  # fmt: skip


def test_find_picks_leftovers_of_vanished_domains_only() -> None:
    found = collector.find(
        live={"live"},
        cliques=[labelled("live.c", "live", "drv"), labelled("gone.c", "gone", "drv")],
        templates=[labelled("t", "gone", "ns"), labelled("t2", "live", "ns")],
        node_objects=[labelled("n1", "gone"), labelled("n2", "live"), labelled("n3", "")],
    )
    assert [(f.kind, f.namespace, f.name, f.domain) for f in found] == [
        ("clique", "drv", "gone.c", "gone"),
        ("template", "ns", "t", "gone"),
        ("label", "", "n1", "gone"),
    ]
    assert found[0].uid == "obj-gone.c"
    assert found[0].resource_version == "7"
