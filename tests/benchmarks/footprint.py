"""What each node costs: RSS of the chart's per-node processes, API watches, requests, CPU.

RSS comes from ``/proc`` (every container the simulated kubelet runs, from its image under runc
or as a process of the checkout, is a process of this machine with its ``--node-name`` in its
arguments); watches and requests from the API server's own metrics, so
they include the control plane's (kube-scheduler, kube-controller-manager, kwok's node leases):
per node they are an upper bound of what our components add.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import statistics
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import parser

from cdsim.fakeimex import install as fake_imex
from computedomains import waiting

COMPONENTS = {
    "kubelet-plugin": ("kubelet-plugin",),
    "imex-agent": ("imex-agent",),
}
"""Component → the arguments that name its process (``computedomains <subcommand> ...``)."""
WINDOW = 30.0
"""Seconds of idle cluster over which requests are counted."""


def _processes(file: str) -> Iterator[tuple[int, list[str], str]]:
    """(PID, arguments, text of ``/proc/<pid>/<file>``) of every process that can be read."""
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            raw = (proc / "cmdline").read_bytes().split(b"\0")
            text = (proc / file).read_text()
        except OSError:
            continue
        yield int(proc.name), [a.decode(errors="replace") for a in raw if a], text


def product_subcommand(argv: list[str]) -> str:
    """The ``computedomains`` subcommand a command line runs ("" for another program).

    ``python -m computedomains SUB`` (a process of the checkout) and the image's entrypoint
    script, ``/usr/bin/python3.11 /usr/local/bin/computedomains SUB`` as the kernel runs its
    ``#!`` line.
    """
    for at, arg in enumerate(argv[:-1]):
        if pathlib.PurePosixPath(arg).name == "computedomains":
            return argv[at + 1]
    return ""


def rss_by_node() -> dict[str, dict[str, float]]:
    """Node → component → RSS (MiB) of the per-node processes running now."""
    out: dict[str, dict[str, float]] = {}
    for _, argv, status in _processes("status"):
        if not product_subcommand(argv):
            continue
        node = next((a.split("=", 1)[1] for a in argv if a.startswith("--node-name=")), "")
        found = re.search(r"VmRSS:\s+(\d+)", status)
        for component, words in COMPONENTS.items():
            if node and found and all(w in argv for w in words):
                out.setdefault(node, {})[component] = int(found.group(1)) / 1024
    return out


def runtime_rss_mib() -> float:
    """RSS (MiB) of every ``runc`` process running now: what the simulation's container runtime
    adds (a ``runc run`` per container; none in process mode)."""
    total = 0
    for _, argv, status in _processes("status"):
        found = re.search(r"VmRSS:\s+(\d+)", status)
        if argv and pathlib.Path(argv[0]).name == "runc" and found:
            total += int(found.group(1))
    return round(total / 1024, 1)


CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Cpu:
    """CPU seconds of one process: its own, and its children's that it has waited for."""

    component: str
    own: float
    children: float


def component_of(argv: list[str]) -> str:
    """Which part of the simulated cluster a command line is ("" for anything else)."""
    name = pathlib.Path(argv[0]).name if argv else ""
    if name in CONTROL_PLANE:
        return name
    if argv[1:4] == ["-m", "cdsim", "kubelet"]:
        return "simulated kubelet"
    if name == "runc":
        return "runc"
    subcommand = product_subcommand(argv)
    if subcommand:
        return subcommand
    program = fake_imex.program_of(argv)
    return f"fake {program}" if program else ""


def cpu_now() -> dict[int, Cpu]:
    """Every process of the simulated cluster by PID, with its CPU seconds so far."""
    out: dict[int, Cpu] = {}
    for pid, argv, stat in _processes("stat"):
        component = component_of(argv)
        if component:
            fields = stat.rsplit(")", 1)[1].split()
            own = (int(fields[11]) + int(fields[12])) / TICKS
            out[pid] = Cpu(component, own, (int(fields[13]) + int(fields[14])) / TICKS)
    return out


def cpu_spent(before: dict[int, Cpu], after: dict[int, Cpu]) -> dict[str, float]:
    """CPU seconds by component between two :func:`cpu_now` samples, largest first.

    Processes that started and ended in between (a fake ``nvidia-imex-ctl``, a pod's init
    container) count through their parent's children time, as ``<parent> children``.
    """
    spent: dict[str, float] = {}
    for pid, now in after.items():
        then = before.get(pid)
        if then is not None and then.component != now.component:
            then = None  # the PID was reused
        own = now.own - (then.own if then else 0.0)
        children = now.children - (then.children if then else 0.0)
        spent[now.component] = spent.get(now.component, 0.0) + own
        if children > 0:
            key = f"{now.component} children"
            spent[key] = spent.get(key, 0.0) + children
    return {k: round(v, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v > 0}


def _metrics(api: Any) -> str:
    serialized = api.param_serialize("GET", "/metrics", header_params={"Accept": "text/plain"},
                                     auth_settings=["BearerToken"])  # fmt: skip
    return str(api.call_api(*serialized).read().decode())


def _samples(text: str, name: str) -> dict[tuple[str, str], float]:
    """(resource, verb) → value of metric ``name``, summed over its other labels."""
    out: dict[tuple[str, str], float] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                key = (sample.labels.get("resource", ""), sample.labels.get("verb", ""))
                out[key] = out.get(key, 0.0) + sample.value
    return out


def measure(api: Any, nodes: int) -> dict[str, Any]:
    """RSS per node and component, watches open and requests per second, per node."""
    expected = len(COMPONENTS)
    seen: dict[str, dict[str, float]] = {}

    def complete() -> bool:
        seen.clear()
        seen.update(rss_by_node())
        return len(seen) >= nodes and all(len(c) == expected for c in seen.values())

    waiting.until(f"every one of {nodes} nodes to run its {expected} processes", complete,
                  timeout=60, interval=1)  # fmt: skip
    per_node = [sum(c.values()) for c in seen.values()]
    by_component = {
        name: round(statistics.median(c[name] for c in seen.values()), 1) for name in COMPONENTS
    }
    before, started = _samples(_metrics(api), "apiserver_request_total"), time.monotonic()
    waiting.until(f"a {WINDOW:g} s idle window", lambda: time.monotonic() - started >= WINDOW,
                  timeout=WINDOW + 10, interval=1)  # fmt: skip
    text = _metrics(api)
    elapsed = time.monotonic() - started
    after = _samples(text, "apiserver_request_total")
    rates = {
        f"{resource or '-'} {verb}": round((value - before.get((resource, verb), 0.0)) / elapsed, 2)
        for (resource, verb), value in after.items()
        if value > before.get((resource, verb), 0.0)
    }
    watches = {
        resource or "-": value
        for (resource, verb), value in _samples(text, "apiserver_longrunning_requests").items()
        if verb == "WATCH" and value
    }
    total_rate = sum(rates.values())
    return {
        "nodes": nodes,
        "rss_per_node_mib": {
            "p50": round(statistics.median(per_node), 1),
            "max": round(max(per_node), 1),
        },
        "rss_by_component_p50_mib": by_component,
        "requests_per_s_idle": round(total_rate, 2),
        "requests_per_s_idle_per_node": round(total_rate / nodes, 3),
        "requests_per_s_idle_by_resource_verb": dict(sorted(rates.items())),
        "watches_open": int(sum(watches.values())),
        "watches_open_per_node": round(sum(watches.values()) / nodes, 2),
        "watches_open_by_resource": dict(sorted(watches.items())),
    }
