"""How each fault is done to the simulated cluster and undone (I/O).

- kill-plugin, kill-agent, kill-imex: SIGKILL the node's process, found by its arguments and
  folder. The simulated kubelet restarts a container (with the kubelet's crash-loop backoff);
  the agent starts nvidia-imex again.
- kill-controller-leader, kill-controller-standby, kill-webhook: SIGKILL the container process
  of the pod holding the controller's Lease, of another controller pod, of a webhook pod.
- hang-imex: ``hang`` in the node's fake IMEX fault file; undone by putting the file back.
- restart-apiserver: stop kube-apiserver (SIGTERM, SIGKILL after 10 s); undone by starting it
  with the same flags and waiting for readyz.
- pause-etcd: SIGSTOP etcd; undone by SIGCONT.
- degrade-fabric: the node's NVML answers fabric ``failed`` or ``degraded``; undone: healthy.
- node-not-ready: the node's NotReady annotation (kwok reports Ready=False); undone: removed.
- corrupt-checkpoint: SIGSTOP the node's plugin, tear its checkpoint (or rewrite it as a newer
  plugin's), SIGKILL the plugin; the restarted plugin rebuilds it.

Node faults hit a node that runs workload pods (and, for IMEX faults, runs IMEX), passing over
the nodes another fault hit lately; ``pick`` chooses among them (:func:`schedule.choose`).
Everything runs in the calling thread: the API server started again must be the child of the
thread that started the cluster (its parent-death signal is tied to that thread).
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Collection, Sequence

from cdsim import cluster, nodefaults, topology
from cdsim.chaos import schedule
from cdsim.chaos.schedule import FaultKind
from cdsim.chaos.snapshot import Snapshot
from computedomains.kube import client as kube_client
from computedomains.kube import retry

APISERVER = "kube-apiserver"
ETCD = "etcd"
APISERVER_START_TIMEOUT = 120.0
UNDO_ERRORS: tuple[type[Exception], ...] = (*kube_client.API_ERRORS, RuntimeError)
"""What undoing a fault may raise: the API refused or is away, a process would not start."""


class NoTarget(Exception):
    """Nothing to hit now (the process is down already, no replica); the fault is skipped."""


@dataclasses.dataclass(frozen=True)
class Applied:
    """A fault as it was done: whom it hit, and what undoing it needs."""

    fault: schedule.Fault
    node: str
    """The node it hit; "" for a fault of no one node."""
    target: str
    """What it hit, in words: ``gb200-r0-n03``, ``pod cd-...-controller-...``, ``etcd``."""
    detail: str = ""
    before: str | None = None
    """hang-imex: the fault file's content before (None: there was none)."""
    pod: str = ""
    """A replica kill: the pod whose container it killed."""

    @property
    def breaks_fabric(self) -> bool:
        """A failed fabric: the node's pods may lose their channel and IMEX."""
        return self.fault.kind is FaultKind.DEGRADE_FABRIC and self.fault.variant == "failed"


@dataclasses.dataclass
class Injector:
    """Does and undoes the faults of one run."""

    sim: cluster.SimCluster
    release_namespace: str
    out: Callable[[str], None]
    api_timeout: float = 5.0

    def __post_init__(self) -> None:
        # Its own client, trying once: while the API server is away a node's annotation waits
        # for the next step instead of holding up the faults due meanwhile.
        self._api = self.sim.api_client()
        self._api.policy = retry.Policy(attempts=1)

    def inject(
        self,
        fault: schedule.Fault,
        seen: Snapshot | None,
        *,
        avoid: Collection[str] = (),
        spare: Collection[str] = (),
    ) -> Applied:
        """Do ``fault``; ``seen``: the cluster as last seen, ``avoid``: nodes hit lately.

        ``spare``: replica pods not to kill now (killed often lately: the kubelet's crash-loop
        backoff would keep them down longer each time, which tells nothing of the product).

        Raises :class:`NoTarget` when there is nothing to hit, an API error when the API server
        did not take a node's annotation.
        """
        kind = fault.kind
        if kind is FaultKind.RESTART_APISERVER:
            self.sim.stop_component(APISERVER)
            return Applied(fault, "", APISERVER, "stopped")
        if kind is FaultKind.PAUSE_ETCD:
            self.sim.signal_component(ETCD, signal.SIGSTOP)
            return Applied(fault, "", ETCD, "SIGSTOP")
        if kind in (
            FaultKind.KILL_CONTROLLER_LEADER,
            FaultKind.KILL_CONTROLLER_STANDBY,
            FaultKind.KILL_WEBHOOK,
        ):
            return self._kill_replica(fault, seen, spare)
        return self._node_fault(fault, seen, avoid)

    def undo(self, applied: Applied) -> None:
        """Undo a lasting fault (an API error: try again later)."""
        kind, node = applied.fault.kind, applied.node
        if kind is FaultKind.RESTART_APISERVER:
            self.sim.start_component(APISERVER, timeout=APISERVER_START_TIMEOUT)
        elif kind is FaultKind.PAUSE_ETCD:
            self.sim.signal_component(ETCD, signal.SIGCONT)
        elif kind is FaultKind.HANG_IMEX:
            nodefaults.restore_imex_fault(self.sim.host_trees[node], applied.before)
        elif kind is FaultKind.DEGRADE_FABRIC:
            self.sim.set_fabric_profile(node, topology.FabricProfile.HEALTHY)
        elif kind is FaultKind.NODE_NOT_READY:
            self.sim.set_node_ready(node, True, api=self._api, timeout=self.api_timeout)

    # -- replicas ---------------------------------------------------------------------------

    def _kill_replica(
        self, fault: schedule.Fault, seen: Snapshot | None, spare: Collection[str]
    ) -> Applied:
        if seen is None:
            raise NoTarget("the cluster has not been seen yet")
        component = "webhook" if fault.kind is FaultKind.KILL_WEBHOOK else "controller"
        pods = sorted(
            (c for c in seen.components if c.component == component), key=lambda c: c.name
        )
        names = [c.name for c in pods if c.name not in spare]
        if fault.kind is FaultKind.KILL_CONTROLLER_LEADER:
            name = seen.leader if seen.leader in names else None
        elif fault.kind is FaultKind.KILL_CONTROLLER_STANDBY:
            name = schedule.choose([n for n in names if n != seen.leader], fault.pick)
        else:
            name = schedule.choose(names, fault.pick)
        target = next((c for c in pods if c.name == name), None)
        if target is None:
            why = f"leader {seen.leader or '(none)'}" if seen.leader else "no leader"
            raise NoTarget(f"no {component} replica to hit ({why}; spared: {sorted(spare)})")
        needles = ("controller", "--leader-elect") if component == "controller" else ("webhook",)
        tree = self.sim.host_trees[target.node]
        pid = nodefaults.container_pid(tree, target.uid, *needles)
        if pid is None:
            raise NoTarget(f"{component} pod {target.name} runs no process now")
        os.kill(pid, signal.SIGKILL)
        detail = f"pid {pid} on {target.node}"
        return Applied(fault, "", f"pod {target.name}", detail, pod=target.name)

    # -- nodes ------------------------------------------------------------------------------

    def _node_fault(
        self, fault: schedule.Fault, seen: Snapshot | None, avoid: Collection[str]
    ) -> Applied:
        node = schedule.choose(self._candidates(fault.kind, seen), fault.pick, avoid=list(avoid))
        if node is None:
            raise NoTarget("no node to hit")
        tree = self.sim.host_trees[node]
        kind = fault.kind
        if kind in (FaultKind.KILL_PLUGIN, FaultKind.KILL_AGENT, FaultKind.KILL_IMEX):
            if kind is FaultKind.KILL_PLUGIN:
                pid = nodefaults.plugin_pid(tree, node)
            elif kind is FaultKind.KILL_AGENT:
                pid = nodefaults.agent_pid(tree, node)
            else:
                pid = nodefaults.imex_pid(tree)
            if pid is None:
                raise NoTarget(f"nothing of {kind} runs on {node} now")
            os.kill(pid, signal.SIGKILL)
            return Applied(fault, node, node, f"pid {pid}")
        if kind is FaultKind.CORRUPT_CHECKPOINT:
            pid = nodefaults.plugin_pid(tree, node)
            if pid is None:
                raise NoTarget(f"no kubelet plugin runs on {node} now")
            path = tree.plugin_checkpoint
            nodefaults.kill_frozen(pid, lambda: nodefaults.damage_checkpoint(path, fault.variant))
            return Applied(fault, node, node, f"plugin pid {pid}, checkpoint {fault.variant}")
        if kind is FaultKind.HANG_IMEX:
            before = nodefaults.set_imex_fault(tree, "hang")
            return Applied(fault, node, node, "fault file: hang", before=before)
        if kind is FaultKind.DEGRADE_FABRIC:
            self.sim.set_fabric_profile(node, topology.FabricProfile(fault.variant))
            return Applied(fault, node, node, f"NVML fabric {fault.variant}")
        if kind is FaultKind.NODE_NOT_READY:
            self.sim.set_node_ready(node, False, api=self._api, timeout=self.api_timeout)
            return Applied(fault, node, node, "reports NotReady")
        raise AssertionError(f"not a node fault: {kind}")

    def _candidates(self, kind: FaultKind, seen: Snapshot | None) -> Sequence[str]:
        """Nodes worth hitting: those running workload pods (with IMEX, for IMEX faults)."""
        racked = sorted(n.name for n in self.sim.nodes if n.rack is not None)
        if seen is None:
            return racked
        busy = seen.busy_nodes()
        if kind in (FaultKind.KILL_IMEX, FaultKind.HANG_IMEX):
            running = {f.node for f in seen.files if f.imex_running}
            return [n for n in busy if n in running] or sorted(running)
        return busy or racked


def undo_all(
    injector: Injector, applied: Sequence[Applied], out: Callable[[str], None]
) -> list[Applied]:
    """Undo every fault still applied, etcd and the API server first; returns those that failed.

    For the end of a run, however it ends: nothing may stay frozen, down or broken.
    """
    first = {FaultKind.PAUSE_ETCD: 0, FaultKind.RESTART_APISERVER: 1}
    failed = []
    for item in sorted(applied, key=lambda a: first.get(a.fault.kind, 2)):
        try:
            injector.undo(item)
            out(f"undid {item.fault.label} on {item.target}")
        except UNDO_ERRORS as exc:
            out(f"could not undo {item.fault.label} on {item.target}: {exc}")
            failed.append(item)
    return failed
