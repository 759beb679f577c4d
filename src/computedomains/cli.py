"""The ``computedomains`` command: one subcommand per component or tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import computedomains
from computedomains import subcommand
from computedomains.controller.config import ControllerConfig
from computedomains.fabric import commands as fabric_commands
from computedomains.imexagent.config import AgentConfig
from computedomains.kubeletplugin.config import PluginConfig
from computedomains.nodeinit import commands as nodeinit_commands
from computedomains.webhook.config import WebhookConfig

COMPONENTS = (
    subcommand.Component("kubelet-plugin", "run the DRA kubelet plugin on a node",
                         PluginConfig, "computedomains.kubeletplugin.plugin"),
    subcommand.Component("controller", "run the ComputeDomain controller (templates, slots, "
                         "cliques, status)", ControllerConfig,
                         "computedomains.controller.manager"),
    subcommand.Component("imex-agent", "run the node's IMEX daemon for the node's ComputeDomain",
                         AgentConfig, "computedomains.imexagent.agent"),
    subcommand.Component("webhook", "serve ComputeDomain conversion, validation and clique "
                         "placement (HTTPS)", WebhookConfig, "computedomains.webhook.service"),
)  # fmt: skip
"""The long-running components: each one's subcommand, flags and the module that serves."""

_HOOKS_COMMAND = "hooks"
"""Only ``hooks`` imports the hook programs and, through them, the generated Kubernetes client."""


class _Version(argparse.Action):
    """``--version``, resolved only when asked for (the lookup costs every command startup)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"{parser.prog} {computedomains.version()}")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser; the hooks' subcommands only when ``argv`` may name them.

    ``argv`` None (or help, or no subcommand yet) registers every subcommand.
    """
    parser = argparse.ArgumentParser(
        prog="computedomains",
        description="ComputeDomains for multi-node NVLink Kubernetes clusters.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True)
    command = next((a for a in argv or () if not a.startswith("-")), None)
    if command is None or command == _HOOKS_COMMAND:
        from computedomains.hooks import commands as hooks_commands  # noqa: PLC0415 - see above

        hooks_commands.add_parsers(subparsers)
    for component in COMPONENTS:
        subcommand.add_component(subparsers, component)
    fabric_commands.add_parsers(subparsers)
    nodeinit_commands.add_parsers(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(given).parse_args(given)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
