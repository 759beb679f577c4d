"""``computedomains hooks <name>``: the Helm hook programs the chart runs as Jobs."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from computedomains import flags, logs
from computedomains.hooks import client, kubeio, report

HOOKS: dict[str, str] = {
    "preflight": "before install/upgrade: versions, DRA APIs, conflicting installs, values",
    "verify": "after install/upgrade: node-init's verdicts, the fabric per rack, components",
    "uninstall": "before uninstall: refuse while domains run; remove finalizers, labels",
    "migrate": "snapshot, validate and rewrite ComputeDomains at the storage version; adoption",
    "restore": "restore ComputeDomains and cliques from a migration snapshot",
    "roll-agents": "after upgrade: new IMEX agents on the nodes no ComputeDomain holds",
}
"""Hook name → one-line help. Each is the module ``computedomains.hooks.<name>`` (without
hyphens), with ``Settings`` (a :class:`client.Connection` whose fields declare its flags),
``STOP`` (the :class:`report.Stop` for the errors that end it) and
``run(api, settings, report) -> int`` (the exit code Helm and Argo CD see)."""


def add_parsers(subparsers: Any) -> None:
    """Register ``hooks`` and one subcommand per hook."""
    parser = subparsers.add_parser("hooks", help="Helm/Argo CD hook programs (run as Jobs)")
    hook_parsers = parser.add_subparsers(dest="hook", required=True)
    for name, help_text in HOOKS.items():
        hook_parser = hook_parsers.add_parser(name, help=help_text)
        flags.add_to(hook_parser, _module(name).Settings)
        logs.add_flags(hook_parser)
        hook_parser.set_defaults(func=_runner(name))


def _module(name: str) -> Any:
    # The CLI registers `hooks` only when it is the command, so importing every hook (and the
    # Kubernetes client with it) costs no component's start-up.
    return importlib.import_module(f"computedomains.hooks.{name.replace('-', '')}")


def _runner(name: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        logs.configure(args, progress=report.LOGGER)
        module = _module(name)
        return run_hook(name, module.run, flags.build(module.Settings, args), module.STOP)

    return run


def run_hook(
    name: str,
    act: Callable[[kubeio.Api, Any, report.Report], int],
    settings: client.Connection,
    stop: report.Stop,
) -> int:
    """Every hook's run: its report and client, ``act``, and ``stop``'s exit on its errors."""
    out = report.Report(name)
    api = client.connect(settings)
    try:
        return int(act(api, settings, out))
    except stop.errors as exc:
        out.finding(report.Finding(report.Severity.FAIL, f"{stop.what}: {exc}", fix=stop.fix))
        return stop.exit_code
