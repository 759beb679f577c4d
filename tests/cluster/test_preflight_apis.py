"""Preflight on API servers this release cannot run on: refused, and says how.

Real kube-apiservers, not faked discovery answers: one with resource.k8s.io/v1 switched off
(`--runtime-config`), and one emulating Kubernetes 1.33 (`--emulated-version`, KEP-4330), which
serves exactly 1.33's APIs and features and reports that version in `/version`.
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from tests.support import clusters, migration

pytestmark = pytest.mark.cluster


def preflight(kubeconfig: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """The preflight hook run against ``kubeconfig``'s API server, to its end."""
    return migration.run_hook(
        migration.hook(
            kubeconfig,
            "preflight",
            "--namespace",
            "default",
            "--release",
            "cd",
        ),
        timeout=120,
    )


def test_preflight_refuses_without_resource_k8s_io_v1(tmp_path: pathlib.Path) -> None:
    # Never ready: its own DRA informers cannot sync without v1. It answers all the same.
    off = "--runtime-config=resource.k8s.io/v1=false"
    with clusters.api_server_alone(tmp_path, off, health="livez") as plane:
        done = preflight(plane.admin_kubeconfig)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "resource.k8s.io/v1 is not served" in done.stdout, done.stdout
    assert "--runtime-config=resource.k8s.io/v1=true" in done.stdout, done.stdout
    assert "refused" in done.stdout.splitlines()[-1], done.stdout


def test_preflight_refuses_a_too_old_kubernetes(tmp_path: pathlib.Path) -> None:
    emulate = ("--emulated-version=kube=1.33", "--min-compatibility-version=kube=1.33")
    with clusters.api_server_alone(tmp_path, *emulate, health="livez") as plane:
        done = preflight(plane.admin_kubeconfig)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "emulating 1.33 is too old: this release needs 1.34 or newer" in done.stdout, done.stdout
    assert "upgrade the control plane to Kubernetes 1.34 or newer" in done.stdout, done.stdout
    # 1.33 has no resource.k8s.io/v1 either: both are reported, in one run.
    assert "resource.k8s.io/v1 is not served" in done.stdout, done.stdout
    assert "refused" in done.stdout.splitlines()[-1], done.stdout
