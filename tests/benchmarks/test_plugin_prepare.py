"""Kubelet-plugin prepare latency and throughput when the domain is already READY, and RSS.

Baseline in the same run: an empty NodePrepareResources round trip on the same socket and
connection, i.e. what gRPC itself costs. Prepare includes reading the claim from the API
server, the durable checkpoint writes and the CDI spec write. Each claim is prepared while the
node holds :data:`HELD` others, as a node with every channel slot in use does.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from kubernetes import client

from cdsim import cluster, topology
from computedomains.drapb import dra_v1_pb2, services
from tests.benchmarks import report
from tests.support import clusters, kube, plugin

SEQUENTIAL = 200
CONCURRENT = 32
HELD = 16
"""Claims the node holds while one more is prepared: a node holds at most one per channel slot
(16 by default), and the checkpoint written at every prepare holds them all."""


@pytest.fixture(scope="module")
def bench(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[plugin.PluginProcess, str, dict[str, Any]]]:
    sim = cluster.SimCluster(
        name=f"bench-{uuid.uuid4().hex[:6]}",
        topology_spec=topology.Topology(racks=1, nodes_per_rack=2),
        log=lambda _: None,
    )
    with sim:
        api = clusters.typed_client(sim.kubeconfig)
        plugin.install_crds(api)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
        kube.wait_for_default_service_account(api, "bench")
        domain = plugin.create_domain(api, "bench")
        proc = plugin.PluginProcess(sim, sim.nodes[0].name, tmp_path_factory.mktemp("logs"))
        proc.write_verdict()
        proc.write_imex(domain["metadata"]["uid"])
        proc.start()
        try:
            yield proc, "bench", domain
        finally:
            proc.stop()


def _claims(
    proc: plugin.PluginProcess, namespace: str, domain: dict[str, Any], n: int
) -> list[dict[str, str]]:
    api = clusters.typed_client(proc.sim.kubeconfig)
    params = plugin.channel_parameters(domain["metadata"]["uid"])
    return [
        plugin.allocated_claim(
            api, namespace, node=proc.node, device="channel-0", parameters=params
        )
        for _ in range(n)
    ]


def _memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process: PSS splits pages shared with other processes (libpython,
    OpenSSL, gRPC's library) among them, so PSSs of co-located processes add up honestly."""
    rollup = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:]}
    return fields["Rss"], fields["Pss"]


def test_prepare_latency_throughput_and_rss(
    bench: tuple[plugin.PluginProcess, str, dict[str, Any]],
) -> None:
    proc, namespace, domain = bench
    claims = _claims(proc, namespace, domain, SEQUENTIAL + CONCURRENT + 20)
    with grpc.insecure_channel(f"unix://{proc.dra_socket}") as channel:
        stub = services.Client(channel, services.DRA["v1.DRAPlugin"])

        def call(batch: list[dict[str, str]]) -> tuple[float, Any]:
            started = time.perf_counter()
            answer = stub.call(
                "NodePrepareResources",
                dra_v1_pb2.NodePrepareResourcesRequest(
                    claims=[dra_v1_pb2.Claim(**c) for c in batch]
                ),
                timeout=45,
            )
            return time.perf_counter() - started, answer

        for claim in claims[:20]:  # warm-up: connections, caches, the node label
            assert not call([claim])[1].claims[claim["uid"]].error
        noop = [call([])[0] for _ in range(SEQUENTIAL)]
        proc.unprepare(claims[: 20 - HELD])
        prepare, held = [], claims[20 - HELD : 20]
        for claim in claims[20 : 20 + SEQUENTIAL]:
            elapsed, answer = call([claim])
            assert not answer.claims[claim["uid"]].error, answer
            prepare.append(elapsed)
            held.append(claim)
            proc.unprepare([held.pop(0)])  # untimed: the pod of the oldest claim went
        proc.unprepare(held)

    burst = claims[20 + SEQUENTIAL :]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(lambda c: proc.prepare([c]), burst))
    burst_seconds = time.perf_counter() - started
    assert all(not a.claims[c["uid"]].error for a, c in zip(answers, burst, strict=True))
    assert proc.child is not None
    plugin_rss, plugin_pss = _memory_kib(proc.child.pid)
    proc.unprepare(claims)

    noop_s, prepare_s = report.summarize(noop), report.summarize(prepare)
    report.save(
        "plugin-prepare",
        {
            "noop_roundtrip_ms": {
                k: round(v * 1000, 3) if k != "n" else v for k, v in noop_s.items()
            },
            "prepare_ms": {k: round(v * 1000, 3) if k != "n" else v for k, v in prepare_s.items()},
            "prepare_vs_noop_p50_ratio": round(prepare_s["p50"] / noop_s["p50"], 2),
            "concurrent_claims": CONCURRENT,
            "concurrent_wall_s": round(burst_seconds, 3),
            "concurrent_claims_per_s": round(CONCURRENT / burst_seconds, 1),
            # The whole node side, re-check included, is measured by test_node_footprint.py.
            "plugin_rss_mib": round(plugin_rss / 1024, 1),
            "plugin_pss_mib": round(plugin_pss / 1024, 1),
        },
        plots=[
            report.Plot(
                name="prepare",
                title="NodePrepareResources, domain READY, vs an empty round trip",
                labels=["empty round trip (baseline)", "prepare"],
                series={q: [noop_s[q] * 1000, prepare_s[q] * 1000] for q in ("p50", "p99")},
                unit="milliseconds",
            ),
        ],
    )
    assert prepare_s["n"] == SEQUENTIAL
