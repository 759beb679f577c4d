"""One node's DRA part, in its own thread: register plugins, prepare and unprepare claims.

A thread per node, like the kubelet per node: a plugin's prepare may block for up to the
45 s call timeout (waiting for IMEX, say) and must hold up neither other nodes nor the
processes of this node's pods. The decisions come from :mod:`dra`; this module does the I/O:
reading claims, calling plugins, resolving CDI IDs, Events, the pod annotation that lets
kwok mark the pod Ready, and ``<node>/pods/<uid>/cdi-devices.json`` for tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pathlib
import threading
import time
from collections.abc import Mapping, Sequence

import grpc

from cdsim.kubelet import backoff, cdi, dra, plugins, podspec, runtimespec
from computedomains import nodefiles
from computedomains.kube import client as kube_client
from computedomains.kube import events, pods, resourceclaims, wire

CDI_DEVICES_FILE = "cdi-devices.json"
_LOG = logging.getLogger(__name__)


def pod_dir(node_root: pathlib.Path, uid: str) -> pathlib.Path:
    """The simulated kubelet's folder for one pod (not part of the simulated host's files)."""
    return node_root / "pods" / uid


def injection(edits: cdi.ContainerEdits, node_root: pathlib.Path) -> podspec.Injection:
    """What a container gets from CDI edits.

    The env, mounts from the node's host tree, and device nodes (which only a container run
    from its image gets).
    """
    env = tuple((k, v) for k, _, v in (e.partition("=") for e in edits.get("env", [])))
    mounts = []
    for mount in edits.get("mounts", []):
        mounts.append(
            podspec.Mount(
                container_path=str(mount["containerPath"]),
                host_path=podspec.on_node(node_root, str(mount["hostPath"])),
                kind="cdi",
            )
        )
    devices = tuple(
        runtimespec.DeviceNode(
            path=str(d["path"]), major=int(d.get("major", 0)), minor=int(d.get("minor", 0)),
            kind=str(d.get("type", "c")), file_mode=int(d.get("fileMode", 0o666)),
            uid=int(d.get("uid", 0)), gid=int(d.get("gid", 0)),
        )
        for d in edits.get("deviceNodes", [])
    )  # fmt: skip
    return podspec.Injection(env=env, mounts=tuple(mounts), devices=devices)


@dataclasses.dataclass
class _PodState:
    retry: backoff.Backoff = dataclasses.field(default_factory=backoff.Backoff)
    devices: Mapping[str, podspec.Injection] | None = None
    """Container name → CDI injection, once prepared."""


class NodeDra:
    """Registration, prepare and unprepare for one node; fed pod snapshots by :meth:`update`."""

    def __init__(
        self, api: kube_client.Client, *, node: str, root: pathlib.Path, interval: float = 0.5
    ) -> None:
        self.node = node
        self.root = root
        self._api = api
        self._interval = interval
        self._events = events.Recorder(api, component="kubelet", host=node)
        self.registry = plugins.Registry(
            root / "var/lib/kubelet/plugins_registry", node=node, host_root=root
        )
        self._lock = threading.Lock()
        self._pods: list[wire.Pod] = []
        self._states: dict[str, _PodState] = {}
        self._prepared: dict[str, dra.PreparedClaim] = {}
        self._unprepare_retry: dict[str, backoff.Backoff] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dra-{node}", daemon=True)

    # -- called from the main loop ---------------------------------------------------------

    def start(self) -> None:
        """Start the node's thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; calls in flight fail when the plugin connections close."""
        self._stop.set()
        self._wake.set()
        self.registry.close()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout)

    def update(self, node_pods: Sequence[wire.Pod]) -> None:
        """Give the thread the node's current pods."""
        with self._lock:
            self._pods = list(node_pods)
        self._wake.set()

    def devices(self, uid: str) -> Mapping[str, podspec.Injection] | None:
        """Container name → CDI injection once the pod is prepared; None before."""
        with self._lock:
            state = self._states.get(uid)
            return state.devices if state else None

    # -- the node's thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync(time.monotonic())
            except Exception:  # noqa: BLE001 - a bug must not end the node's kubelet: log, go on
                _LOG.exception("[%s] DRA sync failed", self.node)
            self._wake.wait(self._interval)
            self._wake.clear()

    def _sync(self, now: float) -> None:
        if self.registry.scan(now):
            for state in self._states.values():
                state.retry.reset()  # a new plugin may be what a waiting pod needed
            for retry in self._unprepare_retry.values():
                retry.reset()
        with self._lock:
            node_pods = list(self._pods)
        active = {p["metadata"]["uid"]: p for p in node_pods if dra.is_active(p)}
        for uid, pod in active.items():
            if not pod.get("spec", {}).get("resourceClaims"):
                continue
            with self._lock:
                state = self._states.setdefault(uid, _PodState())
            if state.devices is None and state.retry.ready(now):
                self._prepare(pod, state, now)
        self._unprepare(set(active), now)
        gone = [uid for uid in self._states if uid not in active]
        for uid in gone:
            with self._lock:
                del self._states[uid]
            folder = pod_dir(self.root, uid)
            (folder / CDI_DEVICES_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # still holds the processes' files: not ours
                folder.rmdir()

    def _read_claims(
        self, namespace: str, entries: Sequence[dra.PodClaim]
    ) -> dict[str, dra.ClaimView | None]:
        views: dict[str, dra.ClaimView | None] = {}
        for entry in entries:
            if entry.claim_name:
                found = resourceclaims.read(self._api, namespace, entry.claim_name)
                views[entry.claim_name] = dra.claim_view(found) if found else None
        return views

    def _prepare(self, pod: wire.Pod, state: _PodState, now: float) -> None:
        meta = pod["metadata"]
        uid, namespace = meta["uid"], meta["namespace"]
        entries = dra.pod_claims(pod)
        try:
            plan = dra.plan_prepare(
                uid,
                namespace,
                entries,
                self._read_claims(namespace, entries),
                prepared={u: set(r.devices) for u, r in self._prepared.items()},
                registered=self.registry.drivers(),
            )
        except kube_client.API_ERRORS as exc:
            self._failed(pod, state, [f"reading ResourceClaims: {exc}"], now)
            return
        errors = list(plan.errors)
        for driver, claims in plan.calls.items():
            errors += self._call_prepare(driver, claims)
        for ref in plan.claims.values():
            if ref.uid in self._prepared:
                self._prepared[ref.uid].pods.add(uid)
        if not errors:
            errors = self._finish(pod, plan, state)
        if errors:
            self._failed(pod, state, errors, now)

    def _call_prepare(self, driver: str, claims: Sequence[dra.ClaimRef]) -> list[str]:
        client = self.registry.client(driver)
        if client is None:
            return [f"DRA driver {driver} is not registered"]
        try:
            results = client.prepare(claims)
        except grpc.RpcError as exc:
            return [f"NodePrepareResources of {driver} failed: {_rpc_error(exc)}"]
        devices, errors = dra.check_prepare(driver, claims, results)
        for claim in claims:
            if claim.uid in devices:
                record = self._prepared.setdefault(claim.uid, dra.PreparedClaim(claim))
                record.devices[driver] = devices[claim.uid]
        return errors

    def _finish(self, pod: wire.Pod, plan: dra.PreparePlan, state: _PodState) -> list[str]:
        """Resolve the CDI IDs, record them, and let kwok mark the pod Ready."""
        meta, spec = pod["metadata"], pod.get("spec", {})
        uids = [ref.uid for ref in plan.claims.values()]
        registry = cdi.load_dir(self.root / "var/run/cdi")
        containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
        try:
            pod_ids = dra.pod_cdi_ids(uids, self._prepared)
            merged = cdi.resolve(pod_ids, registry)
            per_container = {
                c.get("name", ""): dra.container_cdi_ids(c, plan.claims, self._prepared)
                for c in containers
            }
            edits = {name: cdi.resolve(ids, registry) for name, ids in per_container.items()}
        except cdi.CdiError as exc:
            return [f"CDI: {exc}"]
        nodefiles.write_json(
            pod_dir(self.root, meta["uid"]) / CDI_DEVICES_FILE,
            {
                "pod": {k: meta.get(k, "") for k in ("namespace", "name", "uid")},
                "claims": [
                    {**dataclasses.asdict(rec.ref), "devices": {
                        d: [x.to_wire() for x in devs] for d, devs in rec.devices.items()}}
                    for rec in (self._prepared[u] for u in dict.fromkeys(uids))
                ],
                "cdiDevices": pod_ids,
                "containerEdits": merged,
                "containers": {
                    name: {"cdiDevices": per_container[name], "containerEdits": edits[name]}
                    for name in per_container
                },
            },
        )  # fmt: skip
        try:
            pods.annotate(
                self._api, meta["namespace"], meta["name"], {dra.PREPARED_ANNOTATION: "true"}
            )
        except kube_client.API_ERRORS as exc:
            return [f"marking the pod prepared: {exc}"]
        with self._lock:
            state.devices = {name: injection(e, self.root) for name, e in edits.items()}
        state.retry.reset()
        _LOG.info("[%s] prepared %s/%s: %s", self.node, meta["namespace"], meta["name"], pod_ids)
        return []

    def _failed(self, pod: wire.Pod, state: _PodState, errors: list[str], now: float) -> None:
        meta = pod["metadata"]
        delay = state.retry.failed(now)
        message = "Failed to prepare dynamic resources: " + "; ".join(errors)
        _LOG.warning("[%s] %s/%s (retry in %.0fs): %s",
                     self.node, meta["namespace"], meta["name"], delay, message)  # fmt: skip
        self._events.emit(
            events.ObjectRef("Pod", meta["name"], meta["namespace"], meta["uid"]),
            reason=dra.FAILED_REASON,
            message=message,
            warning=True,
        )

    def _unprepare(self, active: set[str], now: float) -> None:
        for driver, claims in dra.plan_unprepare(self._prepared, active).items():
            retry = self._unprepare_retry.setdefault(driver, backoff.Backoff())
            if not retry.ready(now):
                continue
            client = self.registry.client(driver)
            errors: list[str] = []
            if client is None:
                errors = [f"DRA driver {driver} is not registered"]
            else:
                try:
                    done, errors = dra.check_unprepare(driver, claims, client.unprepare(claims))
                except grpc.RpcError as exc:
                    done, errors = [], [f"NodeUnprepareResources of {driver}: {_rpc_error(exc)}"]
                for uid in done:
                    self._prepared[uid].devices.pop(driver, None)
                    if not self._prepared[uid].devices:
                        del self._prepared[uid]
                        _LOG.info("[%s] unprepared claim %s", self.node, uid)
            if errors:
                delay = retry.failed(now)
                _LOG.warning("[%s] unprepare failed (retry in %.0fs): %s",
                             self.node, delay, "; ".join(errors))  # fmt: skip
            else:
                retry.reset()


def _rpc_error(exc: grpc.RpcError) -> str:
    details = exc.details() if isinstance(exc, grpc.Call) else None
    return str(details or exc)
