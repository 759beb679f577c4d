"""The agent's pure decisions: membership, supervisor action, report."""

from __future__ import annotations

import dataclasses
import math

import pytest

from computedomains.api.imex import Reason
from computedomains.api.imex import State as ImexState
from computedomains.imexagent import decide, render
from computedomains.imexagent.decide import Action, Health, Mode

ME, PEER, OTHER = "node-a", "node-b", "node-c"
D1 = "11111111-aaaa-bbbb-cccc-000000000001"
D2 = "22222222-aaaa-bbbb-cccc-000000000002"
CLIQUE = "386b0bf3-73f0-5054-949b-d5b6149cb09f.32766"
MY_IP, PEER_IP, OTHER_IP = "127.33.0.5", "127.33.1.5", "127.33.2.5"


def snapshot(
    *,
    domain: str = D1,
    clique: str = CLIQUE,
    daemons: tuple[decide.Daemon, ...] | None = (),
    max_nodes: int = 4,
) -> decide.Snapshot:
    return decide.Snapshot(
        node_name=ME,
        pod_ip=MY_IP,
        max_nodes=max_nodes,
        clique_id=clique,
        fabric_note="fabric verdict no-fabric: no GPU reports NVLink fabric support",
        domain_uid=domain,
        daemons=daemons,
    )


def daemon(name: str, ip: str, index: int | None) -> decide.Daemon:
    return decide.Daemon(node_name=name, address=ip, index=index)


def hosts(
    domain: str, addresses: dict[int, str], max_nodes: int = 4
) -> tuple[render.HostEntry, ...]:
    return render.host_entries(domain, addresses, max_nodes)


@pytest.mark.parametrize(
    ("snap", "mode", "slot", "addresses"),
    [
        pytest.param(snapshot(clique=""), Mode.IDLE, None, None, id="no clique: idle"),
        pytest.param(snapshot(domain=""), Mode.OUT, None, None, id="no domain label: out"),
        pytest.param(snapshot(daemons=None), Mode.WAITING, None, None, id="no clique object"),
        pytest.param(
            snapshot(daemons=(daemon(PEER, PEER_IP, 0),)), Mode.WAITING, None, None,
            id="not listed yet",
        ),
        pytest.param(
            snapshot(daemons=(daemon(ME, MY_IP, None),)), Mode.WAITING, None, None,
            id="listed without a slot (clique full)",
        ),
        pytest.param(
            snapshot(daemons=(daemon(ME, MY_IP, 4),)), Mode.WAITING, None, None,
            id="slot beyond the maximum",
        ),
        pytest.param(
            snapshot(daemons=(daemon(ME, "", 2),)), Mode.MEMBER, 2, {2: MY_IP},
            id="own address known before the controller saw it",
        ),
        pytest.param(
            snapshot(daemons=(daemon(ME, MY_IP, 1), daemon(PEER, PEER_IP, 0),
                              daemon(OTHER, "", 3))),
            Mode.MEMBER, 1, {0: PEER_IP, 1: MY_IP},
            id="peer without an address stays on the sentinel",
        ),
        pytest.param(
            snapshot(daemons=(daemon(ME, MY_IP, 0), daemon(PEER, PEER_IP, 9),
                              daemon(OTHER, OTHER_IP, None))),
            Mode.MEMBER, 0, {0: MY_IP},
            id="peers with invalid slots left out",
        ),
        pytest.param(
            snapshot(daemons=(daemon(ME, MY_IP, 0), daemon(PEER, f"{PEER_IP} evil\n1.2.3.4", 1),
                              daemon(OTHER, "not-an-ip", 2))),
            Mode.MEMBER, 0, {0: MY_IP},
            id="addresses that are no IP stay on the sentinel (found by generated input)",
        ),
    ],
)  # fmt: skip
def test_target(
    snap: decide.Snapshot, mode: Mode, slot: int | None, addresses: dict[int, str] | None
) -> None:
    target = decide.target(snap)
    assert target.mode == mode
    if slot is None:
        assert target.membership is None
        return
    assert addresses is not None
    assert target.membership == decide.Membership(snap.domain_uid, slot, hosts(D1, addresses))


MEMBER = decide.target(snapshot(daemons=(daemon(ME, MY_IP, 0), daemon(PEER, PEER_IP, 1))))
ALONE = decide.target(snapshot(daemons=(daemon(ME, MY_IP, 0),)))
OTHER_DOMAIN = decide.target(snapshot(domain=D2, daemons=(daemon(ME, MY_IP, 0),)))
OUT = decide.target(snapshot(domain=""))
IDLE = decide.target(snapshot(clique=""))
WAITING_D1 = decide.target(snapshot(daemons=None))
WAITING_D2 = decide.target(snapshot(domain=D2, daemons=None))
assert MEMBER.membership is not None
RUNNING = decide.Running(D1, MEMBER.membership.hosts)
OPEN = decide.Gates(start_not_before=-math.inf, reload_not_before=-math.inf)
NOW = 100.0


@pytest.mark.parametrize(
    ("target", "running", "gates", "expected"),
    [
        pytest.param(MEMBER, None, OPEN, decide.Step(Action.START, NOW), id="slot: start"),
        pytest.param(
            MEMBER, None, dataclasses.replace(OPEN, start_not_before=104.0),
            decide.Step(Action.START, 104.0), id="start after the crash backoff",
        ),
        pytest.param(MEMBER, RUNNING, OPEN, decide.Step(Action.NONE, math.inf), id="in sync"),
        pytest.param(ALONE, RUNNING, OPEN, decide.Step(Action.RELOAD, NOW), id="peer left: reload"),
        pytest.param(
            ALONE, RUNNING, dataclasses.replace(OPEN, reload_not_before=103.0),
            decide.Step(Action.RELOAD, 103.0), id="reload waits for IMEX's rate limit",
        ),
        pytest.param(OTHER_DOMAIN, RUNNING, OPEN, decide.Step(Action.RESTART, NOW),
                     id="domain changed: restart"),
        pytest.param(OUT, RUNNING, OPEN, decide.Step(Action.STOP, NOW), id="left: stop"),
        pytest.param(IDLE, RUNNING, OPEN, decide.Step(Action.STOP, NOW), id="fabric gone: stop"),
        pytest.param(OUT, None, OPEN, decide.Step(Action.NONE, math.inf), id="out, not running"),
        pytest.param(WAITING_D1, RUNNING, OPEN, decide.Step(Action.NONE, math.inf),
                     id="slot briefly missing: keep running"),
        pytest.param(WAITING_D2, RUNNING, OPEN, decide.Step(Action.STOP, NOW),
                     id="waiting in another domain: stop the old one"),
    ],
)  # fmt: skip
def test_step(
    target: decide.Target,
    running: decide.Running | None,
    gates: decide.Gates,
    expected: decide.Step,
) -> None:
    assert decide.step(target, running, gates, now=NOW) == expected


def observed(health: Health, domain: str = D1, text: str = "") -> decide.Observed:
    return decide.Observed(health=health, domain_uid=domain, text=text)


BIND_ERROR = "nvidia-imex exited with code 1: Failed to bind to 127.33.0.5:50000"


@pytest.mark.parametrize(
    ("target", "seen", "expected"),
    [
        pytest.param(
            IDLE, observed(Health.NOT_RUNNING, ""),
            (ImexState.STOPPED, "", Reason.IDLE, "idle: fabric verdict no-fabric"), id="idle",
        ),
        pytest.param(
            OUT, observed(Health.NOT_RUNNING, ""),
            (ImexState.STOPPED, "", Reason.STOPPED, "the node is in no ComputeDomain"),
            id="never in a domain",
        ),
        pytest.param(
            OUT, observed(Health.NOT_RUNNING, D1),
            (ImexState.STOPPED, D1, Reason.STOPPED, "IMEX stopped: the node left the domain"),
            id="left a domain",
        ),
        pytest.param(
            WAITING_D1, observed(Health.NOT_RUNNING, ""),
            (ImexState.NOT_READY, D1, Reason.STARTING, "waiting for a slot in clique"),
            id="waiting for a slot",
        ),
        pytest.param(
            WAITING_D1, observed(Health.READY, D1, "READY"),
            (ImexState.READY, D1, Reason.READY, "READY"), id="slot briefly missing, IMEX READY",
        ),
        pytest.param(
            MEMBER, observed(Health.STARTING, D1, "waiting for nvidia-imex"),
            (ImexState.NOT_READY, D1, Reason.STARTING, "waiting for nvidia-imex"), id="starting",
        ),
        pytest.param(
            MEMBER, observed(Health.READY, D1, "READY"),
            (ImexState.READY, D1, Reason.READY, "READY"), id="ready",
        ),
        pytest.param(
            MEMBER, observed(Health.FAILED, D1, BIND_ERROR),
            (ImexState.FAILED, D1, Reason.FAILED, BIND_ERROR), id="failed with IMEX's text",
        ),
        pytest.param(
            OTHER_DOMAIN, observed(Health.READY, D1, "READY"),
            (ImexState.NOT_READY, D2, Reason.STARTING, "starting IMEX"),
            id="still the old domain's IMEX",
        ),
    ],
)  # fmt: skip
def test_report(
    target: decide.Target, seen: decide.Observed, expected: tuple[ImexState, str, Reason, str]
) -> None:
    report = decide.report(target, seen)
    state, domain, reason, text = expected
    assert (report.state, report.domain_uid, report.reason) == (state, domain, reason)
    assert report.text.startswith(text)
    assert report.ready == (state == ImexState.READY)
    assert report.message == f"domain {domain}: {report.text}"
