"""How a hook reaches the API server: its first flags and the client made from them."""

from __future__ import annotations

import dataclasses
import pathlib

from computedomains import flaggroups, flags
from computedomains.hooks import kubeio
from computedomains.kube import client as kube_client


@dataclasses.dataclass(frozen=True, kw_only=True)
class Connection:
    """Every hook's first settings: how to reach the API server, and the release's namespace.

    A hook takes no request budget (:func:`connect`), so these are its only API flags.
    """

    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    namespace: str = flags.field(flaggroups.NAMESPACE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseConnection(Connection):
    """:class:`Connection` and the Helm release the hook acts for."""

    release: str = flags.option("--release", required=True, help="the Helm release name")


def connect(settings: Connection) -> kubeio.Api:
    """The hook's API: from ``--kubeconfig``, else the pod's ServiceAccount, as a component's.

    No request budget: a hook is one short Job that waits on nothing but the API server.
    """
    return kubeio.Api(kube_client.connect(settings.kubeconfig))
