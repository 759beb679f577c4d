"""DRA plugins on one node: registration through the registry dir, and calls to their service.

Registration follows the kubelet's plugin watcher: every socket in ``plugins_registry`` (names
starting with '.' are ignored) is asked ``GetInfo``; a ``DRAPlugin`` whose supported services
overlap the kubelet's is registered and told so (``NotifyRegistrationStatus``), anything else
is told why not. A socket that disappears (or is replaced) deregisters its plugin; with two
instances of one driver, the newest registration serves.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import stat
from collections.abc import Sequence
from typing import Any

import grpc

from cdsim.kubelet import backoff, dra, podspec
from computedomains.drapb import dra_v1_pb2, pluginregistration_v1_pb2, services

KUBELET_SERVICES = tuple(services.DRA)
"""What a 1.34+ kubelet speaks, preferred first (v1, then v1beta1)."""
PLUGIN_TYPE = "DRAPlugin"
CALL_TIMEOUT = 45.0
"""The kubelet's per-call timeout for NodePrepareResources/NodeUnprepareResources."""
_GET_INFO_TIMEOUT = 1.0
_NOTIFY_TIMEOUT = 5.0
_SUN_PATH_MAX = 107
_LOG = logging.getLogger(__name__)


def choose_service(supported: Sequence[str]) -> str | None:
    """The first of the plugin's services that the kubelet speaks (the plugin's preference)."""
    return next((s for s in supported if s in KUBELET_SERVICES), None)


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """A ``GetInfo`` answer."""

    type: str
    name: str
    endpoint: str
    versions: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Accepted:
    """A registration the kubelet accepts."""

    driver: str
    endpoint: pathlib.Path
    service: str


def accept(info: PluginInfo, socket: pathlib.Path) -> Accepted | str:
    """Check a ``GetInfo`` answer; returns the registration or the reason to refuse it."""
    if info.type != PLUGIN_TYPE:
        return f"no handler registered for plugin type {info.type!r}"
    if not info.name:
        return "the plugin reported no driver name"
    service = choose_service(info.versions)
    if service is None:
        return (
            f"none of the plugin's services {list(info.versions)} is supported "
            f"by this kubelet ({', '.join(KUBELET_SERVICES)})"
        )
    endpoint = pathlib.Path(info.endpoint) if info.endpoint else socket
    if not endpoint.is_absolute():
        return f"endpoint {info.endpoint!r} is not an absolute path"
    return Accepted(info.name, endpoint, service)


def _target(path: pathlib.Path) -> str:
    if len(str(path).encode()) > _SUN_PATH_MAX:
        raise OSError(f"unix socket path {path} is longer than {_SUN_PATH_MAX} bytes")
    return f"unix://{path}"


def register(socket: pathlib.Path, host_root: pathlib.Path) -> Accepted:
    """Run the registration handshake on ``socket``; raises on refusal or failure.

    The endpoint a plugin reports is a path on its node's host (a plugin in a container names
    it as its hostPath mount shows it): the kubelet dials it in ``host_root``, the node's tree.
    """
    with grpc.insecure_channel(_target(socket)) as channel:
        stub = services.Client(channel, services.REGISTRATION)
        reply = stub.call(
            "GetInfo", pluginregistration_v1_pb2.InfoRequest(), timeout=_GET_INFO_TIMEOUT
        )
        info = PluginInfo(reply.type, reply.name, reply.endpoint, tuple(reply.supported_versions))
        verdict = accept(info, socket)
        status = pluginregistration_v1_pb2.RegistrationStatus(
            plugin_registered=isinstance(verdict, Accepted),
            error="" if isinstance(verdict, Accepted) else verdict,
        )
        stub.call("NotifyRegistrationStatus", status, timeout=_NOTIFY_TIMEOUT)
    if isinstance(verdict, str):
        raise ValueError(f"refused plugin on {socket.name}: {verdict}")
    return dataclasses.replace(verdict, endpoint=podspec.on_node(host_root, str(verdict.endpoint)))


class DraClient:
    """Calls one registered plugin's DRA service (v1 or v1beta1, as registered)."""

    def __init__(self, accepted: Accepted) -> None:
        self.accepted = accepted
        self._channel = grpc.insecure_channel(_target(accepted.endpoint))
        # The service registration picked: v1's messages serve both versions (drapb.services).
        self._stub = services.Client(self._channel, services.DRA[accepted.service])

    def _claims(self, claims: Sequence[dra.ClaimRef]) -> list[Any]:
        return [dra_v1_pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def prepare(
        self, claims: Sequence[dra.ClaimRef], *, timeout: float = CALL_TIMEOUT
    ) -> dict[str, dra.ClaimResult]:
        """One ``NodePrepareResources`` call; raises ``grpc.RpcError`` when the call fails."""
        request = dra_v1_pb2.NodePrepareResourcesRequest(claims=self._claims(claims))
        response = self._stub.call("NodePrepareResources", request, timeout=timeout)
        return {
            uid: dra.ClaimResult(
                devices=tuple(
                    dra.Device(
                        request_names=tuple(d.request_names),
                        pool=str(d.pool_name),
                        device=str(d.device_name),
                        cdi_ids=tuple(d.cdi_device_ids),
                    )
                    for d in entry.devices
                ),
                error=str(entry.error),
            )
            for uid, entry in response.claims.items()
        }

    def unprepare(
        self, claims: Sequence[dra.ClaimRef], *, timeout: float = CALL_TIMEOUT
    ) -> dict[str, str]:
        """One ``NodeUnprepareResources`` call: claim UID → error ('' when done)."""
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=self._claims(claims))
        response = self._stub.call("NodeUnprepareResources", request, timeout=timeout)
        return {str(uid): str(entry.error) for uid, entry in response.claims.items()}

    def close(self) -> None:
        """Close the connection; calls in flight fail at once."""
        self._channel.close()


@dataclasses.dataclass
class _Socket:
    identity: tuple[int, int]
    """(inode, mtime): a socket recreated under the same name is a new plugin instance."""
    retry: backoff.Backoff = dataclasses.field(default_factory=backoff.Backoff)
    client: DraClient | None = None
    registered_at: float = 0.0


class Registry:
    """The plugins registered on one node, kept current by :meth:`scan`."""

    def __init__(self, directory: pathlib.Path, *, node: str, host_root: pathlib.Path) -> None:
        self._directory = directory
        self._node = node
        self._host_root = host_root
        self._sockets: dict[str, _Socket] = {}

    def _present(self) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        try:
            entries = list(self._directory.iterdir())
        except FileNotFoundError:
            return found
        for path in entries:
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue
            if not path.name.startswith(".") and stat.S_ISSOCK(info.st_mode):
                found[path.name] = (info.st_ino, info.st_mtime_ns)
        return found

    def scan(self, now: float) -> bool:
        """Register new sockets, drop vanished ones; True when the set of plugins changed."""
        present = self._present()
        changed = False
        for name, entry in list(self._sockets.items()):
            if present.get(name) != entry.identity:
                changed |= self._drop(name)
        for name, identity in present.items():
            entry = self._sockets.setdefault(name, _Socket(identity))
            if entry.client is None and entry.retry.ready(now):
                changed |= self._register(name, entry, now)
        return changed

    def _register(self, name: str, entry: _Socket, now: float) -> bool:
        try:
            accepted = register(self._directory / name, self._host_root)
        except (grpc.RpcError, ValueError, OSError) as exc:
            delay = entry.retry.failed(now)
            _LOG.warning("[%s] registration of %s failed (retry in %.0fs): %s",
                         self._node, name, delay, exc)  # fmt: skip
            return False
        entry.client = DraClient(accepted)
        entry.registered_at = now
        _LOG.info("[%s] registered DRA driver %s (%s at %s)",
                  self._node, accepted.driver, accepted.service, accepted.endpoint)  # fmt: skip
        return True

    def _drop(self, name: str) -> bool:
        entry = self._sockets.pop(name)
        if entry.client is None:
            return False
        entry.client.close()
        _LOG.info("[%s] deregistered DRA driver %s (%s removed)",
                  self._node, entry.client.accepted.driver, name)  # fmt: skip
        return True

    def client(self, driver: str) -> DraClient | None:
        """The newest registered instance of ``driver``, if any."""
        candidates = [
            s for s in self._sockets.values() if s.client and s.client.accepted.driver == driver
        ]
        newest = max(candidates, key=lambda s: s.registered_at, default=None)
        return newest.client if newest else None

    def drivers(self) -> frozenset[str]:
        """Names of the registered drivers."""
        return frozenset(s.client.accepted.driver for s in self._sockets.values() if s.client)

    def close(self) -> None:
        """Close every connection, so calls in flight fail at once (safe from another thread)."""
        for entry in list(self._sockets.values()):
            if entry.client is not None:
                entry.client.close()
