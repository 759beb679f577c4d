"""The JSON wire form of the API objects callers read, as TypedDicts.

Helpers in ``computedomains.kube`` that return raw objects (no client models) type them with
these. Only the fields somebody reads are declared; everything is optional on the wire, so
every TypedDict is ``total=False`` and readers use ``.get``.
"""

from __future__ import annotations

from typing import Any, TypedDict


class OwnerReference(TypedDict, total=False):
    """``metadata.ownerReferences[]``."""

    apiVersion: str
    kind: str
    name: str
    uid: str


class ObjectMeta(TypedDict, total=False):
    """``metadata``."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    deletionTimestamp: str
    ownerReferences: list[OwnerReference]
    creationTimestamp: str
    finalizers: list[str]


class ObjectFieldSelector(TypedDict, total=False):
    """``env[].valueFrom.fieldRef``."""

    apiVersion: str
    fieldPath: str


class EnvVarSource(TypedDict, total=False):
    """``env[].valueFrom`` (other sources exist; only ``fieldRef`` is read)."""

    fieldRef: ObjectFieldSelector


class EnvVar(TypedDict, total=False):
    """``containers[].env[]``."""

    name: str
    value: str
    valueFrom: EnvVarSource


class VolumeMount(TypedDict, total=False):
    """``containers[].volumeMounts[]``."""

    name: str
    mountPath: str
    subPath: str
    readOnly: bool


class ContainerClaim(TypedDict, total=False):
    """``containers[].resources.claims[]``: a pod claim (and request) the container uses."""

    name: str
    request: str


class ContainerResources(TypedDict, total=False):
    """``containers[].resources``."""

    claims: list[ContainerClaim]


class ContainerPort(TypedDict, total=False):
    """``containers[].ports[]``."""

    name: str
    containerPort: int
    protocol: str


class ExecAction(TypedDict, total=False):
    """A probe's ``exec``."""

    command: list[str]


class Probe(TypedDict, total=False):
    """``startupProbe``, ``livenessProbe`` or ``readinessProbe`` of a container.

    ``httpGet``, ``tcpSocket`` and ``grpc`` stay loose dicts: only the simulated kubelet
    reads them (:mod:`cdsim.kubelet.probes`).
    """

    exec: ExecAction
    httpGet: dict[str, Any]
    tcpSocket: dict[str, Any]
    grpc: dict[str, Any]
    initialDelaySeconds: int
    periodSeconds: int
    timeoutSeconds: int
    successThreshold: int
    failureThreshold: int
    terminationGracePeriodSeconds: int


class Container(TypedDict, total=False):
    """``spec.containers[]`` and ``spec.initContainers[]``."""

    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[EnvVar]
    volumeMounts: list[VolumeMount]
    workingDir: str
    resources: ContainerResources
    restartPolicy: str
    """Only on init containers: ``Always`` makes it a sidecar."""
    terminationMessagePolicy: str
    ports: list[ContainerPort]
    startupProbe: Probe
    livenessProbe: Probe
    readinessProbe: Probe


class HostPathVolumeSource(TypedDict, total=False):
    """``volumes[].hostPath``."""

    path: str
    type: str


class Volume(TypedDict, total=False):
    """``spec.volumes[]`` (other sources exist; only these are read)."""

    name: str
    hostPath: HostPathVolumeSource
    emptyDir: dict[str, object]


class PodResourceClaim(TypedDict, total=False):
    """``spec.resourceClaims[]``."""

    name: str
    resourceClaimName: str
    resourceClaimTemplateName: str


class PodSpec(TypedDict, total=False):
    """``spec`` of a Pod."""

    nodeName: str
    serviceAccountName: str
    automountServiceAccountToken: bool
    restartPolicy: str
    terminationGracePeriodSeconds: int
    containers: list[Container]
    initContainers: list[Container]
    volumes: list[Volume]
    resourceClaims: list[PodResourceClaim]
    readinessGates: list[dict[str, str]]


class PodResourceClaimStatus(TypedDict, total=False):
    """``status.resourceClaimStatuses[]``: the claim generated for a pod claim, if any."""

    name: str
    resourceClaimName: str


class PodCondition(TypedDict, total=False):
    """``status.conditions[]`` of a Pod."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class PodStatus(TypedDict, total=False):
    """``status`` of a Pod."""

    phase: str
    podIP: str
    hostIP: str
    resourceClaimStatuses: list[PodResourceClaimStatus]
    conditions: list[PodCondition]


class Pod(TypedDict, total=False):
    """A Pod."""

    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class DeviceRequestAllocationResult(TypedDict, total=False):
    """``status.allocation.devices.results[]`` of a ResourceClaim."""

    request: str
    driver: str
    pool: str
    device: str


class DeviceAllocationResult(TypedDict, total=False):
    """``status.allocation.devices``."""

    results: list[DeviceRequestAllocationResult]


class AllocationResult(TypedDict, total=False):
    """``status.allocation``."""

    devices: DeviceAllocationResult


class ResourceClaimConsumerReference(TypedDict, total=False):
    """``status.reservedFor[]``."""

    apiGroup: str
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(TypedDict, total=False):
    """``status`` of a ResourceClaim."""

    allocation: AllocationResult
    reservedFor: list[ResourceClaimConsumerReference]


class ResourceClaim(TypedDict, total=False):
    """A resource.k8s.io/v1 ResourceClaim."""

    metadata: ObjectMeta
    status: ResourceClaimStatus


class Node(TypedDict, total=False):
    """A Node, as far as its identity and labels go."""

    metadata: ObjectMeta


class ResourceClaimTemplate(TypedDict, total=False):
    """A resource.k8s.io/v1 ResourceClaimTemplate (its spec is never read back)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, object]


class LeaseSpec(TypedDict, total=False):
    """``spec`` of a coordination.k8s.io/v1 Lease."""

    holderIdentity: str
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int


class Lease(TypedDict, total=False):
    """A coordination.k8s.io/v1 Lease."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: LeaseSpec
