"""The kubelet plugin's fabric re-check flags: node-init's check, its settings built once."""

from __future__ import annotations

import pathlib
import threading

import pytest

from computedomains import flags
from computedomains.fabric import discovery
from computedomains.kube import client as kube_client
from computedomains.kube import retry
from computedomains.kubeletplugin import config
from computedomains.nodeinit import run as nodeinit_run
from computedomains.nodeinit import settings as nodeinit_settings


def _parse(*argv: str) -> config.PluginConfig:
    return flags.parse(config.PluginConfig, ["--node-name=n1", *argv])


def test_no_re_check_unless_an_interval_is_given() -> None:
    assert _parse().fabric_recheck is None
    assert _parse("--fabric-recheck-interval=0").fabric_recheck is None


def test_the_re_check_judges_with_the_plugins_paths_and_grace() -> None:
    cfg = _parse(
        "--fabric-recheck-interval=30", "--driver-root=/run/nvidia/driver",
        "--proc-root=/host/proc", "--fabric-verdict-file=/run/v.json", "--fault-grace-checks=4",
        "--transitional-grace=90", "--taint-broken", "--namespace=drv",
    )  # fmt: skip
    recheck = cfg.fabric_recheck
    assert recheck is not None
    assert (recheck.node_name, recheck.watch, recheck.recheck_interval) == ("n1", True, 30.0)
    assert recheck.namespace == cfg.namespace == "drv"  # where it reads the membership record
    assert recheck.discovery.driver_root == pathlib.Path("/run/nvidia/driver")
    assert recheck.discovery.proc_root == cfg.proc_root == pathlib.Path("/host/proc")
    assert recheck.verdict_file == cfg.fabric_verdict_file == pathlib.Path("/run/v.json")
    assert recheck.fault_grace == cfg.fault_grace and recheck.fault_grace.checks == 4
    assert (recheck.transitional_grace, recheck.taint_broken) == (90.0, True)


def test_a_negative_interval_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse("--fabric-recheck-interval=-1")
    assert "--fabric-recheck-interval: must not be negative, got -1" in capsys.readouterr().err


def test_the_re_check_thread_starts_over_after_a_failure_until_stopped(
    tmp_path: pathlib.Path,
) -> None:
    recheck = nodeinit_settings.Settings(
        node_name="n1",
        kubeconfig=tmp_path / "missing-kubeconfig",  # every start fails
        discovery=discovery.DiscoverySettings(),
        watch=True,
        recheck_interval=0.01,
    )
    stop = threading.Event()
    failures: list[str] = []
    lines: list[str] = []

    def warn(line: str) -> None:
        failures.append(line)
        if len(failures) == 2:
            stop.set()

    nodeinit_run.watch(recheck, stop=stop, log=lines.append, warn=warn)
    assert len(failures) == 2, failures
    assert all(f.startswith("check failed, starting over in 0.01s") for f in failures)
    assert "FileNotFoundError" in failures[0]
    assert lines == []  # failures go to warn, not to the info log


def test_the_re_check_uses_the_client_it_is_given(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin passes its own client: one process, one request budget."""

    def no_second_client(*args: object) -> None:
        raise AssertionError("the re-check made a client of its own")

    monkeypatch.setattr(kube_client, "connect", no_second_client)
    given = kube_client.Client("https://127.0.0.1:1", policy=retry.Policy(attempts=1))
    recheck = nodeinit_settings.Settings(
        node_name="n1",
        # No NVML there: the check fails and publishes that, through the given client.
        discovery=discovery.DiscoverySettings(driver_root=tmp_path, proc_root=tmp_path),
        verdict_file=tmp_path / "verdict.json",
        watch=True,
        recheck_interval=0.01,
    )
    stop = threading.Event()
    failures: list[str] = []

    def warn(line: str) -> None:
        failures.append(line)
        stop.set()

    nodeinit_run.watch(recheck, stop=stop, log=lambda _: None, warn=warn, api=given)
    # It got as far as the API with the given client (nothing listens there).
    assert failures and "AssertionError" not in failures[0], failures
