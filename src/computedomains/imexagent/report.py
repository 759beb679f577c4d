"""Write what IMEX is doing where others look: the node's IMEX files and status, the pod condition.

The status file is for the kubelet plugin on the same node (it gates prepares on READY); the
condition on the agent's own pod is for the controller. Both are rewritten only when the
report changes; a failed condition write is retried with backoff, never given up.
"""

from __future__ import annotations

import datetime
import logging
import math
import pathlib
from typing import Any

from computedomains import nodefiles
from computedomains.api import constants
from computedomains.imexagent import config, decide, render
from computedomains.kube import client as kube_client
from computedomains.kube import pods

log = logging.getLogger(__name__)
_RETRY_FIRST = 1.0
_RETRY_CAP = 30.0


def status_document(node: str, report: decide.Report, *, now: datetime.datetime) -> dict[str, Any]:
    """The ImexStatus document (docs/node-side.md)."""
    return nodefiles.document(
        constants.IMEX_STATUS_KIND,
        {
            "node": node,
            "domainUID": report.domain_uid,
            "state": report.state.value,
            "message": "" if report.ready else report.text,
            "updatedAt": now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
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
    """Publishes reports to the status file and the pod condition."""

    def __init__(self, api: kube_client.Client, cfg: config.AgentConfig) -> None:
        self._api = api
        self._cfg = cfg
        self._in_file: decide.Report | None = None
        self._in_condition: decide.Report | None = None
        self._retry_at = -math.inf
        self._failures = 0

    @property
    def current(self) -> decide.Report | None:
        """The report in the status file now."""
        return self._in_file

    def publish(self, report: decide.Report, *, now: float) -> float:
        """Write ``report`` where it differs; returns when to call again (a retry), or inf."""
        if report != self._in_file:
            document = status_document(
                self._cfg.node_name, report, now=datetime.datetime.now(datetime.UTC)
            )
            nodefiles.write_json(self._cfg.status_file, document)
            log.info("IMEX status: %s %s", report.state.value, report.message)
            self._in_file = report
        if report == self._in_condition:
            return math.inf
        if now < self._retry_at:
            return self._retry_at
        try:
            self._write_condition(report)
        except kube_client.API_ERRORS as exc:
            self._failures += 1
            delay = min(_RETRY_CAP, _RETRY_FIRST * 2 ** (self._failures - 1))
            log.warning("could not set the pod condition (%s); retrying in %gs", exc, delay)
            self._retry_at = now + delay
            return self._retry_at
        self._in_condition, self._failures, self._retry_at = report, 0, -math.inf
        return math.inf

    def _write_condition(self, report: decide.Report) -> None:
        cfg = self._cfg
        pods.set_condition(
            self._api,
            cfg.namespace,
            cfg.pod_name,
            uid=cfg.pod_uid,
            condition_type=constants.IMEX_READY_CONDITION,
            status="True" if report.ready else "False",
            reason=report.reason.value,
            message=report.message,
        )
