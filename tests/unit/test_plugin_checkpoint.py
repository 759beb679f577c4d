"""Checkpoint files: round trip, boot scoping, corruption."""

from __future__ import annotations

import json
import pathlib

from computedomains.kubeletplugin import cdi, checkpoint

ENTRY = checkpoint.ClaimEntry(
    uid="u1",
    namespace="ns",
    name="c",
    state=checkpoint.ClaimState.COMPLETED,
    domain_uid="d",
    device_type="channel",
    allocation="abc",
    devices=(
        checkpoint.PreparedDevice(
            ("channel",), "n1", "channel-0", ("k8s.compute-domain.nvidia.com/claim=u1-channel-0",)
        ),
    ),
)


def test_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, checkpoint.Checkpoint("boot-1", {"u1": ENTRY}))
    loaded = checkpoint.load(path, boot_id="boot-1")
    assert loaded.outcome is checkpoint.LoadOutcome.LOADED
    assert loaded.checkpoint.claims == {"u1": ENTRY}
    assert json.loads(path.read_text())["apiVersion"] == "node.compute-domains/v1"


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
    ):
        path.write_text(garbage)
        loaded = checkpoint.load(path, boot_id="b")
        assert loaded.outcome is checkpoint.LoadOutcome.CORRUPT
        assert loaded.checkpoint.claims == {}
        assert not path.exists()
    assert len(list(tmp_path.glob("checkpoint.json.corrupt-*"))) >= 1


def test_cdi_spec_for_all_channels(tmp_path: pathlib.Path) -> None:
    edits = cdi.Edits(device_nodes=cdi.channel_nodes(major=235, channels=range(2048)))
    document = cdi.spec(claim_uid="u1", info={"domain-uid": "d"}, devices={"channel-0": edits})
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
