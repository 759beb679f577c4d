"""The chart's processes and files on one simulated node, and the faults done to them.

Shared by the cluster tests and the chaos run (:mod:`cdsim.chaos`): which process is a node's
kubelet plugin, IMEX agent or ``nvidia-imex``, or a chart pod's container; how a plugin's
checkpoint is damaged; how the node's fake IMEX is told to fail. Processes are found by their
arguments and, where names repeat across clusters, by the folder they work in: several
simulated clusters on one machine have nodes of the same names.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
from collections.abc import Callable, Sequence

from cdsim import hosttree, processes
from cdsim.fakeimex import install as fake_imex
from cdsim.kubelet import node as sim_node

CHECKPOINT_DAMAGE = ("corrupt", "newer-version")
"""How :func:`damage_checkpoint` damages a checkpoint: torn in the middle (a bad disk, a bug),
or rewritten by a newer plugin (before a rollback)."""


def plugin_pid(
    tree: hosttree.HostTree, node: str, *, table: Sequence[processes.ProcessInfo] | None = None
) -> int | None:
    """The node's kubelet plugin process."""
    return processes.find("kubelet-plugin", f"--node-name={node}", under=tree.root, table=table)


def agent_pid(
    tree: hosttree.HostTree, node: str, *, table: Sequence[processes.ProcessInfo] | None = None
) -> int | None:
    """The node's IMEX agent process."""
    return processes.find("imex-agent", f"--node-name={node}", under=tree.root, table=table)


def imex_pid(
    tree: hosttree.HostTree, *, table: Sequence[processes.ProcessInfo] | None = None
) -> int | None:
    """The node's (fake) ``nvidia-imex``, started by its agent with the node's ``imexd.cfg``."""
    root = tree.root.resolve()
    for proc in processes.scan() if table is None else table:
        ours = fake_imex.program_of(proc.argv) == "nvidia-imex" and proc.inside(root)
        if ours and processes.pid_alive(proc.pid):
            return proc.pid
    return None


def container_pid(
    tree: hosttree.HostTree,
    pod_uid: str,
    *needles: str,
    table: Sequence[processes.ProcessInfo] | None = None,
) -> int | None:
    """The process of a chart pod's container whose arguments hold ``needles``.

    ``needles``: its subcommand (``controller``, ``webhook``), say. The simulated kubelet runs
    it in the pod's folder in the node's tree.
    """
    folder = sim_node.pod_dir(tree.root, pod_uid)
    return processes.find(*needles, under=folder, table=table)


def kill_frozen(pid: int, meanwhile: Callable[[], None]) -> None:
    """Freeze ``pid`` (SIGSTOP), run ``meanwhile``, then SIGKILL it.

    Frozen, a plugin cannot write its checkpoint any more: what ``meanwhile`` does to the file
    is what its successor finds.
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        meanwhile()
    finally:
        os.kill(pid, signal.SIGKILL)


def damage_checkpoint(path: pathlib.Path, how: str) -> None:
    """Damage the plugin checkpoint at ``path`` (:data:`CHECKPOINT_DAMAGE`).

    A missing file is damaged too: garbage takes its place.
    """
    text = path.read_text() if path.exists() else "{}"
    if how == "corrupt":
        path.write_text(text[: len(text) // 2] or "{")  # torn in the middle
    elif how == "newer-version":
        try:
            document = json.loads(text)
        except ValueError:  # torn already: a newer plugin would have rewritten it whole
            document = {}
        if not isinstance(document, dict):
            document = {}
        path.write_text(json.dumps({**document, "checkpointVersion": 99, "claims": []}))
    else:
        raise ValueError(f"unknown checkpoint damage {how!r}: expected one of {CHECKPOINT_DAMAGE}")


def set_imex_fault(tree: hosttree.HostTree, words: str) -> str | None:
    """Write the fake IMEX's fault file (``bind``, ``hang``, ...); returns what it held before.

    None: there was no file. :func:`restore_imex_fault` puts it back.
    """
    path = tree.imex_fault_file
    before = path.read_text() if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{words}\n")
    return before


def restore_imex_fault(tree: hosttree.HostTree, before: str | None) -> None:
    """Put the fault file back as :func:`set_imex_fault` found it."""
    path = tree.imex_fault_file
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(before)
