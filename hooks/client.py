"""The official Kubernetes client for the hooks: from ``--kubeconfig`` or the pod's ServiceAccount.

Hooks are short-lived Jobs, so the generated client's import cost does not matter, and its
dynamic client reads and writes any API version, which migration needs. The long-running
components keep :mod:`computedomains.kube`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import kubernetes.client
import kubernetes.config
import kubernetes.dynamic
from kubernetes.config import incluster_config

from computedomains import flaggroups, flags
from computedomains.kube import client as kube_client


@dataclasses.dataclass(frozen=True, kw_only=True)
class Connection:
    """Every hook's first settings: how to reach the API server, and the release's namespace.

    The generated client takes no request budget of ours, so these are the only API flags.
    """

    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    namespace: str = flags.field(flaggroups.NAMESPACE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseConnection(Connection):
    """:class:`Connection` and the Helm release the hook acts for."""

    release: str = flags.option("--release", required=True, help="the Helm release name")


def api_client(kubeconfig: pathlib.Path | None) -> kubernetes.client.ApiClient:
    """A client for ``kubeconfig``, else for the pod's ServiceAccount.

    The ServiceAccount folder is the usual one unless the simulated cluster moved it
    (:data:`computedomains.kube.client.SERVICEACCOUNT_DIR_ENV`), exactly as for the components.
    """
    configuration = kubernetes.client.Configuration()
    if kubeconfig is not None:
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
    else:
        folder = pathlib.Path(
            os.environ.get(kube_client.SERVICEACCOUNT_DIR_ENV, kube_client.SERVICEACCOUNT_DIR)
        )
        loader = incluster_config.InClusterConfigLoader(
            token_filename=str(folder / "token"), cert_filename=str(folder / "ca.crt")
        )
        loader.load_and_set(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def dynamic_client(kubeconfig: pathlib.Path | None) -> kubernetes.dynamic.DynamicClient:
    """The dynamic client (any group, any version) over :func:`api_client`."""
    return kubernetes.dynamic.DynamicClient(api_client(kubeconfig))
