"""A whole simulated cluster: control plane, simulated GB200 nodes and their host trees.

``SimCluster`` is a context manager: leaving it, normally or through an exception or
KeyboardInterrupt, stops every process it started (by PID) and removes its temp dir. A
small JSON state file under the cache lets ``sim down``/``sim status`` find a cluster that
runs in another process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import IO, Any

from cdsim import controlplane, fakenvml, hosttree, kubeconfig, nodes, processes, tools, topology
from cdsim.fakeimex import install as fake_imex
from cdsim.kubelet import containers
from computedomains import waiting
from computedomains.api import resources as kube_resources
from computedomains.kube import client as kube_client
from computedomains.kube import nodes as kube_nodes


class ClusterError(RuntimeError):
    """The cluster could not be started or found."""


@dataclasses.dataclass
class ClusterState:
    """What ``sim status``/``sim down`` need to know about a running cluster."""

    name: str
    directory: str
    kubeconfig: str
    server: str
    supervisor_pid: int
    children: dict[str, int]
    nodes: int
    address_block: int
    started_at: float
    control_plane_seconds: float
    """Start → every control-plane process healthy."""
    ready_seconds: float
    """Start → every simulated node Ready."""
    registry: str = ""
    """The cluster's OCI registry, ``127.0.0.1:PORT`` (plain HTTP)."""

    def write(self, path: pathlib.Path) -> None:
        """Persist atomically (temp file and rename), so readers never see half a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2))
        tmp.rename(path)

    @classmethod
    def read(cls, path: pathlib.Path) -> ClusterState:
        """Load a state file written by :meth:`write`."""
        return cls(**json.loads(path.read_text()))


def state_dir(env: dict[str, str] | None = None) -> pathlib.Path:
    """Where state files and locks of running clusters live."""
    return tools.cache_root(env) / "sim"


def state_file(name: str) -> pathlib.Path:
    """The state file of the cluster called ``name``."""
    return state_dir() / f"{name}.json"


def remove_leftovers(directory: pathlib.Path, log: Callable[[str], None]) -> None:
    """Remove a cluster's folder and whatever of it still runs, saying what did.

    After a clean stop nothing runs: a crash leaves the processes that carry the cluster's
    mark (:func:`processes.strays`) and runc's containers with their overlay mounts. One left
    alive keeps its loopback address and port, so the next cluster given the same address
    block could not start that component there; a live mount would stop the removal half-way.
    """
    found = processes.strays(directory)
    if found:
        log(f"[sim] warning: {len(found)} process(es) outlived their supervisor; stopping:")
        for pid, command in found.items():
            log(f"[sim]   pid {pid}: {command[:160]}")
        processes.stop_pids(list(found), grace=2.0)
    left = containers.Runc(directory / containers.STATE_DIR).remove_all(directory)
    if left:
        log(f"[sim] warning: removed containers {left} that outlived their supervisor")
    shutil.rmtree(directory, ignore_errors=True)


def _block_lock(block: int) -> pathlib.Path:
    """The lock of loopback address block ``block``.

    It names the folder of the cluster on the block (empty once that cluster stopped cleanly).
    """
    return state_dir() / "blocks" / f"{block}.lock"


def _left_in(block: int) -> pathlib.Path | None:
    """The folder of a cluster that held ``block`` and did not clean up, if one is left."""
    try:
        named = _block_lock(block).read_text().strip()
    except OSError:
        return None
    return pathlib.Path(named) if named and pathlib.Path(named).exists() else None


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside (main thread only: Python sets handlers nowhere else)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _exclusive(path: pathlib.Path, *, remove: bool = False) -> Iterator[IO[str] | None]:
    """Hold an flock on ``path`` (None when another process holds it); freed on exit or death.

    ``remove``: the file goes when the lock is freed (a cluster's name: names are many and
    one-off). Removed while still held, so a process that opened it just before locks a file
    no longer in place: it sees that and opens the path again.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            yield None
            return
        try:
            in_place = path.stat().st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            in_place = False
        if in_place:
            break
        handle.close()  # its holder removed it meanwhile: lock the one there now
    try:
        yield handle
    finally:
        if remove:
            path.unlink(missing_ok=True)
        handle.close()


class SimCluster:
    """One simulated cluster, started by :meth:`start` and stopped by :meth:`stop`."""

    def __init__(
        self,
        *,
        name: str = "default",
        topology_spec: topology.Topology | None = None,
        toolbox: tools.ToolBox | None = None,
        log: Callable[[str], None] | None = None,
        runtime: str | None = None,
    ) -> None:
        """A cluster named ``name``, not started yet.

        ``runtime``: how chart pods run (:data:`controlplane.RUNTIMES`; None: the
        environment's ``COMPUTE_DOMAINS_SIM_RUNTIME``, else the default).
        """
        self.name = name
        self.runtime = controlplane.runtime_from(runtime)
        self.topology = topology_spec or topology.Topology()
        self.toolbox = toolbox or tools.ToolBox.from_env()
        self.log = log or self.toolbox.log
        self.directory: pathlib.Path | None = None
        self._block: int | None = None
        """The loopback address block held, once claimed."""
        self.nodes: list[topology.SimNode] = []
        self.host_trees: dict[str, hosttree.HostTree] = {}
        self.control_plane: controlplane.ControlPlane | None = None
        self.state: ClusterState | None = None
        self._locks = contextlib.ExitStack()

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> SimCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, *, timeout: float = 120.0) -> ClusterState:
        """Start the control plane, create the nodes and wait until all are Ready."""
        started = time.monotonic()
        try:
            binaries = controlplane.Binaries.from_tools(
                self.toolbox.ensure_all(["etcd", "kubernetes", "kwok"])
            )
            block = self._claim_names()
            self.directory = pathlib.Path(tempfile.mkdtemp(prefix="cds-"))
            self._block = block
            _block_lock(block).write_text(str(self.directory))  # for whoever takes it next
            self.nodes = topology.expand(self.topology, cluster_name=self.name, address_block=block)
            self.control_plane = controlplane.ControlPlane(
                directory=self.directory,
                binaries=binaries,
                name=self.name,
                log=self.log,
                runtime=self.runtime,
                images_dir=self.toolbox.cache / "sim" / "images",
                address_block=block,
            )
            self.control_plane.start(timeout=timeout)
            control_plane_seconds = time.monotonic() - started
            self._create_nodes()
            self.wait_nodes_ready(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        self.state = ClusterState(
            name=self.name,
            directory=str(self.directory),
            kubeconfig=str(self.kubeconfig),
            server=self.control_plane.server,
            supervisor_pid=os.getpid(),
            children={c.name: c.pid for c in self.control_plane.children},
            nodes=len(self.nodes),
            address_block=block,
            started_at=time.time(),
            control_plane_seconds=round(control_plane_seconds, 2),
            ready_seconds=round(time.monotonic() - started, 2),
            registry=self.control_plane.registry,
        )
        self.state.write(state_file(self.name))
        return self.state

    def stop(self) -> None:
        """Stop every process this cluster started and remove its files; safe to repeat.

        Ctrl-C and SIGTERM wait meanwhile: a second one must not leave containers behind.
        """
        with _signals_held():
            self._stop()

    def _stop(self) -> None:
        try:
            if self.control_plane is not None:
                self.log(f"[sim] stopping cluster {self.name}")
                self.control_plane.stop()
                self.control_plane = None
        finally:
            # Whatever failed above, the files and the locks on the name and block go.
            if self.directory is not None:
                remove_leftovers(self.directory, self.log)
                self.directory = None
            if self._block is not None:
                _block_lock(self._block).write_text("")  # nothing of ours is left there
                self._block = None
            if self.state is not None:
                state_file(self.name).unlink(missing_ok=True)
                self.state = None
            self._locks.close()

    def _claim_names(self) -> int:
        """Lock this cluster's name and a free loopback address block; returns the block."""
        name_lock = _exclusive(state_dir() / f"{self.name}.lock", remove=True)
        if self._locks.enter_context(name_lock) is None:
            raise ClusterError(
                f"a simulated cluster named {self.name!r} is already running; "
                f"stop it with `cdsim down --name {self.name}` or pick another name"
            )
        stale = state_file(self.name)
        if stale.exists():
            # The name lock was free, so whoever wrote this died without cleaning up (its
            # children died with it through PDEATHSIG); only its files are left to remove.
            old = ClusterState.read(stale)
            self.log(
                f"[sim] removing leftovers of a crashed cluster {self.name!r}: {old.directory}"
            )
            remove_leftovers(pathlib.Path(old.directory), self.log)
            stale.unlink()
        # A block a crashed cluster left (its folder named in the lock, its containers maybe
        # still on the block's addresses) only when no clean one is free: then it is cleared.
        blocks = range(topology.ADDRESS_BLOCKS)
        for block in sorted(blocks, key=lambda b: _left_in(b) is not None):
            if self._locks.enter_context(_exclusive(_block_lock(block))) is None:
                continue
            left = _left_in(block)
            if left is not None:
                self.log(f"[sim] address block {block}: removing a crashed cluster's {left}")
                remove_leftovers(left, self.log)
            return block
        raise ClusterError(f"all {topology.ADDRESS_BLOCKS} loopback address blocks are in use")

    # -- nodes ----------------------------------------------------------------------------

    def _create_nodes(self) -> None:
        assert self.directory is not None
        api = self.api_client()
        version = kube_client.server_version(api)
        self.log(
            f"[sim] creating {len(self.nodes)} nodes ({self.topology.racks} racks x "
            f"{self.topology.nodes_per_rack}, {self.topology.non_fabric_nodes} without fabric)"
        )
        library = self.toolbox.nvml_library()
        for node in self.nodes:
            tree = hosttree.write(
                self.directory / "nodes" / node.name,
                node,
                nvml_library=library,
                imex_python=fake_imex.IMAGE_PYTHON if self.runtime == "runc" else sys.executable,
            )
            self.host_trees[node.name] = tree
            boot_id = tree.boot_id.read_text().strip()
            kube_nodes.create(api, nodes.manifest(node, kubelet_version=version, boot_id=boot_id))

    def set_fabric_profile(self, node: str, profile: topology.FabricProfile) -> None:
        """Change what the node's (fake) NVML reports, as a fabric or driver change would."""
        spec = dataclasses.replace(self.topology, overrides={node: topology.NodeOverride(profile)})
        changed = next(
            n
            for n in topology.expand(spec, cluster_name=self.name, address_block=0)
            if n.name == node
        )
        hosttree.write_nvml_answers(self.host_trees[node], fakenvml.answers(changed))

    def set_node_ready(
        self,
        node: str,
        ready: bool,
        *,
        api: kube_client.Client | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Make ``node`` report NotReady (its kubelet says so) or Ready again.

        kwok's stages follow the node's :data:`nodes.NOT_READY_ANNOTATION` (kwok-stages.yaml).
        """
        (api or self.api_client()).patch(
            kube_resources.NODES.path(node), nodes.not_ready_patch(not ready), timeout=timeout
        )

    # -- control-plane faults -------------------------------------------------------------

    def stop_component(self, name: str, *, grace: float = 10.0) -> None:
        """Stop one control-plane process (``kube-apiserver``, ...) until it is started again."""
        if self.control_plane is None:
            raise ClusterError("the cluster is not running")
        self.control_plane.stop_component(name, grace=grace)

    def start_component(self, name: str, *, timeout: float = 60.0) -> None:
        """Start a control-plane process :meth:`stop_component` stopped, as before.

        The state file then names its new PID, so ``cdsim down`` stops it.
        """
        if self.control_plane is None:
            raise ClusterError("the cluster is not running")
        self.control_plane.start_component(name, timeout=timeout)
        if self.state is not None:
            self.state.children = {c.name: c.pid for c in self.control_plane.children}
            self.state.write(state_file(self.name))

    def signal_component(self, name: str, sig: signal.Signals) -> None:
        """Send ``sig`` to one control-plane process: SIGSTOP pauses etcd, SIGCONT resumes it."""
        if self.control_plane is None:
            raise ClusterError("the cluster is not running")
        child = self.control_plane.component(name)
        if child.popen.poll() is None:
            child.popen.send_signal(sig)

    def ready_node_names(self) -> set[str]:
        """Names of simulated nodes whose Ready condition is True."""
        ready, _ = kube_nodes.ready_names(self.api_client())
        return ready & {n.name for n in self.nodes}

    def wait_nodes_ready(self, *, timeout: float) -> None:
        """Wait until every simulated node is Ready."""
        assert self.control_plane is not None
        want = len(self.nodes)
        waiting.until(
            f"all {want} simulated nodes to be Ready",
            lambda: len(self.ready_node_names()) == want,
            timeout=timeout,
            interval=0.2,
            abort=self.control_plane.check_running,
        )
        self.log(f"[sim] {want} nodes Ready")

    # -- access ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> pathlib.Path:
        """The admin kubeconfig."""
        if self.control_plane is None:
            raise ClusterError("the cluster is not running")
        return self.control_plane.admin_kubeconfig

    def api_client(self) -> kube_client.Client:
        """A new admin API client."""
        return kube_client.Client.from_kubeconfig(self.kubeconfig)

    def service_account_kubeconfig(
        self,
        namespace: str,
        service_account: str,
        *,
        expiration_seconds: int = 3600,
        bound_pod: tuple[str, str] | None = None,
    ) -> pathlib.Path:
        """Mint a token for a ServiceAccount (TokenRequest) and write a kubeconfig using it."""
        assert self.directory is not None
        suffix = f"-{bound_pod[0]}" if bound_pod else ""
        return kubeconfig.for_service_account(
            self.kubeconfig,
            self.directory / "sa" / f"{namespace}.{service_account}{suffix}.kubeconfig",
            namespace=namespace,
            service_account=service_account,
            expiration_seconds=expiration_seconds,
            bound_pod=bound_pod,
        )

    def summary(self) -> dict[str, Any]:
        """A short description of the running cluster, for the CLI and the demo."""
        racks: dict[str, int] = {}
        for node in self.nodes:
            key = f"rack {node.rack}" if node.rack is not None else "no fabric"
            racks[key] = racks.get(key, 0) + 1
        return {
            "name": self.name,
            "server": self.control_plane.server if self.control_plane else None,
            "kubeconfig": str(self.kubeconfig),
            "nodes": len(self.nodes),
            "ready": len(self.ready_node_names()),
            "racks": racks,
            "registry": self.control_plane.registry if self.control_plane else None,
            "directory": str(self.directory),
        }
