"""What our own components count, read from their /metrics (pod IP, named port)."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

from kubernetes import client

from computedomains import waiting

COMPONENTS = ("controller", "kubelet-plugin", "imex-agent")
"""The components that count their API server requests (``kube/requestmetrics.py``)."""
_SERIES = re.compile(r"^computedomains_\w+_api_requests_total\{([^}]*)\} (\S+)$", re.M)


def scrape(pod: Any) -> str:
    """The /metrics text of ``pod`` (a typed client V1Pod) on its ``http``/``metrics`` port."""
    port = next(
        p.container_port
        for c in pod.spec.containers
        for p in c.ports or []
        if p.name in ("http", "metrics")
    )
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def api_requests(text: str) -> list[tuple[dict[str, str], float]]:
    """The ``*_api_requests_total`` samples of a /metrics text: (labels, count)."""
    return [
        (dict(re.findall(r'(\w+)="([^"]*)"', labels)), float(value))
        for labels, value in _SERIES.findall(text)
    ]


def refusals(api: Any, driver_ns: str) -> dict[str, float]:
    """409 and 429 answers to our components' own requests so far, by
    ``<component> <verb> <resource>`` (leases excluded: the elector's, counted apart)."""
    out: dict[str, float] = {}
    core = client.CoreV1Api(api)
    for component in COMPONENTS:
        selector = f"app.kubernetes.io/component={component}"
        for pod in core.list_namespaced_pod(driver_ns, label_selector=selector).items:
            if not pod.status.pod_ip:
                continue
            for labels, value in api_requests(scrape(pod)):
                if labels.get("code") in ("409", "429") and labels.get("resource") != "leases":
                    key = f"{component} {labels.get('verb')} {labels.get('resource')}"
                    out[key] = out.get(key, 0.0) + value
    return out


def leader(api: Any, driver_ns: str) -> Any:
    """The controller pod that leads (a replica being restarted is passed over meanwhile)."""
    found: list[Any] = []

    def leading() -> bool:
        pods = client.CoreV1Api(api).list_namespaced_pod(
            driver_ns, label_selector="app.kubernetes.io/component=controller"
        )
        for pod in pods.items:
            try:
                text = scrape(pod) if pod.status.pod_ip else ""
            except OSError:
                continue
            if re.search(r"^computedomains_controller_leader 1", text, re.M):
                found[:] = [pod]
                return True
        return False

    waiting.until("a leading controller", leading, timeout=60, interval=0.5)
    return found[0]
