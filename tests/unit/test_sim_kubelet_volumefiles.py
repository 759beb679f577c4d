"""The files the kubelet writes for ConfigMap, Secret, downward-API and projected volumes."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest

from cdsim.kubelet import volumefiles
from computedomains.kube import wire

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "team-a", "uid": "u-1", "labels": {"app": "x"}},
    "spec": {"nodeName": "gb200-r0-n00", "serviceAccountName": "worker"},
}
CONFIG_MAPS = {
    "kube-root-ca.crt": {"data": {"ca.crt": "CA PEM"}},
    "settings": {
        "data": {"a": "1", "b": "2"},
        "binaryData": {"c": base64.b64encode(b"\0").decode()},
    },
}
SECRETS = {"creds": {"data": {"user": base64.b64encode(b"admin").decode()}}}
MINTED: list[tuple[int, Sequence[str]]] = []


def _token(seconds: int, audiences: Sequence[str]) -> str:
    MINTED.append((seconds, audiences))
    return f"token-{seconds}"


def _files(volume: Mapping[str, Any]) -> dict[str, tuple[bytes, int]] | None:
    found = volumefiles.volume_files(
        volume, POD, config_maps=CONFIG_MAPS.get, secrets=SECRETS.get, token=_token
    )
    return None if found is None else {f.path: (f.data, f.mode) for f in found}


def test_the_service_account_volume_has_token_ca_and_namespace() -> None:
    volume = {
        "name": "kube-api-access-x",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [
                    {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }  # fmt: skip
    assert _files(volume) == {
        "token": (b"token-3607", 0o644),
        "ca.crt": (b"CA PEM", 0o644),
        "namespace": (b"team-a", 0o644),
    }
    assert MINTED[-1] == (3607, [])
    pod = cast(wire.Pod, {"spec": {"volumes": [volume]}})
    assert volumefiles.token_lifetime(pod) == 3607


def test_config_maps_and_secrets_give_every_key_or_the_items_asked_for() -> None:
    assert _files({"name": "v", "configMap": {"name": "settings", "defaultMode": 0o600}}) == {
        "a": (b"1", 0o600), "b": (b"2", 0o600), "c": (b"\0", 0o600),
    }  # fmt: skip
    picked = {"name": "settings", "items": [{"key": "b", "path": "sub/b.txt", "mode": 0o400}]}
    assert _files({"name": "v", "configMap": picked}) == {"sub/b.txt": (b"2", 0o400)}
    assert _files({"name": "v", "secret": {"secretName": "creds"}}) == {"user": (b"admin", 0o644)}


def test_a_missing_source_fails_unless_optional() -> None:
    with pytest.raises(volumefiles.VolumeError, match='configmap "gone" not found'):
        _files({"name": "v", "configMap": {"name": "gone"}})
    assert _files({"name": "v", "configMap": {"name": "gone", "optional": True}}) == {}
    with pytest.raises(volumefiles.VolumeError, match='has no key "z"'):
        _files({"name": "v", "configMap": {"name": "settings", "items": [{"key": "z"}]}})


def test_an_item_path_may_not_leave_the_volume() -> None:
    with pytest.raises(volumefiles.VolumeError, match="stay inside the volume"):
        escaping = {"name": "settings", "items": [{"key": "a", "path": "../../etc/x"}]}
        _files({"name": "v", "configMap": escaping})


def test_other_volume_kinds_have_no_files() -> None:
    assert _files({"name": "v", "emptyDir": {}}) is None
    assert _files({"name": "v", "hostPath": {"path": "/"}}) is None
