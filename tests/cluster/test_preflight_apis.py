"""Preflight on an API server that does not serve resource.k8s.io/v1: refused, and says how.

A real kube-apiserver with the group version switched off (`--runtime-config`), not a faked
discovery answer. (A Kubernetes older than 1.34 cannot be built here; that refusal is decided
by the same pure check, asserted in tests/unit/test_hooks_preflight.py.)
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from computedomains.sim import controlplane, tools
from tests.support import migration

pytestmark = pytest.mark.cluster


@pytest.fixture
def without_resource_v1(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """An API server (and etcd) alone, resource.k8s.io/v1 off; yields its admin kubeconfig."""
    binaries = controlplane.Binaries.from_tools(
        tools.ToolBox.from_env().ensure_all(["etcd", "kubernetes", "kwok"])
    )
    plane = controlplane.ControlPlane(
        directory=tmp_path / "control-plane", binaries=binaries, name="no-v1", log=lambda _: None
    )
    try:
        # Never ready: its own DRA informers cannot sync without v1. It answers all the same.
        plane.start_api_server(
            extra_args=("--runtime-config=resource.k8s.io/v1=false",), health="livez"
        )
        yield plane.admin_kubeconfig
    finally:
        plane.stop()


def test_preflight_refuses_without_resource_k8s_io_v1(without_resource_v1: pathlib.Path) -> None:
    done = migration.run_hook(
        migration.hook(
            without_resource_v1,
            "preflight",
            "--namespace",
            "default",
            "--release",
            "cd",
            "--fabric-backend",
            "fake",
        ),
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "resource.k8s.io/v1 is not served" in done.stdout, done.stdout
    assert "--runtime-config=resource.k8s.io/v1=true" in done.stdout, done.stdout
    assert "refused" in done.stdout.splitlines()[-1], done.stdout
