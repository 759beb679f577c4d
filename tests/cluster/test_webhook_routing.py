"""The API server calls a webhook through its Service, at the endpoint's (pod's) loopback IP.

No container runs here and Service IPs are not routed, so the API server's ``cluster`` egress
goes through the simulated kubelet's Service proxy, which forwards a connection to a Service's
IP and port to a ready pod behind it (kwok gave the pod an IP from its node's loopback
podCIDR). This test serves a tiny ValidatingWebhook from its own process, bound to such a pod's
IP, and registers it by Service name, as a chart does.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import pathlib
import ssl
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim import pki
from computedomains import waiting
from tests.support import kube

pytestmark = pytest.mark.cluster

PORT = 9443
DENIED = "the test webhook refuses ConfigMaps with a 'forbidden' key"


class _Review(http.server.BaseHTTPRequestHandler):
    """Answers AdmissionReviews: refuses ConfigMaps that carry the key ``forbidden``."""

    seen: list[str]

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        self.seen.append(request["name"])
        allowed = "forbidden" not in (request["object"].get("data") or {})
        response: dict[str, Any] = {"uid": request["uid"], "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "message": DENIED}
        body = json.dumps({**review, "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the API server's calls are asserted, not logged."""


@contextlib.contextmanager
def _serving(ip: str, cert: pki.CertFiles) -> Iterator[list[str]]:
    """An HTTPS admission webhook on ``ip``; yields the names of the objects it reviewed."""
    seen: list[str] = []
    handler = type("Review", (_Review,), {"seen": seen})
    server = http.server.ThreadingHTTPServer((ip, PORT), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert.cert), str(cert.key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="test-webhook", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _configmap(name: str, data: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": data}


def test_the_api_server_reaches_a_validating_webhook_through_its_service(
    sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str, tmp_path: pathlib.Path
) -> None:
    core = client.CoreV1Api(api)
    labels = {"test": f"webhook-{uuid.uuid4().hex[:6]}"}
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "webhook", "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.37",
                        "ports": [{"name": "https", "containerPort": PORT}],
                    }
                ]
            },
        },
    )
    pod = kube.wait_for_pod(
        api, namespace, "webhook", "to be Ready with an IP", lambda p: p.status.pod_ip and
        kube.pod_condition(p, "Ready"), timeout=60,
    )  # fmt: skip
    ip = str(pod.status.pod_ip)
    port = {"name": "https", "port": 443, "targetPort": "https"}
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "checker"}, "spec": {"selector": labels, "ports": [port]}}
    )

    ca = pki.CertificateAuthority(tmp_path)
    cert = ca.issue("webhook", common_name="checker", dns_names=(f"checker.{namespace}.svc",))
    name = f"test-{namespace}"
    webhook = {
        "name": "checker.compute-domains.test",
        "clientConfig": {
            "service": {"name": "checker", "namespace": namespace, "path": "/", "port": 443},
            "caBundle": base64.b64encode(ca.files.cert.read_bytes()).decode(),
        },
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["configmaps"],
            }
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    }
    admission = client.AdmissionregistrationV1Api(api)
    with _serving(ip, cert) as seen:
        admission.create_validating_webhook_configuration(
            {"metadata": {"name": name}, "webhooks": [webhook]}
        )
        try:

            def refused() -> str | None:
                try:
                    core.create_namespaced_config_map(
                        namespace, _configmap("bad", {"forbidden": "x"}), dry_run="All"
                    )
                except ApiException as exc:
                    return str(exc.body) if DENIED in str(exc.body) else None
                return None  # the API server has not loaded the configuration yet

            waiting.until(
                "the API server to call the webhook through Service checker and obey it",
                refused,
                timeout=60,
                interval=0.5,
            )
            core.create_namespaced_config_map(namespace, _configmap("good", {"fine": "x"}))
            assert "good" in seen and "bad" in seen
        finally:
            admission.delete_validating_webhook_configuration(name)
