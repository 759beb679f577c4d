"""Conversion between the served versions, v1beta1 and v1beta2: pure, one object at a time.

The conversion webhook calls :func:`convert` for each object of a ConversionReview; the
migration hooks call it too. What moves where (ComputeDomain; a ComputeDomainClique only
changes its ``apiVersion``):

- v1beta1 → v1beta2: a non-zero ``spec.numNodes`` goes into the annotation
  ``computedomains.io/num-nodes`` (decimal), since v1beta2 has no such field; an annotation
  ``computedomains.io/placement`` (what a v1beta2 ``spec.placement`` became in v1beta1) is
  restored into ``spec.placement`` and removed.
- v1beta2 → v1beta1: the num-nodes annotation goes back into ``spec.numNodes`` (0 without
  one, the v1beta1 default the API server would fill in) and is removed; a set
  ``spec.placement`` is kept as compact JSON in the placement annotation. ``status.conditions``
  and ``status.cliques`` are dropped: v1beta1 has neither, and the controller derives them
  again from the members.

So metadata and spec round-trip losslessly both ways, and so does a v1beta1 status. Anything
this module does not know (other fields, other annotations) is copied unchanged: the API
server prunes what the target schema lacks. The two annotations are reserved for conversion;
one that conversion cannot read raises :class:`ConversionError` naming it, rather than being
guessed at (a failed conversion fails the request; it never loses data).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, MutableMapping
from typing import Any

from computedomains.api import constants, models
from computedomains.api.schema import ValidationError

VERSIONS = (constants.API_VERSION, constants.API_VERSION_V1BETA2)
"""The apiVersions :func:`convert` reads and writes."""
KINDS = (constants.COMPUTE_DOMAIN_KIND, constants.CLIQUE_KIND)
_NUM_NODES = f"metadata.annotations[{constants.NUM_NODES_ANNOTATION}]"
_PLACEMENT = f"metadata.annotations[{constants.PLACEMENT_ANNOTATION}]"


class ConversionError(ValueError):
    """An object cannot be converted; the message names the field (``spec.numNodes: ...``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def convert(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (a ComputeDomain or ComputeDomainClique) at ``api_version``; a new object.

    Same version in and out is the identity (a copy). Raises :class:`ConversionError` for an
    unknown version or kind, or a field conversion cannot carry over.
    """
    if not isinstance(obj, Mapping):
        raise ConversionError("", f"expected an object, got {type(obj).__name__}")
    if api_version not in VERSIONS:
        raise ConversionError("apiVersion", _unsupported("target version", api_version))
    source = obj.get("apiVersion")
    if source not in VERSIONS:
        raise ConversionError("apiVersion", _unsupported("version", source))
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ConversionError("kind", f"cannot convert kind {kind!r}: expected one of {KINDS}")
    out = copy.deepcopy(dict(obj))
    if source == api_version:
        return out
    out["apiVersion"] = api_version
    if kind == constants.CLIQUE_KIND:
        return out  # the same schema in both versions
    if api_version == constants.API_VERSION_V1BETA2:
        _to_v1beta2(out)
    else:
        _to_v1beta1(out)
    return out


def _unsupported(what: str, version: object) -> str:
    return f"unsupported {what} {version!r}: expected one of {', '.join(VERSIONS)}"


def _to_v1beta2(obj: dict[str, Any]) -> None:
    annotations = _annotations(obj)
    spec = _spec(obj)
    if spec is not None:
        num_nodes = spec.pop("numNodes", 0)
        if type(num_nodes) is not int or num_nodes < 0:
            raise ConversionError("spec.numNodes", f"expected an integer >= 0, got {num_nodes!r}")
        # numNodes wins over a stale annotation: the v1beta1 object says what it asks for.
        annotations.pop(constants.NUM_NODES_ANNOTATION, None)
        if num_nodes:
            annotations[constants.NUM_NODES_ANNOTATION] = str(num_nodes)
        placement = annotations.pop(constants.PLACEMENT_ANNOTATION, None)
        if placement is not None:
            spec["placement"] = _read_placement(placement)
    _store_annotations(obj, annotations)


def _to_v1beta1(obj: dict[str, Any]) -> None:
    annotations = _annotations(obj)
    spec = _spec(obj)
    if spec is not None:
        count = annotations.pop(constants.NUM_NODES_ANNOTATION, "0")
        try:
            spec["numNodes"] = models.parse_num_nodes(count)
        except ValueError as exc:
            raise ConversionError(_NUM_NODES, str(exc)) from None
        annotations.pop(constants.PLACEMENT_ANNOTATION, None)
        if "placement" in spec:
            placement = spec.pop("placement")
            _read_placement(placement, field="spec.placement")
            annotations[constants.PLACEMENT_ANNOTATION] = json.dumps(
                placement, separators=(",", ":"), sort_keys=True
            )
    _store_annotations(obj, annotations)
    status = obj.get("status")
    if isinstance(status, MutableMapping):
        status.pop("conditions", None)
        status.pop("cliques", None)


def _annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ConversionError("metadata", "expected an object")
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise ConversionError("metadata.annotations", "expected an object")
    return dict(annotations)


def _store_annotations(obj: dict[str, Any], annotations: dict[str, Any]) -> None:
    """Write changed ``annotations`` back; none left removes the key, as the API server does."""
    if annotations == _annotations(obj):
        return
    metadata = obj.setdefault("metadata", {})
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)


def _spec(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    spec = obj.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConversionError("spec", f"expected an object, got {type(spec).__name__}")
    return spec


def _read_placement(value: object, *, field: str = _PLACEMENT) -> Any:
    """A placement as JSON data, checked against the v1beta2 schema."""
    if field == _PLACEMENT:
        if not isinstance(value, str):
            raise ConversionError(field, f"expected a JSON string, got {type(value).__name__}")
        try:
            value = json.loads(value)
        # Not only malformed JSON: a number past Python's 4300 digits is a ValueError, and
        # nesting deeper than the interpreter's stack a RecursionError.
        except (ValueError, RecursionError) as exc:
            raise ConversionError(field, f"not JSON: {exc}") from None
    try:
        models.Placement.from_dict(value, strict=False)
    except ValidationError as exc:
        inner = f"{field}.{exc.field}" if exc.field else field
        raise ConversionError(inner, exc.message) from None
    return value
