"""Run ``computedomains webhook`` as a local process, and install what it serves, by URL.

The chart's CRDs and webhook configurations are rendered as the chart renders them; only
their ``clientConfig`` changes from the Service to ``https://127.0.0.1:<port>/...``, since
the API server here cannot reach a Service. The webhook's certificate then names 127.0.0.1
too (``--extra-names``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import os
import pathlib
import signal
import socket
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import parser

from cdsim import cluster as sim_cluster
from cdsim import ports, processes, topology
from computedomains import waiting
from tests.chart import rendering
from tests.support import clusters, helm, kube

NAMESPACE = "cd-system"
RELEASE = "cd"
CONFIGURATION = "cd-compute-domains-webhook"
"""The chart's name of both webhook configurations (release ``cd``)."""
SERVICE = "cd-cd-webhook"
LOCAL_PATHS = {
    "validate.computedomains.resource.nvidia.com": "/validate/computedomains",
    "placement.pods.computedomains.io": "/mutate/pods",
    "labelled.placement.pods.computedomains.io": "/mutate/pods",
}


@dataclasses.dataclass
class WebhookProcess:
    """``computedomains webhook`` with admin credentials, serving on 127.0.0.1."""

    kubeconfig: pathlib.Path
    log_dir: pathlib.Path
    port: int
    secret: str = "cd-compute-domains-webhook-tls"
    name: str = "webhook"
    args: tuple[str, ...] = ()
    http_port: int = dataclasses.field(default_factory=ports.free_port)
    child: processes.Managed | None = None

    def start(self, *, wait: bool = True) -> None:
        """Start it; with ``wait``, until it is ready (certificate served, cache synced)."""
        argv = [
            sys.executable, "-m", "computedomains", "webhook",
            f"--kubeconfig={self.kubeconfig}", f"--namespace={NAMESPACE}",
            f"--bind=127.0.0.1:{self.port}", f"--http-bind=127.0.0.1:{self.http_port}",
            f"--service-name={SERVICE}", "--extra-names=127.0.0.1", f"--tls-secret={self.secret}",
            f"--validating-webhook-configuration={CONFIGURATION}",
            f"--mutating-webhook-configuration={CONFIGURATION}",
            "--resync-interval=0.5", "--shutdown-grace=0", *self.args,
        ]  # fmt: skip
        self.child = processes.start(self.name, argv, log_dir=self.log_dir, env=dict(os.environ))
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Until ``/readyz`` answers 200."""
        assert self.child is not None
        waiting.until(
            f"{self.name} to be ready", lambda: self.probe("/readyz") == 200, timeout=60,
            abort=self.child.check_running,
        )  # fmt: skip

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) and reap."""
        if self.child is not None:
            processes.stop_all([self.child])
            self.child = None

    def kill(self) -> None:
        """SIGKILL, as a crashed pod, and reap."""
        assert self.child is not None
        os.kill(self.child.pid, signal.SIGKILL)
        self.child.popen.wait(timeout=10)
        self.child = None

    def probe(self, path: str) -> int:
        """HTTP status of ``path`` on the metrics/probe endpoint (0 when nothing answers)."""
        try:
            url = f"http://127.0.0.1:{self.http_port}{path}"
            with urllib.request.urlopen(url, timeout=5) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def sample(self, name: str, **labels: str) -> float:
        """One sample of ``/metrics`` (0 when absent)."""
        url = f"http://127.0.0.1:{self.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        for family in parser.text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return float(s.value)
        return 0.0

    def served_certificate(self) -> bytes:
        """The DER certificate the HTTPS endpoint presents now."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
            context.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


def _local(config: dict[str, Any], port: int, path: str) -> dict[str, Any]:
    """``config`` with its Service reference replaced by the local URL (no caBundle)."""
    assert "caBundle" not in config, "the chart must not render a caBundle"
    service = config["service"]
    assert (service["name"], service["namespace"], service["port"]) == (SERVICE, NAMESPACE, 443)
    assert service["path"] == path
    return {"url": f"https://127.0.0.1:{port}{path}"}


def rendered(h: helm.Helm, port: int) -> list[dict[str, Any]]:
    """The chart's CRDs and webhook configurations, pointed at ``127.0.0.1:<port>``."""
    docs = rendering.template(
        h, "--show-only", "charts/crds/templates/resource.nvidia.com_computedomains.yaml",
        "--show-only", "charts/crds/templates/resource.nvidia.com_computedomaincliques.yaml",
        "--show-only", "templates/webhook-configurations.yaml",
        release=RELEASE, namespace=NAMESPACE,
    )  # fmt: skip
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition":
            webhook = doc["spec"]["conversion"].get("webhook")
            if webhook is not None:
                webhook["clientConfig"] = _local(webhook["clientConfig"], port, "/convert")
        else:
            for entry in doc["webhooks"]:
                path = LOCAL_PATHS[entry["name"]]
                entry["clientConfig"] = _local(entry["clientConfig"], port, path)
    return docs


def install(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Create the rendered objects and wait until the CRDs are Established."""
    ext = client.ApiextensionsV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    create: dict[str, Callable[..., object]] = {
        "CustomResourceDefinition": ext.create_custom_resource_definition,
        "ValidatingWebhookConfiguration": admission.create_validating_webhook_configuration,
        "MutatingWebhookConfiguration": admission.create_mutating_webhook_configuration,
    }
    for doc in docs:
        create[doc["kind"]](doc)
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition":
            name = doc["metadata"]["name"]
            waiting.until(
                f"CRD {name} Established",
                functools.partial(kube.crd_established, ext, name),
                timeout=30,
            )


def ca_bundles(api: client.ApiClient) -> dict[str, str | None]:
    """The caBundle (base64) of the CRD's conversion and of each webhook, by where it is."""
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "computedomains.resource.nvidia.com"
    )
    conversion = crd.spec.conversion.webhook.client_config
    out: dict[str, str | None] = {"crd": _text(conversion.ca_bundle)}
    admission = client.AdmissionregistrationV1Api(api)
    validating = admission.read_validating_webhook_configuration(CONFIGURATION)
    mutating = admission.read_mutating_webhook_configuration(CONFIGURATION)
    for configuration in (validating, mutating):
        for entry in configuration.webhooks:
            out[entry.name] = _text(entry.client_config.ca_bundle)
    return out


def _text(bundle: str | bytes | None) -> str | None:
    """A caBundle as the base64 text the API returns (the typed client may decode it)."""
    return base64.b64encode(bundle).decode() if isinstance(bundle, bytes) else bundle


def secret_data(api: client.ApiClient, name: str) -> dict[str, str] | None:
    """The Secret's data (base64 values), or None when there is none."""
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, NAMESPACE)
    except ApiException as exc:
        if kube.status_of(exc) == 404:
            return None
        raise
    return dict(secret.data or {})


def ensure_namespace(api: client.ApiClient) -> None:
    """The release namespace, created unless present."""
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:
        if kube.status_of(exc) != 409:
            raise


@contextlib.contextmanager
def one_node_cluster(
    *, name: str, helm_home: pathlib.Path, log_dir: pathlib.Path
) -> Iterator[tuple[Any, WebhookProcess]]:
    """A one-node simulated cluster with the chart's CRDs and webhook configurations (called by
    URL) and the webhook running against it; the typed client and the process."""
    sim = sim_cluster.SimCluster(
        name=name, topology_spec=topology.Topology(racks=1, nodes_per_rack=1), log=lambda _: None
    )
    with sim:
        api = clusters.typed_client(sim.kubeconfig)
        port = ports.free_port()
        ensure_namespace(api)
        install(api, rendered(rendering.helm_for("helm4", helm_home), port))
        process = WebhookProcess(kubeconfig=sim.kubeconfig, log_dir=log_dir, port=port)
        process.start()
        try:
            yield api, process
        finally:
            process.stop()
