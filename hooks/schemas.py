"""Validate stored objects against a CRD's structural schema with ``jsonschema``.

A Kubernetes structural schema is OpenAPI 3.0 with extensions; :func:`to_json_schema` turns it
into JSON Schema (draft 2020-12) with the same meaning wherever JSON Schema can say it:

- ``x-kubernetes-int-or-string``: an integer or a string (the schema has no ``type`` then);
- ``nullable: true``: ``null`` is allowed beside the type;
- OpenAPI 3.0's boolean ``exclusiveMinimum``/``exclusiveMaximum``: draft 2020-12's numbers;
- ``x-kubernetes-list-type: set``: ``uniqueItems``; ``map`` lists: no two items with the same
  ``x-kubernetes-list-map-keys`` (checked by :func:`validate`, JSON Schema cannot say it);
- every other ``x-kubernetes-*`` key is dropped: preserve-unknown-fields and embedded resources
  only widen what is allowed, and CEL rules (``x-kubernetes-validations``) are the API
  server's to evaluate.

Each problem names the object and the field (``spec.channel.resourceClaimTemplate.name``,
``status.nodes[2].index``), never just the schema rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jsonschema

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "additionalItems")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One field of one object that the schema does not accept."""

    kind: str
    namespace: str
    name: str
    path: str
    """The field, as ``a.b[3].c`` (``<root>`` for the object itself)."""
    message: str

    def line(self) -> str:
        """The problem as one progress line."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"INVALID {self.kind} {where}: {self.path}: {self.message}"


def to_json_schema(structural: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a structural schema; see the module docstring."""
    converted = _convert(structural)
    converted["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return converted


def _convert(node: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _convert(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, Sequence):
            out[key] = [_convert(sub) for sub in value]
        elif key in _SCHEMA_ONE and isinstance(value, Mapping):
            out[key] = _convert(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [*out.get("anyOf", []), {"type": "integer"}, {"type": "string"}]
    for bound in ("Minimum", "Maximum"):
        flag = out.get(f"exclusive{bound}")
        if isinstance(flag, bool):
            limit = out.get(bound.lower())
            del out[f"exclusive{bound}"]
            if flag and limit is not None:
                out[f"exclusive{bound}"] = out.pop(bound.lower())
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@dataclasses.dataclass(frozen=True)
class Validator:
    """A compiled schema for one kind; reusable across objects (compiling is the slow part)."""

    kind: str
    structural: Mapping[str, Any]
    _compiled: jsonschema.protocols.Validator = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        schema = to_json_schema(self.structural)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        object.__setattr__(self, "_compiled", cls(schema))

    def problems(self, obj: Mapping[str, Any]) -> list[Problem]:
        """Every problem of ``obj``, ordered by field path."""
        meta = obj.get("metadata") or {}
        found = [(path, message) for path, message in self._schema_errors(obj)]
        found.extend(_duplicate_keys(self.structural, obj, ()))
        return [
            Problem(
                self.kind,
                str(meta.get("namespace") or ""),
                str(meta.get("name") or ""),
                format_path(path),
                message,
            )
            for path, message in sorted(
                set(found), key=lambda item: (format_path(item[0]), item[1])
            )
        ]

    def _schema_errors(self, obj: Mapping[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
        for error in self._compiled.iter_errors(obj):
            path = tuple(error.absolute_path)
            if error.validator == "required" and isinstance(error.instance, Mapping):
                # The error sits on the parent; name the missing field itself.
                required = error.validator_value
                for field in required if isinstance(required, list) else []:
                    if field not in error.instance:
                        yield (*path, field), "required field missing"
                continue
            yield path, error.message


def _duplicate_keys(
    schema: Mapping[str, Any], value: Any, path: tuple[Any, ...]
) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Items of ``x-kubernetes-list-type: map`` lists that repeat another item's keys."""
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_schema = properties.get(key, extra if isinstance(extra, Mapping) else None)
            if sub_schema is not None:
                yield from _duplicate_keys(sub_schema, sub, (*path, key))
    elif isinstance(value, list):
        items = schema.get("items")
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: dict[tuple[Any, ...], int] = {}
        for index, item in enumerate(value):
            if schema.get("x-kubernetes-list-type") == "map" and isinstance(item, Mapping):
                identity = tuple(repr(item.get(k)) for k in keys)
                if identity in seen:
                    named = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
                    yield (
                        (*path, index),
                        f"duplicate list-map key ({named}) of item {seen[identity]}",
                    )
                else:
                    seen[identity] = index
            if isinstance(items, Mapping):
                yield from _duplicate_keys(items, item, (*path, index))


def format_path(path: Sequence[Any]) -> str:
    """``("spec", "nodes", 2, "index")`` → ``spec.nodes[2].index``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"
