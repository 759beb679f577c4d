"""Per-claim CDI specs: the device nodes, env and mounts a container runtime applies.

Specs are written as JSON (valid YAML, so the conventional ``.yaml`` name works for every CDI
parser) because a spec for ``allocationMode: All`` carries thousands of device nodes and
JSON is fast to write. The annotations record which claim and domain a spec belongs to
(:class:`SpecInfo`, written and read here only), so the plugin rebuilds its claims from the
files when its checkpoint is lost (``rebuild.py``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
from typing import Any

from computedomains import nodefiles
from computedomains.api import constants
from computedomains.kubeletplugin.devices import DeviceType

CDI_VERSION = "0.6.0"
"""The lowest CDI version with spec annotations, the newest field we use."""
CHANNEL_PATH = "/dev/nvidia-caps-imex-channels/channel{}"
IMEX_CONFIG_MOUNT = "/imexd"
_ANNOTATION = constants.OWN_PREFIX + "/{}"
_SPEC_PREFIX = f"{constants.CDI_VENDOR}-{constants.CDI_CLAIM_CLASS}_"

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SpecInfo:
    """What a claim's spec records about the claim, in its annotations and device names."""

    claim_uid: str
    namespace: str
    name: str
    domain_uid: str
    """"" for the IMEX agent's daemon claim, which names no domain."""
    device_type: DeviceType | None
    """None when the spec's annotation names no device type this plugin knows."""
    devices: tuple[str, ...] = ()
    """The claim's device names (``channel-0-s3``), as the spec's devices carry them."""

    def annotations(self) -> dict[str, str]:
        """The spec's ``annotations``."""
        info = {
            "claim-uid": self.claim_uid,
            "claim": f"{self.namespace}/{self.name}",
            "domain-uid": self.domain_uid,
            "device-type": self.device_type.value if self.device_type else "",
        }
        return {_ANNOTATION.format(k): v for k, v in sorted(info.items())}


def parse_info(document: dict[str, Any]) -> SpecInfo | None:
    """The :class:`SpecInfo` of a spec this plugin wrote; None for anything else."""
    annotations = document.get("annotations")
    if not isinstance(annotations, dict):
        return None
    uid = annotations.get(_ANNOTATION.format("claim-uid"))
    namespace, _, name = str(annotations.get(_ANNOTATION.format("claim"), "")).partition("/")
    if not isinstance(uid, str) or not uid or not name:
        return None
    prefix = f"{uid}-"
    names = [str(d.get("name", "")) for d in document.get("devices") or [] if isinstance(d, dict)]
    return SpecInfo(
        claim_uid=uid,
        namespace=namespace,
        name=name,
        domain_uid=str(annotations.get(_ANNOTATION.format("domain-uid"), "")),
        device_type=_device_type(annotations.get(_ANNOTATION.format("device-type"))),
        devices=tuple(n.removeprefix(prefix) for n in names if n.startswith(prefix)),
    )


def _device_type(annotation: object) -> DeviceType | None:
    try:
        return DeviceType(str(annotation))
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class DeviceNode:
    """A character device node to create in the container."""

    path: str
    major: int
    minor: int
    file_mode: int = 0o666

    def to_dict(self) -> dict[str, Any]:
        """CDI ``deviceNodes`` entry."""
        return {
            "path": self.path,
            "type": "c",
            "major": self.major,
            "minor": self.minor,
            "fileMode": self.file_mode,
        }


@dataclasses.dataclass(frozen=True)
class Edits:
    """Container edits of one CDI device."""

    device_nodes: tuple[DeviceNode, ...] = ()
    env: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    """(host path, container path) bind mounts."""

    def empty(self) -> bool:
        """True when the edits change nothing (no spec needs writing)."""
        return not (self.device_nodes or self.env or self.mounts)

    def to_dict(self) -> dict[str, Any]:
        """CDI ``containerEdits``."""
        edits: dict[str, Any] = {}
        if self.device_nodes:
            edits["deviceNodes"] = [d.to_dict() for d in self.device_nodes]
        if self.env:
            edits["env"] = list(self.env)
        if self.mounts:
            edits["mounts"] = [
                {"hostPath": h, "containerPath": c, "options": ["rw", "nosuid", "nodev", "bind"]}
                for h, c in self.mounts
            ]
        return edits


def channel_nodes(*, major: int, channels: range) -> tuple[DeviceNode, ...]:
    """Device nodes for IMEX channels ``channels``."""
    return tuple(DeviceNode(CHANNEL_PATH.format(n), major, n) for n in channels)


def device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI name of one prepared device of a claim."""
    return f"{constants.CDI_KIND}={claim_uid}-{device}"


def spec_path(cdi_root: pathlib.Path, claim_uid: str) -> pathlib.Path:
    """The claim's spec file (one per claim; the claim UID keeps runtimes' caches honest)."""
    return cdi_root / f"{_SPEC_PREFIX}{claim_uid}.yaml"


def spec(*, info: SpecInfo, devices: dict[str, Edits]) -> dict[str, Any]:
    """A CDI spec for ``devices`` (device name → edits) of the claim ``info`` describes."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": constants.CDI_KIND,
        "annotations": info.annotations(),
        "devices": [
            {"name": f"{info.claim_uid}-{name}", "containerEdits": edits.to_dict()}
            for name, edits in devices.items()
        ],
    }


def read_specs(cdi_root: pathlib.Path) -> list[SpecInfo]:
    """What every claim spec in ``cdi_root`` says; unreadable ones are logged and skipped.

    Skipped specs are not lost: a claim the API still shows allocated here is rebuilt from the
    API, and unprepare removes its file by the claim UID in the name.
    """
    found = []
    for path in sorted(cdi_root.glob(f"{_SPEC_PREFIX}*.yaml")):
        info = None
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("CDI spec %s is unreadable (%s); ignoring it", path, exc)
        else:
            info = parse_info(document) if isinstance(document, dict) else None
        if info is not None and path == spec_path(cdi_root, info.claim_uid):
            found.append(info)
    return found


def write(cdi_root: pathlib.Path, claim_uid: str, document: dict[str, Any]) -> None:
    """Write the claim's spec atomically (a runtime never reads half a spec)."""
    # Specs live in /var/run (tmpfs) and die with the boot, like the claims they describe.
    nodefiles.write_json(spec_path(cdi_root, claim_uid), document, compact=True, boot_scoped=True)


def remove(cdi_root: pathlib.Path, claim_uid: str) -> None:
    """Delete the claim's spec; missing is fine (unprepare is idempotent)."""
    spec_path(cdi_root, claim_uid).unlink(missing_ok=True)
