"""The official Kubernetes client for the hooks: from ``--kubeconfig`` or the pod's ServiceAccount.

Hooks are short-lived Jobs, so the generated client's import cost does not matter, and its
dynamic client reads and writes any API version, which migration needs. The long-running
components keep :mod:`computedomains.kube`.
"""

from __future__ import annotations

import argparse
import os
import pathlib

import kubernetes.client
import kubernetes.config
import kubernetes.dynamic
from kubernetes.config import incluster_config

from computedomains import flaggroups, flags
from computedomains.kube import client as kube_client


def add_arguments(parser: argparse.ArgumentParser, *, release: bool = False) -> None:
    """``--kubeconfig``, ``--namespace`` (the release's) and, with ``release``, ``--release``.

    The first two are every component's; ``--release`` is the Helm release name, required.
    """
    # The generated client: no request budget of ours.
    flags.register(parser, flaggroups.KUBECONFIG)
    flags.register(parser, flaggroups.NAMESPACE)
    if release:
        flags.add(parser, "--release", default=None, required=True, help="the Helm release name")


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
