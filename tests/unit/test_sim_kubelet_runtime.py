"""The simulated kubelet's runtime parts: restarts and backoff, plugin registration over real
sockets, CDI injections, and a pod's processes from init container to stop.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from cdsim import hosttree, processes
from cdsim.kubelet import backoff, dra, node, plugins, podspec, probes, runner
from computedomains import waiting
from tests.support import fakedra


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    retry = backoff.Backoff(initial=1, cap=5)
    assert [retry.failed(100.0) for _ in range(5)] == [1, 2, 4, 5, 5]
    assert not retry.ready(104.9) and retry.ready(105.0)
    retry.reset()
    assert retry.ready(0.0) and retry.failed(0.0) == 1


def test_crash_backoff_restarts_at_once_then_waits_as_the_kubelet() -> None:
    retry = backoff.Backoff(initial=10, cap=300, first_free=True)
    assert [retry.failed(0.0) for _ in range(8)] == [0, 10, 20, 40, 80, 160, 300, 300]


@pytest.mark.parametrize(
    ("code", "init", "sidecar", "policy", "restarts"),
    [
        (0, False, False, "Always", True),
        (1, False, False, "Always", True),
        (0, False, False, "OnFailure", False),
        (1, False, False, "OnFailure", True),
        (1, False, False, "Never", False),
        (0, True, False, "Always", False),
        (1, True, False, "Always", True),
        (1, True, False, "Never", False),
        (0, True, True, "Never", True),
    ],
)
def test_restart_rules(code: int, init: bool, sidecar: bool, policy: str, restarts: bool) -> None:
    assert runner.restarts(code, init=init, sidecar=sidecar, pod_policy=policy) is restarts


def test_choose_service_takes_the_plugins_first_that_the_kubelet_speaks() -> None:
    assert plugins.choose_service(["v2.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAPlugin"]) == (
        "v1beta1.DRAPlugin"
    )
    assert plugins.choose_service(["v1alpha4.Node"]) is None
    assert plugins.choose_service([]) is None


def test_accept_checks_type_name_services_and_endpoint() -> None:
    socket = pathlib.Path("/r/x-reg.sock")
    good = plugins.PluginInfo("DRAPlugin", "x.example", "/p/dra.sock", ("v1.DRAPlugin",))
    assert plugins.accept(good, socket) == plugins.Accepted(
        "x.example", pathlib.Path("/p/dra.sock"), "v1.DRAPlugin"
    )
    no_endpoint = plugins.PluginInfo("DRAPlugin", "x.example", "", ("v1beta1.DRAPlugin",))
    assert plugins.accept(no_endpoint, socket) == plugins.Accepted(
        "x.example", socket, "v1beta1.DRAPlugin"
    )
    refusals = {
        "no handler registered for plugin type 'CSIPlugin'": good.__class__(
            "CSIPlugin", "x", "/p", ("v1.DRAPlugin",)
        ),
        "no driver name": plugins.PluginInfo("DRAPlugin", "", "/p", ("v1.DRAPlugin",)),
        "none of the plugin's services": plugins.PluginInfo("DRAPlugin", "x", "/p", ("v9.X",)),
        "not an absolute path": plugins.PluginInfo("DRAPlugin", "x", "p.sock", ("v1.DRAPlugin",)),
    }
    for message, info in refusals.items():
        verdict = plugins.accept(info, socket)
        assert isinstance(verdict, str) and message in verdict


@pytest.fixture
def tree() -> Iterator[hosttree.HostTree]:
    """A node tree under a short path: unix socket paths are limited to 107 bytes."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="cdt-"))
    for sub in ("var/lib/kubelet/plugins_registry", "var/lib/kubelet/plugins", "var/run/cdi"):
        (root / sub).mkdir(parents=True)
    yield hosttree.HostTree(root)
    shutil.rmtree(root)


def test_registration_prepare_unprepare_and_deregistration_over_real_sockets(
    tree: hosttree.HostTree,
) -> None:
    registry = plugins.Registry(tree.kubelet_registry, node="n", host_root=tree.root)
    claim = dra.ClaimRef("ns", "c", "uid-1")
    with fakedra.FakeDraPlugin("w.example.com", tree, versions=("v1beta1.DRAPlugin",)) as plugin:
        assert registry.scan(time.monotonic())
        assert registry.drivers() == {"w.example.com"}
        assert plugin.record.registrations == [(True, "")]
        client = registry.client("w.example.com")
        assert client is not None and client.accepted.service == "v1beta1.DRAPlugin"
        assert client.prepare([claim]) == {
            "uid-1": dra.ClaimResult(
                (dra.Device((), tree.root.name, "dev-0", (plugin.cdi_id("uid-1"),)),)
            )
        }
        assert plugin.cdi_spec("uid-1").exists()
        assert client.unprepare([claim]) == {"uid-1": ""}
        assert not registry.scan(time.monotonic()), "nothing changed"
    assert registry.scan(time.monotonic()), "the socket is gone"
    assert registry.drivers() == frozenset()


def test_a_plugin_of_the_wrong_type_is_told_why_and_not_registered(
    tree: hosttree.HostTree,
) -> None:
    registry = plugins.Registry(tree.kubelet_registry, node="n", host_root=tree.root)
    with fakedra.FakeDraPlugin("w.example.com", tree, plugin_type="DevicePlugin") as plugin:
        assert not registry.scan(time.monotonic())
        assert registry.drivers() == frozenset()
        assert plugin.record.registrations == [
            (False, "no handler registered for plugin type 'DevicePlugin'")
        ]
        assert not registry.scan(time.monotonic()), "refusals are retried only after a backoff"


def test_cdi_injection_maps_mounts_into_the_node_tree() -> None:
    root = pathlib.Path("/sim/nodes/n1")
    injected = node.injection(
        {
            "env": ["A=1", "B=x=y"],
            "mounts": [
                {"hostPath": "/var/run/imex", "containerPath": "/imexd"},
                {"hostPath": f"{root}/already/there", "containerPath": "/there"},
            ],
        },
        root,
    )
    assert injected.env == (("A", "1"), ("B", "x=y"))
    assert [(m.container_path, m.host_path) for m in injected.mounts] == [
        ("/imexd", root / "var/run/imex"),
        ("/there", root / "already/there"),
    ]


def _process(name: str, script: str, out: pathlib.Path) -> podspec.ContainerPlan:
    return podspec.ContainerPlan(
        name=name,
        argv=(sys.executable, "-c", script, str(out)),
        env={},
        cwd=out.parent,
        mounts=(podspec.Mount("/data", out.parent / "data", "DirectoryOrCreate"),),
    )


def test_init_containers_run_to_completion_before_containers_which_restart_and_stop(
    tmp_path: pathlib.Path, prober: probes.Prober
) -> None:
    log = tmp_path / "log"
    append = "import os, sys; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n')"
    plan = podspec.PodPlan(
        init=(_process("init", append, tmp_path / "init.out"),),
        containers=(
            _process("main", append + "; import signal; signal.pause()", tmp_path / "main.out"),
        ),
        restart_policy="Always",
    )
    pod = runner.PodRunner(label="ns/p", plan=plan, log_dir=log, prober=prober)

    def lines(name: str) -> list[str]:
        path = tmp_path / name
        return path.read_text().split() if path.exists() else []

    def step_until(what: str, check: object) -> None:
        def stepped() -> bool:
            pod.tick(time.monotonic())
            return bool(check())  # type: ignore[operator]

        waiting.until(what, stepped, timeout=30, interval=0.05)

    step_until("the main container to start after init", lambda: lines("main.out"))
    assert len(lines("init.out")) == 1
    assert (tmp_path / "data").is_dir()
    first = int(lines("main.out")[0])
    processes.stop_pids([first], grace=5)
    step_until("the main container to be restarted", lambda: len(lines("main.out")) == 2)
    second = int(lines("main.out")[1])
    assert pod.pids() == [second]
    pod.terminate(time.monotonic(), grace=5)
    step_until("the pod's processes to stop", lambda: pod.finished)
    assert not processes.pid_alive(second)
    assert len(lines("init.out")) == 1, "init containers ran once"
    assert (log / "main.log").exists()
