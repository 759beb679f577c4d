"""The controller's leader-only writes go through one client fenced by the lease."""

from __future__ import annotations

import pathlib

import pytest

from cdsim import kubeconfig
from computedomains.controller import config, manager
from computedomains.kube import events
from tests.support.answering import serving, url

DOMAIN = events.ObjectRef("ComputeDomain", "cd", "ns", "uid-1", api_version="x/v1")


def _controller(tmp_path: pathlib.Path, server_url: str) -> manager.Controller:
    path = kubeconfig.write(tmp_path / "kubeconfig", cluster_name="c",
                            cluster={"server": server_url}, user="u",
                            credentials={"token": "t"})  # fmt: skip
    # Turns off: leading starts with one write of the turn, which this test watches.
    cfg = config.ControllerConfig(namespace="drv", kubeconfig=path, pod_name="p",
                                  placement_turns=False)  # fmt: skip
    return manager.Controller(cfg)


@pytest.mark.parametrize("what", ["event", "turn"])
def test_a_write_refused_with_429_is_not_sent_again_once_the_lease_is_lost(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    leading = [True]
    with serving((429, {"Retry-After": "0"}), (201, {})) as server:
        controller = _controller(tmp_path, url(server))
        monkeypatch.setattr(controller.elector, "holds_lease", lambda: leading[0])
        # The lease is lost while the refused write waits to be sent again.
        controller.api.observer = lambda method, path, status: leading.__setitem__(0, False)
        if what == "event":
            controller.recorder.start()
            controller.recorder.emit(DOMAIN, reason="Test", message="written once at most")
            assert controller.recorder.flush(30)
            controller.recorder.close(30)
        else:
            controller.turns.start()
        assert server.seen == ["POST" if what == "event" else "PUT"]
    assert not leading[0]
