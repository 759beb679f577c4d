"""At ``-v 1`` the kubelet plugin logs each decision with its inputs: a prepare, a slice publish."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import pytest

from computedomains import flags
from computedomains.api import constants, fabricverdict, resources
from computedomains.kube import nodes, resourceclaims
from computedomains.kubeletplugin import (
    claims,
    config,
    devices,
    domainlookup,
    errors,
    ledger,
    prepare,
    slices,
)

NO_FABRIC = fabricverdict.NodeFabric("no-fabric", "NoFabric", "", "", 0)
HEALTHY = fabricverdict.NodeFabric("healthy", "FabricHealthy", "", "abc.1", 2048)
DOMAIN = {"metadata": {"uid": "cd-1", "namespace": "team-a", "name": "cd"}}


def _claim(name: str, uid: str, domain: str) -> dict[str, Any]:
    params = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CHANNEL_CONFIG_KIND,
        "domainID": domain,
    }
    result = {"request": "channel", "driver": constants.DRIVER_NAME, "pool": "n1",
              "device": "channel-0"}  # fmt: skip
    opaque = {"driver": constants.DRIVER_NAME, "parameters": params}
    return {
        "metadata": {"uid": uid, "namespace": "team-a", "name": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [result],
                    "config": [{"source": "FromClaim", "requests": [], "opaque": opaque}],
                }
            },
        },
    }


class Api:
    """Claims, one ComputeDomain, the node and its slice, served by path."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.claims = {resourceclaims.path("team-a", o["metadata"]["name"]): o for o in objects}
        self.created: list[dict[str, Any]] = []

    def find(self, path: str, **_: Any) -> dict[str, Any] | None:
        return self.claims.get(path)

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        if path == nodes.path("n1"):
            return {"metadata": {"uid": "node-uid"}}
        listed = resources.COMPUTE_DOMAINS.path(namespace="team-a")
        return {"items": [DOMAIN] if path in (listed, resources.COMPUTE_DOMAINS.path()) else []}

    def create(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.created.append(body)
        return body


def _config(tmp_path: pathlib.Path) -> config.PluginConfig:
    return flags.parse(
        config.PluginConfig,
        ["--node-name=n1", f"--cdi-root={tmp_path / 'cdi'}",
         f"--kubelet-plugins-dir={tmp_path / 'plugins'}"],
    )  # fmt: skip


def _prepare(api: Api, cfg: config.PluginConfig, uid: str, name: str, recorded: str) -> str:
    """Prepare the claim; "" when it prepared, else the reason it was refused."""
    book = ledger.Ledger(
        checkpoint_file=cfg.checkpoint_file, cdi_root=cfg.cdi_root, clock=lambda: 1.0
    )
    preparer = prepare.Preparer(
        cfg, api=api, book=book, domains=domainlookup.DomainLookup(api),
        fabric=lambda: NO_FABRIC, recorded=lambda: recorded,
    )  # fmt: skip
    try:
        preparer.prepare(claims.ClaimRef(uid, "team-a", name), deadline=float("inf"))
    except errors.PrepareError as exc:
        return exc.reason
    return ""


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]


def test_the_prepare_decision_names_claim_domain_fabric_and_holders(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = Api(_claim("c1", "u1", "cd-1"), _claim("c2", "u2", "cd-9"))
    cfg = _config(tmp_path)
    cfg.plugin_dir.mkdir(parents=True)
    with caplog.at_level(logging.DEBUG, logger="computedomains"):
        assert _prepare(api, cfg, "u1", "c1", recorded="") == ""
        assert _prepare(api, cfg, "u1", "c1", recorded="cd-2") == "NodeInAnotherComputeDomain"
        assert _prepare(api, cfg, "u2", "c2", recorded="") == "ComputeDomainNotFound"
    prepared, busy, refused = [line for line in _lines(caplog) if "prepare decision" in line]
    assert prepared == (
        "prepare decision for claim team-a/c1 (u1) on node n1: prepare; "
        "ComputeDomain team-a/cd (cd-1), devices channel-0, fabric no-fabric (clique -), "
        "recorded holder none, other holder none"
    )
    assert ": retry (NodeInAnotherComputeDomain: " in busy
    assert "recorded holder cd-2, other holder cd-2" in busy
    assert "claim team-a/c2 (u2)" in refused and ": refuse (ComputeDomainNotFound: " in refused
    assert "domain not resolved" in refused

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="computedomains"):
        assert _prepare(api, cfg, "u2", "c2", recorded="") == "ComputeDomainNotFound"
    assert not [r for r in caplog.records if "prepare decision" in r.getMessage()]


def test_the_slice_decision_names_fabric_holder_and_turn(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = Api()
    cfg = _config(tmp_path)
    publisher = slices.Publisher(
        api, cfg, holder=lambda clique: "cd-1", turn=lambda: "", fabric=lambda: HEALTHY,
    )  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="computedomains"):
        assert publisher.sync()
        assert not publisher.sync()
    count = len(devices.node_devices(slots=cfg.channel_slots, usable=True))
    tail = f"fabric healthy (clique abc.1), held by cd-1, turn of nobody, {count} devices"
    assert [line for line in _lines(caplog) if line.startswith("slice of node")] == [
        f"slice of node n1: publish; {tail}",  # the unchanged second sync says nothing
    ]

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="computedomains"):
        publisher.sync()
    assert not [r for r in caplog.records if r.getMessage().startswith("slice of node")]
