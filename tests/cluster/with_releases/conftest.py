"""Cluster tests that install, upgrade, roll back, adopt and sync whole releases.

They run after tests/cluster/with_chart (whose release is gone by then) and each starts from
a cluster without our CRDs, since every one of them decides who owns the CRDs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import clusters, lifecycle


@pytest.fixture
def releases(
    cluster: clusters.TestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[lifecycle.Releases]:
    """Releases made by one test, on a cluster without our CRDs; all removed afterwards."""
    api = cluster.api()
    lifecycle.remove_crds(api)
    made = lifecycle.Releases(cluster, tmp_path_factory.mktemp("releases"))
    try:
        yield made
    finally:
        made.cleanup()
        lifecycle.remove_crds(api)
