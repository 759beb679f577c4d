"""The real control plane as local processes on loopback, and the cluster's OCI registry.

etcd, API server, KCM, scheduler, kwok and the registry (:mod:`cdsim.registry`).

The API server runs with TLS, ``Node,RBAC`` authorization, service-account tokens and
ServiceAccount admission, like a production cluster; the other components authenticate
with client certificates for their well-known identities, so the bootstrap RBAC applies.
It reaches webhook Services through the simulated kubelet's Service proxy (its ``cluster``
egress), which forwards to the pods' loopback IPs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

from cdsim import kubeconfig, pki, ports, processes, registry
from cdsim.kubelet import containers, podspec, serviceproxy
from computedomains import waiting

SERVICE_CIDR = "10.96.0.0/16"
"""Only allocated from, never routed: only the API server's egress, through the simulated
kubelet's Service proxy, reaches a Service IP (a webhook's)."""
SERVICE_IP = "10.96.0.1"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
STAGES_FILE = pathlib.Path(__file__).with_name("kwok-stages.yaml")
_KCM_CONTROLLERS = (
    "*"  # the default set: daemonset, job, GC, SA, namespace, node-lifecycle, resourceclaim ...
)


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Paths of the control-plane programs."""

    etcd: pathlib.Path
    kube_apiserver: pathlib.Path
    kube_controller_manager: pathlib.Path
    kube_scheduler: pathlib.Path
    kwok: pathlib.Path

    @classmethod
    def from_tools(cls, paths: Mapping[str, pathlib.Path]) -> Binaries:
        """Pick the binaries out of :meth:`ToolBox.ensure_all`'s result."""
        return cls(
            etcd=paths["etcd"],
            kube_apiserver=paths["kube-apiserver"],
            kube_controller_manager=paths["kube-controller-manager"],
            kube_scheduler=paths["kube-scheduler"],
            kwok=paths["kwok"],
        )


RUNTIMES = ("process", "runc")
"""How the simulated kubelet runs pods: from their images in the cluster's registry under runc
(the default), or the chart's as processes of this checkout (the benchmarks' baseline)."""
RUNTIME_ENV = "COMPUTE_DOMAINS_SIM_RUNTIME"
DEFAULT_RUNTIME = "runc"


def runtime_from(asked: str | None, env: Mapping[str, str] | None = None) -> str:
    """The runtime asked for, else the environment's :data:`RUNTIME_ENV`, else the default."""
    chosen = asked or (os.environ if env is None else env).get(RUNTIME_ENV) or DEFAULT_RUNTIME
    if chosen not in RUNTIMES:
        raise ValueError(f"runtime {chosen!r}: expected one of {', '.join(RUNTIMES)}")
    return chosen


@dataclasses.dataclass
class ControlPlane:
    """Starts and stops one cluster's control-plane processes in ``directory``."""

    directory: pathlib.Path
    binaries: Binaries
    name: str
    log: Callable[[str], None]
    children: list[processes.Managed] = dataclasses.field(default_factory=list)
    api_port: int = 0
    etcd_url: str = ""
    """etcd's client URL once started (tests read what etcd itself stores)."""
    registry_port: int = 0
    runtime: str = DEFAULT_RUNTIME
    """:data:`RUNTIMES`: how the simulated kubelet runs chart pods."""
    images_dir: pathlib.Path | None = None
    """Where it unpacks pulled images (``runc``; shared by every cluster)."""
    address_block: int | None = None
    """The loopback address block the cluster holds: its listeners take the block's ports."""
    _block_ports: ports.BlockPorts | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.address_block is not None:
            self._block_ports = ports.BlockPorts(self.address_block)

    @property
    def registry(self) -> str:
        """The OCI registry's ``host:port`` (plain HTTP, loopback)."""
        return f"127.0.0.1:{self.registry_port}"

    @property
    def server(self) -> str:
        """The API server URL."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        """Kubeconfig of the cluster admin (``system:masters``)."""
        return self.directory / "admin.kubeconfig"

    @property
    def ca_file(self) -> pathlib.Path:
        """The cluster CA certificate."""
        return self.directory / "pki" / "ca.crt"

    def start(self, *, timeout: float = 60.0) -> None:
        """Start every component and wait until each reports healthy."""
        ca, cluster_pki = self.start_api_server(timeout=timeout)
        kcm_port = self._start_component(
            "kube-controller-manager",
            self.binaries.kube_controller_manager,
            ca,
            identity="system:kube-controller-manager",
            extra=[
                f"--controllers={_KCM_CONTROLLERS}",
                f"--root-ca-file={ca.files.cert}",
                f"--service-account-private-key-file={cluster_pki.service_account_key}",
                "--use-service-account-credentials=true",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--concurrent-daemonset-syncs=4",
                "--node-monitor-grace-period=40s",
            ],
        )
        sched_port = self._start_component(
            "kube-scheduler",
            self.binaries.kube_scheduler,
            ca,
            identity="system:kube-scheduler",
            extra=[],
        )
        self.registry_port = self._start_registry()  # kwok's stages name it
        kwok_port = self._start_kwok(ca)
        self._wait_healthy(
            "kube-controller-manager", f"https://127.0.0.1:{kcm_port}/healthz", timeout=timeout
        )
        self._wait_healthy(
            "kube-scheduler", f"https://127.0.0.1:{sched_port}/healthz", timeout=timeout
        )
        self._wait_healthy("kwok", f"http://127.0.0.1:{kwok_port}/healthz", timeout=timeout)
        self._wait_healthy("docker-registry", f"http://{self.registry}/v2/", timeout=timeout)
        self._start_sim_kubelet(ca)

    def start_api_server(
        self, *, timeout: float = 60.0, extra_args: tuple[str, ...] = (), health: str = "readyz"
    ) -> tuple[pki.CertificateAuthority, pki.ClusterPKI]:
        """Start etcd and kube-apiserver (with ``extra_args``) and write the admin kubeconfig.

        :meth:`start` goes on from here. Alone, it is an API server whose flags a test
        chooses (an API group switched off, say); ``health`` is the endpoint awaited (``livez``
        for a server that answers requests but never becomes ready).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        ca, cluster_pki = pki.create_cluster_pki(self.directory / "pki", service_ip=SERVICE_IP)
        self._admin = ca.issue("admin", common_name="admin", organizations=("system:masters",))
        self.api_port = self._port()
        self.etcd_url = self._start_etcd()
        self._start_apiserver(self.etcd_url, cluster_pki, extra_args)
        kubeconfig.write_client_cert(
            self.admin_kubeconfig,
            server=self.server,
            ca=ca.files.cert,
            cluster_name=self.cluster_name,
            user="admin",
            cert=self._admin.cert,
            key=self._admin.key,
        )
        self._wait_healthy("kube-apiserver", f"{self.server}/{health}", timeout=timeout)
        return ca, cluster_pki

    @property
    def cluster_name(self) -> str:
        """The cluster's name in kubeconfigs."""
        return f"compute-domains-sim-{self.name}"

    def stop(self) -> None:
        """Stop every started process (reverse order) and reap it, then every container."""
        processes.stop_all(self.children)
        if self.runtime == "runc":
            runc = containers.Runc(self.directory / containers.STATE_DIR)
            left = runc.remove_all(self.directory)
            if left:
                self.log(f"[sim] warning: containers {left} outlived the simulated kubelet")

    def check_running(self) -> None:
        """Raise if any component has exited."""
        for child in self.children:
            child.check_running()

    def component(self, name: str) -> processes.Managed:
        """The child process of component ``name`` (``etcd``, ``kube-apiserver``, ...)."""
        for child in self.children:
            if child.name == name:
                return child
        raise KeyError(f"no control-plane component {name!r}")

    def stop_component(self, name: str, *, grace: float = 10.0) -> None:
        """Stop one component (SIGTERM, SIGKILL after ``grace``) and reap it.

        :meth:`start_component` starts it again.
        """
        processes.stop_all([self.component(name)], grace=grace)

    def start_component(self, name: str, *, timeout: float = 60.0) -> None:
        """Start a component :meth:`stop_component` stopped, as it was started.

        Same flags and ports; when it is the API server, wait until it is ready again.

        Call it from the thread that started the control plane: the parent-death signal of
        the new process is tied to the calling thread.
        """
        old = self.component(name)
        if old.popen.poll() is None:
            return
        self.log(f"[sim] starting {name} again")
        self.children[self.children.index(old)] = processes.start_again(old)
        if name == "kube-apiserver":
            self._wait_healthy(name, f"{self.server}/readyz", timeout=timeout)

    # -- components -----------------------------------------------------------------------

    def _port(self) -> int:
        return ports.free_port() if self._block_ports is None else self._block_ports.take()

    def _spawn(
        self, name: str, argv: list[str], extra_env: Mapping[str, str] | None = None
    ) -> processes.Managed:
        self.log(f"[sim] starting {name}")
        env = {**os.environ, **(extra_env or {}), processes.CLUSTER_ENV: str(self.directory)}
        child = processes.start(
            name, argv, log_dir=self.directory / "logs", cwd=self.directory, env=env
        )
        self.children.append(child)
        return child

    def _start_etcd(self) -> str:
        client, peer = self._port(), self._port()
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=sim",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=sim=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",  # a throw-away cluster: durability buys nothing
                "--log-level=warn",
            ],
        )
        return f"http://127.0.0.1:{client}"

    def _start_apiserver(
        self, etcd_url: str, cluster_pki: pki.ClusterPKI, extra_args: tuple[str, ...] = ()
    ) -> None:
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.directory / 'apiserver-certs'}",
                f"--tls-cert-file={cluster_pki.serving.cert}",
                f"--tls-private-key-file={cluster_pki.serving.key}",
                f"--client-ca-file={cluster_pki.ca.cert}",
                "--authorization-mode=Node,RBAC",
                "--anonymous-auth=false",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}",
                f"--service-account-key-file={cluster_pki.service_account_pub}",
                f"--service-account-signing-key-file={cluster_pki.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--endpoint-reconciler-type=none",
                # Webhooks (admission, CRD conversion) are called at their Service's IP, which
                # nothing routes here: the simulated kubelet's Service proxy forwards those
                # connections to a ready pod's loopback IP (EndpointSlices refuse loopback
                # addresses, so --enable-aggregator-routing cannot find them).
                f"--egress-selector-config-file={self._egress_config()}",
                "--allow-privileged=true",
                "--profiling=false",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
                *extra_args,
            ],
        )

    def _egress_config(self) -> pathlib.Path:
        """The API server's ``cluster`` egress through the simulated kubelet's Service proxy."""
        path = self.directory / "egress-selector.yaml"
        socket_path = self.directory / serviceproxy.SOCKET_NAME
        path.write_text(json.dumps(serviceproxy.egress_selector_config(socket_path), indent=2))
        return path

    def _client_kubeconfig(
        self,
        ca: pki.CertificateAuthority,
        component: str,
        identity: str,
        organizations: tuple[str, ...] = (),
    ) -> pathlib.Path:
        cert = ca.issue(component, common_name=identity, organizations=organizations)
        return kubeconfig.write_client_cert(
            self.directory / f"{component}.kubeconfig",
            server=self.server,
            ca=ca.files.cert,
            cluster_name=self.cluster_name,
            user=identity,
            cert=cert.cert,
            key=cert.key,
        )

    def _start_component(
        self,
        name: str,
        binary: pathlib.Path,
        ca: pki.CertificateAuthority,
        *,
        identity: str,
        extra: list[str],
    ) -> int:
        config = self._client_kubeconfig(ca, name, identity)
        port = self._port()
        self._spawn(
            name,
            [
                str(binary),
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.directory / (name + '-certs')}",
                "--leader-elect=false",
                *extra,
            ],
        )
        return port

    def _start_kwok(self, ca: pki.CertificateAuthority) -> int:
        # kwok plays every simulated kubelet, so it gets cluster-admin, like kwokctl gives it.
        config = self._client_kubeconfig(ca, "kwok", "kwok", ("system:masters",))
        port = self._port()
        stages = self.directory / STAGES_FILE.name
        runs = podspec.runs_here_jq(self.registry if self.runtime == "runc" else "")
        stages.write_text(STAGES_FILE.read_text().replace(podspec.STAGES_PLACEHOLDER, runs))
        self._spawn(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={config}",
                f"--config={stages}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{port}",
                "--node-lease-duration-seconds=40",
            ],
        )
        return port

    def _start_registry(self) -> int:
        port = self._port()
        config = registry.write_config(self.directory / "registry", port=port)
        self._spawn("docker-registry", [str(registry.binary()), "serve", str(config)])
        return port

    def _start_sim_kubelet(self, ca: pki.CertificateAuthority) -> None:
        # It mints pod tokens, patches pods and records Events for every simulated node, so
        # like kwok it gets cluster-admin. Nothing waits for it: pods that need it wait.
        config = self._client_kubeconfig(ca, "sim-kubelet", "sim-kubelet", ("system:masters",))
        self._spawn(
            "sim-kubelet",
            [
                sys.executable,
                "-m",
                "cdsim",
                "kubelet",
                f"--kubeconfig={config}",
                f"--cluster-dir={self.directory}",
                *(
                    [f"--registry={self.registry}", f"--images-dir={self.images_dir}"]
                    if self.runtime == "runc" and self.images_dir
                    else []
                ),
            ],
            # It starts a process (fork, then exec) while its gRPC calls to the DRA plugins
            # run in other threads: gRPC's fork handlers must stay off, or a fork can crash it.
            extra_env={"GRPC_ENABLE_FORK_SUPPORT": "false"},
        )

    def _wait_healthy(self, name: str, url: str, *, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self._admin.cert), str(self._admin.key))
        if "apiserver" not in name:
            # KCM and scheduler serve with their own self-signed certs; only liveness matters.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)

        waiting.until(
            f"{name} to report healthy at {url}",
            healthy,
            timeout=timeout,
            interval=0.1,
            abort=self.check_running,
            retry_on=(OSError, urllib.error.URLError, ssl.SSLError),
        )
