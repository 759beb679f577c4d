"""Helm 4's default wait never sees OnDelete agents replaced: preflight refuses that upgrade."""

from __future__ import annotations

from typing import Any

import pytest

from computedomains.hooks import helmwait
from computedomains.hooks.report import Severity


@pytest.mark.parametrize(
    ("helm", "upgrade", "strategy", "wait", "agents", "expected"),
    [
        ("v4.3.2", True, "OnDelete", "watcher", 36, Severity.FAIL),
        ("v4.3.2", True, "OnDelete", "legacy", 36, Severity.OK),
        ("v4.3.2", True, "OnDelete", "hookOnly", 36, Severity.OK),
        ("v3.22.0", True, "OnDelete", "watcher", 36, None),  # Helm 3 skips OnDelete
        ("v4.3.2", False, "OnDelete", "watcher", 0, None),  # an install: every pod is new
        ("v4.3.2", True, "RollingUpdate", "watcher", 36, None),  # the pods are replaced
        ("v4.3.2", True, "OnDelete", "watcher", 0, None),  # no agent to wait for
        ("", True, "OnDelete", "watcher", 36, None),  # a Helm that did not say
    ],
)
def test_only_helm_4s_watcher_with_on_delete_agents_to_replace_is_refused(
    helm: str, upgrade: bool, strategy: str, wait: str, agents: int, expected: Severity | None
) -> None:
    found = helmwait.check(
        helm_version=helm, upgrade=upgrade, strategy=strategy, wait=wait, agents=agents
    )
    assert [f.severity for f in found] == ([expected] if expected else [])
    if expected is Severity.FAIL:
        assert "--wait=legacy" in found[0].fix and "preflight.helm4Wait=legacy" in found[0].fix
        assert "36 agent(s)" in found[0].message


def test_the_helm_major_is_read_from_its_version() -> None:
    assert helmwait.helm_major("v4.3.2") == 4
    assert helmwait.helm_major("v3.22.0+g1234") == 3
    assert helmwait.helm_major("") is None


def test_only_an_upgrade_that_changes_the_agents_pod_template_leaves_agents_behind() -> None:
    live: dict[str, Any] = {
        "metadata": {"annotations": {helmwait.POD_TEMPLATE_ANNOTATION: "abc"}},
        "status": {"currentNumberScheduled": 8},
    }
    assert helmwait.replaced_agents(live, pod_template="abc") == 0  # --reuse-values alone
    # ... unless an earlier upgrade left agents on their old template: Helm 4 counts them.
    live["status"] |= {"desiredNumberScheduled": 8, "updatedNumberScheduled": 6}
    assert helmwait.replaced_agents(live, pod_template="abc") == 2
    assert helmwait.replaced_agents(live, pod_template="def") == 8
    del live["metadata"]["annotations"]  # a release from before the digest
    assert helmwait.replaced_agents(live, pod_template="abc") == 8
