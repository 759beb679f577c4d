"""The API resources the components use, and their paths: one table instead of built URLs."""

from __future__ import annotations

import dataclasses

from computedomains.api import constants


@dataclasses.dataclass(frozen=True)
class Resource:
    """Where objects of one kind live on the API server."""

    group: str
    """"" for the core group."""
    version: str
    plural: str
    namespaced: bool

    def path(self, name: str = "", *, namespace: str = "", subresource: str = "") -> str:
        """The object's path, or its collection's (in ``namespace``, or in all of them)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        path = f"{base}/{self.plural}"
        if name:
            path += f"/{name}"
        return f"{path}/{subresource}" if subresource else path


# At the storage version: reading and writing there never calls the conversion webhook, so
# the components keep working while it is down.
COMPUTE_DOMAINS = Resource(
    constants.GROUP, constants.STORAGE_VERSION, constants.COMPUTE_DOMAIN_PLURAL, namespaced=True
)
CLIQUES = Resource(
    constants.GROUP, constants.STORAGE_VERSION, constants.CLIQUE_PLURAL, namespaced=True
)
CLIQUES_V1BETA1 = Resource(constants.GROUP, constants.VERSION, constants.CLIQUE_PLURAL, True)
"""The cliques at v1beta1, the one version a CRD rolled back to 0.1.x serves (same schema)."""
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", True)
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", True)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", False)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", False)
NODES = Resource("", "v1", "nodes", False)
NAMESPACES = Resource("", "v1", "namespaces", False)
PODS = Resource("", "v1", "pods", True)
EVENTS = Resource("", "v1", "events", True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", True)
SERVICES = Resource("", "v1", "services", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", True)
SECRETS = Resource("", "v1", "secrets", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", True)
DAEMON_SETS = Resource("apps", "v1", "daemonsets", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
JOBS = Resource("batch", "v1", "jobs", True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False
)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False
)
