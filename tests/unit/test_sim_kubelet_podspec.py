"""Pod spec → processes: $(VAR) expansion, downward API, hostPath rewriting, entrypoints."""

from __future__ import annotations

import pathlib

import pytest

from cdsim.kubelet import podspec
from computedomains.kube import wire

ROOT = pathlib.Path("/sim/nodes/n1")
POD_DIR = ROOT / "pods/u1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "1"),
        ("x-$(A)-$(B)-y", "x-1-two-y"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("cost: $5", "cost: $5"),
        ("trailing $", "trailing $"),
        ("$(A", "$(A"),
        ("$()", "$()"),
        ("$(A)$(A)", "11"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert podspec.expand(text, {"A": "1", "B": "two"}) == expected


def _pod(**spec: object) -> wire.Pod:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "labels": {"app": "x"},
            "annotations": {"note": "hi"},
        },
        "spec": {"nodeName": "n1", "serviceAccountName": "sa", **spec},
        "status": {"podIP": "127.17.0.5", "hostIP": "127.16.0.2"},
    }
    return pod  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "p"),
        ("metadata.namespace", "ns"),
        ("metadata.uid", "u1"),
        ("spec.nodeName", "n1"),
        ("spec.serviceAccountName", "sa"),
        ("status.podIP", "127.17.0.5"),
        ("status.hostIP", "127.16.0.2"),
        ("metadata.labels['app']", "x"),
        ("metadata.annotations['note']", "hi"),
        ("metadata.labels['absent']", ""),
    ],
)
def test_downward_api_fields(path: str, value: str) -> None:
    assert podspec.field_value(_pod(), path) == value


def test_unsupported_field_and_env_sources_are_refused() -> None:
    with pytest.raises(podspec.PodSpecError, match=r"status\.podIPs"):
        podspec.field_value(_pod(), "status.podIPs")
    container: wire.Container = {
        "name": "c",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {}}}],  # type: ignore[typeddict-unknown-key]
    }
    with pytest.raises(podspec.PodSpecError, match="only value and fieldRef"):
        podspec.container_env(container, _pod(), {})


def test_env_values_expand_against_earlier_variables_and_service_env() -> None:
    container: wire.Container = {
        "name": "c",
        "env": [
            {"name": "LATER_REF", "value": "$(NODE)"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "OUT", "value": "/out/$(NODE)/$(KUBERNETES_SERVICE_PORT)"},
        ],
    }
    env = podspec.container_env(container, _pod(), {"KUBERNETES_SERVICE_PORT": "6443"})
    assert env == {"LATER_REF": "$(NODE)", "NODE": "n1", "OUT": "/out/n1/6443"}


def test_mounts_map_host_paths_and_empty_dirs_into_the_node_tree() -> None:
    container: wire.Container = {
        "volumeMounts": [
            {"name": "run", "mountPath": "/var/run/cd"},
            {"name": "run", "mountPath": "/var/run/cd/imex", "subPath": "imex"},
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ]
    }
    volumes: list[wire.Volume] = [
        {"name": "run", "hostPath": {"path": "/var/run/compute-domains", "type": "Directory"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "token"},
    ]
    mounts = podspec.container_mounts(container, volumes, node_root=ROOT, pod_dir=POD_DIR)
    assert [(m.container_path, m.host_path, m.kind) for m in mounts] == [
        ("/var/run/cd/imex", ROOT / "var/run/compute-domains/imex", "Directory"),
        ("/var/run/cd", ROOT / "var/run/compute-domains", "Directory"),
        ("/scratch", POD_DIR / "volumes/scratch", "emptyDir"),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/data", f"{ROOT}/srv/data"),
        ("/data/x.json", f"{ROOT}/srv/data/x.json"),
        ("--out=/data/x", f"--out={ROOT}/srv/data/x"),
        ("/data/deep/file", f"{ROOT}/deep/file"),
        ("/database", "/database"),
        ("relative/data", "relative/data"),
        ("--flag=value", "--flag=value"),
        ("a=/data", "a=/data"),
    ],
)
def test_rewrite_replaces_a_mounted_prefix_only_at_a_path_boundary(
    value: str, expected: str
) -> None:
    mounts = [
        podspec.Mount("/data/deep", ROOT / "deep"),
        podspec.Mount("/data/", ROOT / "srv/data"),
    ]
    assert podspec.rewrite(value, mounts) == expected


@pytest.mark.parametrize(
    ("command", "args", "argv"),
    [
        ([], ["node-init", "--watch"], ["PY", "-m", "computedomains", "node-init", "--watch"]),
        (["computedomains"], ["fabric", "show"], ["PY", "-m", "computedomains", "fabric", "show"]),
        (["/usr/local/bin/computedomains", "x"], [], ["PY", "-m", "computedomains", "x"]),
        ([], ["computedomains", "x"], ["PY", "-m", "computedomains", "x"]),
        (["python3", "-c", "pass"], ["a"], ["python3", "-c", "pass", "a"]),
    ],
)
def test_entrypoint(command: list[str], args: list[str], argv: list[str]) -> None:
    assert podspec.entrypoint(command, args, python="PY") == argv


def test_plan_pod_builds_processes_with_rewritten_paths_and_runtime_additions() -> None:
    main: wire.Container = {
        "name": "plugin",
        "args": ["kubelet-plugin", "--node-name=$(NODE_NAME)", "--cdi-root=/var/run/cdi"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "STATE", "value": "/var/run/cdi/state"},
        ],
        "volumeMounts": [{"name": "cdi", "mountPath": "/var/run/cdi"}],
        "workingDir": "/var/run/cdi",
    }
    init: wire.Container = {"name": "setup", "command": ["true"], "restartPolicy": "Always"}
    pod = _pod(
        containers=[main],
        initContainers=[init],
        volumes=[{"name": "cdi", "hostPath": {"path": "/var/run/cdi"}}],
        restartPolicy="Always",
    )
    context = podspec.PodContext(
        node_root=ROOT,
        pod_dir=POD_DIR,
        python="PY",
        base_env={"PATH": "/bin"},
        service_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1"},
        injections={
            "plugin": podspec.Injection(
                env=(("WIDGET", "/widget/1"),),
                mounts=(podspec.Mount("/widget", ROOT / "var/run/widget", "cdi"),),
            )
        },
    )
    plan = podspec.plan_pod(pod, context)
    assert [c.name for c in plan.init] == ["setup"] and plan.init[0].sidecar
    assert plan.init[0].cwd == POD_DIR
    process = plan.containers[0]
    assert process.argv == (
        "PY", "-m", "computedomains", "kubelet-plugin", "--node-name=n1",
        f"--cdi-root={ROOT}/var/run/cdi",
    )  # fmt: skip
    assert process.env["STATE"] == f"{ROOT}/var/run/cdi/state"
    assert process.env["WIDGET"] == f"{ROOT}/var/run/widget/1"
    assert process.env["PATH"] == "/bin"
    assert process.env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert process.env["PYTHONUNBUFFERED"] == "1"
    assert process.cwd == ROOT / "var/run/cdi"
    assert not process.sidecar
