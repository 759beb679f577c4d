"""The IMEX agent with real processes: domains form, shrink, move, crash and fail for real.

Agents run for simulated nodes with the flags the chart will pass and a pod of their own;
the fake IMEX they start binds the pods' loopback IPs and connects to its peers. The tests
play the controller: they write the cliques, which name the members (the record agents follow).
Only rack 0 nodes n05-n09 and rack 1 nodes n14-n17 are used; other tests own the rest.
"""

from __future__ import annotations

import os
import pathlib
import signal
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.imexagent import render
from tests.support import imexagent, plugin
from tests.support.imexagent import Agent

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

StartAgents = Callable[..., list[Agent]]


@pytest.fixture
def agents(
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> Iterator[StartAgents]:
    """Start agents for the given nodes; stops them afterwards."""
    plugin.install_crds(api)
    started: list[Agent] = []

    def start(*nodes: str, verdict: str = "healthy", **env: str) -> list[Agent]:
        batch = [Agent(sim, api, namespace, node, tmp_path / "logs") for node in nodes]
        for agent in batch:
            agent.write_verdict(verdict)
            agent.create_pod()
        for agent in batch:
            agent.start(extra_env=env)
            started.append(agent)
        return batch

    yield start
    for agent in started:
        agent.stop()
        (agent.imex_dir / "fail").unlink(missing_ok=True)


def domain_uid() -> str:
    return str(uuid.uuid4())


def connected_peers(agent: Agent) -> set[str]:
    return {row["name"] for row in agent.imex_nodes()["nodes"] if row["state"] == "CONNECTED"}


def wait_connected(agent: Agent, names: set[str]) -> None:
    waiting.until(
        f"{agent.node}'s IMEX to be connected to exactly {sorted(names)}",
        lambda: connected_peers(agent) == names,
        timeout=60,
        retry_on=(OSError, ValueError),
    )


def wait_peer_state(agent: Agent, slot: int, state: str) -> None:
    waiting.until(
        f"{agent.node}'s IMEX to see slot {slot} {state}",
        lambda: agent.imex_nodes()["nodes"][slot]["state"] == state,
        timeout=60,
        retry_on=(OSError, ValueError),
    )


def join(api: client.ApiClient, namespace: str, domain: str, members: list[Agent]) -> None:
    """List the members in the domain's clique, slots in order, and name them members."""
    imexagent.write_clique(api, namespace, domain, members)


def test_domain_forms_then_a_member_leaves_and_peers_reload(
    agents: StartAgents, api: client.ApiClient, namespace: str
) -> None:
    members = agents("gb200-r0-n05", "gb200-r0-n06", "gb200-r0-n07", "gb200-r0-n08")
    for agent in members:
        agent.wait_state("STOPPED", "")
        agent.wait_condition("False", "Stopped")

    domain = domain_uid()
    join(api, namespace, domain, members)
    names = [render.slot_name(domain, slot) for slot in range(len(members))]
    for agent in members:
        assert agent.wait_state("READY", domain)["message"] == ""
        condition = agent.wait_condition("True", "Ready")
        assert condition.message == f"domain {domain}: READY"
    for slot, agent in enumerate(members):
        wait_connected(agent, set(names) - {names[slot]})
        hosts = agent.hosts_file.read_text()
        assert imexagent.KUBELET_LINE in hosts
        assert f"{members[1].pod_ip}\t{names[1]}" in hosts
        assert f"{render.SENTINEL_ADDRESS}\t{render.slot_name(domain, 17)}" in hosts
        nodes_cfg = (agent.imex_dir / "nodes.cfg").read_text().split()
        assert nodes_cfg == [render.slot_name(domain, s) for s in range(18)]
    pids = {a.node: a.imex_nodes()["pid"] for a in members}

    leaver, survivors = members[3], members[:3]
    # The record lets go of it; it keeps its slot until its agent says it stopped.
    imexagent.write_clique(api, namespace, domain, members, named=survivors)
    leaver.wait_state("STOPPED", domain)
    assert leaver.wait_condition("False", "Stopped").message.startswith(f"domain {domain}: ")
    assert imexagent.KUBELET_LINE in leaver.hosts_file.read_text()
    assert render.BLOCK_BEGIN not in leaver.hosts_file.read_text()
    # Only now does the controller free the slot.
    imexagent.write_clique(api, namespace, domain, survivors)
    for slot, agent in enumerate(survivors):
        # The leaver's slot now resolves to the sentinel: IMEX re-read its hosts entries.
        wait_peer_state(agent, 3, "UNAVAILABLE")
        wait_connected(agent, set(names[:3]) - {names[slot]})
        seen = agent.imex_nodes()
        assert seen["pid"] == pids[agent.node], "peers changed: IMEX is reloaded, not restarted"
        assert seen["reloads"] == 1
        assert agent.status() is not None and agent.status()["state"] == "READY"
        assert "computedomains_imexagent_imex_reloads_total 1.0" in agent.metrics()
        assert 'computedomains_imexagent_imex_state{state="READY"} 1.0' in agent.metrics()


def test_a_domain_change_restarts_imex(
    agents: StartAgents, api: client.ApiClient, namespace: str
) -> None:
    members = agents("gb200-r1-n14", "gb200-r1-n15")
    first = domain_uid()
    join(api, namespace, first, members)
    for agent in members:
        agent.wait_state("READY", first)
    old = {a.node: a.imex_nodes()["pid"] for a in members}

    # The first domain lets go of the nodes, the second takes them: IMEX stops for the first
    # and starts for the second (a restart when the agent sees both changes at once).
    second = domain_uid()
    imexagent.delete_clique(api, namespace, first, members[0].clique)
    imexagent.write_clique(api, namespace, second, members)
    for slot, agent in enumerate(members):
        agent.wait_state("READY", second)
        agent.wait_condition("True", "Ready")
        wait_connected(agent, {render.slot_name(second, 1 - slot)})
        assert agent.imex_nodes()["pid"] != old[agent.node]
        assert (agent.imex_dir / "nodes.cfg").read_text().startswith(render.slot_name(second, 0))


def test_killed_imex_is_restarted(
    agents: StartAgents, api: client.ApiClient, namespace: str
) -> None:
    (agent,) = agents("gb200-r1-n16")
    domain = domain_uid()
    join(api, namespace, domain, [agent])
    agent.wait_state("READY", domain)
    pid = agent.imex_nodes()["pid"]

    os.kill(pid, signal.SIGKILL)
    waiting.until(
        "a new IMEX process",
        lambda: agent.imex_nodes()["pid"] != pid,
        timeout=60,
        retry_on=(OSError, ValueError),
    )
    agent.wait_state("READY", domain)
    assert 'computedomains_imexagent_imex_restarts_total{cause="crash"} 1.0' in agent.metrics()


def test_an_unreadable_verdict_for_a_moment_leaves_imex_running(
    agents: StartAgents, api: client.ApiClient, namespace: str
) -> None:
    """A torn verdict file says nothing of the fabric: the agent keeps the last usable verdict
    (as the kubelet plugin does) instead of idling IMEX under the domain's pods."""
    (agent,) = agents("gb200-r1-n16")
    domain = domain_uid()
    join(api, namespace, domain, [agent])
    agent.wait_state("READY", domain)
    pid = agent.imex_nodes()["pid"]
    log = agent.log_dir / f"imex-agent-{agent.node}.log"

    agent.verdict_file.write_text('{"kind": "FabricVerdict", "torn')
    waiting.until(
        "the agent to read the torn verdict: it keeps the last usable one, or idles IMEX",
        lambda: (
            "keeping the last usable fabric verdict" in log.read_text()
            or (agent.status() or {}).get("state") != "READY"
        ),
        timeout=60,
    )
    status = agent.status()
    assert status is not None and (status["state"], status["domainUID"]) == ("READY", domain)
    assert agent.imex_nodes()["pid"] == pid, agent.log_tail()
    agent.write_verdict()


def test_bind_failure_is_reported_with_imex_error_then_recovers(
    agents: StartAgents, api: client.ApiClient, namespace: str
) -> None:
    (agent,) = agents("gb200-r0-n09")
    (agent.imex_dir / "fail").write_text("bind\n")
    domain = domain_uid()
    join(api, namespace, domain, [agent])

    error = f"Failed to bind to {agent.pod_ip}:50000: Address already in use"
    status = agent.wait_state("FAILED", domain)
    assert error in status["message"]
    condition = agent.wait_condition("False", "Failed")
    assert condition.message.startswith(f"domain {domain}: nvidia-imex exited with code 1: ")
    assert error in condition.message

    (agent.imex_dir / "fail").unlink()
    agent.wait_state("READY", domain)
    agent.wait_condition("True", "Ready")


def test_node_without_fabric_idles(
    agents: StartAgents, api: client.ApiClient, namespace: str
) -> None:
    (agent,) = agents("gb200-r1-n17", verdict="no-fabric")
    status = agent.wait_state("STOPPED", "")
    assert status["message"].startswith("idle: fabric verdict no-fabric")
    condition = agent.wait_condition("False", "Idle")
    assert condition.message.startswith("domain : idle")
    with pytest.raises(OSError, match="UNAVAILABLE"):
        agent.imex_nodes()
