"""Under several workers, each cluster's tests go to one worker as one piece (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests import conftest


@pytest.mark.parametrize(
    ("nodeid", "unit"),
    [
        ("tests/cluster/test_crds.py::test_x", conftest.SESSION_SCOPE),
        ("tests/cluster/with_chart/test_domains.py::test_x", conftest.SESSION_SCOPE),
        ("tests/cluster/with_releases/test_upgrade.py::test_x", conftest.LIFECYCLE_SCOPE),
        ("tests/chart/test_install.py::test_x[helm3]", conftest.LIFECYCLE_SCOPE),
        ("tests/cluster/test_demo.py::test_x", conftest.DEMO_TEST),
        # Their own clusters: not the session cluster's worker's to wait for.
        ("tests/cluster/test_teardown.py::test_x", "tests/cluster/test_teardown.py"),
        ("tests/cluster/test_preflight_apis.py::test_x", "tests/cluster/test_preflight_apis.py"),
        ("tests/unit/test_placement.py::test_x", conftest.UNIT_SCOPE),
        ("tests/chart/test_schemas.py::test_x[eks]", conftest.SESSION_SCOPE),
        ("tests/chart/test_render.py::test_x", "tests/chart/test_render.py"),
        ("tests/packaging/test_wheel.py", "tests/packaging/test_wheel.py"),
    ],
)
def test_a_test_goes_with_the_cluster_it_needs(nodeid: str, unit: str) -> None:
    assert conftest.work_unit(nodeid) == unit
