"""At ``-v 1`` the IMEX agent logs what it decided to run for the node, and from what."""

from __future__ import annotations

import logging
import math

import pytest

from computedomains.imexagent import agent, decide, render

NODE, PEER = "node-a", "node-b"
CLIQUE = "abc.1"
NO_GATES = decide.Gates(start_not_before=0.0, reload_not_before=0.0)


def _snapshot(domain: str, *peers: decide.Daemon) -> decide.Snapshot:
    mine = decide.Daemon(NODE, "10.0.0.1", 0)
    return decide.Snapshot(
        node_name=NODE, pod_ip="10.0.0.1", max_nodes=4, clique_id=CLIQUE, fabric_note="",
        domain_uid=domain, daemons=(mine, *peers),
    )  # fmt: skip


def _running(domain: str) -> decide.Running:
    return decide.Running(domain, render.host_entries(domain, {0: "10.0.0.1"}, 4))


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("IMEX on node")]


def test_the_step_names_node_domains_peers_and_the_action(
    caplog: pytest.LogCaptureFixture,
) -> None:
    peer = decide.Daemon(PEER, "10.0.0.2", 1)
    with caplog.at_level(logging.DEBUG, logger="computedomains"):
        _, restart = agent.next_step(_snapshot("cd-2"), _running("cd-1"), NO_GATES, now=5.0)
        _, reload = agent.next_step(_snapshot("cd-1", peer), _running("cd-1"), NO_GATES, now=5.0)
        _, keep = agent.next_step(_snapshot("cd-1"), _running("cd-1"), NO_GATES, now=5.0)
        gated = decide.Gates(start_not_before=7.5, reload_not_before=0.0)
        _, start = agent.next_step(_snapshot("cd-1"), None, gated, now=5.0)
    assert (restart.action, reload.action, keep.action) == (
        decide.Action.RESTART,
        decide.Action.RELOAD,
        decide.Action.NONE,
    )
    assert start == decide.Step(decide.Action.START, 7.5)
    member = f"target member, domain cd-1 (slot 0 of clique {CLIQUE}, "
    assert _lines(caplog) == [
        f"IMEX on node {NODE}: restart now; target member, domain cd-2 (slot 0 of clique "
        f"{CLIQUE}, 0 peer(s)); running for domain cd-1; peers changed",
        f"IMEX on node {NODE}: reload now; {member}1 peer(s)); running for domain cd-1; "
        "peers changed",
        f"IMEX on node {NODE}: start in 2.5s; {member}0 peer(s)); running for domain none; peers -",
    ]
    assert math.isinf(keep.at)

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="computedomains"):
        agent.next_step(_snapshot("cd-2"), _running("cd-1"), NO_GATES, now=5.0)
    assert _lines(caplog) == []
