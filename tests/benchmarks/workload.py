"""Creating a workload's pods the way kube-controller-manager's Job controller does.

A multi-node job reaches the API server through a Job (or a JobSet's Jobs): the Job controller
creates its pods in slow-start batches (1, 2, 4, 8, ... pods, each batch's calls in parallel,
the next batch once the last one succeeded). The benchmarks create their pods the same way for
every kind of claim, so a baseline and a ComputeDomain pay the same creation pattern, and the
formation that overlaps creation is measured as it happens on a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

MAX_PER_SYNC = 500
"""The most pods the Job controller creates in one sync (``MaxPodCreateDeletePerSync``); the
rest wait for its next sync, which starts from a batch of one again."""


def slow_start(count: int, first: int = 1) -> Iterator[range]:
    """Index ranges of the batches for ``count`` pods: 1, 2, 4, ... within each sync of at
    most :data:`MAX_PER_SYNC` pods."""
    done = 0
    while done < count:
        sync_end = min(count, done + MAX_PER_SYNC)
        size = first
        while done < sync_end:
            batch = min(size, sync_end - done)
            yield range(done, done + batch)
            done += batch
            size *= 2


def create_pods(api: Any, namespace: str, bodies: Sequence[dict[str, Any]]) -> float:
    """Create ``bodies`` in slow-start batches, each batch's calls in parallel; seconds taken.

    A failed call raises (after its batch): the benchmarks make no pod that may be refused.
    """
    core = client.CoreV1Api(api)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="create-pods") as pool:
        for batch in slow_start(len(bodies)):
            calls = [pool.submit(core.create_namespaced_pod, namespace, bodies[i]) for i in batch]
            for call in calls:
                call.result()
    return time.monotonic() - started


def conditional_claims(api: Any, namespace: str, tag: str) -> tuple[int, int]:
    """(claims allocated with binding conditions, claims) of the pods named ``<tag>-...``.

    Each claim of the first number waited for the scheduler's PreBind poll.
    """
    claims = client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items
    mine = [
        c for c in claims
        if any(o.name.startswith(f"{tag}-") for o in c.metadata.owner_references or [])
    ]  # fmt: skip
    results = [c.status.allocation.devices.results if c.status.allocation else [] for c in mine]
    waited = len([r for r in results if any(d.binding_conditions for d in r or [])])
    return waited, len(mine)
