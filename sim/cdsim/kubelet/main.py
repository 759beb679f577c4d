"""The simulated kubelet process: one loop for every simulated node's chart pods and DRA.

Pods come from an informer (list+watch). The loop hands each node's pods to that node's DRA
thread (:class:`node.NodeDra`) and runs chart pods (label
``app.kubernetes.io/name=compute-domains``), and with a registry every pod whose images all
come from it, once they have an IP (kwok gave the pod its "sandbox") and, with claims, once
those are prepared: from their images under runc, or (without a store) as processes of this
checkout. From then on this loop owns the
chart pod's status as a kubelet does: phase, ``Initialized``/``ContainersReady``/``Ready``
from the containers' processes and the probes it runs (:mod:`runner`, :mod:`probes`), and
every container's state, ``ready``, ``started`` and restarts. A chart pod whose containers are
done for good (``restartPolicy`` Never or OnFailure: a Job's, a Helm hook's) gets its phase from
their exit codes, so the Job controller completes or fails the Job as on a real cluster. A
deleted chart pod stays Terminating while its processes stop (SIGTERM, SIGKILL after the grace
period), then this loop removes it, as the kubelet does. The process also serves the API
server's Service proxy (:mod:`serviceproxy`), from the same pod cache, by readiness, and the
kubelet API's container logs through it (:mod:`logserver`).
Every process starts from this loop's thread: the parent-death signal fires when the thread
that forked a child ends, and this thread lives as long as the process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import pathlib
import shutil
import signal
import sys
import threading
import time
import types
import urllib.parse
from collections.abc import Mapping
from typing import Any, cast

from cdsim import kubeconfig, processes
from cdsim.kubelet import (
    backoff,
    containers,
    dra,
    imagestore,
    logserver,
    node,
    podspec,
    probes,
    pulls,
    runner,
    serviceproxy,
    volumefiles,
)
from cdsim.kubelet import status as pod_status
from computedomains.api import resources
from computedomains.kube import client as kube_client
from computedomains.kube import events, informer, pods, wire

CONTAINERS_DIR = "containers"
"""A pod's folder's folder of container bundles (root layer and runc configuration)."""
TOKEN_SECONDS = 3607
"""What the kubelet requests for projected tokens; it renews them at 80 % of their life."""
"""For the Service proxy the API server's webhook calls go through."""
_TICK = 0.25
STATUS_RESYNC = 10.0
"""Seconds between looks at whether another writer changed a pod's conditions (the kubelet's
status manager syncs every 10 s)."""
_SHUTDOWN_GRACE = 3.0
_PASSTHROUGH_ENV = ("PATH", "PYTHONPATH", "HOME", "TMPDIR", "LANG", processes.CLUSTER_ENV)
_LOG = logging.getLogger(__name__)
_MOUNT_ERRORS: tuple[type[Exception], ...] = (volumefiles.VolumeError, *kube_client.API_ERRORS)


@dataclasses.dataclass(frozen=True)
class ApiServer:
    """Where pods reach the API server, and its CA (for ``ca.crt``)."""

    host: str
    port: int
    ca_file: pathlib.Path

    @classmethod
    def from_kubeconfig(cls, path: pathlib.Path) -> ApiServer:
        """Read the server URL and CA from a kubeconfig."""
        _, cluster = kubeconfig.current_cluster(path)
        url = urllib.parse.urlsplit(cluster["server"])
        return cls(
            str(url.hostname), int(url.port or 443), pathlib.Path(cluster["certificate-authority"])
        )


def pod_log_dir(cluster_dir: pathlib.Path, *, namespace: str, name: str, uid: str) -> pathlib.Path:
    """The folder of a chart pod's container logs (``<container>.log``: stdout and stderr).

    It outlives the pod, so what a deleted pod (a Helm hook's, say) wrote stays readable.
    """
    return cluster_dir / "logs" / "pods" / f"{namespace}_{name}_{uid}"


def pod_log_dirs(cluster_dir: pathlib.Path, *, namespace: str, name: str) -> list[pathlib.Path]:
    """The log folders of every pod called ``name`` (a glob pattern) in ``namespace``.

    Oldest first: a name may come back with a new pod (a new UID).
    """
    pattern = pod_log_dir(cluster_dir, namespace=namespace, name=name, uid="*").name
    found = (cluster_dir / "logs" / "pods").glob(pattern)
    return sorted(found, key=lambda path: path.stat().st_mtime)


def _write(path: pathlib.Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` atomically: a process reading its token never sees half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.chmod(mode)
    tmp.replace(path)


def _without_times(status: Mapping[str, Any] | None) -> Any:
    """A status with its conditions' transition times left out (what changed, not when)."""
    if status is None:
        return None
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    return {**status, "conditions": conditions}


@dataclasses.dataclass
class _Running:
    pod: wire.Pod
    runner: runner.PodRunner
    token_at: float | None
    """When to renew the ServiceAccount token (None: the pod has none)."""
    reported: dict[str, Any] | None = None
    """The status last written for the pod (None: none yet)."""
    reported_at: float = 0.0
    """When it was written (monotonic seconds)."""


def _conditions_known(pod: wire.Pod, reported: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The pod's conditions, with those this kubelet last wrote in their place.

    The informer may not have seen that write yet.
    """
    known = {str(c.get("type")): dict(c) for c in pod.get("status", {}).get("conditions", [])}
    for condition in (reported or {}).get("conditions", []):
        known[str(condition["type"])] = dict(condition)
    return list(known.values())


def overwritten(pod: wire.Pod, reported: Mapping[str, Any] | None) -> list[str]:
    """Conditions this kubelet reported that another writer changed since: their types.

    The node lifecycle controller marks every pod of a NotReady node not Ready; the kubelet's
    status manager finds the API's copy different from its own at its next sync
    (:data:`STATUS_RESYNC`) and writes its own again, so the pods are Ready again once the node
    is. (Right after a write the informer may still hold the pod from before it: the resync
    period keeps that from costing more than an identical write now and then.)
    """
    if not reported:
        return []
    conditions = pod.get("status", {}).get("conditions", [])
    theirs = {str(c.get("type")): c.get("status") for c in conditions}
    return [
        str(c["type"])
        for c in reported.get("conditions", [])
        if str(c["type"]) in theirs and theirs[str(c["type"])] != c.get("status")
    ]


def _images(pod: wire.Pod) -> dict[str, str]:
    spec = pod.get("spec", {})
    return {
        c.get("name", ""): c.get("image", "")
        for c in [*spec.get("initContainers", []), *spec.get("containers", [])]
    }


def _grace(pod: wire.Pod) -> float:
    """Seconds from SIGTERM to SIGKILL for a deleted pod: what the deletion asked for."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    grace = cast(Mapping[str, Any], meta).get("deletionGracePeriodSeconds")
    return float(grace if grace is not None else spec.get("terminationGracePeriodSeconds", 30))


class SimKubelet:
    """Plays the kubelet of every node whose host tree is under ``<cluster dir>/nodes``."""

    def __init__(
        self,
        api: kube_client.Client,
        *,
        cluster_dir: pathlib.Path,
        server: ApiServer,
        store: imagestore.Store | None = None,
        registry: str = "",
    ) -> None:
        """Play the kubelet of every node under ``<cluster_dir>/nodes``.

        With ``store``, chart pods run from their images under runc (pulled into it);
        without, as processes of this checkout.
        """
        self._api = api
        self._registry = registry if store else ""
        """Pods whose images all come from here run too (containers only)."""
        self._runtime = containers.Runc(cluster_dir / containers.STATE_DIR) if store else None
        self._pulls = (
            pulls.Pulls(store, on_event=self._pod_event, credentials=self._pull_credentials)
            if store
            else None
        )
        self._waiting: dict[str, dict[str, Any]] = {}
        """Pod UID → the status last written while its images were pulled."""
        self._mount_retry: dict[str, backoff.Backoff] = {}
        """Pod UID → back-off of a volume that could not be set up."""
        self._cluster_dir = cluster_dir
        self._nodes_dir = cluster_dir / "nodes"
        self._server = server
        self._wake = threading.Event()
        self._pods = informer.Informer(api, path=pods.PATH, on_change=lambda *_: self._wake.set())
        self._services = informer.Informer(api, path=resources.SERVICES.path())
        log_tls = logserver.tls_context(cluster_dir / "sim-kubelet")
        self._proxy = serviceproxy.ServiceProxy(
            cluster_dir / serviceproxy.SOCKET_NAME,
            lambda: (self._services.items(), self._pods.items()),
            kubelet_api=(
                logserver.KUBELET_PORT,
                lambda conn: logserver.serve_connection(
                    conn, context=log_tls, log_file=self._container_log
                ),
            ),
        )
        self._nodes: dict[str, node.NodeDra] = {}
        self._events: dict[str, events.BackgroundRecorder] = {}
        self._fingerprints: dict[str, frozenset[tuple[str, str]]] = {}
        self._running: dict[str, _Running] = {}
        self._unrunnable: set[str] = set()
        self._removed: set[str] = set()
        """UIDs of deleted chart pods this kubelet has removed (their last delete sent)."""
        self._ended_pods: set[str] = set()
        """UIDs of deleted chart pods whose terminal phase this kubelet wrote (the pod list
        may not show it yet)."""
        self._prober = probes.Prober()

    def _container_log(self, namespace: str, name: str, container: str) -> pathlib.Path | None:
        """The newest log of ``container`` of pod ``namespace/name`` (None: never ran here)."""
        folders = pod_log_dirs(self._cluster_dir, namespace=namespace, name=name)
        return folders[-1] / f"{container}.log" if folders else None

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set, then stop every process and thread."""
        self._pods.start()
        self._services.start()
        self._proxy.start()
        try:
            while not stop.is_set():
                try:
                    self._step(time.monotonic())
                except Exception:  # noqa: BLE001 - one bad pod or API hiccup must not end the kubelet
                    _LOG.exception("sync failed")
                self._wake.wait(_TICK)
                self._wake.clear()
        finally:
            self._shutdown()

    def _step(self, now: float) -> None:
        self._discover_nodes()
        by_node: dict[str, list[wire.Pod]] = {name: [] for name in self._nodes}
        for pod in cast(list[wire.Pod], self._pods.items()):
            name = pod.get("spec", {}).get("nodeName", "")
            if name in by_node:
                by_node[name].append(pod)
        for name, node_pods in by_node.items():
            fingerprint = frozenset(
                (p["metadata"]["uid"], p["metadata"].get("resourceVersion", "")) for p in node_pods
            )
            if fingerprint != self._fingerprints.get(name):
                self._fingerprints[name] = fingerprint
                self._nodes[name].update(node_pods)
        self._sync_processes(by_node, now)

    def _discover_nodes(self) -> None:
        try:
            names = [p.name for p in self._nodes_dir.iterdir() if p.is_dir()]
        except FileNotFoundError:
            return
        for name in names:
            if name not in self._nodes:
                dra_node = node.NodeDra(self._api, node=name, root=self._nodes_dir / name)
                dra_node.start()
                self._nodes[name] = dra_node
                recorder = events.BackgroundRecorder(
                    events.Recorder(self._api, component="kubelet", host=name)
                )
                recorder.start()
                self._events[name] = recorder

    def _sync_processes(self, by_node: Mapping[str, list[wire.Pod]], now: float) -> None:
        chart = {
            p["metadata"]["uid"]: p
            for pods_ in by_node.values()
            for p in pods_
            if podspec.runs_here(p, self._registry)
        }
        wanted = {uid: p for uid, p in chart.items() if dra.is_active(p)}
        for uid, running in list(self._running.items()):
            if uid not in wanted:
                current = chart.get(uid, running.pod)
                running.runner.terminate(now, grace=_grace(current))
            running.runner.tick(now)
            if running.runner.finished:
                if uid in chart:  # stopped, still in the API: its terminal phase first
                    running.pod = chart[uid]
                    if not self._report(running):
                        continue  # retried next tick
                    self._ended_pods.add(uid)
                del self._running[uid]
                self._clean(running.pod)
                continue
            if running.token_at is not None and now >= running.token_at:
                running.token_at = self._renew_token(running, now)
            if uid in wanted:
                running.pod = wanted[uid]
                self._report(running)
        self._unrunnable &= set(wanted)
        for uid, pod in chart.items():
            deleted = "deletionTimestamp" in pod["metadata"] and uid not in self._running
            if deleted and (uid in self._ended_pods or self._ended(pod)):
                self._remove(pod)
        self._removed &= set(chart)
        self._ended_pods &= set(chart)
        self._forget_waiting(set(wanted) - set(self._running))
        for uid, pod in wanted.items():
            if uid not in self._running and uid not in self._unrunnable:
                self._maybe_start(pod, now)

    def _forget_waiting(self, waiting: set[str]) -> None:
        """Keep pull and mount state only for the pods (UIDs) still waiting to start."""
        for uid in set(self._waiting) - waiting:
            del self._waiting[uid]
        for uid in set(self._mount_retry) - waiting:
            del self._mount_retry[uid]
        if self._pulls is not None:
            self._pulls.forget(waiting)

    def _ended(self, pod: wire.Pod) -> bool:
        """A deleted pod that no process of ours ran has a terminal phase (written if need be).

        One never started (deleted before its claims were prepared, or not runnable) ends
        ``Failed``, as a kubelet ends it.
        """
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return True
        final = pod_status.never_started(
            pod.get("spec", {}),
            images=_images(pod),
            previous=pod.get("status", {}).get("conditions") or [],
            now=pod_status.stamp(datetime.datetime.now(datetime.UTC)),
        )
        if not self._patch_status(pod, final):
            return False
        self._ended_pods.add(pod["metadata"]["uid"])
        return True

    def _patch_status(self, pod: wire.Pod, status: Mapping[str, Any]) -> bool:
        """Write ``status`` to this pod (not a new one of the same name); False: retry later.

        The patch carries the pod's UID, as the kubelet's does, so that it never lands on a
        pod created since under the same name; such a pod, or none, means nothing is left to
        report.
        """
        meta = pod["metadata"]
        path = resources.PODS.path(meta["name"], namespace=meta["namespace"])
        try:
            self._api.patch(
                f"{path}/status",
                {"metadata": {"uid": meta["uid"]}, "status": status},
                strategic=True,  # conditions merge by type; container statuses are replaced
            )
        except kube_client.ApiError as exc:
            if exc.failure is kube_client.Failure.NOT_FOUND or (
                (exc.failure is kube_client.Failure.CONFLICT or exc.status == kube_client.INVALID)
                and not self._same_pod(path, meta["uid"])
            ):
                return True  # gone (or replaced) meanwhile: nothing left to report
            _LOG.warning("status of %s/%s: %s", meta["namespace"], meta["name"], exc)
            return False
        except kube_client.API_ERRORS as exc:
            _LOG.warning("status of %s/%s: %s", meta["namespace"], meta["name"], exc)
            return False
        return True

    def _same_pod(self, path: str, uid: str) -> bool:
        """The pod at ``path`` is still the one with ``uid`` (True when that cannot be read)."""
        try:
            found = self._api.find(path)
        except kube_client.API_ERRORS:
            return True
        return found is not None and found["metadata"]["uid"] == uid

    def _remove(self, pod: wire.Pod) -> None:
        """The kubelet's last word on a deleted pod whose processes have all ended."""
        meta = pod["metadata"]
        if meta["uid"] in self._removed:
            return
        try:
            self._api.delete(
                resources.PODS.path(meta["name"], namespace=meta["namespace"]),
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        except kube_client.ApiError as exc:
            if exc.failure is not kube_client.Failure.NOT_FOUND:
                _LOG.warning("removing %s/%s: %s (retrying)", meta["namespace"], meta["name"], exc)
                return
        except kube_client.API_ERRORS as exc:
            _LOG.warning("removing %s/%s: %s (retrying)", meta["namespace"], meta["name"], exc)
            return
        self._removed.add(meta["uid"])

    def _maybe_start(self, pod: wire.Pod, now: float) -> None:
        meta, spec = pod["metadata"], pod.get("spec", {})
        if not pod.get("status", {}).get("podIP"):
            return  # kwok has not "created the sandbox" yet: downward-API IPs are unknown
        injections: Mapping[str, podspec.Injection] = {}
        if spec.get("resourceClaims"):
            prepared = self._nodes[spec["nodeName"]].devices(meta["uid"])
            if prepared is None:
                return
            injections = prepared
        label = f"{meta['namespace']}/{meta['name']}"
        root = self._nodes_dir / spec["nodeName"]
        pulled = self._pull(pod, now)
        if pulled is None:
            return
        token_at = None
        if pulled:
            if not self._write_volumes(pod, root, now):
                return
            lifetime = volumefiles.token_lifetime(pod)
            token_at = now + 0.8 * lifetime if lifetime else None
        elif spec.get("automountServiceAccountToken", True):
            token_at = self._write_token(pod, now)
        context = self._context(pod, root, injections, pulled)
        try:
            plan = podspec.plan_pod(pod, context)
        except podspec.PodSpecError as exc:
            _LOG.error("%s cannot run: %s", label, exc)
            self._pod_event(pod, "Failed", f"Error: {exc}", True)
            self._unrunnable.add(meta["uid"])
            if pulled:  # as a kubelet says it: every container waits on its configuration
                spec_names = [
                    c["name"]
                    for c in [*spec.get("initContainers", []), *spec.get("containers", [])]
                ]
                self._write_waiting(
                    pod, {n: ("CreateContainerConfigError", str(exc)) for n in spec_names}
                )
            return
        log_dir = pod_log_dir(
            self._cluster_dir, namespace=meta["namespace"], name=meta["name"], uid=meta["uid"]
        )
        folder = node.pod_dir(root, meta["uid"])
        pod_runner = runner.PodRunner(
            label=label,
            plan=plan,
            log_dir=log_dir,
            prober=self._prober,
            hold_dir=folder / runner.HOLD_DIR,
            on_event=lambda reason, message, warning: self._pod_event(
                pod, reason, message, warning
            ),
            runtime=self._runtime,
            bundles=folder / CONTAINERS_DIR,
        )
        running = _Running(pod, pod_runner, token_at)
        self._running[meta["uid"]] = running
        self._waiting.pop(meta["uid"], None)
        pod_runner.tick(now)
        self._report(running)

    def _pod_event(self, pod: wire.Pod, reason: str, message: str, warning: bool) -> None:
        meta = pod["metadata"]
        ref = events.ObjectRef("Pod", meta["name"], meta["namespace"], meta["uid"])
        recorder = self._events[pod["spec"]["nodeName"]]
        recorder.emit(ref, reason=reason, message=message, warning=warning)

    def _pull(self, pod: wire.Pod, now: float) -> dict[str, imagestore.Image] | None:
        """The pulled image of each container that runs from one.

        None while one is missing: the pod's status then says why.
        """
        if self._pulls is None:
            return {}
        spec = pod.get("spec", {})
        wanted = [*spec.get("initContainers", []), *spec.get("containers", [])]
        pulled, waiting = self._pulls.images(pod, wanted, now)
        if not waiting:
            return pulled
        self._write_waiting(pod, {name: (w.reason, w.message) for name, w in waiting.items()})
        return None

    def _write_waiting(self, pod: wire.Pod, reasons: Mapping[str, tuple[str, str]]) -> None:
        """Write the status of a pod whose containers wait for ``reasons`` (when it changed)."""
        meta = pod["metadata"]
        status = pod_status.waiting(
            pod.get("spec", {}),
            reasons=reasons,
            images=_images(pod),
            previous=pod.get("status", {}).get("conditions") or [],
            now=pod_status.stamp(datetime.datetime.now(datetime.UTC)),
        )
        last = self._waiting.get(meta["uid"])
        if _without_times(status) != _without_times(last) and self._patch_status(pod, status):
            self._waiting[meta["uid"]] = status

    def _pull_credentials(self, pod: wire.Pod, ref: imagestore.Reference) -> tuple[str, str] | None:
        """The pod's ``imagePullSecrets`` entry for the registry of ``ref``.

        As the kubelet passes them to the runtime: the first Secret that names the registry.
        """
        namespace = pod["metadata"]["namespace"]
        found = []
        for name in pulls.pull_secret_names(pod):
            try:
                secret = self._api.find(resources.SECRETS.path(name, namespace=namespace))
            except kube_client.API_ERRORS as exc:
                _LOG.warning("pull secret %s/%s: %s", namespace, name, exc)
                continue
            if secret is not None:
                found.append(secret)
        return imagestore.registry_credentials(found, ref.registry)

    def _write_volumes(self, pod: wire.Pod, root: pathlib.Path, now: float) -> bool:
        """Write the files of the pod's ConfigMap, Secret, downward-API and projected volumes.

        The ServiceAccount token is among them. False (with a ``FailedMount`` Event) when one
        cannot be set up yet.
        """
        meta = pod["metadata"]
        retry = self._mount_retry.setdefault(meta["uid"], backoff.Backoff(initial=2.0, cap=120.0))
        if not retry.ready(now):
            return False
        folder = node.pod_dir(root, meta["uid"])
        namespace = meta["namespace"]

        def lookup(kind: Any) -> volumefiles.Lookup:
            return lambda name: self._api.find(kind.path(name, namespace=namespace))

        def token(seconds: int, audiences: Any) -> str:
            return kube_client.mint_service_account_token(
                self._api, namespace=namespace, audiences=list(audiences),
                service_account=pod["spec"].get("serviceAccountName", "default"),
                expiration_seconds=seconds, bound_pod=(meta["name"], meta["uid"]),
            )  # fmt: skip

        failed = []
        for volume in pod["spec"].get("volumes", []):
            name = volume.get("name", "")
            try:
                files = volumefiles.volume_files(
                    volume, pod, config_maps=lookup(resources.CONFIG_MAPS),
                    secrets=lookup(resources.SECRETS), token=token,
                )  # fmt: skip
                for file in files or []:
                    _write(podspec.volume_dir(folder, name) / file.path, file.data, mode=file.mode)
            except _MOUNT_ERRORS as exc:  # the others are still written (a token to renew)
                failed.append(f'MountVolume.SetUp failed for volume "{name}" : {exc}')
        if not failed:
            retry.reset()
            return True
        delay = retry.failed(now)
        for message in failed:
            _LOG.warning("%s/%s: %s (retry in %.0fs)", namespace, meta["name"], message, delay)
            self._pod_event(pod, "FailedMount", message, True)
        return False

    def _context(
        self,
        pod: wire.Pod,
        root: pathlib.Path,
        injections: Mapping[str, podspec.Injection],
        pulled: Mapping[str, imagestore.Image],
    ) -> podspec.PodContext:
        meta, spec = pod["metadata"], pod.get("spec", {})
        folder = node.pod_dir(root, meta["uid"])
        base = {k: os.environ[k] for k in _PASSTHROUGH_ENV if k in os.environ}
        base["HOSTNAME"] = meta["name"]
        if spec.get("automountServiceAccountToken", True):
            base[kube_client.SERVICEACCOUNT_DIR_ENV] = str(folder / "serviceaccount")
        return podspec.PodContext(
            node_root=root,
            pod_dir=folder,
            python=sys.executable,
            base_env=base,
            service_env={
                "KUBERNETES_SERVICE_HOST": self._server.host,
                "KUBERNETES_SERVICE_PORT": str(self._server.port),
            },
            injections=injections,
            images=pulled,
            runc_state=self._runtime.state if self._runtime else None,
        )

    def _report(self, running: _Running) -> bool:
        """Write the pod's status when it differs from what was last written; False if that failed.

        A failed write is retried next tick. A Job's pod thus succeeds or fails by its exit
        codes, and a deleted pod, once stopped, ends ``Succeeded`` or ``Failed`` before it is
        removed (``runner.stopped_phase``).
        """
        pod = running.pod
        meta = pod["metadata"]
        gates = [g.get("conditionType", "") for g in pod.get("spec", {}).get("readinessGates", [])]
        status = running.runner.status(
            images=_images(pod), gates=gates, conditions=_conditions_known(pod, running.reported)
        )
        if status == running.reported and (
            time.monotonic() - running.reported_at < STATUS_RESYNC
            or not overwritten(pod, running.reported)
        ):
            return True
        if not self._patch_status(pod, status):
            return False
        if status["phase"] != (running.reported or {}).get("phase"):
            _LOG.info("%s/%s: %s", meta["namespace"], meta["name"], status["phase"])
        running.reported = status
        running.reported_at = time.monotonic()
        return True

    def _renew_token(self, running: _Running, now: float) -> float:
        """Write the pod's token again; returns when to renew it next."""
        pod = running.pod
        if not running.runner.in_containers:
            return self._write_token(pod, now)
        root = self._nodes_dir / pod["spec"]["nodeName"]
        lifetime = volumefiles.token_lifetime(pod) or TOKEN_SECONDS
        if not self._write_volumes(pod, root, now):
            return now + 5.0
        return now + 0.8 * lifetime

    def _write_token(self, pod: wire.Pod, now: float) -> float:
        """Mint a pod-bound token and write the ServiceAccount folder; returns when to renew."""
        meta, spec = pod["metadata"], pod.get("spec", {})
        folder = node.pod_dir(self._nodes_dir / spec["nodeName"], meta["uid"]) / "serviceaccount"
        try:
            token = kube_client.mint_service_account_token(
                self._api,
                namespace=meta["namespace"],
                service_account=spec.get("serviceAccountName", "default"),
                expiration_seconds=TOKEN_SECONDS,
                bound_pod=(meta["name"], meta["uid"]),
            )
        except kube_client.API_ERRORS as exc:
            _LOG.warning("token for %s/%s: %s (retrying)", meta["namespace"], meta["name"], exc)
            return now + 5.0
        _write(folder / "ca.crt", self._server.ca_file.read_text())
        _write(folder / "namespace", meta["namespace"])
        _write(folder / "token", token)
        return now + 0.8 * TOKEN_SECONDS

    def _clean(self, pod: wire.Pod) -> None:
        meta = pod["metadata"]
        folder = node.pod_dir(self._nodes_dir / pod["spec"]["nodeName"], meta["uid"])
        containers.unmount_under(folder / CONTAINERS_DIR)
        for part in ("serviceaccount", "volumes", CONTAINERS_DIR):
            shutil.rmtree(folder / part, ignore_errors=True)
        with contextlib.suppress(OSError):  # still holds the DRA part's files: it removes them
            folder.rmdir()

    def _shutdown(self) -> None:
        self._proxy.stop()
        self._prober.close()
        for recorder in self._events.values():
            recorder.close(timeout=1.0)
        self._services.stop()
        self._pods.stop()
        for dra_node in self._nodes.values():
            dra_node.stop()
        pids = [pid for r in self._running.values() for pid in r.runner.pids()]
        processes.stop_pids(pids, grace=_SHUTDOWN_GRACE)
        now = time.monotonic()
        for running in self._running.values():
            running.runner.terminate(now, grace=0)
            running.runner.tick(now)  # reaps what stop_pids ended
        if self._pulls is not None:
            self._pulls.close()
        if self._runtime is not None:
            self._runtime.remove_all(self._cluster_dir)  # what a killed ``runc run`` left
        deadline = time.monotonic() + _SHUTDOWN_GRACE
        for dra_node in self._nodes.values():
            dra_node.join(timeout=max(0.0, deadline - time.monotonic()))


def run(
    *,
    kubeconfig_path: pathlib.Path,
    cluster_dir: pathlib.Path,
    registry: str = "",
    images_dir: pathlib.Path | None = None,
) -> int:
    """Run the simulated kubelet until SIGTERM or SIGINT.

    With ``images_dir``, chart pods run from their images under runc, pulled into that cache
    (``registry``: the cluster's, spoken to over plain HTTP).
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    api = kube_client.Client.from_kubeconfig(kubeconfig_path)
    store = None
    if images_dir is not None:
        store = imagestore.Store(images_dir, insecure=[registry] if registry else [])
        for folder in store.prune():
            _LOG.info("removed the unpacked image %s (unused for a day)", folder.name)
    kubelet = SimKubelet(
        api,
        cluster_dir=cluster_dir,
        server=ApiServer.from_kubeconfig(kubeconfig_path),
        store=store,
        registry=registry,
    )
    _LOG.info("simulated kubelet for the nodes under %s", cluster_dir / "nodes")
    kubelet.run(stop)
    return 0
