"""The API resources only the webhook uses (beside :mod:`computedomains.api.resources`)."""

from __future__ import annotations

from computedomains.api import constants, resources

STORAGE_VERSION = "v1beta2"
"""The version the webhook caches ComputeDomains at: the storage version, served without
conversion, so the webhook's own cache never depends on the webhook."""
COMPUTE_DOMAINS = resources.Resource(
    constants.GROUP, STORAGE_VERSION, constants.COMPUTE_DOMAIN_PLURAL, namespaced=True
)
SECRETS = resources.Resource("", "v1", "secrets", namespaced=True)
CRDS = resources.Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False
)
VALIDATING_WEBHOOKS = resources.Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)
MUTATING_WEBHOOKS = resources.Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", namespaced=False
)
COMPUTE_DOMAIN_CRD = f"{constants.COMPUTE_DOMAIN_PLURAL}.{constants.GROUP}"
