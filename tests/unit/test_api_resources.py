"""The table of API resources builds every path the components use."""

from __future__ import annotations

import pytest

from computedomains.api import resources


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (resources.NODES.path(), "/api/v1/nodes"),
        (resources.NODES.path("n1"), "/api/v1/nodes/n1"),
        (resources.PODS.path(), "/api/v1/pods"),
        (resources.PODS.path("p", namespace="ns", subresource="status"),
         "/api/v1/namespaces/ns/pods/p/status"),
        (resources.COMPUTE_DOMAINS.path(), "/apis/resource.nvidia.com/v1beta2/computedomains"),
        (resources.COMPUTE_DOMAINS.path("cd", namespace="ns", subresource="status"),
         "/apis/resource.nvidia.com/v1beta2/namespaces/ns/computedomains/cd/status"),
        (resources.CLIQUES.path(namespace="d"),
         "/apis/resource.nvidia.com/v1beta2/namespaces/d/computedomaincliques"),
        (resources.RESOURCE_SLICES.path("s", namespace="ignored"),
         "/apis/resource.k8s.io/v1/resourceslices/s"),
        (resources.LEASES.path("l", namespace="d"),
         "/apis/coordination.k8s.io/v1/namespaces/d/leases/l"),
        (resources.SERVICE_ACCOUNTS.path("sa", namespace="d", subresource="token"),
         "/api/v1/namespaces/d/serviceaccounts/sa/token"),
        (resources.CONFIG_MAPS.path("c", namespace="d"), "/api/v1/namespaces/d/configmaps/c"),
        (resources.SECRETS.path(namespace="d"), "/api/v1/namespaces/d/secrets"),
        (resources.SERVICES.path(), "/api/v1/services"),
        (resources.DAEMON_SETS.path("ds", namespace="d"),
         "/apis/apps/v1/namespaces/d/daemonsets/ds"),
        (resources.DEPLOYMENTS.path(namespace="d"), "/apis/apps/v1/namespaces/d/deployments"),
        (resources.DEVICE_CLASSES.path("c"), "/apis/resource.k8s.io/v1/deviceclasses/c"),
        (resources.CRDS.path("x.y", subresource="status"),
         "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y/status"),
        (resources.VALIDATING_WEBHOOK_CONFIGURATIONS.path("w"),
         "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/w"),
        (resources.MUTATING_WEBHOOK_CONFIGURATIONS.path("w"),
         "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w"),
    ],
)  # fmt: skip
def test_paths(path: str, expected: str) -> None:
    assert path == expected
