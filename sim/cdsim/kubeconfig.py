"""Write kubeconfig files: certificate users, and token users minted for a ServiceAccount."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from computedomains.kube import client as kube_client


def write(
    path: pathlib.Path,
    *,
    cluster_name: str,
    cluster: dict[str, Any],
    user: str,
    credentials: Mapping[str, Any],
    namespace: str | None = None,
) -> pathlib.Path:
    """Write a single-context kubeconfig (mode 0600: it holds credentials)."""
    context: dict[str, str] = {"cluster": cluster_name, "user": user}
    if namespace:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def write_client_cert(
    path: pathlib.Path,
    *,
    server: str,
    ca: pathlib.Path,
    cluster_name: str,
    user: str,
    cert: pathlib.Path,
    key: pathlib.Path,
) -> pathlib.Path:
    """Write a kubeconfig that authenticates with a client certificate."""
    return write(
        path,
        cluster_name=cluster_name,
        cluster={"server": server, "certificate-authority": str(ca)},
        user=user,
        credentials={"client-certificate": str(cert), "client-key": str(key)},
    )


def current_cluster(source: pathlib.Path) -> tuple[str, dict[str, Any]]:
    """Name and entry of the cluster that ``source``'s current context points at."""
    document = yaml.safe_load(source.read_text())
    current = document["current-context"]
    context = next(c["context"] for c in document["contexts"] if c["name"] == current)
    entry = next(c for c in document["clusters"] if c["name"] == context["cluster"])
    cluster = dict(entry["cluster"])
    ca = cluster.get("certificate-authority")
    if ca and not pathlib.Path(ca).is_absolute():
        cluster["certificate-authority"] = str((source.parent / ca).resolve())
    return str(entry["name"]), cluster


def for_service_account(
    admin: pathlib.Path,
    dest: pathlib.Path,
    *,
    namespace: str,
    service_account: str,
    expiration_seconds: int = 3600,
    bound_pod: tuple[str, str] | None = None,
) -> pathlib.Path:
    """Mint a ServiceAccount token with the ``admin`` kubeconfig and write a kubeconfig using it.

    Works against any cluster the admin kubeconfig reaches, simulated or real.
    """
    token = kube_client.mint_service_account_token(
        kube_client.Client.from_kubeconfig(admin),
        namespace=namespace,
        service_account=service_account,
        expiration_seconds=expiration_seconds,
        bound_pod=bound_pod,
    )
    cluster_name, cluster = current_cluster(admin)
    return write(
        dest,
        cluster_name=cluster_name,
        cluster=cluster,
        user=f"system:serviceaccount:{namespace}:{service_account}",
        credentials={"token": token},
        namespace=namespace,
    )
