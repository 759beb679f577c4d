"""A ComputeDomain as every component and hook acts on it, parsed once from its raw object.

The controller, the webhook and the hooks each need part of it: identity, the channel
template, the clique placement, the lifecycle (deleting, finalizers), the status. One view
serves them all, read from an object of either served version: :meth:`Domain.parse` validates
through the model (fields it cannot parse count as absent: an object from a newer version must
still be served by its identity); :meth:`Domain.peek` reads the few fields admission needs.
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
        """The view of a raw ComputeDomain of either version, validated by the model.

        A status the model cannot read (a newer version's) costs the status only; a spec it
        cannot read leaves the object to be acted on by its identity alone (no template).
        """
        meta = raw.get("metadata") or {}
        model = _model(raw) or _model({k: v for k, v in raw.items() if k != "status"})
        if model is None:
            model = models.ComputeDomainV1Beta2(metadata=meta)
        spec = model.spec
        return cls(
            uid=DomainUID(str(meta.get("uid") or "")),
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            template=spec.channel.resource_claim_template.name if spec else "",
            allocation_mode=spec.channel.allocation_mode if spec else models.AllocationMode.SINGLE,
            num_nodes=model.num_nodes,
            clique=model.clique_placement,
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
            status=model.status,
            generation=model.generation,
        )

    @classmethod
    def peek(cls, raw: Mapping[str, Any]) -> Domain:
        """Identity, template, clique placement and lifecycle, read from ``raw`` unvalidated.

        What admission needs, at the cost of a few lookups: the webhook reads every domain
        for every pod it admits, so it must not parse each one's status.
        """
        meta = raw.get("metadata") or {}
        spec = _mapping(raw.get("spec"))
        try:
            clique = models.CliquePlacement(_mapping(spec.get("placement")).get("clique") or "None")
        except ValueError:
            clique = models.CliquePlacement.NONE
        return cls(
            uid=DomainUID(str(meta.get("uid") or "")),
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            template=template_of(raw),
            clique=clique,
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is an object, else an empty one (a field of an unexpected shape)."""
    return value if isinstance(value, Mapping) else {}


def _model(raw: Mapping[str, Any]) -> models.ComputeDomainV1Beta2 | None:
    try:
        return models.ComputeDomainV1Beta2.from_dict(raw, strict=False)
    except ValidationError:
        return None


def template_of(obj: Mapping[str, Any]) -> str:
    """The channel ResourceClaimTemplate name a ComputeDomain object names ("" if none)."""
    claim = _mapping(
        _mapping(_mapping(obj.get("spec")).get("channel")).get("resourceClaimTemplate")
    )
    return str(claim.get("name") or "")


def in_namespace(domains: Iterable[Domain], namespace: str) -> list[Domain]:
    """The domains of ``namespace``, by name."""
    return sorted((d for d in domains if d.namespace == namespace), key=lambda d: d.name)
