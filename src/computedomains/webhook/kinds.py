"""The API resources only the webhook uses (beside :mod:`computedomains.api.resources`)."""

from __future__ import annotations

from computedomains.api import constants, resources

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
