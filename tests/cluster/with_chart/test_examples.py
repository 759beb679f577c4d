"""examples/*.yaml are valid as they are, against the installed chart.

The ComputeDomain example is v1beta1 (the incumbent's manifests), so the API server converts
it to the storage version through the chart's webhook: it needs the chart running.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml
from kubernetes import client, dynamic

from tests.chart import rendering as r
from tests.support import dryrun

pytestmark = pytest.mark.cluster


def test_examples_pass_server_side_validation(
    chart: str, api: client.ApiClient, namespace: str, tmp_path: pathlib.Path
) -> None:
    objects = [
        doc
        for path in sorted((r.REPO / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    dyn = dynamic.DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))  # type: ignore[no-untyped-call]
    failures = {
        f"{o['kind']} {o['metadata']['name']}": failure
        for o in objects
        if (failure := dryrun.dry_run(dyn, o, namespace)) is not None
    }
    assert {o["kind"] for o in objects} >= {"ComputeDomain", "StatefulSet"}
    assert not failures, "\n".join(f"{what}: {why}" for what, why in failures.items())
