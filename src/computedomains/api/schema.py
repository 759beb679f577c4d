"""Declarative API fields: one definition drives parsing, serialising and the CRD schema.

A model is a frozen, keyword-only dataclass that subclasses :class:`Model`; each field is
declared with :func:`field`, which records the JSON name, the description and the
constraints the CRD enforces (minimum, string length and format, list-map keys, immutability).
From those same declarations:

- :meth:`Model.from_dict` checks an object the way the API server would and names the full
  path of the first offending field (``spec.channel.allocationMode: unsupported value ...``);
- :meth:`Model.to_dict` writes it back;
- :func:`openapi` emits the structural OpenAPI v3 schema the CRD carries.

Supported field types: ``str``, ``int``, ``bool``, ``StrEnum`` subclasses, nested models,
``tuple[T, ...]`` (a JSON list), ``T | None`` and ``Mapping[str, Any]`` (an opaque object,
used for ``metadata``, which the API server validates itself).
"""
# size: the one model-to-OpenAPI engine; its field kinds read best side by side

from __future__ import annotations

import copy
import dataclasses
import enum
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeVar, overload

T = TypeVar("T")

FieldTable = tuple[tuple[dataclasses.Field[Any], "FieldInfo", Any], ...]
"""Per model: each dataclass field with its :class:`FieldInfo` and resolved type."""

_INFO = "computedomains.api.schema"
"""Key of our :class:`FieldInfo` in a dataclass field's metadata."""


class ValidationError(ValueError):
    """An object does not match its schema; ``field`` is the JSON path of the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@dataclasses.dataclass(frozen=True)
class StringFormat:
    """A string format: a regular expression (RE2 and Python alike), length bounds, a reason.

    The CRD checks it with a CEL rule that carries ``message``, so the API server's answer says
    what is wrong in words rather than in a regular expression; a strict parse checks the same
    expression and says the same thing.
    """

    regex: str
    min_length: int
    max_length: int
    message: str

    def matches(self, value: str) -> bool:
        """Whether ``value`` has this format (the whole string, as the CEL rule anchors it)."""
        return re.fullmatch(self.regex, value) is not None

    def cel_rule(self) -> str:
        """The ``x-kubernetes-validations`` rule: CEL's ``matches`` searches, so it is anchored."""
        return f"self.matches('^(?:{self.regex})$')"


DNS1123_SUBDOMAIN = StringFormat(
    # Kubernetes' own definition (apimachinery IsDNS1123Subdomain); [.] needs no escaping in
    # either CEL or Python.
    regex=r"[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
    min_length=1,
    max_length=253,
    message="must be a lowercase RFC 1123 subdomain: lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit, e.g. 'my-domain-channel'",
)
"""The names of most Kubernetes objects, ResourceClaimTemplates included."""


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """What a model field means on the wire and in the CRD."""

    json: str
    doc: str
    required: bool
    minimum: int | None = None
    min_length: int | None = None
    string_format: StringFormat | None = None
    """Format of a string field, with its own length bounds (``min_length`` is then unused)."""
    list_map_keys: tuple[str, ...] = ()
    immutable: str | None = None
    """Message of a ``self == oldSelf`` CEL rule, for fields fixed after creation."""
    refused: str | None = None
    """Message refusing any value: a field another API version has, declared here only so that
    a write naming it is refused (by a CEL rule, and by :meth:`Model.from_dict`) instead of
    silently pruned."""


@overload
def field(
    json: str,
    doc: str,
    *,
    default: T,
    required: bool = False,
    minimum: int | None = None,
    min_length: int | None = None,
    string_format: StringFormat | None = None,
    list_map_keys: tuple[str, ...] = (),
    immutable: str | None = None,
    refused: str | None = None,
) -> T: ...
@overload
def field(
    json: str,
    doc: str,
    *,
    default_factory: typing.Callable[[], T],
    minimum: int | None = None,
    min_length: int | None = None,
    string_format: StringFormat | None = None,
    list_map_keys: tuple[str, ...] = (),
    immutable: str | None = None,
    refused: str | None = None,
) -> T: ...
@overload
def field(
    json: str,
    doc: str,
    *,
    minimum: int | None = None,
    min_length: int | None = None,
    string_format: StringFormat | None = None,
    list_map_keys: tuple[str, ...] = (),
    immutable: str | None = None,
    refused: str | None = None,
) -> Any: ...
def field(
    json: str,
    doc: str,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    required: bool | None = None,
    minimum: int | None = None,
    min_length: int | None = None,
    string_format: StringFormat | None = None,
    list_map_keys: tuple[str, ...] = (),
    immutable: str | None = None,
    refused: str | None = None,
) -> Any:
    """Declare a model field.

    A field without a default is required. ``required=True`` on a field with a default marks
    it required in the schema as well: the API server fills in the default before it checks
    required fields, so the field is always present on stored objects.
    """
    has_default = default is not dataclasses.MISSING or default_factory is not dataclasses.MISSING
    info = FieldInfo(
        json=json,
        doc=doc,
        required=bool(required) or not has_default,
        minimum=minimum,
        min_length=min_length,
        string_format=string_format,
        list_map_keys=list_map_keys,
        immutable=immutable,
        refused=refused,
    )
    mutable = default_factory is not dataclasses.MISSING
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        hash=False if mutable else None,  # a mapping is unhashable; leave it out of __hash__
        metadata={_INFO: info},
    )


@typing.dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
class Model:
    """Base of every API model: subclasses become frozen, keyword-only dataclasses.

    A top-level kind sets ``KIND`` (and keeps the group's ``API_VERSION``); ``from_dict``
    then checks ``apiVersion``/``kind`` and ``to_dict`` writes them.
    """

    KIND: ClassVar[str | None] = None
    API_VERSION: ClassVar[str | None] = None
    _field_table: ClassVar[FieldTable | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)

    @classmethod
    def from_dict(cls, data: object, *, strict: bool = True) -> Self:
        """Parse ``data``; raises :class:`ValidationError` naming the offending field.

        ``strict`` rejects unknown fields and checks string formats (for user input). Without
        it unknown fields are dropped, so objects written by a newer version still parse, and
        formats are not checked, so an object stored before its CRD checked a format still
        reaches the controller, whose write with it then fails visibly (for objects read back
        from the API server or from disk). Types, enum values, minimums and required fields
        are checked either way.
        """
        if cls.KIND is None:
            return _parse_model(cls, data, "", strict)
        if not isinstance(data, Mapping):
            raise ValidationError("", f"expected an object, got {_json_type(data)}")
        for key, want in (("apiVersion", cls.API_VERSION), ("kind", cls.KIND)):
            if data.get(key) != want:
                raise ValidationError(key, f"expected {want!r}, got {data.get(key)!r}")
        body = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
        return _parse_model(cls, body, "", strict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; unset optional fields (``None``, empty lists) are left out."""
        out: dict[str, Any] = {}
        if self.KIND is not None:
            out = {"apiVersion": self.API_VERSION, "kind": self.KIND}
        for f, info, _ in model_fields(type(self)):
            value = getattr(self, f.name)
            if value is None or (isinstance(value, tuple | Mapping) and not value):
                continue
            out[info.json] = _dump(value)
        return out


def info_of(f: dataclasses.Field[Any]) -> FieldInfo:
    """The :class:`FieldInfo` of a model field."""
    info = f.metadata.get(_INFO)
    if not isinstance(info, FieldInfo):
        raise TypeError(f"{f.name} is not declared with computedomains.api.schema.field")
    return info


def model_fields(cls: type[Model]) -> FieldTable:
    """(dataclass field, its info, its resolved type) for every field of ``cls``."""
    # Resolving the annotations is most of the cost of a parse, and the kubelet plugin parses
    # on every prepare: resolve once per class, lazily, since a model's annotations may name
    # models defined after it. The result is immutable and kept on the class itself.
    table = cls.__dict__.get("_field_table")
    if table is None:
        hints = typing.get_type_hints(cls)
        table = tuple((f, info_of(f), hints[f.name]) for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        cls._field_table = table
    return typing.cast(FieldTable, table)


def has_default(f: dataclasses.Field[Any]) -> bool:
    """True when the field may be left out of the input."""
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def schema_default(f: dataclasses.Field[Any]) -> Any:
    """The default the CRD declares for ``f``, or ``None`` when it declares none.

    ``None`` and empty-list defaults mean "absent" and have no schema default.
    """
    if f.default is dataclasses.MISSING or f.default is None or f.default == ():
        return None
    return _dump(f.default)


def unwrap_optional(tp: Any) -> Any:
    """``T`` for ``T | None``, else ``tp`` unchanged."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        return args[0]
    return tp


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_name(tp: type) -> str:
    """The JSON name of a Python scalar type."""
    if tp is bool:  # before int: bool subclasses int
        return "boolean"
    if tp is int:
        return "integer"
    if tp is float:
        return "number"
    if tp is str:
        return "string"
    return "null" if tp is type(None) else tp.__name__


def _json_type(value: object) -> str:
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return _type_name(type(value))


def _parse_model(cls: type[T], data: object, path: str, strict: bool) -> T:
    if not isinstance(data, Mapping):
        raise ValidationError(path, f"expected an object, got {_json_type(data)}")
    fields = model_fields(cls)  # type: ignore[arg-type]
    if strict:
        unknown = sorted(str(k) for k in set(data) - {info.json for _, info, _ in fields})
        if unknown:
            raise ValidationError(_join(path, unknown[0]), "unknown field")
    kwargs: dict[str, Any] = {}
    for f, info, tp in fields:
        sub = _join(path, info.json)
        # An explicit null counts as absent, as the API server treats it for these fields.
        if data.get(info.json) is None:
            if not has_default(f):
                raise ValidationError(sub, "required field missing")
            continue
        if info.refused is not None:
            raise ValidationError(sub, info.refused)
        kwargs[f.name] = _parse_value(unwrap_optional(tp), info, data[info.json], sub, strict)
    return cls(**kwargs)


def _parse_value(tp: Any, info: FieldInfo, value: object, path: str, strict: bool) -> Any:
    if typing.get_origin(tp) is tuple:
        return _parse_list(typing.get_args(tp)[0], info, value, path, strict)
    if typing.get_origin(tp) is Mapping:
        if not isinstance(value, Mapping):
            raise ValidationError(path, f"expected an object, got {_json_type(value)}")
        return copy.deepcopy(dict(value))
    if isinstance(tp, type) and issubclass(tp, Model):
        return _parse_model(tp, value, path, strict)
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        if not isinstance(value, str):
            raise ValidationError(path, f"expected a string, got {_json_type(value)}")
        if value not in tp._value2member_map_:
            allowed = ", ".join(f'"{m.value}"' for m in tp)
            raise ValidationError(path, f'unsupported value "{value}": supported values {allowed}')
        return tp(value)
    if tp in (str, int, bool):
        return _parse_scalar(tp, info, value, path, strict)
    raise TypeError(f"unsupported field type {tp!r} at {path}")


def _parse_scalar(tp: type, info: FieldInfo, value: object, path: str, strict: bool) -> Any:
    # bool is an int in Python, but not in JSON: compare the exact type.
    if type(value) is not tp:
        raise ValidationError(path, f"expected {_type_name(tp)}, got {_json_type(value)}")
    if isinstance(value, int) and info.minimum is not None and value < info.minimum:
        raise ValidationError(path, f"must be greater than or equal to {info.minimum}")
    if isinstance(value, str) and info.min_length is not None:
        _check_min_length(value, info.min_length, path)
    if isinstance(value, str) and info.string_format is not None and strict:
        _check_format(info.string_format, value, path)
    return value


def _check_min_length(value: str, minimum: int, path: str) -> None:
    if len(value) < minimum:
        raise ValidationError(
            path, "must not be empty" if minimum == 1 else f"shorter than {minimum}"
        )


def _check_format(fmt: StringFormat, value: str, path: str) -> None:
    _check_min_length(value, fmt.min_length, path)
    if len(value) > fmt.max_length:
        raise ValidationError(path, f"must be no more than {fmt.max_length} characters")
    if not fmt.matches(value):
        raise ValidationError(path, fmt.message)


def _parse_list(item: Any, info: FieldInfo, value: object, path: str, strict: bool) -> Any:
    if not isinstance(value, list):
        raise ValidationError(path, f"expected an array, got {_json_type(value)}")
    items = tuple(_parse_value(item, info, v, f"{path}[{i}]", strict) for i, v in enumerate(value))
    if info.list_map_keys:
        seen: set[tuple[Any, ...]] = set()
        for i, entry in enumerate(items):
            as_json = entry.to_dict()
            key = tuple(as_json.get(k) for k in info.list_map_keys)
            if key in seen:
                named = ", ".join(f"{k}={as_json.get(k)!r}" for k in info.list_map_keys)
                where = f"{path}[{i}].{info.list_map_keys[0]}"
                raise ValidationError(where, f"duplicate entry ({named} is listed twice)")
            seen.add(key)
    return items


def _dump(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, enum.StrEnum):
        return value.value
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    return value


def summary(cls: type[Model]) -> str:
    """The first paragraph of ``cls``'s docstring on one line: its schema description."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


def openapi(cls: type[Model]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of model ``cls`` (an object with its properties).

    A field's own description wins over the description of its model type.
    """
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f, info, tp in model_fields(cls):
        prop = _openapi_type(unwrap_optional(tp), info)
        if info.doc:
            prop["description"] = info.doc
        default = schema_default(f)
        if default is not None:
            prop["default"] = default
        rules = _cel_rules(info)
        if rules:
            prop["x-kubernetes-validations"] = rules
        properties[info.json] = prop
        if info.required:
            required.append(info.json)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if summary(cls):
        schema["description"] = summary(cls)
    if required:
        schema["required"] = sorted(required)
    return schema


def _cel_rules(info: FieldInfo) -> list[dict[str, str]]:
    """The field's ``x-kubernetes-validations``: immutability, then its string format."""
    rules = []
    if info.refused is not None:
        rules.append({"rule": "false", "message": info.refused})
    if info.immutable:
        rules.append({"rule": "self == oldSelf", "message": info.immutable})
    if info.string_format is not None:
        rules.append({"rule": info.string_format.cel_rule(), "message": info.string_format.message})
    return rules


def _openapi_type(tp: Any, info: FieldInfo) -> dict[str, Any]:
    if typing.get_origin(tp) is tuple:
        schema: dict[str, Any] = {
            "type": "array",
            "items": _openapi_type(typing.get_args(tp)[0], info),
        }
        if info.list_map_keys:
            schema["x-kubernetes-list-type"] = "map"
            schema["x-kubernetes-list-map-keys"] = list(info.list_map_keys)
        return schema
    if typing.get_origin(tp) is Mapping:
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, Model):
        return openapi(tp)
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        return {"type": "string", "enum": [m.value for m in tp]}
    return _openapi_scalar(tp, info)


def _openapi_scalar(tp: Any, info: FieldInfo) -> dict[str, Any]:
    if tp not in (str, int, bool):
        raise TypeError(f"unsupported field type {tp!r}")
    schema: dict[str, Any] = {"type": _type_name(tp)}
    if tp is int and info.minimum is not None:
        schema["minimum"] = info.minimum
    if tp is str and info.string_format is not None:
        # maxLength also bounds the CEL rule's cost: the API server refuses an unbounded one.
        schema["minLength"] = info.string_format.min_length
        schema["maxLength"] = info.string_format.max_length
    elif tp is str and info.min_length is not None:
        schema["minLength"] = info.min_length
    return schema
