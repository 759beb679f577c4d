"""The demo's progress line and the manifest paths it applies to."""

from __future__ import annotations

from cdsim import demo
from cdsim import kubeapply as apply


def test_progress_line_shows_pods_members_slots_and_status() -> None:
    progress = demo.Progress(
        pods=4,
        running=3,
        nodes=3,
        status="NotReady",
        members=(("n1", 1, "Ready"), ("n0", 0, "Ready"), ("n2", 2, "NotReady")),
    )
    line = demo.render(progress, 12.34)
    assert line == (
        "[  12.3s] pods 3/4 Running | members 2/3 IMEX-ready (slots 0,1,2) | ComputeDomain NotReady"
    )


def test_resource_paths_for_namespaced_and_cluster_objects() -> None:
    cd = apply.Resource("/apis/resource.nvidia.com/v1beta1", "computedomains", namespaced=True)
    assert (
        cd.path("a", "demo") == "/apis/resource.nvidia.com/v1beta1/namespaces/demo/computedomains/a"
    )
    node = apply.Resource("/api/v1", "nodes", namespaced=False)
    assert node.path("n1", "ignored") == "/api/v1/nodes/n1"


def test_a_domain_counts_as_formed_only_with_every_node_a_ready_member() -> None:
    members = (("n0", 0, "Ready"), ("n1", 1, "Ready"))
    assert demo.Progress(4, 4, 2, members, "Ready").formed
    assert not demo.Progress(0, 0, 0, (), "Ready").formed  # nobody joined yet
    assert not demo.Progress(4, 4, 3, members, "Ready").formed  # a node not yet a member
    assert not demo.Progress(4, 3, 2, members, "Ready").formed
    assert not demo.Progress(4, 4, 2, (("n0", 0, "Ready"), ("n1", 1, "NotReady")), "Ready").formed
