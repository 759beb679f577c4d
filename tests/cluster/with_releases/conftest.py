"""Cluster tests that install, upgrade, roll back, adopt and sync whole releases.

They run on the session's second, smaller cluster (``lifecycle_cluster``: two racks of four
nodes), and each starts from a cluster without our CRDs (the ``releases`` fixture), since each
decides who owns them.
"""

from __future__ import annotations

import pytest

from cdsim import cluster as sim_cluster
from tests.support import clusters


@pytest.fixture(scope="package")
def cluster(lifecycle_cluster: clusters.TestCluster) -> clusters.TestCluster:
    """The lifecycle cluster (two racks of four nodes) stands in for the session's here."""
    return lifecycle_cluster


@pytest.fixture(scope="package")
def sim(lifecycle_cluster: clusters.TestCluster) -> sim_cluster.SimCluster:
    """The lifecycle cluster's simulation; skips against an existing cluster."""
    return lifecycle_cluster.simulation()
