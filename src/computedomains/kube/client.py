"""Build API clients from kubeconfigs and mint ServiceAccount tokens."""

from __future__ import annotations

import os
import pathlib

from kubernetes import client, config

ApiClient = client.ApiClient
"""Re-exported so callers outside ``kube`` never import the client library themselves."""


def server_version(api: client.ApiClient) -> str:
    """The API server's version, e.g. ``v1.36.3``."""
    return str(client.VersionApi(api).get_code().git_version)


def from_kubeconfig(path: pathlib.Path, *, context: str | None = None) -> client.ApiClient:
    """An API client for the kubeconfig at ``path`` (its own configuration, no globals)."""
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(path), context=context
    )
    return api


SERVICEACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICEACCOUNT_DIR_ENV = "COMPUTE_DOMAINS_SERVICEACCOUNT_DIR"
"""Set only by the simulated cluster, which cannot mount the token at the usual path."""


def from_environment(kubeconfig: pathlib.Path | None = None) -> client.ApiClient:
    """The client a component uses: ``kubeconfig`` if given, else the pod's ServiceAccount.

    In-cluster, the token, CA and namespace come from the ServiceAccount mount and the API
    server address from ``KUBERNETES_SERVICE_HOST``/``_PORT``, as for every pod.
    """
    if kubeconfig is not None:
        return from_kubeconfig(kubeconfig)
    directory = pathlib.Path(os.environ.get(SERVICEACCOUNT_DIR_ENV, SERVICEACCOUNT_DIR))
    configuration = client.Configuration()
    loader = config.incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt")
    )
    loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def mint_service_account_token(
    api: client.ApiClient,
    *,
    namespace: str,
    service_account: str,
    expiration_seconds: int = 3600,
    audiences: list[str] | None = None,
    bound_pod: tuple[str, str] | None = None,
) -> str:
    """Request a token for ``namespace/service_account`` through the TokenRequest API.

    ``bound_pod`` (name, uid) binds the token to a pod, as the kubelet's projected tokens
    are; the API server then adds the pod's node name to the token's claims.
    """
    bound = None
    if bound_pod is not None:
        bound = client.V1BoundObjectReference(
            api_version="v1", kind="Pod", name=bound_pod[0], uid=bound_pod[1]
        )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=audiences or [],
            expiration_seconds=expiration_seconds,
            bound_object_ref=bound,
        )
    )
    response = client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, request
    )
    if response.status is None:
        raise RuntimeError(f"TokenRequest for {namespace}/{service_account} returned no token")
    return str(response.status.token)
