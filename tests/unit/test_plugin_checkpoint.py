"""Checkpoint files: round trip, versions, boot scoping, corruption; what CDI specs record."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from computedomains.kubeletplugin import cdi, checkpoint
from computedomains.kubeletplugin.devices import DeviceType

CHANNEL = DeviceType.CHANNEL

ENTRY = checkpoint.ClaimEntry(
    uid="u1",
    namespace="ns",
    name="c",
    state=checkpoint.ClaimState.COMPLETED,
    domain_uid="d",
    device_type=CHANNEL,
    allocation="abc",
    devices=(
        checkpoint.PreparedDevice(
            ("channel",), "n1", "channel-0", ("k8s.compute-domain.nvidia.com/claim=u1-channel-0",)
        ),
    ),
)


ABORTED = checkpoint.ClaimEntry(
    "u2", "ns", "c2", checkpoint.ClaimState.ABORTED, "d", CHANNEL, "def", aborted_at=12.5
)


def test_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, checkpoint.Checkpoint("boot-1", {"u1": ENTRY, "u2": ABORTED}))
    loaded = checkpoint.load(path, boot_id="boot-1")
    assert loaded.outcome is checkpoint.LoadOutcome.LOADED
    assert loaded.checkpoint.claims == {"u1": ENTRY, "u2": ABORTED}
    document = json.loads(path.read_text())
    assert document["apiVersion"] == "node.compute-domains/v1"
    assert document["checkpointVersion"] == checkpoint.VERSION


def _v1_without_version_field() -> dict[str, Any]:
    """A checkpoint as the first plugin wrote it: no ``checkpointVersion``."""
    return {
        "apiVersion": "node.compute-domains/v1",
        "kind": "PluginCheckpoint",
        "bootID": "boot-1",
        "claims": {
            "u1": {
                "uid": "u1",
                "namespace": "ns",
                "name": "c",
                "state": "PrepareCompleted",
                "domain_uid": "d",
                "device_type": "channel",
                "allocation": "abc",
                "devices": [
                    {
                        "requests": ["channel"],
                        "pool": "n1",
                        "device": "channel-0",
                        "cdi_ids": ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"],
                    }
                ],
                "aborted_at": None,
            }
        },
    }


def test_the_first_format_converts_to_the_same_model_and_is_rewritten_in_the_current_one(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps(_v1_without_version_field()))
    loaded = checkpoint.load(path, boot_id="boot-1")
    assert loaded.outcome is checkpoint.LoadOutcome.LOADED
    assert loaded.checkpoint.claims == {"u1": ENTRY}
    checkpoint.save(path, loaded.checkpoint)
    rewritten = json.loads(path.read_text())
    assert rewritten == {**_v1_without_version_field(), "checkpointVersion": checkpoint.VERSION}


@pytest.mark.parametrize(
    ("version", "outcome"),
    [
        (checkpoint.VERSION + 1, checkpoint.LoadOutcome.NEWER_VERSION),
        (99, checkpoint.LoadOutcome.NEWER_VERSION),
        (0, checkpoint.LoadOutcome.CORRUPT),
        ("2", checkpoint.LoadOutcome.CORRUPT),
        (True, checkpoint.LoadOutcome.CORRUPT),
    ],
)
def test_a_newer_or_invalid_version_is_quarantined_and_asks_for_a_rebuild(
    tmp_path: pathlib.Path, version: object, outcome: checkpoint.LoadOutcome
) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({**_v1_without_version_field(), "checkpointVersion": version}))
    loaded = checkpoint.load(path, boot_id="boot-1")
    assert loaded.outcome is outcome and loaded.outcome.needs_rebuild
    assert loaded.checkpoint.claims == {} and loaded.checkpoint.boot_id == "boot-1"
    assert not path.exists() and len(list(tmp_path.glob("checkpoint.json.corrupt-*"))) == 1
    assert "moved to checkpoint.json.corrupt-" in loaded.detail


def test_an_unreadable_file_is_quarantined_and_asks_for_a_rebuild(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.mkdir()  # reading it fails with EISDIR: unreadable, which is not absent
    loaded = checkpoint.load(path, boot_id="b")
    assert loaded.outcome is checkpoint.LoadOutcome.UNREADABLE and loaded.outcome.needs_rebuild
    assert not path.exists()
    checkpoint.save(path, loaded.checkpoint)
    assert checkpoint.load(path, boot_id="b").outcome is checkpoint.LoadOutcome.LOADED


@pytest.mark.parametrize(
    ("outcome", "rebuild"),
    [
        (checkpoint.LoadOutcome.NEW, True),
        (checkpoint.LoadOutcome.LOADED, False),
        (checkpoint.LoadOutcome.CORRUPT, True),
        (checkpoint.LoadOutcome.UNREADABLE, True),
        (checkpoint.LoadOutcome.NEWER_VERSION, True),
        (checkpoint.LoadOutcome.REBOOTED, False),
    ],
)
def test_which_outcomes_rebuild(outcome: checkpoint.LoadOutcome, rebuild: bool) -> None:
    assert outcome.needs_rebuild is rebuild


def test_other_boot_discards_claims(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, checkpoint.Checkpoint("boot-1", {"u1": ENTRY}))
    loaded = checkpoint.load(path, boot_id="boot-2")
    assert loaded.outcome is checkpoint.LoadOutcome.REBOOTED
    assert loaded.checkpoint.claims == {} and loaded.discarded == (ENTRY,)


def test_corrupt_file_is_quarantined_and_replaced_by_an_empty_one(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint.json"
    for garbage in (
        "{not json",
        '{"apiVersion": "node.compute-domains/v1", "kind": "PluginCheckpoint"}',
        '{"apiVersion": "node.compute-domains/v2", "kind": "PluginCheckpoint", "claims": {}}',
    ):
        path.write_text(garbage)
        loaded = checkpoint.load(path, boot_id="b")
        assert loaded.outcome is checkpoint.LoadOutcome.CORRUPT and loaded.outcome.needs_rebuild
        assert loaded.checkpoint.claims == {}
        assert not path.exists()
    assert len(list(tmp_path.glob("checkpoint.json.corrupt-*"))) >= 1


def test_cdi_spec_for_all_channels(tmp_path: pathlib.Path) -> None:
    edits = cdi.Edits(device_nodes=cdi.channel_nodes(major=235, channels=range(2048)))
    document = cdi.spec(info=_info("u1"), devices={"channel-0": edits})
    cdi.write(tmp_path, "u1", document)
    written = json.loads(cdi.spec_path(tmp_path, "u1").read_text())
    nodes = written["devices"][0]["containerEdits"]["deviceNodes"]
    assert len(nodes) == 2048 and nodes[-1] == {
        "path": "/dev/nvidia-caps-imex-channels/channel2047",
        "type": "c",
        "major": 235,
        "minor": 2047,
        "fileMode": 0o666,
    }
    assert written["kind"] == "k8s.compute-domain.nvidia.com/claim"
    assert written["devices"][0]["name"] == "u1-channel-0"
    assert cdi.device_id("u1", "channel-0") == "k8s.compute-domain.nvidia.com/claim=u1-channel-0"
    cdi.remove(tmp_path, "u1")
    cdi.remove(tmp_path, "u1")
    assert not cdi.spec_path(tmp_path, "u1").exists()


def _info(uid: str, device_type: DeviceType = CHANNEL, domain: str = "d") -> cdi.SpecInfo:
    return cdi.SpecInfo(uid, "ns", f"claim-{uid}", domain, device_type)


def test_a_spec_records_its_claim_for_a_rebuild(tmp_path: pathlib.Path) -> None:
    edits = cdi.Edits(env=("CLIQUE_ID=abc.1",))
    cdi.write(tmp_path, "u1", cdi.spec(info=_info("u1"), devices={"channel-0-s2": edits}))
    cdi.write(
        tmp_path,
        "u2",
        cdi.spec(info=_info("u2", DeviceType.DAEMON, ""), devices={"daemon-0": edits}),
    )
    (tmp_path / "k8s.compute-domain.nvidia.com-claim_torn.yaml").write_text('{"cdiVers')
    (tmp_path / "other-vendor.yaml").write_text("{}")
    found = {s.claim_uid: s for s in cdi.read_specs(tmp_path)}
    assert found == {
        "u1": cdi.SpecInfo("u1", "ns", "claim-u1", "d", CHANNEL, ("channel-0-s2",)),
        "u2": cdi.SpecInfo("u2", "ns", "claim-u2", "", DeviceType.DAEMON, ("daemon-0",)),
    }
    assert cdi.read_specs(tmp_path / "missing") == []
