"""``cdsim demo``: a simulated GB200 cluster, the chart, and a ComputeDomain forming.

Steps, each timed and printed: build the tools if needed, start a 2-rack simulated cluster,
``helm install`` the chart (the gb200-nvl72 profile under the simulation's overlay
values/sim.yaml), wait for every node's kubelet plugin, apply the manifests in ``examples/``
(the same ones a real cluster takes), then follow the workload and the domain live until the
domain is Ready. Without a terminal it prints only changes, so the
output reads well in a log file.

Each run names its cluster after its own process (``demo-<pid>``), so demos, ``make test`` and
``cdsim up`` run side by side; the name and the kubeconfig are printed when the
cluster is up and again once the domain is Ready.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from cdsim import cluster, processes, publish, tools, topology
from cdsim import kubeapply as kube_apply
from cdsim.kubelet import main as kubelet_main
from computedomains import waiting
from computedomains.api import constants
from computedomains.kube import client as kube_client
from computedomains.kube import pods as kube_pods

DEMO_NAMESPACE = "demo"
DRIVER_NAMESPACE = "compute-domains"
RELEASE = "compute-domains"
DEFAULT_VALUES = (pathlib.Path("values/gb200-nvl72.yaml"), pathlib.Path("values/sim.yaml"))
"""What a real NVL72 cluster installs, then the simulation's overlay (only what it needs)."""


def cluster_name() -> str:
    """The cluster name of the demo running in this process: ``demo-<pid>``.

    Unique among the clusters running on the machine (two live processes never share a PID),
    and chosen without looking around, so two demos starting at once cannot pick the same one;
    a PID is reused only after its process is gone, and SimCluster clears a dead cluster's
    leftovers. A fixed name made every second demo, and the test of the demo, fail while one
    ran.
    """
    return f"demo-{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class Progress:
    """What the demo shows about the workload and its domain at one moment."""

    pods: int
    running: int
    nodes: int
    """Nodes the workload's pods run on."""
    members: tuple[tuple[str, int | None, str], ...]
    """(node, slot, status) per member, from the ComputeDomain's status."""
    status: str

    @property
    def ready_members(self) -> int:
        """Members whose IMEX is ready."""
        return sum(1 for _, _, s in self.members if s == "Ready")

    @property
    def formed(self) -> bool:
        """Every pod runs and every node it runs on is a ready member of a Ready domain.

        (A domain nobody has joined yet also reads Ready, so the status alone is not enough.)
        """
        return (
            self.status == "Ready"
            and self.running == self.pods > 0
            and self.ready_members == len(self.members) == self.nodes
        )


def render(progress: Progress, elapsed: float) -> str:
    """One status line: pods, members and slots, domain status."""
    slots = ",".join(str(slot) for _, slot, _ in sorted(progress.members, key=lambda m: m[1] or 0))
    return (
        f"[{elapsed:6.1f}s] pods {progress.running}/{progress.pods} Running | members "
        f"{progress.ready_members}/{len(progress.members)} IMEX-ready (slots {slots or '-'}) | "
        f"ComputeDomain {progress.status}"
    )


def gather(api: kube_client.Client, namespace: str, domain: str) -> Progress:
    """Read the workload's pods and the domain's status."""
    pods = api.get(f"/api/v1/namespaces/{namespace}/pods").get("items", [])
    domains = f"/apis/{constants.API_VERSION}/namespaces/{namespace}/computedomains"
    status = api.get(f"{domains}/{domain}").get("status") or {}
    members = tuple(
        (str(n.get("name")), n.get("index"), str(n.get("status", "NotReady")))
        for n in status.get("nodes") or []
    )
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    nodes = {p.get("spec", {}).get("nodeName") for p in running}
    return Progress(
        len(pods), len(running), len(nodes), members, str(status.get("status", "NotReady"))
    )


def _unready_pods(
    api: kube_client.Client, directory: pathlib.Path, *, most: int = 5, lines: int = 15
) -> str:
    """Why an install did not finish: the chart's pods neither ready nor done, with log tails.

    The sim keeps each container's log under the cluster directory, hooks' included. The first
    ``most`` such pods are shown (a DaemonSet's pods tend to fail alike), and how many more.
    """
    try:
        pods = api.get(f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods").get("items", [])
    except kube_client.API_ERRORS as exc:
        return f"(cannot list the chart's pods: {exc})"
    found: list[str] = []
    shown = 0
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        if kube_pods.is_ready(pod) or status.get("phase") == "Succeeded":
            continue
        shown += 1
        if shown > most:
            continue
        found.append(f"pod {meta['name']} ({status.get('phase', 'Unknown')}, not ready):")
        folder = kubelet_main.pod_log_dir(
            directory, namespace=DRIVER_NAMESPACE, name=meta["name"], uid=meta["uid"]
        )
        for log in sorted(folder.glob("*.log")):
            found.append(f"  {log.stem}: last lines of its log")
            found += [f"    {line}" for line in processes.log_tail(log, lines).splitlines()]
    if shown > most:
        found.append(f"... and {shown - most} more pods not ready")
    return "\n".join(found) or "(every chart pod is ready or done)"


def _interrupt(signum: int, frame: types.FrameType | None) -> None:
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """Let SIGTERM stop a run as Ctrl-C does (KeyboardInterrupt), so its cleanup runs."""
    signal.signal(signal.SIGTERM, _interrupt)


def publish_build(
    box: tools.ToolBox,
    state: cluster.ClusterState,
    chart: pathlib.Path,
    *,
    out: Callable[[str], None],
) -> publish.Published:
    """Publish this checkout's image and ``chart`` to the cluster's registry."""
    return publish.publish_build(
        helm=box.path("helm3"), registry=state.registry, chart_dir=chart.resolve(), log=out
    )


def install_chart(
    box: tools.ToolBox,
    state: cluster.ClusterState,
    api: kube_client.Client,
    published: publish.Published,
    *,
    values: Sequence[pathlib.Path],
    out: Callable[[str], None],
) -> None:
    """``helm install`` the published chart with ``values`` into :data:`DRIVER_NAMESPACE`.

    The chart is installed from the registry by OCI reference, as a user installs theirs. A
    failed install raises with Helm's words and the chart pods that are not ready.
    """
    kubeconfig, directory = state.kubeconfig, pathlib.Path(state.directory)
    helm = box.path("helm3")
    files = " ".join(f"-f {v}" for v in values)
    out(
        f"helm install {RELEASE} {published.chart_ref} --version {published.version} {files}"
        f" (namespace {DRIVER_NAMESPACE})"
    )
    done = subprocess.run(
        [
            str(helm),
            "install",
            RELEASE,
            *published.chart_args(),
            "--namespace",
            DRIVER_NAMESPACE,
            "--create-namespace",
            *(arg for v in values for arg in ("--values", str(v))),
            "--wait",
            # Helm bounds each step by this: the wait for the resources, then each hook.
            # The verify hook waits up to verify.timeoutSeconds (300 s) for the components
            # before it reports; Helm must not give up on it first, saying nothing.
            "--timeout",
            "10m",
            "--kubeconfig",
            kubeconfig,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        try:
            why = _unready_pods(api, directory)
        except Exception as exc:  # noqa: BLE001 - the explanation must not hide Helm's error
            why = f"(cannot show the chart's pods: {exc!r})"
        raise RuntimeError(f"helm install failed:\n{done.stdout}\n{done.stderr}\n{why}")


def wait_plugins(
    api: kube_client.Client, nodes: int, *, out: Callable[[str], None], timeout: float = 300
) -> None:
    """Wait until the kubelet plugins of ``nodes`` nodes publish devices, saying how many do."""
    seen = -1

    def published() -> bool:
        nonlocal seen
        slices = api.get("/apis/resource.k8s.io/v1/resourceslices").get("items", [])
        count = sum(
            1
            for s in slices
            if s["spec"].get("driver") == constants.DRIVER_NAME and s["spec"].get("devices")
        )
        if count != seen:
            out(f"  kubelet plugins publishing devices: {count}/{nodes} nodes")
            seen = count
        return count >= nodes

    waiting.until(
        "every node's kubelet plugin to publish its devices", published, timeout=timeout, interval=1
    )


@dataclasses.dataclass
class Demo:
    """One run of the demo."""

    examples: pathlib.Path
    chart: pathlib.Path
    values: tuple[pathlib.Path, ...]
    """Values files, in order."""
    out: Callable[[str], None]
    interactive: bool
    racks: int = 2
    nodes_per_rack: int = 18
    """Nodes per rack: 18, a full NVL72 (fewer: a lighter demo beside others)."""
    runtime: str | None = None
    """How the simulated kubelet runs pods (:data:`controlplane.RUNTIMES`; None: the default)."""
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def step(self, name: str, started: float) -> None:
        """Record and print how long a step took."""
        self.timings[name] = round(time.monotonic() - started, 1)
        self.out(f"  done: {name} in {self.timings[name]:.1f}s")

    def run(self, *, until_ready: bool, timeout: float) -> int:
        """Run every step; returns the exit code."""
        started = time.monotonic()
        interrupt_on_sigterm()
        box = tools.ToolBox.from_env()
        box.ensure_all(["etcd", "kubernetes", "kwok", "helm3"])
        self.step("tools", started)
        sim = cluster.SimCluster(
            name=cluster_name(), toolbox=box,
            topology_spec=topology.Topology(racks=self.racks, nodes_per_rack=self.nodes_per_rack),
            runtime=self.runtime,
        )  # fmt: skip
        try:
            mark = time.monotonic()
            state = sim.start()
            self.out(f"Simulated cluster {sim.name} up: {state.nodes} GB200 nodes")
            self.out(f"  kubeconfig  {state.kubeconfig}")
            self.out(f"  status      cdsim status --name {sim.name}")
            self.step("cluster", mark)
            api = sim.api_client()
            self.out(f"  registry    {state.registry}")
            self._install_chart(box, state, api)
            self._wait_plugins(api, len(sim.nodes))
            domain = self._apply_examples(api)
            self._follow(api, domain, timeout=timeout)
            self.out(f"ComputeDomain {DEMO_NAMESPACE}/{domain} is Ready. Timings: {self.timings}")
            # Again here: the live progress has pushed the first mention off the screen.
            kubectl = f"kubectl get computedomains -n {DEMO_NAMESPACE}"
            self.out(f"Try:  KUBECONFIG={state.kubeconfig} {kubectl}")
            if not until_ready:
                self.out("Cluster keeps running; Ctrl-C stops it and cleans up.")
                signal.pause()  # until Ctrl-C or SIGTERM
            return 0
        except KeyboardInterrupt:
            return 0
        except (waiting.WaitTimeout, cluster.ClusterError, tools.ToolError, RuntimeError) as exc:
            self.out(f"error: {exc}")
            return 1
        finally:
            self.out("Cleaning up the simulated cluster...")
            sim.stop()

    def _install_chart(
        self, box: tools.ToolBox, state: cluster.ClusterState, api: kube_client.Client
    ) -> None:
        """Publish this checkout's image and chart to the cluster's registry, then install."""
        mark = time.monotonic()
        published = publish_build(box, state, self.chart, out=self.out)
        self.step("publish image and chart", mark)
        mark = time.monotonic()
        install_chart(box, state, api, published, values=self.values, out=self.out)
        self.step("helm install", mark)

    def _wait_plugins(self, api: kube_client.Client, nodes: int) -> None:
        mark = time.monotonic()
        wait_plugins(api, nodes, out=self.out)
        self.step("node agents", mark)

    def _apply_examples(self, api: kube_client.Client) -> str:
        mark = time.monotonic()
        api.request(
            "PATCH",
            f"/api/v1/namespaces/{DEMO_NAMESPACE}",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEMO_NAMESPACE}},
            content_type="application/apply-patch+yaml",
            query={"fieldManager": kube_apply.FIELD_MANAGER},
        )
        manifests: list[dict[str, Any]] = []
        for path in sorted(self.examples.glob("*.yaml")):
            manifests += [m for m in yaml.safe_load_all(path.read_text()) if m]
        domain = next(
            m["metadata"]["name"] for m in manifests if m["kind"] == constants.COMPUTE_DOMAIN_KIND
        )
        # The ComputeDomain first: the controller then creates the claim template pods need.
        manifests.sort(key=lambda m: m["kind"] != constants.COMPUTE_DOMAIN_KIND)
        for applied in kube_apply.apply(api, manifests, namespace=DEMO_NAMESPACE):
            self.out(f"  applied {applied}")
        self.step("apply examples", mark)
        return str(domain)

    def _follow(self, api: kube_client.Client, domain: str, *, timeout: float) -> None:
        mark = time.monotonic()
        last = ""

        def ready() -> bool:
            nonlocal last
            progress = gather(api, DEMO_NAMESPACE, domain)
            line = render(progress, time.monotonic() - mark)
            changed = line.split("] ", 1)[1] != last.split("] ", 1)[-1]
            if self.interactive:
                sys.stdout.write("\r" + line)
                sys.stdout.flush()
            elif changed:
                self.out(line)
            last = line
            return progress.formed

        waiting.until(
            f"ComputeDomain {DEMO_NAMESPACE}/{domain} to be Ready",
            ready,
            timeout=timeout,
            interval=0.5,
        )
        if self.interactive:
            sys.stdout.write("\n")
        self.step("domain Ready", mark)
