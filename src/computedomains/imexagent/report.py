"""Write what IMEX is doing where others look: the node's IMEX files and status, the pod condition.

The status file is for the kubelet plugin on the same node (it gates prepares on READY); the
condition on the agent's own pod is for the controller; both follow :mod:`computedomains.api.imex`.
The file is rewritten when the report changes and, as the heartbeat, every heartbeat interval
anyway; the condition only when the report changes. A failed condition write is retried with
backoff, never given up.
"""

from __future__ import annotations

import datetime
import logging
import math
import pathlib
from collections.abc import Callable

from computedomains import nodefiles
from computedomains.api import imex, resources
from computedomains.imexagent import config, decide, render
from computedomains.kube import client as kube_client

log = logging.getLogger(__name__)
_RETRY_FIRST = 1.0
_RETRY_CAP = 30.0


def status_of(
    node: str,
    report: decide.Report,
    *,
    start: imex.AgentStart,
    updated_at: datetime.datetime,
    now: datetime.datetime,
) -> imex.ImexStatus:
    """The ImexStatus file for ``report``, last changed at ``updated_at``, rewritten ``now``."""
    return imex.ImexStatus(
        node=node,
        domain_uid=report.domain_uid,
        state=report.state,
        message="" if report.ready else report.text,
        updated_at=updated_at,
        heartbeat_at=now,
        agent=start,
    )


def pod_report(report: decide.Report, start: imex.AgentStart) -> imex.PodReport:
    """What the agent's pod says for ``report``, written by the run ``start``."""
    return imex.PodReport(
        ready=report.ready,
        reason=report.reason,
        message=report.message,
        domain_uid=report.domain_uid,
        agent=start,
    )


class ImexFiles:
    """The files IMEX reads; each is rewritten only when its content changes."""

    def __init__(self, cfg: config.AgentConfig) -> None:
        self._cfg = cfg

    def write(self, membership: decide.Membership) -> None:
        """Everything IMEX needs to start (or reload) for ``membership``."""
        cfg = self._cfg
        _replace(cfg.config_file, render.imexd_cfg(pod_ip=cfg.pod_ip, imex_dir=cfg.imex_dir))
        _replace(cfg.nodes_file, render.nodes_cfg(membership.domain_uid, cfg.max_nodes_per_clique))
        self._hosts(membership.hosts)

    def clear_hosts(self) -> None:
        """Remove our entries from the hosts file (IMEX was stopped)."""
        self._hosts(())

    def _hosts(self, entries: tuple[render.HostEntry, ...]) -> None:
        path = self._cfg.hosts_file
        try:
            existing = path.read_text()
        except FileNotFoundError:
            existing = ""
        text = render.merge_hosts(existing, entries)
        if text == existing:
            return
        # A pod's /etc/hosts is a single file the kubelet bind-mounts: a rename cannot replace
        # it, so it is rewritten in place. IMEX reads it only when the agent starts or signals
        # it, which happens after this write returns.
        # Written over the old content, then cut to length: the file is never empty midway.
        with path.open("r+" if path.exists() else "w") as handle:
            handle.write(text)
            handle.truncate()


def _replace(path: pathlib.Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` unless it holds that already."""
    try:
        if path.read_text() == text:
            return
    except FileNotFoundError:
        pass
    nodefiles.write_bytes(path, text.encode())


class Reporter:
    """Publishes reports to the status file (with its heartbeat) and the pod condition."""

    def __init__(
        self,
        api: kube_client.Client,
        cfg: config.AgentConfig,
        *,
        start: imex.AgentStart,
        wall: Callable[[], datetime.datetime],
    ) -> None:
        self._api = api
        self._cfg = cfg
        self._start = start
        self._wall = wall
        self._in_file: decide.Report | None = None
        self._changed_at = start.started_at
        self._beat_due = -math.inf
        self._in_condition: decide.Report | None = None
        self._retry_at = -math.inf
        self._failures = 0

    @property
    def current(self) -> decide.Report | None:
        """The report in the status file now."""
        return self._in_file

    def publish(self, report: decide.Report, *, now: float) -> float:
        """Write ``report`` where it differs, and the heartbeat when due.

        Returns when to call again: the next heartbeat, or a condition retry if that is sooner.
        """
        if report != self._in_file or now >= self._beat_due:
            self._write_file(report, now=now)
        if report == self._in_condition:
            return self._beat_due
        if now < self._retry_at:
            return min(self._retry_at, self._beat_due)
        try:
            self._write_condition(report)
        except kube_client.API_ERRORS as exc:
            self._failures += 1
            delay = min(_RETRY_CAP, _RETRY_FIRST * 2 ** (self._failures - 1))
            log.warning("could not set the pod condition (%s); retrying in %gs", exc, delay)
            self._retry_at = now + delay
            return min(self._retry_at, self._beat_due)
        self._in_condition, self._failures, self._retry_at = report, 0, -math.inf
        return self._beat_due

    def _write_file(self, report: decide.Report, *, now: float) -> None:
        wall = self._wall()
        if report != self._in_file:
            self._changed_at = wall
            log.info("IMEX status: %s %s", report.state.value, report.message)
        status = status_of(
            self._cfg.node_name, report, start=self._start, updated_at=self._changed_at, now=wall
        )
        imex.write_status(self._cfg.status_file, status)
        self._in_file = report
        self._beat_due = now + self._cfg.heartbeat_interval

    def _write_condition(self, report: decide.Report) -> None:
        cfg = self._cfg
        path = resources.PODS.path(cfg.pod_name, namespace=cfg.namespace)
        pod = self._api.get(path)
        body = imex.status_patch(
            pod_report(report, self._start),
            uid=cfg.pod_uid,
            conditions=pod.get("status", {}).get("conditions") or [],
            now=self._wall(),
        )
        self._api.patch(f"{path}/status", body, strategic=True)
