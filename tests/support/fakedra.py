"""A made-up DRA driver for tests: the real kubelet gRPC APIs, served on a node's sockets.

It registers through the node's ``plugins_registry`` like any kubelet plugin, prepares a
claim by writing a valid CDI spec for it (one device, ``<claimUID>-dev-0``) and unprepares it
by removing the spec. Tests read what it was asked and switch errors on and off.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import pathlib
import threading
import types
from typing import Any

import grpc

from cdsim import hosttree
from computedomains.drapb import dra_v1_pb2, pluginregistration_v1_pb2, services


@dataclasses.dataclass
class Record:
    """What the plugin was asked and told; lists of claim UIDs per call."""

    prepare_calls: list[list[str]] = dataclasses.field(default_factory=list)
    unprepare_calls: list[list[str]] = dataclasses.field(default_factory=list)
    unprepared: list[str] = dataclasses.field(default_factory=list)
    """Claims whose unprepare succeeded."""
    registrations: list[tuple[bool, str]] = dataclasses.field(default_factory=list)


class FakeDraPlugin:
    """Registration and the DRA service (v1 and v1beta1) for ``driver`` on one node's tree."""

    def __init__(
        self,
        driver: str,
        tree: hosttree.HostTree,
        *,
        plugin_type: str = "DRAPlugin",
        versions: tuple[str, ...] = tuple(services.DRA),
    ) -> None:
        self.driver = driver
        self.tree = tree
        self.plugin_type = plugin_type
        self.versions = versions
        self.fail_prepare: str | None = None
        self.fail_unprepare: str | None = None
        self.record = Record()
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    @property
    def registration_socket(self) -> pathlib.Path:
        """Where the kubelet finds the plugin."""
        return self.tree.kubelet_registry / f"{self.driver}-reg.sock"

    @property
    def dra_socket(self) -> pathlib.Path:
        """The DRA service's socket."""
        return self.tree.kubelet_plugins / self.driver / "dra.sock"

    @property
    def cdi_kind(self) -> str:
        """``<vendor>/<class>`` of the specs it writes."""
        return f"k8s.{self.driver}/claim"

    def cdi_spec(self, claim_uid: str) -> pathlib.Path:
        """The spec file of one prepared claim."""
        return self.tree.cdi / f"k8s.{self.driver}-claim_{claim_uid}.yaml"

    def cdi_id(self, claim_uid: str) -> str:
        """The CDI device ID returned for a claim."""
        return f"{self.cdi_kind}={claim_uid}-dev-0"

    def start(self) -> FakeDraPlugin:
        """Serve both sockets (the registration socket last: it announces the plugin)."""
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        services.serve(server, services.REGISTRATION, self)
        for version in self.versions:
            services.serve(server, services.DRA[version], self)
        server.add_insecure_port(f"unix://{self.dra_socket}")
        server.add_insecure_port(f"unix://{self.registration_socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the sockets (the kubelet then deregisters the plugin)."""
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None
        self.registration_socket.unlink(missing_ok=True)
        self.dra_socket.unlink(missing_ok=True)

    def __enter__(self) -> FakeDraPlugin:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    # -- gRPC ------------------------------------------------------------------------------

    def GetInfo(self, request: Any, context: Any) -> Any:
        return pluginregistration_v1_pb2.PluginInfo(
            type=self.plugin_type,
            name=self.driver,
            endpoint=str(self.dra_socket),
            supported_versions=list(self.versions),
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.record.registrations.append((request.plugin_registered, request.error))
        return pluginregistration_v1_pb2.RegistrationStatusResponse()

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        with self._lock:
            self.record.prepare_calls.append([c.uid for c in request.claims])
            failure = self.fail_prepare
        for claim in request.claims:
            entry = response.claims[claim.uid]
            if failure:
                entry.error = failure
                continue
            self._write_spec(claim.uid)
            entry.devices.add(
                pool_name=self.tree.root.name,
                device_name="dev-0",
                cdi_device_ids=[self.cdi_id(claim.uid)],
            )
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = dra_v1_pb2.NodeUnprepareResourcesResponse()
        with self._lock:
            self.record.unprepare_calls.append([c.uid for c in request.claims])
            failure = self.fail_unprepare
        for claim in request.claims:
            response.claims[claim.uid].error = failure or ""
            if not failure:
                self.cdi_spec(claim.uid).unlink(missing_ok=True)
                with self._lock:
                    self.record.unprepared.append(claim.uid)
        return response

    def _write_spec(self, claim_uid: str) -> None:
        spec = {
            "cdiVersion": "0.6.0",
            "kind": self.cdi_kind,
            "containerEdits": {"env": [f"WIDGET_DRIVER={self.driver}"]},
            "devices": [
                {
                    "name": f"{claim_uid}-dev-0",
                    "containerEdits": {
                        "env": [f"WIDGET_CLAIM={claim_uid}"],
                        "mounts": [{"hostPath": "/var/run/widget", "containerPath": "/widget"}],
                    },
                }
            ],
        }
        path = self.cdi_spec(claim_uid)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(spec))
        tmp.replace(path)
