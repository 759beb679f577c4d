"""Formation of an 18-node ComputeDomain with every component real, against two baselines.

Per run: the same 18 pods (one per node of rack 1), once without claims (scheduler + kwok),
once each holding a claim of a plain DRA driver that adds nothing (``sim/plaindra.py``: the
scheduler's and the kubelet's own DRA path) and once with the domain's channel claim (plus
holds, prepare, slots, IMEX start with a 0.5 s fake start-up delay, peers); measured from pod
creation to all pods Ready. The figure that counts is ComputeDomain minus plain DRA, per run.
Three placement modes, each after its own ``helm upgrade``: the default (the placing domain's
turn), binding conditions on every free node (``controller.placementTurns=false``), and
neither (``kubeletPlugin.bindingConditions=false``). Also: API writes of the controller per
formation and while idle, HTTP 409/429 on our writes, and the controller's memory and CPU while
20 domains churn on 36 nodes.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import time
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import pytest
from kubernetes import client, watch

from cdsim import cluster, plaindra
from cdsim.kubelet import main as sim_kubelet
from computedomains import trace, waiting
from computedomains.api import constants
from computedomains.kube import client as kube_client
from tests.benchmarks import conftest, footprint, ownmetrics, publishing, report, workload
from tests.benchmarks.conftest import NAMESPACE
from tests.support import kube
from tests.support.controller import WRITE_VERBS

RUNS = 20
RUNS_OTHER = 8
"""Formations in each of the other two placement modes."""
SIZES = (2, 6)
"""Smaller domains on the turn, beside the 18-node one: how the cost above a plain claim grows
with the nodes forming at once, every node's processes on this machine's cores."""
RUNS_SIZE = 4
NODES = [f"gb200-r1-n{i:02d}" for i in range(18)]
PLAIN_TEMPLATE = "plain-dra"


def _pods(
    api: Any, template: str | None, tag: str, nodes: Sequence[str] = NODES
) -> tuple[float, float]:
    """Create one pod per node of ``nodes`` (claiming from ``template`` if given) as a Job
    would (:mod:`workload`); (create calls, all Ready) s.

    Readiness is followed by a watch, not by listing: the measurement adds no load of its own.
    """
    core = client.CoreV1Api(api)
    bodies = []
    for node in nodes:
        spec: dict[str, Any] = {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "busybox:1.37", "command": ["sleep", "3600"]}],
        }
        if template:
            spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": template}]
            spec["containers"][0]["resources"] = {"claims": [{"name": "imex"}]}
        bodies.append(
            {"metadata": {"name": f"{tag}-{node[-3:]}", "labels": {"run": tag}}, "spec": spec}
        )
    started = time.monotonic()
    created = workload.create_pods(api, NAMESPACE, bodies)
    ready: set[str] = set()
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    events = stream.stream(  # type: ignore[no-untyped-call]
        core.list_namespaced_pod, NAMESPACE, label_selector=f"run={tag}", timeout_seconds=180
    )
    for event in events:
        pod = event["object"]
        condition = kube.pod_condition(pod, "Ready")
        if condition is not None and condition.status == "True":
            ready.add(pod.metadata.name)
        else:
            ready.discard(pod.metadata.name)
        if len(ready) == len(nodes):
            stream.stop()  # type: ignore[no-untyped-call]
            return created, time.monotonic() - started
    raise AssertionError(f"{len(nodes)} pods of {tag} not Ready within 180 s: {len(ready)} are")


def delete_pods(api: Any, tag: str) -> None:
    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"run={tag}")
    waiting.until(
        f"pods of {tag} gone",
        lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=f"run={tag}").items,
        timeout=120,
        interval=0.2,
    )


def _domain(api: Any, name: str) -> str:
    body = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        constants.GROUP, constants.VERSION, NAMESPACE, constants.COMPUTE_DOMAIN_PLURAL, body
    )
    resource = client.ResourceV1Api(api)
    waiting.until(
        "the claim template",
        lambda: resource.read_namespaced_resource_claim_template(f"{name}-channel", NAMESPACE),
        timeout=30,
        retry_on=(client.exceptions.ApiException,),
    )
    return f"{name}-channel"


def _uid(api: Any, name: str) -> str:
    found = client.CustomObjectsApi(api).get_namespaced_custom_object(
        constants.GROUP, constants.VERSION, NAMESPACE, constants.COMPUTE_DOMAIN_PLURAL, name
    )
    return str(cast(dict[str, Any], found)["metadata"]["uid"])


def _traced(sim: cluster.SimCluster, driver_ns: str) -> list[trace.Event]:
    """Every trace line the chart's components wrote (the simulated kubelet keeps their logs)."""
    assert sim.directory is not None
    events: list[trace.Event] = []
    for folder in sim_kubelet.pod_log_dirs(sim.directory, namespace=driver_ns, name="*"):
        for log in folder.glob("*.log"):
            with log.open(errors="replace") as lines:
                events.extend(trace.parse(lines))
    return events


def _stages(
    events: list[trace.Event], formations: list[tuple[str, float]], total: list[float]
) -> dict[str, dict[str, float]]:
    """Per stage, over the runs: seconds from pod creation until all 18 nodes had reached it."""
    offsets: dict[str, list[float]] = {}
    for (uid, since), ready in zip(formations, total, strict=True):
        reached = trace.all_reached(events, domain=uid, nodes=len(NODES), since=since)
        for stage in trace.Stage:
            if stage in reached:
                offsets.setdefault(stage.value, []).append(reached[stage])
        offsets.setdefault("pods-ready", []).append(ready)
    summary = {name: report.summarize(values) for name, values in offsets.items()}
    print("\nformation of 18 nodes, stage by stage (s after the pods were created, all nodes):")
    for name, figures in summary.items():
        print(f"  {name:<18} p50 {figures['p50']:6.3f}  p99 {figures['p99']:6.3f}  "
              f"(n={figures['n']:.0f})")  # fmt: skip
    return summary


def _undomain(api: Any, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        constants.GROUP, constants.VERSION, NAMESPACE, constants.COMPUTE_DOMAIN_PLURAL, name
    )
    core = client.CoreV1Api(api)
    waiting.until(
        "no node in a domain",
        lambda: not core.list_node(label_selector=constants.COMPUTE_DOMAIN_LABEL).items,
        timeout=120,
        interval=0.2,
    )


def _status(api: Any, name: str) -> str:
    found = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            constants.GROUP, constants.VERSION, NAMESPACE, constants.COMPUTE_DOMAIN_PLURAL, name
        ),
    )
    return str((found.get("status") or {}).get("status", ""))


def _ready(api: Any, name: str) -> bool:
    return _status(api, name) == "Ready"


@dataclasses.dataclass(frozen=True)
class Writes:
    """The controller's API writes so far, from its request counter (leases excluded: the
    elector's renewals, a fixed rate, not the controller's work)."""

    refused: int
    """Answered 409 or 429."""
    by_resource: dict[str, int]

    @property
    def total(self) -> int:
        """Every write, whatever the resource."""
        return sum(self.by_resource.values())


def _writes(text: str) -> Writes:
    refused = 0
    by_resource: dict[str, int] = {}
    for labels, value in ownmetrics.api_requests(text):
        resource, count = labels.get("resource", ""), int(value)
        if resource == "leases" or labels.get("verb", "").upper() not in WRITE_VERBS:
            continue
        by_resource[resource] = by_resource.get(resource, 0) + count
        if labels.get("code") in ("409", "429"):
            refused += count
    return Writes(refused, by_resource)


def _process(pod_ip: str) -> tuple[int, float]:
    """(RSS KiB, CPU seconds) of the controller process serving ``pod_ip``."""
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            status = (proc / "status").read_text()
        except OSError:
            continue
        if b"controller" in argv and any(pod_ip.encode() in a for a in argv):
            found = re.search(r"VmRSS:\s+(\d+)", status)
            assert found is not None
            rss = int(found.group(1))
            return rss, (int(stat[11]) + int(stat[12])) / 100
    raise AssertionError(f"no controller process on {pod_ip}")


@dataclasses.dataclass
class Rounds:
    """What a series of 18-node formations measured."""

    baseline: list[float] = dataclasses.field(default_factory=list)
    plain: list[float] = dataclasses.field(default_factory=list)
    """The same pods each holding a claim of the plain DRA driver."""
    formation: list[float] = dataclasses.field(default_factory=list)
    created: list[float] = dataclasses.field(default_factory=list)
    """Seconds the 18 create calls of the domain's pods took (admission, our webhook)."""
    created_plain: list[float] = dataclasses.field(default_factory=list)
    """The same for the plain DRA pods."""
    conditional: list[int] = dataclasses.field(default_factory=list)
    """Per formation: the domain's claims allocated with binding conditions (each paid the
    scheduler's PreBind poll)."""
    writes: list[float] = dataclasses.field(default_factory=list)
    writes_by_resource: dict[str, int] = dataclasses.field(default_factory=dict)
    """Summed over the formations."""
    conflicts: int = 0
    started: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    """(domain UID, wall-clock creation of its pods) per formation, for the trace."""


def rounds(
    api: Any, driver_ns: str, prefix: str, runs: int, nodes: Sequence[str] = NODES
) -> Rounds:
    """``runs`` times: the baseline pods, the plain DRA pods, then a domain and the same pods
    claiming from it, one pod per node of ``nodes``."""
    out = Rounds()
    for run in range(runs):
        name = f"{prefix}{run}"
        out.baseline.append(_pods(api, None, f"base-{name}", nodes)[1])
        delete_pods(api, f"base-{name}")
        created_plain, ready_plain = _pods(api, PLAIN_TEMPLATE, f"plain-{name}", nodes)
        out.created_plain.append(created_plain)
        out.plain.append(ready_plain)
        delete_pods(api, f"plain-{name}")
        leader = ownmetrics.leader(api, driver_ns)
        before = _writes(ownmetrics.scrape(leader))
        template = _domain(api, name)
        out.started.append((_uid(api, name), time.time()))
        created, ready = _pods(api, template, name, nodes)
        out.created.append(created)
        out.formation.append(ready)
        waiting.until(f"ComputeDomain {name} Ready", partial(_ready, api, name), timeout=30)
        out.conditional.append(workload.conditional_claims(api, NAMESPACE, name)[0])
        after = _writes(ownmetrics.scrape(leader))
        out.writes.append(float(after.total - before.total))
        out.conflicts += after.refused - before.refused
        for resource, count in after.by_resource.items():
            spent = count - before.by_resource.get(resource, 0)
            out.writes_by_resource[resource] = out.writes_by_resource.get(resource, 0) + spent
        delete_pods(api, name)
        _undomain(api, name)
    return out


def _per_formation(measured: Rounds) -> dict[str, float]:
    """Mean writes per formation by resource."""
    runs = max(1, len(measured.writes))
    return {r: round(n / runs, 1) for r, n in sorted(measured.writes_by_resource.items()) if n}


def paired(measured: Rounds) -> dict[str, float]:
    """ComputeDomain minus plain DRA, run by run (the same run's pods, the same nodes)."""
    pairs = zip(measured.formation, measured.plain, strict=True)
    return report.summarize([form - plain for form, plain in pairs])


TARGETS = {"all Ready": "p50 ≤ 3.0", "minus plain DRA": "p50 ≤ 1.0, p99 ≤ 2.0"}
"""The formation targets, shown beside the figures."""


def _side_by_side(modes: dict[str, Rounds]) -> report.Table:
    """No claim, plain DRA claim and ComputeDomain claim, in each placement mode."""
    rows: list[tuple[str, list[float | str]]] = []
    for mode, measured in modes.items():
        figures = {
            "no claim": (report.summarize(measured.baseline), ""),
            "plain DRA claim": (report.summarize(measured.plain), ""),
            "ComputeDomain claim": (report.summarize(measured.formation), TARGETS["all Ready"]),
            "ComputeDomain minus plain DRA (paired)": (paired(measured),
                                                       TARGETS["minus plain DRA"]),
            "create calls, plain DRA": (report.summarize(measured.created_plain), ""),
            "create calls, ComputeDomain": (report.summarize(measured.created), ""),
            "claims allocated with binding conditions (count)": (
                report.summarize([float(n) for n in measured.conditional]), ""),
        }  # fmt: skip
        for label, (summary, target) in figures.items():
            rows.append(
                (f"{mode}: {label}", [summary["p50"], summary["p99"], summary["n"], target])
            )
    return report.Table(
        title="18 pods created → all Ready, seconds (the same run, the same 18 nodes)",
        columns=["p50", "p99", "runs", "target"],
        rows=rows,
    )


def _by_size(sizes: dict[int, Rounds]) -> report.Table:
    """ComputeDomain minus plain DRA on the turn, by the number of nodes forming at once."""
    rows: list[tuple[str, list[float | str]]] = []
    for nodes, measured in sorted(sizes.items()):
        plain, form = report.summarize(measured.plain), report.summarize(measured.formation)
        minus = paired(measured)
        cells: list[float | str] = [plain["p50"], form["p50"], minus["p50"], minus["p99"]]
        rows.append((f"{nodes} nodes", [*cells, minus["n"]]))
    title = ("The turn by domain size: seconds to all Ready (each node's agent, IMEX, plugin "
             "and kubelet share this machine's cores)")  # fmt: skip
    columns = ["plain DRA p50", "ComputeDomain p50", "minus plain p50", "minus plain p99", "runs"]
    return report.Table(title=title, columns=columns, rows=rows)


def _mode(measured: Rounds, stages: dict[str, dict[str, float]]) -> dict[str, Any]:
    base, plain = report.summarize(measured.baseline), report.summarize(measured.plain)
    form = report.summarize(measured.formation)
    return {
        "runs": len(measured.formation),
        "baseline_no_claims_s": base,
        "plain_dra_claim_s": plain,
        "formation_18_nodes_s": form,
        "formation_minus_plain_dra_s": paired(measured),
        "formation_minus_baseline_p50_s": round(form["p50"] - base["p50"], 3),
        "stages_all_nodes_s": stages,
        "create_calls_plain_dra_s": report.summarize(measured.created_plain),
        "create_calls_compute_domain_s": report.summarize(measured.created),
        "claims_with_binding_conditions_per_formation": report.summarize(
            [float(n) for n in measured.conditional]
        ),
        "formations_with_a_poll": sum(1 for n in measured.conditional if n),
        "controller_writes_per_formation": report.summarize(measured.writes),
        "controller_writes_per_formation_by_resource": _per_formation(measured),
    }


@pytest.mark.timeout(3000)
def test_formation_latency_api_writes_and_controller_footprint(
    installed: tuple[cluster.SimCluster, Any, str], tmp_path: pathlib.Path
) -> None:
    sim, api, driver_ns = installed
    lean = kube_client.Client.from_kubeconfig(sim.kubeconfig)
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        NAMESPACE, plaindra.claim_template(PLAIN_TEMPLATE, NAMESPACE)
    )
    with plaindra.running(lean, sim.host_trees):
        _measure(sim, api, driver_ns, tmp_path)


def _measure(sim: cluster.SimCluster, api: Any, driver_ns: str, tmp_path: pathlib.Path) -> None:
    cpu_before = footprint.cpu_now()
    on = rounds(api, driver_ns, "cd", RUNS)
    cpu = footprint.cpu_spent(cpu_before, footprint.cpu_now())
    sizes = {n: rounds(api, driver_ns, f"size{n}-", RUNS_SIZE, NODES[:n]) for n in SIZES}
    sizes[len(NODES)] = on
    leader = ownmetrics.leader(api, driver_ns)
    last: list[int] = []

    def quiet() -> bool:  # the last deletion's clean-up writes are done: 3 s without a write
        last.append(_writes(ownmetrics.scrape(leader)).total)
        return len(last) > 3 and len(set(last[-4:])) == 1

    waiting.until("the controller to finish the last clean-up", quiet, timeout=60, interval=1)
    idle_before = _writes(ownmetrics.scrape(leader)).total
    idle_started = time.monotonic()
    waiting.until(
        "a 10 s idle window", lambda: time.monotonic() - idle_started >= 10, timeout=15, interval=1
    )
    idle_after = _writes(ownmetrics.scrape(leader)).total
    stages = _stages(_traced(sim, driver_ns), on.started, on.formation)
    rss, cpu_share = _churn(api, leader)
    # Binding conditions on every free node: the placement before the turn.
    conftest.upgrade(sim, tmp_path, "controller.placementTurns=false")
    publishing.republished(api, binding=True, at_least=len(publishing.sim_nodes(api)))
    asked = rounds(api, driver_ns, "bc", RUNS_OTHER)
    stages_asked = _stages(_traced(sim, driver_ns), asked.started, asked.formation)
    # Neither: the fallback of Kubernetes before 1.36.
    conftest.upgrade(sim, tmp_path, "kubeletPlugin.bindingConditions=false")
    publishing.republished(api, binding=False, at_least=len(publishing.sim_nodes(api)))
    off = rounds(api, driver_ns, "nobc", RUNS_OTHER)
    stages_off = _stages(_traced(sim, driver_ns), off.started, off.formation)
    base, plain, form = (report.summarize(x) for x in (on.baseline, on.plain, on.formation))
    form_asked, form_off = report.summarize(asked.formation), report.summarize(off.formation)
    writes = report.summarize(on.writes)
    per_round = {k: round(v / RUNS, 2) for k, v in cpu.items()}
    plots = [
        report.Plot(
            name="stages",
            title="18-node formation: all nodes past each stage (s after pod creation)",
            labels=list(stages_asked),
            series={
                "p50 turn (default)": [stages.get(s, {}).get("p50", 0.0) for s in stages_asked],
                "p50 binding conditions": [stages_asked[s]["p50"] for s in stages_asked],
                "p50 neither": [stages_off.get(s, {}).get("p50", 0.0) for s in stages_asked],
            },
            unit="seconds",
            kind="barh",
        ),
        report.Plot(
            name="latency",
            title="18 pods created → all Ready",
            labels=[
                "no claims",
                "plain DRA claim",
                "ComputeDomain, turn (default)",
                "ComputeDomain, binding conditions",
                "ComputeDomain, neither",
            ],
            series={
                q: [base[q], plain[q], form[q], form_asked[q], form_off[q]] for q in ("p50", "p99")
            },
            unit="seconds",
        ),
        report.Plot(
            name="cpu",
            title="CPU seconds per round (baseline pods, formation, clean-up), by process",
            labels=list(per_round)[:12],
            series={"CPU s": list(per_round.values())[:12]},
            unit="CPU seconds",
            kind="barh",
        ),
        report.Plot(
            name="writes",
            title="Controller API writes per 18-node formation",
            labels=["p50", "p99", "target 2N+5"],
            series={"writes": [writes["p50"], writes["p99"], 2 * len(NODES) + 5]},
            unit="writes",
        ),
    ]
    report.save(
        "formation",
        {
            **_mode(on, stages),
            "ratio_p50": round(form["p50"] / base["p50"], 3),
            "ratio_to_plain_dra_p50": round(form["p50"] / plain["p50"], 3),
            "controller_writes_idle_per_s": round((idle_after - idle_before) / 10, 3),
            "http_409_429_on_our_writes": on.conflicts + asked.conflicts + off.conflicts,
            "controller_rss_mib_20_domains_churning": round(rss / 1024, 1),
            "controller_cpu_fraction_20_domains_churning": cpu_share,
            # Per round: the baseline pods, the formation and the clean-up (the machine's work).
            "cpu_s_per_round_by_component": per_round,
            "cpu_s_per_round_total": round(sum(per_round.values()), 1),
            "binding_conditions_on_every_free_node": _mode(asked, stages_asked),
            "without_binding_conditions": _mode(off, stages_off),
            "turn_by_domain_size": {
                str(n): {"runs": len(m.formation), "plain_dra_claim_s": report.summarize(m.plain),
                         "formation_s": report.summarize(m.formation),
                         "formation_minus_plain_dra_s": paired(m)}
                for n, m in sizes.items()
            },
        },
        plots=plots,
        tables=[_side_by_side({"turn (default)": on, "binding conditions on every free node":
                               asked, "neither (device taints alone)": off}), _by_size(sizes)],
    )  # fmt: skip
    assert form["n"] == RUNS and form_asked["n"] == form_off["n"] == RUNS_OTHER
    # With binding conditions on every free node, every stage was traced on every run.
    assert all(stages_asked.get(s.value, {}).get("n") == RUNS_OTHER for s in trace.Stage), (
        stages_asked
    )
    # On the turn, as without binding conditions, the binder answers nothing (no claim waits in
    # PreBind); every other stage is passed.
    for seen, runs in ((stages, RUNS), (stages_off, RUNS_OTHER)):
        missed = {s for s in trace.Stage if seen.get(s.value, {}).get("n") != runs}
        assert missed == {trace.Stage.CLAIM_ALLOCATED, trace.Stage.NODE_RESERVED}, seen


def _churn(api: Any, leader: Any) -> tuple[int, float]:
    """20 domains of 1-2 nodes each (36 nodes), pods created and deleted for 30 s."""
    rss0, cpu0 = _process(leader.status.pod_ip)
    templates = [_domain(api, f"churn{i}") for i in range(20)]
    nodes = [n.metadata.name for n in publishing.sim_nodes(api)]
    core = client.CoreV1Api(api)
    started = time.monotonic()
    cycle = 0
    while time.monotonic() - started < 30:
        for i, template in enumerate(templates):
            node = nodes[(i + cycle) % len(nodes)]
            core.create_namespaced_pod(
                NAMESPACE,
                {
                    "metadata": {"generateName": f"churn{i}-", "labels": {"run": "churn"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template}],
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox:1.37",
                                "resources": {"claims": [{"name": "imex"}]},
                            }
                        ],
                    },
                },
            )
        cycle += 1
        time.sleep(3)  # the churn's own pace: a new wave every 3 s, not a wait for state
        core.delete_collection_namespaced_pod(NAMESPACE, label_selector="run=churn")
    rss, cpu1 = _process(leader.status.pod_ip)
    return max(rss, rss0), round((cpu1 - cpu0) / (time.monotonic() - started), 3)
