"""The files of a pod's ConfigMap, Secret, downward-API and projected volumes.

Pure: :func:`volume_files` says what the kubelet writes for one volume, given lookups for the
ConfigMaps and Secrets of the pod's namespace and a token minter; the caller writes the
files into the pod's folder and binds the folder into the containers (read-only). The
projected ServiceAccount volume the API server adds to every pod
(``kube-api-access-*``: a bound token, ``kube-root-ca.crt``'s ``ca.crt``, the namespace)
is such a volume, so a component finds the API server exactly as in a real pod.
"""

from __future__ import annotations

import base64
import dataclasses
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from cdsim.kubelet import podspec
from computedomains.kube import wire

DEFAULT_MODE = 0o644
"""``defaultMode`` when the volume does not set one."""

Lookup = Callable[[str], Mapping[str, Any] | None]
"""Name → the object (ConfigMap or Secret) in the pod's namespace, None when it is missing."""
Minter = Callable[[int, Sequence[str]], str]
"""``(expirationSeconds, audiences)`` → a token bound to the pod."""


class VolumeError(ValueError):
    """A volume cannot be set up (the kubelet's ``FailedMount``)."""


@dataclasses.dataclass(frozen=True)
class File:
    """One file of a volume."""

    path: str
    """Relative to the volume's root."""
    data: bytes
    mode: int = DEFAULT_MODE


def _safe(path: str) -> str:
    normal = posixpath.normpath(path)
    if not path or normal.startswith("..") or posixpath.isabs(normal):
        raise VolumeError(f"item path {path!r} must be relative and stay inside the volume")
    return normal


def _keyed(
    what: str,
    source: Mapping[str, Any],
    lookup: Lookup,
    *,
    decode: bool,
    mode: int,
) -> list[File]:
    """A ConfigMap's or Secret's keys (all, or ``items``) as files."""
    name = str(source.get("name") or source.get("secretName") or "")
    found = lookup(name)
    if found is None:
        if source.get("optional"):
            return []
        raise VolumeError(f'{what} "{name}" not found')
    data: dict[str, bytes] = {}
    for key, value in (found.get("data") or {}).items():
        data[key] = base64.b64decode(value) if decode else str(value).encode()
    for key, value in (found.get("binaryData") or {}).items():
        data[key] = base64.b64decode(value)
    items = source.get("items")
    if not items:
        return [File(_safe(k), v, mode) for k, v in sorted(data.items())]
    files = []
    for item in items:
        key = str(item.get("key", ""))
        if key not in data:
            if source.get("optional"):
                continue
            raise VolumeError(f'{what} "{name}" has no key "{key}"')
        files.append(File(_safe(str(item.get("path", key))), data[key], item.get("mode", mode)))
    return files


def _downward(items: Sequence[Mapping[str, Any]], pod: wire.Pod, mode: int) -> list[File]:
    files = []
    for item in items:
        if "fieldRef" not in item:
            raise VolumeError("downwardAPI resourceFieldRef is not supported by the simulation")
        try:
            value = podspec.field_value(pod, str(item["fieldRef"].get("fieldPath", "")))
        except podspec.PodSpecError as exc:
            raise VolumeError(str(exc)) from exc
        files.append(File(_safe(str(item.get("path", ""))), value.encode(), item.get("mode", mode)))
    return files


def volume_files(
    volume: wire.Volume,
    pod: wire.Pod,
    *,
    config_maps: Lookup,
    secrets: Lookup,
    token: Minter,
) -> list[File] | None:
    """What the kubelet writes for ``volume``; None for a kind it writes nothing for."""
    spec = cast(Mapping[str, Any], volume)
    if "configMap" in spec:
        source = spec["configMap"]
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        return _keyed("configmap", source, config_maps, decode=False, mode=mode)
    if "secret" in spec:
        source = spec["secret"]
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        return _keyed("secret", source, secrets, decode=True, mode=mode)
    if "downwardAPI" in spec:
        source = spec["downwardAPI"]
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        return _downward(source.get("items") or [], pod, mode)
    if "projected" not in spec:
        return None
    projected = spec["projected"]
    mode = int(projected.get("defaultMode", DEFAULT_MODE))
    files: list[File] = []
    for part in projected.get("sources") or []:
        if "configMap" in part:
            files += _keyed("configmap", part["configMap"], config_maps, decode=False, mode=mode)
        elif "secret" in part:
            files += _keyed("secret", part["secret"], secrets, decode=True, mode=mode)
        elif "downwardAPI" in part:
            files += _downward(part["downwardAPI"].get("items") or [], pod, mode)
        elif "serviceAccountToken" in part:
            source = part["serviceAccountToken"]
            audience = [str(source["audience"])] if source.get("audience") else []
            minted = token(int(source.get("expirationSeconds", 3600)), audience)
            files.append(File(_safe(str(source.get("path", "token"))), minted.encode(), mode))
        else:
            raise VolumeError(f"projected source {sorted(part)} is not supported by the simulation")
    return files


def token_lifetime(pod: wire.Pod) -> int | None:
    """The shortest ``expirationSeconds`` of the pod's projected tokens (None: it has none)."""
    found = [
        int(part["serviceAccountToken"].get("expirationSeconds", 3600))
        for volume in pod.get("spec", {}).get("volumes", [])
        for part in (cast(Mapping[str, Any], volume).get("projected") or {}).get("sources") or []
        if "serviceAccountToken" in part
    ]
    return min(found) if found else None
