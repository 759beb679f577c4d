"""The kubelet plugin's settings, resolved once from flags (each with an env twin)."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from computedomains import settings
from computedomains.api import constants


@dataclasses.dataclass(frozen=True)
class PluginConfig:
    """Everything the plugin needs to know about its node and its paths."""

    node_name: str
    namespace: str
    """The driver's namespace (where the chart runs the components)."""
    kubeconfig: pathlib.Path | None
    """None in a pod: the ServiceAccount is used."""
    registry_dir: pathlib.Path
    plugins_dir: pathlib.Path
    cdi_root: pathlib.Path
    proc_root: pathlib.Path
    fabric_verdict_file: pathlib.Path
    imex_status_file: pathlib.Path
    channel_slots: int
    """Channel devices published per node: how many pods of one domain a node can host."""
    imex_ready_timeout: float
    """Seconds a prepare waits for the node's IMEX domain before answering "retry later"."""
    http_bind: str

    @property
    def plugin_dir(self) -> pathlib.Path:
        """``<plugins dir>/<driver>``: sockets and the checkpoint."""
        return self.plugins_dir / constants.DRIVER_NAME

    @property
    def registration_socket(self) -> pathlib.Path:
        """Where the kubelet finds us."""
        return self.registry_dir / f"{constants.DRIVER_NAME}-reg.sock"

    @property
    def dra_socket(self) -> pathlib.Path:
        """The DRA service socket announced at registration."""
        return self.plugin_dir / "dra.sock"

    @property
    def checkpoint_file(self) -> pathlib.Path:
        """The plugin checkpoint."""
        return self.plugin_dir / "checkpoint.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the plugin's flags."""
    p = settings.path
    settings.add(parser, "--node-name", required=True, help="this node's name")
    settings.add(parser, "--namespace", default="default", help="the driver's namespace")
    settings.add(
        parser, "--kubeconfig", type=p, help="kubeconfig (default: the pod's ServiceAccount)"
    )
    settings.add(
        parser,
        "--kubelet-registry-dir",
        type=p,
        default=constants.KUBELET_REGISTRY_DIR,
        help="kubelet plugin registration directory",
    )
    settings.add(
        parser,
        "--kubelet-plugins-dir",
        type=p,
        default=constants.KUBELET_PLUGINS_DIR,
        help="kubelet plugins directory (our sockets and checkpoint live below it)",
    )
    settings.add(
        parser, "--cdi-root", type=p, default=constants.CDI_ROOT, help="CDI spec directory"
    )
    settings.add(
        parser, "--proc-root", type=p, default=pathlib.Path("/proc"), help="the host's /proc"
    )
    settings.add(
        parser,
        "--fabric-verdict-file",
        type=p,
        default=constants.FABRIC_VERDICT_FILE,
        help="verdict written by node-init",
    )
    settings.add(
        parser,
        "--imex-status-file",
        type=p,
        default=constants.IMEX_STATUS_FILE,
        help="IMEX status written by the IMEX agent",
    )
    settings.add(
        parser,
        "--channel-slots",
        type=int,
        default=16,
        help="channel devices per node (pods of one ComputeDomain per node)",
    )
    settings.add(
        parser,
        "--imex-ready-timeout",
        type=float,
        default=20.0,
        help="seconds a prepare waits for the IMEX domain before asking to retry",
    )
    settings.add(parser, "--http-bind", default="0.0.0.0:8080", help="metrics and probes host:port")


def from_args(args: argparse.Namespace) -> PluginConfig:
    """Resolve parsed flags into the config, validating what argparse cannot."""
    if not 1 <= args.channel_slots <= 126:
        raise SystemExit(
            f"--channel-slots must be 1..126 (a slice holds 128 devices), got {args.channel_slots}"
        )
    if args.imex_ready_timeout <= 0:
        raise SystemExit(f"--imex-ready-timeout must be positive, got {args.imex_ready_timeout}")
    return PluginConfig(
        node_name=args.node_name,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        registry_dir=args.kubelet_registry_dir,
        plugins_dir=args.kubelet_plugins_dir,
        cdi_root=args.cdi_root,
        proc_root=args.proc_root,
        fabric_verdict_file=args.fabric_verdict_file,
        imex_status_file=args.imex_status_file,
        channel_slots=args.channel_slots,
        imex_ready_timeout=args.imex_ready_timeout,
        http_bind=args.http_bind,
    )
