"""The container edits a prepared claim gets, from the node's /proc and the fabric verdict."""

from __future__ import annotations

import pathlib

from computedomains.api import fabricverdict
from computedomains.fabric import checks
from computedomains.kubeletplugin import cdi, config, devices, errors, validate

IMEX_CHANNELS_DEVICE = "nvidia-caps-imex-channels"
CAPS_DEVICE = "nvidia-caps"


def boot_id(proc_root: pathlib.Path) -> str:
    """The current boot's ID (the checkpoint is only valid within one boot)."""
    return (proc_root / "sys/kernel/random/boot_id").read_text().strip()


def edits_for(
    plan: validate.Plan, *, fabric: fabricverdict.NodeFabric, cfg: config.PluginConfig
) -> cdi.Edits:
    """Device nodes, env and mounts for the claim's devices."""
    if plan.device_type is devices.DeviceType.CHANNEL:
        return _channel_edits(plan, fabric=fabric, proc_root=cfg.proc_root)
    return _daemon_edits(plan, fabric=fabric, cfg=cfg)


def _major(proc_root: pathlib.Path, name: str) -> int:
    major = checks.read_proc_devices(proc_root).char_major(name)
    if major is None:
        raise errors.Retryable(
            "DeviceMajorMissing",
            f"{proc_root}/devices lists no {name!r}: the NVIDIA driver is not (fully) loaded",
        )
    return major


def _channel_edits(
    plan: validate.Plan, *, fabric: fabricverdict.NodeFabric, proc_root: pathlib.Path
) -> cdi.Edits:
    if not fabric.has_fabric:
        return cdi.Edits()  # no NVLink fabric: nothing to inject, the claim still succeeds
    count = fabric.channel_count or checks.read_imex_channel_count(proc_root) or 0
    if count < 1:
        raise errors.Retryable("NoImexChannels", "the driver reports no IMEX channels")
    channels = range(count) if plan.all_channels else range(1)
    return cdi.Edits(
        device_nodes=cdi.channel_nodes(
            major=_major(proc_root, IMEX_CHANNELS_DEVICE), channels=channels
        )
    )


def _daemon_edits(
    plan: validate.Plan, *, fabric: fabricverdict.NodeFabric, cfg: config.PluginConfig
) -> cdi.Edits:
    env = [f"CLIQUE_ID={fabric.clique}"]
    if plan.domain is not None:
        env += [
            f"COMPUTE_DOMAIN_UUID={plan.domain.uid}",
            f"COMPUTE_DOMAIN_NAME={plan.domain.name}",
            f"COMPUTE_DOMAIN_NAMESPACE={plan.domain.namespace}",
        ]
    nodes: tuple[cdi.DeviceNode, ...] = ()
    if fabric.has_fabric:
        capability = checks.read_capability(cfg.proc_root)
        if capability is None:
            raise errors.Retryable(
                "ImexManagementMissing",
                "the driver exposes no fabric-imex-mgmt capability: IMEX cannot run on this node",
            )
        nodes = (
            cdi.DeviceNode(
                f"/dev/nvidia-caps/nvidia-cap{capability.minor}",
                _major(cfg.proc_root, CAPS_DEVICE),
                capability.minor,
                capability.mode,
            ),
        )
    mount = (str(cfg.imex_status_file.parent), cdi.IMEX_CONFIG_MOUNT)
    return cdi.Edits(device_nodes=nodes, env=tuple(env), mounts=(mount,))
