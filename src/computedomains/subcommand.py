"""One shape for every long-running component's subcommand.

Its flags, the logging flags, and a start that imports the component only when it runs (so
``--help`` stays fast).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from typing import Any

from computedomains import flags, logs


@dataclasses.dataclass(frozen=True)
class Component:
    """A component's subcommand."""

    name: str
    help: str
    config: type
    """Its config dataclass, whose fields declare its flags (:mod:`computedomains.flags`)."""
    runs: str
    """The module whose ``run(config)`` serves, imported only when the command runs."""


def add_component(subparsers: Any, component: Component) -> None:
    """Register ``computedomains <name>`` with its config's flags and the logging flags.

    It configures logging, then calls ``run(config)`` of the module ``runs``.
    """
    parser = subparsers.add_parser(component.name, help=component.help)
    flags.add_to(parser, component.config)
    logs.add_flags(parser)

    def start(args: argparse.Namespace) -> int:
        logs.configure(args)
        served = importlib.import_module(component.runs)
        return int(served.run(flags.build(component.config, args)))

    parser.set_defaults(func=start)
