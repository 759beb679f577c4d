"""The IMEX contract: the status file and its freshness rule, the pod condition and annotations."""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
from typing import Any

import pytest

from computedomains import nodefiles
from computedomains.api import constants, imex

T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, 250_000, datetime.UTC)
RUN = imex.AgentStart("pod-1", "0123456789abcdef", T0)


def _seconds(s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=s)


def _status(*, heartbeat: datetime.datetime | None = T0, **fields: Any) -> imex.ImexStatus:
    base: dict[str, Any] = {
        "node": "n1", "domain_uid": "d1", "state": imex.State.READY, "message": "",
        "updated_at": T0, "heartbeat_at": heartbeat, "agent": RUN,
    }  # fmt: skip
    return imex.ImexStatus(**(base | fields))


# -- the agent's start identity ----------------------------------------------------------


def test_a_start_identity_round_trips_through_its_annotation() -> None:
    assert imex.AgentStart.from_annotation(RUN.annotation()) == RUN
    fresh = imex.AgentStart.new("pod-1", now=T0)
    assert fresh.started_at == T0 and fresh.pod_uid == "pod-1"
    assert fresh.start_id != imex.AgentStart.new("pod-1", now=T0).start_id, "one ID per run"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not json",
        "[]",
        '{"podUID": "p", "startedAt": "2026-03-01T12:00:00Z"}',
        '{"podUID": "p", "startID": "x", "startedAt": "yesterday"}',
        '{"podUID": "p", "startID": "x", "startedAt": "2026-03-01T12:00:00"}',
    ],
    ids=["empty", "not json", "not an object", "no start ID", "bad time", "no time zone"],
)
def test_an_unreadable_start_annotation_names_no_run(value: str) -> None:
    assert imex.AgentStart.from_annotation(value) is None


# -- the status file ---------------------------------------------------------------------


def test_the_status_file_round_trips(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "status.json"
    written = _status(state=imex.State.FAILED, message="bind failed")
    imex.write_status(path, written)
    assert imex.read_status(path) == written
    document = nodefiles.read_json(path, kind=constants.IMEX_STATUS_KIND)
    assert document is not None and document["agent"]["startID"] == RUN.start_id
    assert imex.read_status(tmp_path / "absent.json") is None


def test_a_legacy_agents_status_parses_and_is_believed_as_it_stands(
    tmp_path: pathlib.Path,
) -> None:
    """An agent from before heartbeats (chart 0.1.0) writes no heartbeat and no identity."""
    path = tmp_path / "status.json"
    old = {"node": "n1", "domainUID": "d1", "state": "READY", "message": "", "updatedAt": ""}
    nodefiles.write_json(path, nodefiles.document(constants.IMEX_STATUS_KIND, old))
    status = imex.read_status(path)
    assert status is not None and status.heartbeat_at is None and status.agent is None
    assert imex.staleness(status, now=T0, max_age=30) == ""


def test_an_unknown_state_makes_the_file_corrupt(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "status.json"
    nodefiles.write_json(path, nodefiles.document(constants.IMEX_STATUS_KIND, {"state": "GOOD"}))
    with pytest.raises(nodefiles.CorruptNodeFile, match="unknown IMEX state 'GOOD'"):
        imex.read_status(path)


@pytest.mark.parametrize(
    ("heartbeat", "now", "stale_words"),
    [
        pytest.param(T0, T0, "", id="just written"),
        pytest.param(T0, T0 + _seconds(30), "", id="exactly the bound old"),
        pytest.param(T0, T0 + _seconds(30.5), "last heartbeat was 30s ago", id="past the bound"),
        pytest.param(T0, T0 + _seconds(600), "600s ago", id="long dead"),
        pytest.param(T0 + _seconds(5), T0, "", id="a little ahead (a clock step)"),
        pytest.param(T0 + _seconds(60), T0, "60s in the future", id="far in the future"),
        pytest.param(None, T0, "names its agent but has no heartbeat", id="no heartbeat"),
    ],
)  # fmt: skip
def test_freshness_rule(
    heartbeat: datetime.datetime | None, now: datetime.datetime, stale_words: str
) -> None:
    why = imex.staleness(_status(heartbeat=heartbeat), now=now, max_age=30)
    assert (why == "") == (stale_words == "")
    assert stale_words in why


# -- the pod condition and its annotations -----------------------------------------------


def _applied(patch: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` after the API server applied the strategic merge ``patch`` (conditions by type)."""
    annotations = {**pod["metadata"].get("annotations", {}), **patch["metadata"]["annotations"]}
    new = {c["type"]: c for c in patch["status"]["conditions"]}
    kept = [c for c in pod["status"].get("conditions", []) if c["type"] not in new]
    return {
        "metadata": {**pod["metadata"], "annotations": annotations},
        "status": {**pod["status"], "conditions": kept + list(new.values())},
    }


REPORT = imex.PodReport(
    ready=True, reason=imex.Reason.READY, message="domain d1: READY", domain_uid="d1", agent=RUN
)


def test_one_patch_carries_condition_domain_and_run_and_reads_back_the_same() -> None:
    pod: dict[str, Any] = {"metadata": {"uid": "pod-1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}  # fmt: skip
    patch = imex.status_patch(REPORT, uid="pod-1", conditions=[], now=T0)
    assert patch["metadata"]["uid"] == "pod-1", "never lands on a newer pod of the same name"
    assert patch["metadata"]["annotations"] == {
        imex.DOMAIN_ANNOTATION: "d1",
        imex.START_ANNOTATION: RUN.annotation(),
    }
    applied = _applied(patch, pod)
    assert imex.pod_report(applied) == dataclasses.replace(
        REPORT, probed_at=T0.replace(microsecond=0)
    )
    assert [c["type"] for c in applied["status"]["conditions"]] == [
        "Ready",
        constants.IMEX_READY_CONDITION,
    ]
    assert imex.pod_report(pod) is None, "no report before the agent wrote one"
    assert "uid" not in imex.status_patch(REPORT, uid="", conditions=[], now=T0)["metadata"]


@pytest.mark.parametrize(
    ("before", "ready", "transition"),
    [
        pytest.param("True", True, "2026-01-01T00:00:00Z", id="same status keeps the time"),
        pytest.param("False", True, "2026-03-01T12:00:00Z", id="a change moves it"),
        pytest.param(None, False, "2026-03-01T12:00:00Z", id="first write"),
    ],
)
def test_the_transition_time_moves_only_with_the_status(
    before: str | None, ready: bool, transition: str
) -> None:
    conditions = []
    if before is not None:
        conditions = [{"type": constants.IMEX_READY_CONDITION, "status": before,
                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]  # fmt: skip
    report = imex.PodReport(ready, imex.Reason.STARTING, "", "d1", RUN)
    (condition,) = imex.status_patch(report, uid="", conditions=conditions, now=T0)["status"][
        "conditions"
    ]
    assert condition["status"] == ("True" if ready else "False")
    assert condition["lastTransitionTime"] == transition
    assert condition["lastProbeTime"] == "2026-03-01T12:00:00Z"


def _pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"containerStatuses": list(containers)}}


STARTED = {"running": {"startedAt": "2026-03-01T12:00:00Z"}}


@pytest.mark.parametrize(
    ("pod", "since"),
    [
        pytest.param(
            _pod({"name": "imex-agent", "state": STARTED}),
            datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC), id="running",
        ),
        pytest.param(
            _pod({"name": "imex-agent", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}),
            None, id="backing off",
        ),
        pytest.param(
            _pod({"name": "imex-agent", "state": {"terminated": {"exitCode": 137}}}),
            None, id="terminated",
        ),
        pytest.param(
            _pod({"name": "sidecar", "state": STARTED}),
            None, id="another container",
        ),
        pytest.param({}, None, id="no status"),
    ],
)  # fmt: skip
def test_running_since(pod: dict[str, Any], since: datetime.datetime | None) -> None:
    assert imex.running_since(pod) == since


CONTAINER = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
"""A container ``startedAt``: whole seconds, rounded down, as the kubelet writes it."""


@pytest.mark.parametrize(
    ("run_started", "since", "current"),
    [
        pytest.param(T0, CONTAINER, True, id="this run, same second as the container"),
        pytest.param(T0 + _seconds(2), CONTAINER, True, id="this run, slow start"),
        pytest.param(CONTAINER - _seconds(40), CONTAINER, False, id="a run before the restart"),
        pytest.param(T0, None, False, id="the container is not running"),
    ],
)  # fmt: skip
def test_a_report_is_current_only_from_the_run_in_the_running_container(
    run_started: datetime.datetime, since: datetime.datetime | None, current: bool
) -> None:
    report = imex.PodReport(
        True, imex.Reason.READY, "", "d1", imex.AgentStart("p", "x", run_started)
    )
    assert imex.current(report, since=since) is current
    assert not imex.current(imex.PodReport(True, "Ready", "", "d1", None), since=CONTAINER)


@pytest.mark.parametrize(
    ("probed", "since", "current"),
    [
        pytest.param(CONTAINER, CONTAINER, True, id="probed as the container started"),
        pytest.param(CONTAINER + _seconds(9), CONTAINER, True, id="probed by this run"),
        pytest.param(CONTAINER - _seconds(1), CONTAINER, False, id="probed by an earlier run"),
        pytest.param(None, CONTAINER, False, id="never probed"),
        pytest.param(CONTAINER, None, False, id="the container is not running"),
    ],
)  # fmt: skip
def test_a_legacy_report_is_current_when_probed_by_the_running_container(
    probed: datetime.datetime | None, since: datetime.datetime | None, current: bool
) -> None:
    report = imex.PodReport(True, "Ready", "", "", None, probed_at=probed, legacy=True)
    assert imex.current(report, since=since) is current


def test_a_pod_without_the_domain_annotation_is_a_legacy_report() -> None:
    condition = {
        "type": constants.IMEX_READY_CONDITION, "status": "True", "reason": "Ready",
        "message": "domain d1: READY", "lastProbeTime": "2026-03-01T12:00:05Z",
    }  # fmt: skip
    report = imex.pod_report({"metadata": {}, "status": {"conditions": [condition]}})
    assert report is not None and report.legacy and report.domain_uid == ""
    assert report.probed_at == CONTAINER + _seconds(5)
    patch = imex.status_patch(REPORT, uid="", conditions=[], now=T0)
    current = imex.pod_report(_applied(patch, {"metadata": {}, "status": {}}))
    assert current is not None and not current.legacy and current.domain_uid == "d1"
