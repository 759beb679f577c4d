"""What the kubelet plugins publish: the simulated nodes, and waiting for a republish.

A placement-mode upgrade restarts every plugin; a benchmark round must not start before each
free node's ResourceSlice says what the new mode says, or its first pods see the old mode.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from cdsim import nodes
from computedomains import waiting
from computedomains.api import constants


def sim_nodes(api: Any) -> list[Any]:
    """The simulated GPU nodes (typed client V1Node objects)."""
    return client.CoreV1Api(api).list_node(label_selector=f"{nodes.SIM_LABEL}=true").items


def republished(api: Any, *, binding: bool, at_least: int = 1) -> None:
    """Wait until at least ``at_least`` free nodes publish channels, every free node's with (or
    without) binding conditions. A held node's channels carry its taint and never binding
    conditions: it is not free, and not counted."""
    slices = client.ResourceV1Api(api)

    def done() -> bool:
        free = [s for s in slices.list_resource_slice().items
                if s.spec.driver == constants.DRIVER_NAME and s.spec.devices
                and not any(d.taints for d in s.spec.devices)]  # fmt: skip
        return len(free) >= at_least and all(
            any(d.binding_conditions for d in s.spec.devices) == binding for s in free
        )

    waiting.until(f"every free node's plugin to publish {'with' if binding else 'without'} "
                  "binding conditions", done, timeout=300, interval=1)  # fmt: skip
