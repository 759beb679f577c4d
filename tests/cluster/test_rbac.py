"""RBAC is enforced for real: ServiceAccounts get exactly what their Roles grant."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomains import waiting
from tests.support import clusters, kube

pytestmark = pytest.mark.cluster


def test_service_account_is_refused_without_role_and_allowed_with_one(
    cluster: clusters.TestCluster, api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    reader = client.CoreV1Api(cluster.service_account_api(namespace, "reader"))

    with pytest.raises(ApiException) as refused:
        reader.list_namespaced_config_map(namespace)
    assert kube.status_of(refused.value) == 403
    assert f"system:serviceaccount:{namespace}:reader" in str(refused.value.body)

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "configmap-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )

    listed = waiting.until(
        "the RoleBinding to let the ServiceAccount list configmaps",
        lambda: reader.list_namespaced_config_map(namespace),
        timeout=30,
        retry_on=(ApiException,),
    )
    assert any(cm.metadata.name == "kube-root-ca.crt" for cm in listed.items)

    # The Role grants reading configmaps in this namespace only: writing, and other
    # resources, stay forbidden.
    with pytest.raises(ApiException) as write_refused:
        reader.create_namespaced_config_map(namespace, {"metadata": {"name": "nope"}})
    assert kube.status_of(write_refused.value) == 403
    with pytest.raises(ApiException) as secrets_refused:
        reader.list_namespaced_secret(namespace)
    assert kube.status_of(secrets_refused.value) == 403
    with pytest.raises(ApiException) as other_ns_refused:
        reader.list_namespaced_config_map("kube-system")
    assert kube.status_of(other_ns_refused.value) == 403


def test_unauthenticated_requests_are_rejected(cluster: clusters.TestCluster) -> None:
    admin = cluster.api().configuration
    configuration = client.Configuration()
    configuration.host = admin.host
    configuration.ssl_ca_cert = admin.ssl_ca_cert
    anonymous = client.CoreV1Api(client.ApiClient(configuration))
    with pytest.raises(ApiException) as rejected:
        anonymous.list_namespace()
    assert kube.status_of(rejected.value) in (401, 403)
