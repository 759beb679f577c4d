"""A ComputeDomain as every component and hook acts on it, parsed once from its raw object.

The controller, the webhook and the hooks each need part of it: identity, the channel
template, the clique placement, the lifecycle (deleting, finalizers), the status. One view
serves them all, read from an object of either served version: fields it cannot parse count
as absent, since an object from a newer version must still be served by its identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, NewType

from computedomains.api import constants, models
from computedomains.api.schema import ValidationError

DomainUID = NewType("DomainUID", str)


@dataclasses.dataclass(frozen=True)
class Domain:
    """One ComputeDomain: who it is, what it asks for and where it is in its life."""

    uid: DomainUID
    name: str
    namespace: str
    template: str
    """``spec.channel.resourceClaimTemplate.name`` (the same field in both versions; "" if
    none)."""
    allocation_mode: models.AllocationMode = models.AllocationMode.SINGLE
    num_nodes: int = 0
    """The v1beta1 ``spec.numNodes`` (its annotation at v1beta2); 0 when unset."""
    clique: models.CliquePlacement = models.CliquePlacement.NONE
    """``spec.placement.clique`` (v1beta2; v1beta1 has none)."""
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    status: models.ComputeDomainStatusV1Beta2 | None = dataclasses.field(
        default=None, compare=False
    )
    """Not compared: a view is a key (hooks map domains to their pods) and the status changes."""
    generation: int = 0
    """``metadata.generation``: the conditions' ``observedGeneration``."""

    @property
    def finalized(self) -> bool:
        """Our finalizer is on the object."""
        return constants.FINALIZER in self.finalizers

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Domain:
        """The view of a raw ComputeDomain of either version."""
        meta = raw.get("metadata") or {}
        try:
            model = models.ComputeDomainV1Beta2.from_dict(raw, strict=False)
        except ValidationError:
            # The CRD validates every write, so this is an object from a future version:
            # act on its identity and the fields read below without the model.
            model = models.ComputeDomainV1Beta2(metadata=meta)
        spec = model.spec
        return cls(
            uid=DomainUID(str(meta.get("uid") or "")),
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            template=template_of(raw),
            allocation_mode=spec.channel.allocation_mode if spec else models.AllocationMode.SINGLE,
            num_nodes=model.num_nodes,
            clique=model.clique_placement,
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
            status=model.status,
            generation=model.generation,
        )


def template_of(obj: Mapping[str, Any]) -> str:
    """The channel ResourceClaimTemplate name a ComputeDomain object names ("" if none)."""
    channel = (obj.get("spec") or {}).get("channel") or {}
    return str((channel.get("resourceClaimTemplate") or {}).get("name") or "")


def in_namespace(domains: Iterable[Domain], namespace: str) -> list[Domain]:
    """The domains of ``namespace``, by name."""
    return sorted((d for d in domains if d.namespace == namespace), key=lambda d: d.name)
