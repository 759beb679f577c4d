"""Reading Node objects."""

from __future__ import annotations

from typing import Any

from kubernetes import client


def is_ready(node: client.V1Node) -> bool:
    """True when the node's Ready condition is True."""
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def create(api: client.ApiClient, body: dict[str, Any]) -> None:
    """Create a Node from a manifest (simulated nodes register this way, like a kubelet)."""
    client.CoreV1Api(api).create_node(body)  # type: ignore[arg-type]  # dict bodies are accepted


def ready_names(api: client.ApiClient, *, timeout: float | None = None) -> tuple[set[str], int]:
    """Names of the Ready nodes, and how many nodes there are in all."""
    items = client.CoreV1Api(api).list_node(_request_timeout=timeout).items
    ready = {n.metadata.name for n in items if n.metadata and n.metadata.name and is_ready(n)}
    return ready, len(items)
