"""Read the cluster and the nodes' host trees into a :class:`state.Snapshot` (I/O).

One snapshot is a handful of LIST requests (the run's domains and pods by their run label,
every channel claim, clique, slice, node and chart pod) and one look at each node's files: its
CDI specs, its plugin checkpoint, its IMEX status file and whether its nvidia-imex runs (one
scan of the processes for all nodes). The API client tries a request twice at most and gives
it ``timeout`` seconds: while the API server is away (restarted, etcd paused) a snapshot fails
fast with :class:`ObservationFailed` and the run tries again at its next step.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from cdsim import cluster, nodefaults, nodes, processes
from cdsim.chaos import snapshot as state
from cdsim.chaos.manifests import DOMAIN_LABEL, RUN_LABEL
from computedomains import nodefiles
from computedomains.api import constants, imex, models, placement, resources
from computedomains.kube import client as kube_client
from computedomains.kube import pods as kube_pods
from computedomains.kubeletplugin import cdi, checkpoint
from computedomains.kubeletplugin.devices import DeviceType

CHART_SELECTOR = "app.kubernetes.io/name=compute-domains"


class ObservationFailed(RuntimeError):
    """The cluster could not be read now (the API server away); try again later."""


@dataclasses.dataclass
class Observer:
    """Takes snapshots of one run on one simulated cluster."""

    api: kube_client.Client
    sim: cluster.SimCluster
    release_namespace: str
    run: str
    """The run's tag (:data:`manifests.RUN_LABEL`)."""
    timeout: float = 10.0

    def snapshot(self, at: float) -> state.Snapshot:
        """Everything the invariants look at, now; ``at``: seconds into the run."""
        try:
            mine = {"labelSelector": f"{RUN_LABEL}={self.run}"}
            domains = self._list(resources.COMPUTE_DOMAINS.path(), mine)
            pods = self._list(resources.PODS.path(), mine)
            claims = self._list(resources.RESOURCE_CLAIMS.path())
            cliques = self._list(resources.CLIQUES.path(namespace=self.release_namespace))
            templates = self._list(resources.RESOURCE_CLAIM_TEMPLATES.path())
            node_objects = self._list(resources.NODES.path())
            slices = self._list(resources.RESOURCE_SLICES.path())
            chart = self._list(
                resources.PODS.path(namespace=self.release_namespace),
                {"labelSelector": CHART_SELECTOR},
            )
            leases = self._list(resources.LEASES.path(namespace=self.release_namespace))
        except kube_client.API_ERRORS as exc:
            raise ObservationFailed(f"{type(exc).__name__}: {exc}") from exc
        components = [k for p in chart if (k := _component(p)) is not None]
        table = processes.scan()
        return state.Snapshot(
            at=at,
            domains=tuple(_domain(d) for d in domains),
            pods=tuple(_pod(p) for p in pods),
            claims=tuple(c for raw in claims if (c := _claim(raw)) is not None),
            cliques=tuple(_clique(c) for c in cliques),
            templates=tuple(_template(t) for t in templates if _owner(t)),
            nodes=tuple(_nodes(node_objects, slices, set(self.sim.host_trees))),
            files=tuple(self._files(name, table) for name in sorted(self.sim.host_trees)),
            components=tuple(components),
            leader=_leader(leases, [c.name for c in components if c.component == "controller"]),
        )

    def events(self, namespaces: Sequence[str], *, limit: int = 15) -> tuple[str, ...]:
        """The last ``limit`` Events of ``namespaces`` (Nodes' are in ``default``), oldest first.

        Empty when they cannot be read now.
        """
        found: list[tuple[str, str]] = []
        for namespace in dict.fromkeys(namespaces):
            try:
                items = self._list(resources.EVENTS.path(namespace=namespace))
            except kube_client.API_ERRORS:
                continue
            found += [(_event_time(e), _event_line(e)) for e in items]
        found.sort()
        return tuple(line for _, line in found[-limit:])

    def _list(self, path: str, query: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        answer = self.api.get(path, query=query, timeout=self.timeout)
        return list(answer.get("items") or [])

    def _files(self, node: str, table: Sequence[processes.ProcessInfo]) -> state.NodeFiles:
        tree = self.sim.host_trees[node]
        specs = tuple(state.Spec(s.claim_uid, s.domain_uid) for s in cdi.read_specs(tree.cdi))
        try:
            status = imex.read_status(tree.imex_status)
        except (nodefiles.CorruptNodeFile, OSError):
            status = None
        return state.NodeFiles(
            node=node,
            specs=specs,
            checkpoint=_checkpoint(tree.plugin_checkpoint),
            imex_running=nodefaults.imex_pid(tree, table=table) is not None,
            imex_domain=status.domain_uid if status else "",
            imex_state=status.state.value if status else "",
        )


def _checkpoint(path: pathlib.Path) -> tuple[state.Entry, ...] | None:
    """The checkpoint's entries; None while it cannot be read (missing, torn, rewritten)."""
    try:
        document = nodefiles.read_json(path, kind=checkpoint.KIND)
        if document is None:
            return None
        loaded = checkpoint.Checkpoint.from_document(path, document)
    except (nodefiles.CorruptNodeFile, OSError, ValueError):
        return None
    return tuple(
        state.Entry(e.uid, e.domain_uid, e.state.value, channel=e.device_type is DeviceType.CHANNEL)
        for e in loaded.claims.values()
    )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _domain(obj: Mapping[str, Any]) -> state.Domain:
    meta, status = _meta(obj), obj.get("status") or {}
    members = tuple(
        state.Member(
            node=str(n.get("name", "")),
            ready=n.get("status") == models.Status.READY,
            index=n.get("index") if isinstance(n.get("index"), int) else None,
            clique=str(n.get("cliqueID", "")),
        )
        for n in status.get("nodes") or []
    )
    return state.Domain(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        ready=status.get("status") == models.Status.READY,
        members=members,
        deleting="deletionTimestamp" in meta,
    )


def _pod(obj: Mapping[str, Any]) -> state.Pod:
    meta, status = _meta(obj), obj.get("status") or {}
    claims = tuple(
        str(c["resourceClaimName"])
        for c in status.get("resourceClaimStatuses") or []
        if c.get("resourceClaimName")
    )
    return state.Pod(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        domain=str((meta.get("labels") or {}).get(DOMAIN_LABEL, "")),
        node=str((obj.get("spec") or {}).get("nodeName") or ""),
        phase=str(status.get("phase", "Pending")),
        claims=claims,
    )


def _claim(obj: Mapping[str, Any]) -> state.Claim | None:
    if not placement.asks_for_a_channel(obj):
        return None
    meta = _meta(obj)
    allocation = placement.parse_claim(obj)
    return state.Claim(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        domain_uid=placement.domain_of(obj),
        node=allocation.node if allocation else "",
        devices=allocation.devices if allocation else (),
        reserved_for=tuple(uid for _, uid in allocation.pods) if allocation else (),
    )


def _clique(obj: Mapping[str, Any]) -> state.Clique:
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    members = models.clique_members(obj)
    return state.Clique(
        name=str(meta.get("name", "")),
        domain_uid=str(labels.get(constants.COMPUTE_DOMAIN_LABEL, "")),
        clique=str(labels.get(constants.CLIQUE_ID_LABEL, "")),
        daemons=tuple(
            state.Daemon(
                node=str(d.get("nodeName", "")),
                index=d.get("index") if isinstance(d.get("index"), int) else None,
                ready=d.get("status") == models.Status.READY,
            )
            for d in obj.get("daemons") or []
        ),
        members=None if members is None else tuple(sorted(members)),
    )


def _owner(obj: Mapping[str, Any]) -> str:
    """The UID of the ComputeDomain that owns ``obj`` ("" when none does)."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("kind") == constants.COMPUTE_DOMAIN_KIND:
            return str(ref.get("uid", ""))
    return ""


def _template(obj: Mapping[str, Any]) -> state.Template:
    meta = _meta(obj)
    return state.Template(str(meta.get("namespace", "")), str(meta.get("name", "")), _owner(obj))


def _nodes(
    objects: Sequence[Mapping[str, Any]], slices: Sequence[Mapping[str, Any]], simulated: set[str]
) -> list[state.Node]:
    held: dict[str, set[str]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != constants.DRIVER_NAME:
            continue
        holds = held.setdefault(str(spec.get("nodeName", "")), set())
        for device in spec.get("devices") or []:
            holds |= {
                str(t.get("value"))
                for t in device.get("taints") or []
                if t.get("key") == placement.HOLD_TAINT_KEY and t.get("value")
            }
            holder = (device.get("attributes") or {}).get(placement.HOLDER_ATTRIBUTE) or {}
            if holder.get("string"):
                holds.add(str(holder["string"]))
    found = []
    for obj in objects:
        meta, status = _meta(obj), obj.get("status") or {}
        name = str(meta.get("name", ""))
        if name not in simulated:
            continue
        conditions = {str(c.get("type")): c.get("status") for c in status.get("conditions") or []}
        taints = tuple(
            f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
            for t in (obj.get("spec") or {}).get("taints") or []
        )
        found.append(
            state.Node(
                name=name,
                ready=conditions.get("Ready") == "True"
                and (meta.get("annotations") or {}).get(nodes.NOT_READY_ANNOTATION) != "true",
                fabric_ready=conditions.get(constants.FABRIC_CONDITION, "True") == "True",
                domain_label=str(
                    (meta.get("labels") or {}).get(constants.COMPUTE_DOMAIN_LABEL, "")
                ),
                taints=taints,
                held_for=tuple(sorted(held.get(name, ()))),
            )
        )
    return found


def _component(pod: Mapping[str, Any]) -> state.Component | None:
    """A long-running chart pod; None for a hook's pod or one going away."""
    meta, status = _meta(pod), pod.get("status") or {}
    if "deletionTimestamp" in meta or status.get("phase") in ("Succeeded", "Failed"):
        return None
    if any(ref.get("kind") == "Job" for ref in meta.get("ownerReferences") or []):
        return None
    containers = tuple(
        state.Container(
            name=str(c.get("name", "")),
            ready=bool(c.get("ready")),
            restarts=int(c.get("restartCount") or 0),
            waiting=str(((c.get("state") or {}).get("waiting") or {}).get("reason") or ""),
        )
        for c in status.get("containerStatuses") or []
    )
    return state.Component(
        name=str(meta.get("name", "")),
        component=str((meta.get("labels") or {}).get(constants.COMPONENT_LABEL, "")),
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        ready=kube_pods.is_ready(pod),
        containers=containers,
        uid=str(meta.get("uid", "")),
    )


def _leader(leases: Sequence[Mapping[str, Any]], controllers: Sequence[str]) -> str:
    """The controller pod whose identity (``<pod>-<uuid>``) holds a Lease; "" when none does."""
    holders = [str((lease.get("spec") or {}).get("holderIdentity") or "") for lease in leases]
    for pod in controllers:
        if any(h.startswith(f"{pod}-") for h in holders):
            return pod
    return ""


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or _meta(event).get("creationTimestamp")
        or ""
    )


def _event_line(event: Mapping[str, Any]) -> str:
    involved = event.get("involvedObject") or {}
    count = event.get("count") or 1
    return (
        f"{_event_time(event)} {_meta(event).get('namespace', '')} {event.get('type', '')} "
        f"{event.get('reason', '')} {involved.get('kind', '')}/{involved.get('name', '')}"
        f"{f' (x{count})' if count > 1 else ''}: {event.get('message', '')}"
    )
