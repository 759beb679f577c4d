"""Names that must match the incumbent driver (manifests, labels, devices) or our own contracts."""

from __future__ import annotations

import pathlib

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
"""The incumbent's version: its manifests use it, and so do the opaque device configs."""
VERSION_V1BETA2 = "v1beta2"
API_VERSION_V1BETA2 = f"{GROUP}/{VERSION_V1BETA2}"
STORAGE_VERSION = VERSION_V1BETA2
"""The version the CRDs store (by default) and every component reads and writes, so that no
component depends on the conversion webhook."""
COMPUTE_DOMAIN_KIND = "ComputeDomain"
CLIQUE_KIND = "ComputeDomainClique"
COMPUTE_DOMAIN_PLURAL = "computedomains"
CLIQUE_PLURAL = "computedomaincliques"

DRIVER_NAME = "compute-domain.nvidia.com"
"""The DRA driver name: ResourceSlices, allocation results, kubelet registration."""
CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_DEVICE_CLASS = "compute-domain-daemon.nvidia.com"
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"

COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
"""On a node: the UID of the ComputeDomain the node is in (written by the kubelet plugin)."""
CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""On a node: ``<clusterUUID>.<cliqueID>`` of its NVLink domain (written by node-init)."""
CLIQUE_ID_LABEL = "resource.nvidia.com/computeDomain.cliqueID"
"""On a ComputeDomainClique: the ``<clusterUUID>.<cliqueID>`` it lists daemons of."""
FINALIZER = "resource.nvidia.com/computeDomain"
"""On a ComputeDomain: ours until its leftovers are gone. The incumbent's string, as the node
label's; each has its own name here, so neither is used for the other."""
COMPUTE_DOMAIN_TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
"""On the ResourceClaimTemplates the controller creates: ``Workload`` (or the incumbent's
``Daemon``)."""
WORKLOAD_TARGET = "Workload"
CHANNEL_REQUEST = "channel"
"""Name of the one request of a workload ResourceClaimTemplate."""

CDI_VENDOR = "k8s.compute-domain.nvidia.com"
CDI_CLAIM_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLAIM_CLASS}"

# Our own identifiers (not the incumbent's).
OWN_PREFIX = "computedomains.io"
NUM_NODES_ANNOTATION = f"{OWN_PREFIX}/num-nodes"
"""On a ComputeDomain stored at v1beta2: the v1beta1 ``spec.numNodes`` (decimal, non-zero),
which v1beta2 dropped; conversion moves it between the two (``api/conversion.py``)."""
CLIQUE_MEMBERS_ANNOTATION = f"{OWN_PREFIX}/members"
"""On a ComputeDomainClique: the nodes of ``daemons`` that are members of the domain now
(comma-separated), as against those whose slot waits for their agent to let go: the
membership record (``placement.recorded_holder``). A node the binder reserved is named in the
round that reserved it, so its agent starts IMEX while the scheduler still waits in PreBind."""
PLACEMENT_ANNOTATION = f"{OWN_PREFIX}/placement"
"""On a ComputeDomain read at v1beta1: its v1beta2 ``spec.placement`` (compact JSON)."""
CONVERSION_PATH = "/convert"
"""Path of the conversion webhook the ComputeDomain CRD calls (ConversionReview v1)."""
FABRIC_CONDITION = "NVLinkFabricReady"
"""Node condition written by node-init with the fabric verdict and its reason."""
FABRIC_TAINT = f"{OWN_PREFIX}/nvlink-fabric-broken"
"""NoSchedule taint node-init puts on a node with a broken fabric (when enabled)."""
CLIQUE_ATTRIBUTE = "clique"
"""Device attribute (driver domain) carrying the node's clique, for workload constraints."""
COMPONENT_LABEL = "app.kubernetes.io/component"
VERSION_LABEL = "app.kubernetes.io/version"
"""On every object and pod of the chart: the appVersion of the chart that made it."""
IMEX_AGENT_COMPONENT = "imex-agent"
"""``COMPONENT_LABEL`` value of the IMEX agent's pods (the controller finds them by it)."""
IMEX_READY_CONDITION = f"{OWN_PREFIX}/IMEXReady"
"""Condition the IMEX agent sets on its own pod: IMEX's state for the node's domain."""
IMEX_STATUS_KIND = "ImexStatus"
"""Kind of the node-local IMEX status file (docs/node-side.md)."""

# Node-local files (DESIGN §4); every component takes these as settings, tests move them.
RUN_DIR = pathlib.Path("/var/run/compute-domains")
FABRIC_VERDICT_FILE = RUN_DIR / "fabric-verdict.json"
IMEX_DIR = RUN_DIR / "imex"
IMEX_STATUS_FILE = IMEX_DIR / "status.json"
KUBELET_REGISTRY_DIR = pathlib.Path("/var/lib/kubelet/plugins_registry")
KUBELET_PLUGINS_DIR = pathlib.Path("/var/lib/kubelet/plugins")
CDI_ROOT = pathlib.Path("/var/run/cdi")
