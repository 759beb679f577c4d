"""A short seeded chaos run in ``make test``: churn and every fault kind for 75 seconds.

The engine of ``make chaos`` (:mod:`cdsim.chaos.run`), against the session's cluster and the
chart this package installed: domains created, scaled and deleted in three tenants while every
fault kind is injected at least once, the invariants checked at every step and at the end
(docs/operations.md, "Chaos run"). A failure prints the report: the seed, each violation with
the timeline around it and the last Events. ``make chaos SEED=20260611 DURATION=75s`` replays the
same timeline on a cluster of its own.

It runs last among the chart's tests (conftest.py): it kills, restarts and pauses what they
all rely on, so whatever it leaves broken must not read as their failure.
"""

from __future__ import annotations

import pytest

from cdsim import cluster as sim_cluster
from cdsim.chaos import invariants, run

pytestmark = pytest.mark.cluster

SEED = 20260611
DURATION = 75.0
"""Every fault kind still fits, with this seed 13 faults in all; with the settling,
the quiet watch and the teardown, about two minutes in all."""


def test_a_short_seeded_chaos_run_breaks_no_invariant(
    chart: str, sim: sim_cluster.SimCluster
) -> None:
    config = run.Config(seed=SEED, duration=DURATION, bounds=invariants.Bounds(quiet=15.0))
    engine = run.Engine(sim=sim, release_namespace=chart, config=config, out=print)
    result = engine.run()
    print(result.render())
    assert result.ok, result.render()
