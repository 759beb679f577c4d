"""What the agent publishes: the status file with its heartbeat, the pod report in one patch."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import pathlib
from typing import Any, cast

import pytest

from computedomains import flags
from computedomains.api import constants, imex
from computedomains.imexagent import config, decide, report
from computedomains.kube import client

T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
RUN = imex.AgentStart("pod-1", "0123456789abcdef", T0)
READY = decide.Report(imex.State.READY, "d1", imex.Reason.READY, "READY")
STARTING = decide.Report(imex.State.NOT_READY, "d2", imex.Reason.STARTING, "starting IMEX")
POD = "/api/v1/namespaces/ns/pods/agent-1"


@dataclasses.dataclass
class PodApi:
    """The agent's own pod and the ``pods/status`` patches sent to it; ``down``: refuses all."""

    patches: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    down: bool = False

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        assert path == POD
        if self.down:
            raise client.ApiError(503, "ServiceUnavailable", "down")
        return {"metadata": {"uid": "pod-1"}, "status": {"conditions": []}}

    def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert path == f"{POD}/status"
        self.patches.append(copy.deepcopy(body))
        return body


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now


def _config(tmp_path: pathlib.Path, *argv: str) -> config.AgentConfig:
    return flags.parse(config.AgentConfig, [
        "--node-name=n1", "--namespace=ns", "--pod-name=agent-1", "--pod-uid=pod-1",
        "--pod-ip=127.0.0.5", f"--imex-dir={tmp_path}", *argv,
    ])  # fmt: skip


def _reporter(tmp_path: pathlib.Path, api: PodApi, wall: Wall) -> report.Reporter:
    cfg = _config(tmp_path, "--heartbeat-interval=5")
    return report.Reporter(cast(client.Client, api), cfg, start=RUN, wall=wall)


def test_the_file_beats_while_nothing_changes_and_the_condition_is_written_once(
    tmp_path: pathlib.Path,
) -> None:
    api, wall = PodApi(), Wall()
    reporter = _reporter(tmp_path, api, wall)
    assert reporter.publish(READY, now=100.0) == 105.0, "called again at the next heartbeat"
    first = imex.read_status(tmp_path / "status.json")
    assert first is not None and first.heartbeat_at == T0 and first.agent == RUN

    wall.now = T0 + datetime.timedelta(seconds=2)
    assert reporter.publish(READY, now=102.0) == 105.0
    assert imex.read_status(tmp_path / "status.json") == first, "no rewrite before it is due"

    wall.now = T0 + datetime.timedelta(seconds=5)
    assert reporter.publish(READY, now=105.0) == 110.0
    beat = imex.read_status(tmp_path / "status.json")
    assert beat is not None and beat.heartbeat_at == wall.now
    assert beat.updated_at == first.updated_at, "a heartbeat is no change of the report"
    assert len(api.patches) == 1, "the condition has no heartbeat"


def test_a_new_report_moves_file_and_pod_together(tmp_path: pathlib.Path) -> None:
    api, wall = PodApi(), Wall()
    reporter = _reporter(tmp_path, api, wall)
    reporter.publish(READY, now=0.0)
    wall.now = T0 + datetime.timedelta(seconds=1)
    reporter.publish(STARTING, now=1.0)
    status = imex.read_status(tmp_path / "status.json")
    assert status is not None
    assert (status.domain_uid, status.state, status.updated_at) == ("d2", imex.State.NOT_READY,
                                                                    wall.now)  # fmt: skip
    assert status.message == "starting IMEX"
    patch = api.patches[-1]
    assert patch["metadata"] == {
        "uid": "pod-1",
        "annotations": {imex.DOMAIN_ANNOTATION: "d2", imex.START_ANNOTATION: RUN.annotation()},
    }
    (condition,) = patch["status"]["conditions"]
    assert condition["type"] == constants.IMEX_READY_CONDITION
    assert (condition["status"], condition["reason"]) == ("False", "Starting")
    assert condition["message"] == "domain d2: starting IMEX"


def test_a_refused_condition_write_is_retried_while_the_file_keeps_beating(
    tmp_path: pathlib.Path,
) -> None:
    api, wall = PodApi(down=True), Wall()
    reporter = _reporter(tmp_path, api, wall)
    assert reporter.publish(READY, now=0.0) == 1.0, "first retry after 1 s"
    assert reporter.publish(READY, now=1.0) == 3.0, "then 2 s"
    assert imex.read_status(tmp_path / "status.json") is not None
    api.down = False
    assert reporter.publish(READY, now=3.0) == 5.0, "written: only the heartbeat is due"
    assert len(api.patches) == 1


def test_the_heartbeat_interval_is_a_setting_with_the_contracts_default(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _config(tmp_path).heartbeat_interval == imex.HEARTBEAT_INTERVAL
    with pytest.raises(SystemExit):
        _config(tmp_path, "--heartbeat-interval=0")
    assert "--heartbeat-interval: must be positive, got 0" in capsys.readouterr().err
    assert _config(tmp_path, "--heartbeat-interval=0.5").heartbeat_interval == 0.5
