"""Resolve CDI device IDs against spec files, as a container runtime does at container create.

Specs are parsed strictly (unknown fields, bad names and malformed edits make a file unusable,
as CDI's loader does), indexed by qualified name ``<vendor>/<class>=<device>``, and an ID
resolves to the spec-wide edits (once per spec) plus the device's own edits. Everything but
:func:`load_dir` is pure.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict, cast

import yaml

KNOWN_VERSIONS = frozenset(
    ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]
)
_VENDOR_OR_CLASS = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_SPEC_FIELDS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_FIELDS = {"name", "annotations", "containerEdits"}
_EDIT_FIELDS = {
    "env",
    "deviceNodes",
    "mounts",
    "hooks",
    "additionalGids",
    "intelRdt",
    "netDevices",
}
_NODE_FIELDS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions"}
_NODE_FIELDS |= {"uid", "gid"}
_MOUNT_FIELDS = {"hostPath", "containerPath", "type", "options"}
_HOOK_FIELDS = {"hookName", "path", "args", "env", "timeout"}
_HOOK_NAMES = {
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
}
_RDT_FIELDS = {"closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring"}
_SPEC_SUFFIXES = (".yaml", ".yml", ".json")


class CdiError(ValueError):
    """A malformed spec, a bad device name, or IDs that do not resolve."""


class ContainerEdits(TypedDict, total=False):
    """CDI ``containerEdits`` (entries kept in their wire form)."""

    env: list[str]
    deviceNodes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    hooks: list[dict[str, Any]]
    additionalGids: list[int]
    intelRdt: dict[str, Any]
    netDevices: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class QualifiedName:
    """``<vendor>/<class>=<name>``."""

    vendor: str
    class_: str
    name: str

    @property
    def kind(self) -> str:
        """``<vendor>/<class>``, the spec's ``kind``."""
        return f"{self.vendor}/{self.class_}"

    def __str__(self) -> str:
        return f"{self.kind}={self.name}"


def parse_name(text: str) -> QualifiedName:
    """Split and check a fully qualified CDI device name."""
    kind, sep, name = text.partition("=")
    vendor, slash, class_ = kind.partition("/")
    if not (sep and slash and vendor and class_ and name):
        raise CdiError(f"{text!r} is not a qualified CDI device name (<vendor>/<class>=<name>)")
    if not (_VENDOR_OR_CLASS.fullmatch(vendor) and _VENDOR_OR_CLASS.fullmatch(class_)):
        raise CdiError(f"{text!r}: invalid vendor or class")
    if not _DEVICE_NAME.fullmatch(name):
        raise CdiError(f"{text!r}: invalid device name")
    return QualifiedName(vendor, class_, name)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One parsed spec file."""

    source: str
    kind: str
    edits: ContainerEdits
    devices: Mapping[str, ContainerEdits]


def _fields(value: object, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CdiError(f"{where}: expected an object, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise CdiError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
    return cast(dict[str, Any], value)


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise CdiError(f"{where}: expected a list")
    return value


def _env(value: object, where: str) -> list[str]:
    entries = _list(value, where)
    for entry in entries:
        if not isinstance(entry, str) or entry.find("=") <= 0:
            raise CdiError(f"{where}: invalid environment variable {entry!r}")
    return entries


def _device_node(value: object, where: str) -> dict[str, Any]:
    node = _fields(value, _NODE_FIELDS, where)
    if not isinstance(node.get("path"), str) or not node["path"]:
        raise CdiError(f"{where}: invalid (empty) device path")
    if node.get("type", "") not in ("", "b", "c", "u", "p"):
        raise CdiError(f"{where}: invalid type {node['type']!r}")
    for number in ("major", "minor"):
        if not isinstance(node.get(number, 0), int) or node.get(number, 0) < 0:
            raise CdiError(f"{where}: invalid {number} {node[number]!r}")
    permissions = node.get("permissions", "")
    if permissions != "none" and set(str(permissions)) - set("rwm"):
        raise CdiError(f"{where}: invalid permissions {permissions!r}")
    return node


def _mount(value: object, where: str) -> dict[str, Any]:
    mount = _fields(value, _MOUNT_FIELDS, where)
    for key in ("hostPath", "containerPath"):
        if not isinstance(mount.get(key), str) or not mount[key]:
            raise CdiError(f"{where}: invalid mount, empty {key}")
    return mount


def _hook(value: object, where: str) -> dict[str, Any]:
    hook = _fields(value, _HOOK_FIELDS, where)
    if hook.get("hookName") not in _HOOK_NAMES:
        raise CdiError(f"{where}: invalid hook name {hook.get('hookName')!r}")
    if not isinstance(hook.get("path"), str) or not hook["path"]:
        raise CdiError(f"{where}: hook {hook['hookName']!r} has an empty path")
    _env(hook.get("env", []), f"{where}.env")
    return hook


def _edits(value: object, where: str, *, device: bool) -> ContainerEdits:
    raw = _fields(value, _EDIT_FIELDS, where)
    edits = ContainerEdits()
    if "env" in raw:
        edits["env"] = _env(raw["env"], f"{where}.env")
    for key, check in (("deviceNodes", _device_node), ("mounts", _mount), ("hooks", _hook)):
        if key in raw:
            items = _list(raw[key], f"{where}.{key}")
            edits[key] = [check(item, f"{where}.{key}[{i}]") for i, item in enumerate(items)]  # type: ignore[literal-required]
    if "additionalGids" in raw:
        gids = _list(raw["additionalGids"], f"{where}.additionalGids")
        if not all(isinstance(g, int) and g >= 0 for g in gids):
            raise CdiError(f"{where}.additionalGids: expected non-negative integers")
        edits["additionalGids"] = gids
    if "netDevices" in raw:
        nets = _list(raw["netDevices"], f"{where}.netDevices")
        for entry in nets:
            net = _fields(entry, {"hostInterfaceName", "name"}, f"{where}.netDevices[]")
            if not net.get("hostInterfaceName") or not net.get("name"):
                raise CdiError(f"{where}.netDevices: hostInterfaceName and name are required")
        edits["netDevices"] = nets
    if "intelRdt" in raw:
        edits["intelRdt"] = _fields(raw["intelRdt"], _RDT_FIELDS, f"{where}.intelRdt")
    if device and not any(edits.get(k) for k in _EDIT_FIELDS):
        raise CdiError(f"{where}: empty container edits")
    return edits


def parse_spec(data: str | bytes, *, source: str) -> Spec:
    """Parse and validate one spec (YAML or JSON); :class:`CdiError` says what is wrong."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise CdiError(f"{source}: not YAML or JSON: {exc}") from None
    raw = _fields(document, _SPEC_FIELDS, source)
    version = raw.get("cdiVersion")
    if version not in KNOWN_VERSIONS:
        raise CdiError(f"{source}: invalid cdiVersion {version!r}")
    kind = raw.get("kind")
    vendor, slash, class_ = str(kind or "").partition("/")
    if not (
        isinstance(kind, str)
        and slash
        and _VENDOR_OR_CLASS.fullmatch(vendor)
        and _VENDOR_OR_CLASS.fullmatch(class_)
    ):
        raise CdiError(f"{source}: invalid kind {kind!r} (want <vendor>/<class>)")
    devices: dict[str, ContainerEdits] = {}
    for i, entry in enumerate(_list(raw.get("devices"), f"{source}.devices")):
        where = f"{source}.devices[{i}]"
        device = _fields(entry, _DEVICE_FIELDS, where)
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_NAME.fullmatch(name):
            raise CdiError(f"{where}: invalid device name {name!r}")
        if name in devices:
            raise CdiError(f"{where}: device {name!r} appears twice")
        devices[name] = _edits(device.get("containerEdits"), f"{where}.containerEdits", device=True)
    if not devices:
        raise CdiError(f"{source}: a spec needs at least one device")
    edits = _edits(raw.get("containerEdits", {}), f"{source}.containerEdits", device=False)
    return Spec(source=source, kind=kind, edits=edits, devices=devices)


@dataclasses.dataclass(frozen=True)
class Registry:
    """Devices by qualified name, and the spec files that could not be used (and why)."""

    devices: Mapping[str, tuple[Spec, ContainerEdits]]
    errors: Mapping[str, str]


def build_registry(specs: Iterable[Spec], errors: Mapping[str, str] | None = None) -> Registry:
    """Index ``specs``; a device name defined by two specs is a conflict and resolves to none."""
    devices: dict[str, tuple[Spec, ContainerEdits]] = {}
    problems = dict(errors or {})
    conflicts: set[str] = set()
    for spec in specs:
        for name, edits in spec.devices.items():
            qualified = f"{spec.kind}={name}"
            if qualified in devices:
                conflicts.add(qualified)
                problems[spec.source] = (
                    f"device {qualified} also defined in {devices[qualified][0].source}"
                )
            devices[qualified] = (spec, edits)
    return Registry({k: v for k, v in devices.items() if k not in conflicts}, problems)


def merge(parts: Iterable[ContainerEdits]) -> ContainerEdits:
    """Concatenate edits in order (``intelRdt``: the last one wins)."""
    merged = ContainerEdits()
    for part in parts:
        for key, value in part.items():
            if key == "intelRdt":
                merged["intelRdt"] = cast(dict[str, Any], value)
            else:
                merged.setdefault(key, []).extend(value)  # type: ignore[misc]
    return merged


def resolve(ids: Sequence[str], registry: Registry) -> ContainerEdits:
    """The edits for ``ids``: each spec's own edits once, then each device's.

    Raises :class:`CdiError` naming every ID that is malformed or matches no device, and the
    spec files that were skipped, since a skipped file is the usual reason.
    """
    problems: list[str] = []
    parts: list[ContainerEdits] = []
    seen_specs: set[str] = set()
    for device_id in dict.fromkeys(ids):
        try:
            qualified = str(parse_name(device_id))
        except CdiError as exc:
            problems.append(str(exc))
            continue
        found = registry.devices.get(qualified)
        if found is None:
            problems.append(f"unresolvable CDI device {qualified}")
            continue
        spec, edits = found
        if spec.source not in seen_specs:
            seen_specs.add(spec.source)
            parts.append(spec.edits)
        parts.append(edits)
    if problems:
        skipped = "".join(f"; skipped {src}: {why}" for src, why in sorted(registry.errors.items()))
        raise CdiError("; ".join(problems) + skipped)
    return merge(parts)


def load_dir(directory: pathlib.Path) -> Registry:
    """Read every spec file in ``directory`` (dot files are writers' temp files: skipped)."""
    specs: list[Spec] = []
    errors: dict[str, str] = {}
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        entries = []
    for path in entries:
        if path.name.startswith(".") or path.suffix not in _SPEC_SUFFIXES:
            continue
        try:
            specs.append(parse_spec(path.read_bytes(), source=path.name))
        except (CdiError, OSError) as exc:
            errors[path.name] = str(exc)
    return build_registry(specs, errors)
