"""Generated bad input for the API server, and what its answers mean (pure: no API calls).

Hypothesis strategies of what people write by hand for ComputeDomains, built from the project's
own models (:mod:`computedomains.api.models`): ComputeDomain specs of both versions, channel
template names, the opaque configs of ResourceClaims, ComputeDomainClique objects, the reserved
annotations (``computedomains.io/num-nodes``, ``computedomains.io/placement``,
``computedomains.io/members``) and the pod label ``computedomains.io/domain``.

Each :class:`Example` is a valid object with at most one thing made wrong (a near miss: an
unknown field, a wrong type, a number out of range, a bad enum value, the wrong case, an empty,
huge or unicode string, a null, a field removed) and records where: :func:`classify` then tells
whether a refusal names that field. What an accepted object must still do is checked by
:func:`domain_works`, :func:`pod_works` and :func:`claim_problem`; :class:`Tally` counts.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import enum
import functools
import json
import random
import string
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from computedomains.api import constants, conversion, models, schema
from computedomains.api.schema import ValidationError
from computedomains.controller import claimcheck
from computedomains.webhook import podaffinity

V1, V2 = constants.API_VERSION, constants.API_VERSION_V1BETA2
DOMAIN_LABEL = podaffinity.DOMAIN_LABEL
TEMPLATE_AT = ("spec", "channel", "resourceClaimTemplate", "name")
PARAMETERS_AT: tuple[str | int, ...] = ("spec", "devices", "config", 0, "opaque", "parameters")
PARAMETERS_LIMIT = 10 * 1024
"""Bytes of an opaque config's parameters the API server takes (resource.k8s.io)."""


# -- where a field is -------------------------------------------------------------------------


class Entry(str):
    """A key of a map field (annotations, labels): rendered ``[key]`` in a path."""

    __slots__ = ()


Path = tuple[str | int, ...]


def render(at: Path) -> str:
    """A path as the API server writes it: ``spec.devices.config[0]``, ``labels[key]``."""
    out = ""
    for part in at:
        if isinstance(part, int | Entry):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


class _Remove:
    """The value that removes a field."""

    def __repr__(self) -> str:
        return "<removed>"


REMOVE = _Remove()


def put(obj: dict[str, Any], at: Path, value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``value`` at ``at`` (or the field removed, for REMOVE).

    Missing objects on the way are made (an ``annotations`` map, say).
    """
    out = copy.deepcopy(obj)
    if not at:
        raise ValueError("a path names at least one field")
    parent: Any = out
    for part in at[:-1]:
        parent = parent[part] if isinstance(part, int) else parent.setdefault(part, {})
    last = at[-1]
    if value is REMOVE:
        if isinstance(parent, dict):
            parent.pop(last, None)
        elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
            del parent[last]
    else:
        parent[last] = copy.deepcopy(value)
    return out


def without(obj: Any, at: Path) -> Any:
    """A deep copy of ``obj`` without what is at ``at`` (where there is something)."""
    out = copy.deepcopy(obj)
    parent: Any = out
    for part in at[:-1]:
        keyed = isinstance(parent, dict) and not isinstance(part, int) and part in parent
        listed = isinstance(parent, list) and isinstance(part, int) and part < len(parent)
        if not (keyed or listed):
            return out
        parent = parent[part]
    if isinstance(parent, dict):
        parent.pop(at[-1], None)
    elif isinstance(parent, list) and isinstance(at[-1], int) and at[-1] < len(parent):
        parent[at[-1]] = None
    return out


@dataclasses.dataclass(frozen=True)
class Example:
    """One object to send: valid, or valid but for the one field at ``at``."""

    body: dict[str, Any]
    base: dict[str, Any]
    """The valid object the example was made from (``body`` itself for a valid example)."""
    at: Path = ()
    """Where ``body`` differs from ``base``; () for a valid example."""
    how: str = "valid"
    also: tuple[str, ...] = ()
    """Other names a refusal may give the field by: the map that holds an annotation or label,
    the key itself, an enclosing object whose size limit the change went over."""

    @property
    def field(self) -> str:
        """The path of the field made wrong ("" for a valid example)."""
        return render(self.at)

    @property
    def names(self) -> tuple[str, ...]:
        """What a refusal of this example must mention, one of them at least.

        A label or annotation that is not a string never reaches admission: the API server's
        decoder refuses the request, naming the map by its Go field (``ObjectMeta.labels``).
        """
        decoded: tuple[str, ...] = ()
        maps = (("metadata", "labels"), ("metadata", "annotations"))
        if self.at[:2] in maps and not isinstance(self.value, str):
            decoded = (f"ObjectMeta.{self.at[1]}",)
        return ((self.field,) if self.at else ()) + self.also + decoded

    @property
    def value(self) -> Any:
        """The value at ``at`` (:data:`REMOVE` when the change removed it)."""
        value: Any = self.body
        for part in self.at:
            try:
                value = value[part]
            except (KeyError, IndexError, TypeError):
                return REMOVE
        return value

    def describe(self, limit: int = 240) -> str:
        """The example in one line, for a failure message."""
        shown = json.dumps(self.value, ensure_ascii=True, default=repr)
        if len(shown) > limit:
            shown = f"{shown[:limit]}... ({len(shown)} characters)"
        return f"{self.how} at {self.field or '-'}: {shown}"


def change(
    base: dict[str, Any], at: Path, how: str, value: Any, *, also: Iterable[str] = ()
) -> Example:
    """The example that sets ``value`` (or :data:`REMOVE`) at ``at`` in ``base``."""
    return Example(put(base, at, value), base, at, how, tuple(also))


# -- values -----------------------------------------------------------------------------------

HUGE_SIZES = (254, 1_000, 10_300, 70_000, 300_000)
"""Lengths of huge strings: past a name's 253, an opaque config's 10 KiB, up to 300 kB (past
the 256 KiB of an object's annotations, well within a request's 3 MiB)."""
ODD_TEXT = (
    "", " ", "\t", "\n", "ünïcödé", "名前", "𝔡𝔬𝔪𝔞𝔦𝔫", "zero\u200bwidth", "nul\x00byte", "😀",
    "a/b", "a b", "a_b", "-", ".", "..", "null", "true", "0", "-1", "{}", "[]", "'", "\\", '"',
    "<script>", "${HOME}", "%s", "\u202eevil",
)  # fmt: skip
CONFUSABLES = tuple(
    sorted(
        {m.value for e in (models.AllocationMode, models.Status, models.CliquePlacement) for m in e}
        | {constants.COMPUTE_DOMAIN_KIND, constants.CLIQUE_KIND, constants.CHANNEL_CONFIG_KIND,
           constants.DAEMON_CONFIG_KIND, V1, V2, constants.VERSION, constants.VERSION_V1BETA2,
           constants.GROUP, "resource.nvidia.com/v1", "True", "False", "Unknown"}
    )
)  # fmt: skip
"""Strings of this API that are valid somewhere, perhaps not here: the other enum's values,
kinds, versions."""
JSON_SAMPLES: dict[str, tuple[Any, ...]] = {
    "string": ("text", "", "1", "true"),
    "integer": (0, -1, 7, 2**64),
    "number": (1.5, -0.5, 1e300),
    "boolean": (True, False),
    "array": ([], ["a"], [{}], [None]),
    "object": ({}, {"a": 1}, {"name": "x"}),
}
"""One value or a few of each JSON type, for "wrong type" (NaN and infinities are not JSON)."""
INTEGERS_NEAR = (
    -1, -(2**31), 2**31, 2**53 + 1, 10**18 - 1, 10**18, 2**63 - 1, 2**63, 2**64, -(2**63) - 1,
    0, 1, 17, 18, 72, 1.5, 2.0, -0.0, 1e20, "3", "", "one", True,
)  # fmt: skip
"""Near misses of an integer: out of range either way, past int64, floats, digits as text."""


@functools.cache
def huge(char: str = "a") -> st.SearchStrategy[str]:
    """Strings of ``char`` of the huge lengths."""
    return st.sampled_from(HUGE_SIZES).map(lambda n: char * n)


@functools.lru_cache(maxsize=1024)
def near_text(valid: str) -> st.SearchStrategy[str]:
    """Strings near ``valid``: its case changed, padded, cut, doubled; odd and huge text."""
    variants = {
        valid.upper(), valid.lower(), valid.swapcase(), valid.capitalize(), f" {valid}",
        f"{valid} ", f"{valid}\n", valid[:-1], valid[1:], valid + valid, valid.replace("-", "_"),
        valid.replace(".", "-"), f"{valid}\x00",
    }  # fmt: skip
    return st.one_of(
        st.sampled_from(sorted(variants - {valid})),
        st.sampled_from([t for t in ODD_TEXT if t != valid]),
        st.sampled_from([c for c in CONFUSABLES if c != valid]),
        huge(),
        st.text(max_size=24),
    )


@functools.cache
def wrong_type(json_type: str) -> st.SearchStrategy[Any]:
    """A value of any JSON type but ``json_type``."""
    others = [v for t, values in JSON_SAMPLES.items() if t != json_type for v in values]
    return st.sampled_from(others)


@functools.cache
def any_json() -> st.SearchStrategy[Any]:
    """A small JSON value of any type."""
    return st.sampled_from([v for values in JSON_SAMPLES.values() for v in values])


@functools.cache
def dns_names() -> st.SearchStrategy[str]:
    """Valid names of Kubernetes objects (DNS-1123 subdomains, ``schema.DNS1123_SUBDOMAIN``)."""
    fmt = schema.DNS1123_SUBDOMAIN
    return st.one_of(
        st.from_regex(fmt.regex, fullmatch=True).filter(lambda s: len(s) <= fmt.max_length),
        st.sampled_from(["a", "0", "nccl.allreduce-1", "xn--bcher-kva", "a" * 63 + "." + "b" * 63,
                         "a" * 64, "a" * 253, "1.2.3.4"]),
    )  # fmt: skip


NAME_NEAR_MISSES = (
    "", "Channel", "CHANNEL", "cd_channel", "-channel", "channel-", "channel.", ".channel", "a..b",
    "a.-b", "a-.b", "team/channel", "a b", " a", "a ", "a\n", "ünï", "名前", "a" * 254,
    "a." * 127 + "a", "a:b", "a@b", "*", "a*", "..", ".", "-",
)  # fmt: skip
"""Names just outside DNS-1123 (``a." * 127 + "a"`` is 255 characters)."""


@functools.cache
def bad_names() -> st.SearchStrategy[str]:
    """Names a Kubernetes object may not have, and some it may."""
    return st.one_of(
        st.sampled_from(NAME_NEAR_MISSES), dns_names(), huge(), st.text(max_size=30),
        dns_names().map(str.upper), dns_names().map(lambda s: s + "-"),
    )  # fmt: skip


def is_object_name(name: object) -> bool:
    """Whether ``name`` is a valid name for a ResourceClaimTemplate (a DNS-1123 subdomain)."""
    fmt = schema.DNS1123_SUBDOMAIN
    return isinstance(name, str) and len(name) <= fmt.max_length and fmt.matches(name)


@functools.cache
def enum_near(values: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Strings near the enum ``values``: other case, padded, plural, other enums' values."""
    misses = {m for v in values for m in (v.lower(), v.upper(), f" {v}", f"{v} ", f"{v}s", v[:-1])}
    return st.one_of(
        st.sampled_from(sorted(misses - set(values))),
        st.sampled_from([c for c in CONFUSABLES if c not in values]),
        st.sampled_from(ODD_TEXT),
        huge("A"),
    )


TYPE_FIELDS = frozenset({"apiVersion", "kind"})
"""The fields the API server reads before the rest, case-insensitively."""


@functools.cache
def unknown_keys(names: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Field names a schema does not have: typos of its ``names``, other versions', made up."""
    known = set(names)
    typos = {
        t
        for k in known
        for t in (k.lower(), k[0].upper() + k[1:], k + "s", k[:-1], k[:1] + k[2:],
                  "".join(f"_{c.lower()}" if c.isupper() else c for c in k), f"{k} ")
        if t
    }  # fmt: skip
    others = {"extra", "\u00f1ame", "placement", "numNodes", "domainId", "uid", "status",
              "spec", "metadata", "allocationMode", "daemons", "nodes", "x-kubernetes",
              "clique"}  # fmt: skip
    # The API server reads apiVersion and kind with Go's case-insensitive JSON decoding: a
    # second "Kind" is the kind to it, not an unknown field it could name.
    folded = {k.casefold() for k in known & TYPE_FIELDS}
    keys = sorted(k for k in (typos | others) - known if k.casefold() not in folded)
    return st.one_of(
        st.sampled_from(keys),
        st.from_regex(r"[a-z][a-zA-Z0-9]{0,15}", fullmatch=True).map(lambda s: f"x{s}"),
    )


# -- the models' fields -----------------------------------------------------------------------


class Kind(enum.StrEnum):
    """What sort of value a field holds, for its near misses."""

    OBJECT = "object"
    """An object of the model: unknown fields can be added to it."""
    MODEL = "model"
    STRING = "string"
    NAME = "name"
    INTEGER = "integer"
    ENUM = "enum"
    LIST = "list"
    REFUSED = "refused"
    """A field the version declares only to refuse it (v1beta2 ``spec.numNodes``)."""
    FIXED = "fixed"
    """``apiVersion`` or ``kind`` of an opaque config."""


@dataclasses.dataclass(frozen=True)
class Site:
    """A place in an object where something can be made wrong."""

    at: Path
    kind: Kind
    present: bool = True
    good: tuple[str, ...] = ()
    """Valid strings here (an enum's values, the fixed value), for near misses of them."""
    known: tuple[str, ...] = ()
    """An object's field names (unknown fields are made from them)."""
    keys: tuple[str, ...] = ()
    """A list's map keys (a duplicate entry repeats them)."""


JSON_TYPE = {Kind.STRING: "string", Kind.NAME: "string", Kind.ENUM: "string",
             Kind.FIXED: "string", Kind.INTEGER: "integer", Kind.MODEL: "object",
             Kind.OBJECT: "object", Kind.LIST: "array", Kind.REFUSED: ""}  # fmt: skip
TOP_SKIPPED = frozenset({"metadata", "status"})
"""Top-level fields left alone: metadata (annotations and labels have their own strategies),
and status (the API server drops it from a create)."""


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, schema.Model)


def _kind(tp: Any, info: schema.FieldInfo) -> tuple[Kind, tuple[str, ...]]:
    if info.refused is not None:
        return Kind.REFUSED, ()
    if typing.get_origin(tp) is tuple:
        return Kind.LIST, ()
    if _is_model(tp):
        return Kind.MODEL, ()
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        return Kind.ENUM, tuple(m.value for m in tp)
    if tp is str:
        return (Kind.NAME if info.string_format is not None else Kind.STRING), ()
    if tp is int:
        return Kind.INTEGER, ()
    raise TypeError(f"no near misses for {tp!r}")


def sites(
    model: type[schema.Model], obj: Mapping[str, Any], at: Path = (), *, top: bool = True
) -> list[Site]:
    """Every place in ``obj`` (a valid ``model``) where a field can be made wrong.

    Each object present (unknown fields go there), each field it declares, present or not;
    down into the objects and list entries present. ``top``: ``obj`` is a top-level object, its
    metadata and status are left alone; one of a ``KIND`` also has ``apiVersion`` and ``kind``.
    """
    fields = schema.model_fields(model)
    known = tuple(info.json for _, info, _ in fields)
    if model.KIND is not None:
        known += ("apiVersion", "kind")
    found = [Site(at, Kind.OBJECT, known=known)]
    if model.KIND is not None and not top:
        found.append(Site((*at, "apiVersion"), Kind.FIXED, good=(str(model.API_VERSION),)))
        found.append(Site((*at, "kind"), Kind.FIXED, good=(str(model.KIND),)))
    for _, info, tp in fields:
        if top and info.json in TOP_SKIPPED:
            continue
        here = (*at, info.json)
        inner = schema.unwrap_optional(tp)
        kind, good = _kind(inner, info)
        value = obj.get(info.json)
        keys = info.list_map_keys if kind is Kind.LIST else ()
        found.append(Site(here, kind, info.json in obj, good, keys=keys))
        if kind is Kind.MODEL and isinstance(value, Mapping):
            found += sites(inner, value, here, top=False)
        elif kind is Kind.LIST and isinstance(value, list):
            item = typing.get_args(inner)[0]
            for i, entry in enumerate(value):
                if _is_model(item) and isinstance(entry, Mapping):
                    found += sites(item, entry, (*here, i), top=False)
    return found


INTEGERS = st.one_of(st.sampled_from(INTEGERS_NEAR), st.integers(-(10**20), 10**20))
BAD_LISTS = st.sampled_from([[], [None], ["text"], [[]], [1]])
SPECIFIC_WEIGHT = 3
"""How much likelier a near miss of the field's own sort is than a null, a removal or a wrong
type (which every field gets)."""


def near_misses(site: Site, current: Any) -> list[tuple[str, st.SearchStrategy[Any]]]:
    """The sorts of near miss for the field at ``site``, whose value is ``current``: what is
    done, and the values it takes (:data:`REMOVE` removes the field)."""
    generic: list[tuple[str, st.SearchStrategy[Any]]] = [("null", st.none())]
    if site.present:
        generic.append(("removed", st.just(REMOVE)))
    if JSON_TYPE[site.kind]:
        generic.append(("wrong type", wrong_type(JSON_TYPE[site.kind])))
    specific: list[tuple[str, st.SearchStrategy[Any]]] = []
    if site.kind in (Kind.STRING, Kind.FIXED):
        valid = current if isinstance(current, str) and current else (site.good or ("x",))[0]
        specific.append(("near miss", near_text(valid)))
    elif site.kind is Kind.NAME:
        specific.append(("bad name", bad_names()))
    elif site.kind is Kind.INTEGER:
        specific.append(("out of range", INTEGERS))
    elif site.kind is Kind.ENUM:
        specific.append(("bad enum value", enum_near(site.good)))
    elif site.kind is Kind.MODEL:
        specific.append(("empty object", st.just({})))
    elif site.kind is Kind.LIST:
        specific.append(("bad list", BAD_LISTS))
        if site.keys and isinstance(current, list) and current:
            specific.append(("duplicate entry", st.just([*current, current[0]])))
    elif site.kind is Kind.REFUSED:
        specific.append(("field of another version", st.one_of(any_json(), st.integers(0, 72))))
    return generic + specific * SPECIFIC_WEIGHT


@st.composite
def perturbed(
    draw: st.DrawFn,
    model: type[schema.Model],
    base: dict[str, Any],
    at: Path = (),
    *,
    top: bool = True,
) -> Example:
    """``base`` (a valid ``model`` at ``at`` in it) with one field of the model made wrong."""
    obj: Any = base
    for part in at:
        obj = obj[part]
    rnd = _dice(draw, base, at)
    site = rnd.choice(sites(model, obj, at, top=top))
    if site.kind is Kind.OBJECT:
        key = draw(unknown_keys(site.known))
        value = draw(any_json())
        return change(base, (*site.at, key), "unknown field", value)
    current: Any = obj
    for part in site.at[len(at) :]:
        current = current.get(part) if isinstance(current, Mapping) else current[part]
    how, values = rnd.choice(near_misses(site, current))
    value = draw(values)
    return change(base, site.at, how, value)


def valid_object(
    model: type[schema.Model],
    overrides: Mapping[str, st.SearchStrategy[Any]],
    at: str = "",
    *,
    top: bool = True,
) -> st.SearchStrategy[dict[str, Any]]:
    """Valid JSON of ``model`` (not its ``apiVersion``/``kind``, metadata or status).

    ``overrides`` give the values of some fields by path (``daemons[].nodeName``); optional
    fields are there or not.
    """
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f, info, tp in schema.model_fields(model):
        if info.refused is not None or (top and info.json in TOP_SKIPPED):
            continue
        path = f"{at}.{info.json}" if at else info.json
        inner = schema.unwrap_optional(tp)
        value = overrides[path] if path in overrides else _valid_value(inner, info, overrides, path)
        (optional if schema.has_default(f) else required)[info.json] = value
    return st.fixed_dictionaries(required, optional=optional)


def _valid_value(
    tp: Any, info: schema.FieldInfo, overrides: Mapping[str, st.SearchStrategy[Any]], path: str
) -> st.SearchStrategy[Any]:
    if typing.get_origin(tp) is tuple:
        entries = valid_object(typing.get_args(tp)[0], overrides, f"{path}[]", top=False)
        keys = info.list_map_keys
        return st.lists(
            entries,
            max_size=3,
            unique_by=(lambda e: tuple(e.get(k) for k in keys)) if keys else None,
        )
    if _is_model(tp):
        return valid_object(tp, overrides, path, top=False)
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        return st.sampled_from([m.value for m in tp])
    if tp is str:
        if info.string_format is not None:
            return dns_names()
        return st.text(string.ascii_lowercase + string.digits + "-.", min_size=1, max_size=16)
    if tp is int:
        return st.integers(min_value=info.minimum or 0, max_value=72)
    raise TypeError(f"no valid values for {tp!r} at {path}")


def _dice(draw: st.DrawFn, *salt: Any) -> random.Random:
    """A random generator for the choices between sorts of examples, seeded by Hypothesis and
    by what was drawn so far (``salt``).

    Hypothesis favours its simplest choices (the first option, the seed 0), so that most
    examples would be the first field's first near miss; these choices are made evenly instead,
    still reproducibly (``derandomize``).
    """
    seed = draw(st.integers(0, 2**64))
    return random.Random(f"{seed}|{json.dumps(salt, sort_keys=True, default=repr)}")


# -- ComputeDomains ---------------------------------------------------------------------------

NUM_NODES_VALUES: tuple[Any, ...] = (
    "0", "1", "4", "18", "007", "9" * 18, "9" * 19, "1" + "0" * 18, "-1", "+4", " 4", "4 ", "4.0",
    "0x10", "1e3", "\u0664", "\uff14", "four", "", "null", "4,5", 4, True, None, {}, [],
)  # fmt: skip
"""Values of ``computedomains.io/num-nodes``: counts, near misses (an Arabic-Indic and a
full-width digit, 19 digits), other JSON types."""
PLACEMENT_VALUES: tuple[Any, ...] = (
    '{"clique":"Required"}', '{"clique":"Preferred"}', '{"clique":"None"}', "{}",
    '{"clique":"required"}', '{"clique":"Always"}', '{"clique":1}', '{"clique":null}',
    '{"clique":"Required","extra":1}', "[]", '"Required"', "Required", "", "{", "null",
    '{"clique":"Required"', 1, None, {"clique": "Required"},
)  # fmt: skip
"""Values of ``computedomains.io/placement`` (compact JSON of a v1beta2 placement)."""
DOMAIN_KEY_MISSES = (
    f"{constants.NUM_NODES_ANNOTATION} ", f"{constants.OWN_PREFIX}/numNodes",
    "Computedomains.io/num-nodes", f"{constants.OWN_PREFIX}//num-nodes", f"{constants.OWN_PREFIX}/",
    f"{constants.PLACEMENT_ANNOTATION}_", f"{constants.OWN_PREFIX}/\u00fcn\u00ef",
)  # fmt: skip
"""Near misses of the reserved annotations' keys: invalid keys, and other valid ones."""


def domain_annotation_values(key: str) -> st.SearchStrategy[Any]:
    """Values of the ComputeDomain annotation ``key`` (either reserved one's, for another)."""
    values = {constants.NUM_NODES_ANNOTATION: NUM_NODES_VALUES,
              constants.PLACEMENT_ANNOTATION: PLACEMENT_VALUES}.get(key)  # fmt: skip
    known = st.sampled_from(values if values else NUM_NODES_VALUES + PLACEMENT_VALUES)
    return st.one_of(known, huge("9"), st.sampled_from(ODD_TEXT))


def annotation_example(
    draw: st.DrawFn,
    base: dict[str, Any],
    keys: Sequence[str],
    misses: Sequence[str],
    values: Callable[[str], st.SearchStrategy[Any]],
) -> Example:
    """``base`` with one annotation of ``keys`` (or a near miss of a key) set to a value."""
    key = draw(st.sampled_from([*keys, *keys, *misses]))
    value = draw(values(key))
    how = "annotation" if key in keys else "annotation key near miss"
    at = ("metadata", "annotations", Entry(key))
    return change(base, at, how, value, also=("metadata.annotations", key))


def domain_model(version: str) -> type[models.ComputeDomain | models.ComputeDomainV1Beta2]:
    """The model of a ComputeDomain at ``version``."""
    return models.ComputeDomainV1Beta2 if version == V2 else models.ComputeDomain


def _spec_model(version: str) -> type[schema.Model]:
    return models.ComputeDomainSpecV1Beta2 if version == V2 else models.ComputeDomainSpec


@functools.cache
def _specs(version: str, template: str | None) -> st.SearchStrategy[dict[str, Any]]:
    names = st.just(template) if template is not None else dns_names()
    overrides = {"spec.channel.resourceClaimTemplate.name": names}
    return valid_object(_spec_model(version), overrides, "spec", top=False)


@st.composite
def valid_domains(draw: st.DrawFn, version: str, template: str | None = None) -> dict[str, Any]:
    """A valid ComputeDomain at ``version``, perhaps with the reserved annotation it may carry
    (v1beta2: ``num-nodes``, as conversion writes it; v1beta1: ``placement``)."""
    spec = draw(_specs(version, template))
    body: dict[str, Any] = {"apiVersion": version, "kind": constants.COMPUTE_DOMAIN_KIND,
                            "metadata": {"name": "gen"}, "spec": spec}  # fmt: skip
    rnd = _dice(draw, spec)
    if version == V2 and rnd.random() < 0.2:
        count = draw(st.integers(1, 72))
        body["metadata"]["annotations"] = {constants.NUM_NODES_ANNOTATION: str(count)}
    elif version == V1 and rnd.random() < 0.2:
        clique = draw(st.sampled_from([p.value for p in models.CliquePlacement]))
        value = json.dumps({"clique": clique}, separators=(",", ":"))
        body["metadata"]["annotations"] = {constants.PLACEMENT_ANNOTATION: value}
    return body


@st.composite
def compute_domains(draw: st.DrawFn, version: str) -> Example:
    """A ComputeDomain at ``version`` (``resource.nvidia.com/v1beta1`` or ``/v1beta2``): valid
    (one in ten), with a reserved annotation written by hand (two in ten), or with one field of
    its spec made wrong."""
    base = draw(valid_domains(version))
    roll = _dice(draw, base).random()
    if roll < 0.7:
        return draw(perturbed(domain_model(version), base))
    if roll < 0.9:
        keys = (constants.NUM_NODES_ANNOTATION, constants.PLACEMENT_ANNOTATION)
        return annotation_example(draw, base, keys, DOMAIN_KEY_MISSES, domain_annotation_values)
    return Example(base, base)


@st.composite
def template_names(draw: st.DrawFn, taken: str) -> Example:
    """A v1beta2 ComputeDomain whose channel template name is generated: valid names, near
    misses of the format, huge and unicode ones, and ``taken`` (another domain's)."""
    base = draw(valid_domains(V2, "gen-channel"))
    base["metadata"].pop("annotations", None)
    name = draw(st.one_of(bad_names(), st.just(taken)))
    return change(base, TEMPLATE_AT, "template name", name)


def domain_works(answer: Mapping[str, Any]) -> str | None:
    """Why a ComputeDomain the API server accepted (its answer) would not work; None if it would.

    The components read it (with the model, as the API server's answer has it), and so do
    clients of the other version: the conversion webhook must be able to convert it.
    """
    version = answer.get("apiVersion")
    if version not in (V1, V2):
        return f"answered at apiVersion {version!r}"
    try:
        domain_model(str(version)).from_dict(answer, strict=False)
    except ValidationError as exc:
        return f"the model cannot read what was stored: {exc}"
    other = V1 if version == V2 else V2
    try:
        conversion.convert(answer, other)
    except conversion.ConversionError as exc:
        return f"it cannot be read at {other}: {exc}"
    return None


# -- opaque configs of claims -----------------------------------------------------------------


def claim(parameters: Any, *, name: str = "gen") -> dict[str, Any]:
    """A ResourceClaim for a channel, written by hand, whose config carries ``parameters``."""
    request = {"name": "channel", "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}
    config = {"requests": ["channel"],
              "opaque": {"driver": constants.DRIVER_NAME, "parameters": parameters}}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request], "config": [config]}},
    }


@functools.cache
def _parameters(
    model: type[models.ChannelConfig | models.DaemonConfig], domain_ids: tuple[str, ...]
) -> st.SearchStrategy[dict[str, Any]]:
    overrides = {}
    if domain_ids:
        overrides["domainID"] = st.one_of(st.sampled_from(domain_ids), st.uuids().map(str))
    return valid_object(model, overrides)


@st.composite
def valid_parameters(draw: st.DrawFn, domain_ids: Sequence[str]) -> dict[str, Any]:
    """A valid ComputeDomainChannelConfig or ComputeDomainDaemonConfig naming one of
    ``domain_ids`` (or a made-up UID)."""
    kinds: list[type[models.ChannelConfig | models.DaemonConfig]] = [
        models.ChannelConfig,
        models.DaemonConfig,
    ]
    model = draw(st.sampled_from(kinds))
    body = draw(_parameters(model, tuple(domain_ids)))
    return {"apiVersion": model.API_VERSION, "kind": model.KIND, **body}


def _config_model(
    parameters: Mapping[str, Any],
) -> type[models.ChannelConfig | models.DaemonConfig]:
    if parameters.get("kind") == constants.DAEMON_CONFIG_KIND:
        return models.DaemonConfig
    return models.ChannelConfig


@st.composite
def channel_claims(draw: st.DrawFn, domain_ids: Sequence[str] = ()) -> Example:
    """A channel ResourceClaim written by hand whose opaque config is generated: valid (one in
    ten), not an object at all (one in ten), or with one field made wrong (``domainIDs``: some
    of the domain UIDs it names)."""
    parameters = draw(valid_parameters(domain_ids))
    base = claim(parameters)
    roll = _dice(draw, base).random()
    if roll < 0.1:
        return Example(base, base)
    if roll < 0.2:
        value = draw(st.sampled_from([[], [parameters], "text", 1, True, None, ""]))
        return change(base, PARAMETERS_AT, "parameters not an object", value)
    made = draw(perturbed(_config_model(parameters), base, PARAMETERS_AT, top=False))
    sent = made.body["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    if len(json.dumps(sent)) > PARAMETERS_LIMIT * 0.9:
        made = dataclasses.replace(made, also=(render(PARAMETERS_AT),))
    return made


def claim_problem(body: Mapping[str, Any], namespace: str) -> claimcheck.Problem | None:
    """What the controller says about the claim ``body`` in ``namespace`` (no domain there).

    ``claimcheck.check`` itself: the test then waits for the Event that says it.
    """
    meta = {**(body.get("metadata") or {}), "namespace": namespace}
    return claimcheck.check({**body, "metadata": meta}, namespace_of=lambda uid: None)


def model_field(parameters: object) -> str | None:
    """The field of an opaque config the model refuses (``""``: the whole), None if it parses."""
    try:
        models.parse_opaque_config(parameters)
    except ValidationError as exc:
        return exc.field
    return None


# -- ComputeDomainCliques ---------------------------------------------------------------------

MEMBERS_VALUES = (
    "", ",", " , ", ",,", "no-such-node", "\u00fcn\u00ef", "\u540d\u524d", "a,,b", "a, b", "\n",
    "null", "*",
)  # fmt: skip
"""Near misses of ``computedomains.io/members`` (a comma-separated list of node names)."""
MEMBERS_KEY_MISSES = (
    f"{constants.CLIQUE_MEMBERS_ANNOTATION} ", f"{constants.OWN_PREFIX}/Members",
    f"{constants.OWN_PREFIX}/member", "Computedomains.io/members",
)  # fmt: skip
LABEL_VALUE_MISSES = (
    "", "A", "a" * 63, "a" * 64, "a b", "\u00fcn\u00ef", "-a", "a-", "a/b", "a..b", "a" * 300,
    "\n",
)  # fmt: skip
"""Label values, valid and not (at most 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at
either end)."""


@functools.cache
def _clique_bodies(clique_id: str, nodes: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    overrides: dict[str, st.SearchStrategy[Any]] = {
        "daemons[].nodeName": st.sampled_from(nodes),
        "daemons[].ipAddress": st.integers(1, 254).map(lambda i: f"10.0.0.{i}"),
        "daemons[].cliqueID": st.just(clique_id),
        "daemons[].index": st.integers(0, 17),
    }
    return valid_object(models.ComputeDomainCliqueV1Beta2, overrides)


@st.composite
def cliques(
    draw: st.DrawFn, clique_id: str, nodes: Sequence[str], labels: Mapping[str, str] | None = None
) -> Example:
    """A ComputeDomainClique (v1beta2) written by hand for a made-up domain in clique
    ``clique_id``, its daemons on ``nodes``: valid (one in ten), its members annotation or a
    label of ours written by hand (three in ten), or with one field of its daemons made wrong.

    ``labels`` are added to every one (for the test to find and remove them).
    """
    uid = str(draw(st.uuids()))
    body = draw(_clique_bodies(clique_id, tuple(nodes)))
    listed = [str(d["nodeName"]) for d in body.get("daemons", [])]
    members = draw(st.sets(st.sampled_from(listed))) if listed else set()
    ours = {constants.COMPUTE_DOMAIN_LABEL: uid, constants.CLIQUE_ID_LABEL: clique_id}
    metadata = {
        "name": models.clique_name(uid, clique_id),
        "labels": {**ours, **(labels or {})},
        "annotations": {constants.CLIQUE_MEMBERS_ANNOTATION: models.clique_members_value(members)},
    }
    base: dict[str, Any] = {"apiVersion": V2, "kind": constants.CLIQUE_KIND,
                            "metadata": metadata, **body}  # fmt: skip
    roll = _dice(draw, base).random()
    if roll < 0.1:
        return Example(base, base)
    if roll < 0.3:
        values: st.SearchStrategy[Any] = st.one_of(
            st.sampled_from(MEMBERS_VALUES),
            st.lists(st.sampled_from(list(nodes)), max_size=4).map(",".join),
            st.sampled_from(list(nodes)).map(lambda n: f" {n} "),
            huge("x,"),
            st.sampled_from([1, True, None, [], {}]),
        )
        keys = (constants.CLIQUE_MEMBERS_ANNOTATION,)
        return annotation_example(draw, base, keys, MEMBERS_KEY_MISSES, lambda _: values)
    if roll < 0.4:
        key = draw(st.sampled_from(sorted(ours)))
        misses = st.sampled_from([*LABEL_VALUE_MISSES, uid.upper(), 1, None])
        at = ("metadata", "labels", Entry(key))
        return change(base, at, "label", draw(misses), also=("metadata.labels", key))
    return draw(perturbed(models.ComputeDomainCliqueV1Beta2, base))


def for_domain(body: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """A clique of :func:`cliques` made for the domain ``uid`` instead (a name not taken yet):
    its name, and its domain label unless that label is what the example changed."""
    out = copy.deepcopy(dict(body))
    meta = out["metadata"]
    old, _, clique_id = str(meta["name"]).partition(".")
    meta["name"] = models.clique_name(uid, clique_id)
    labels = meta.get("labels")
    if isinstance(labels, dict) and labels.get(constants.COMPUTE_DOMAIN_LABEL) == old:
        labels[constants.COMPUTE_DOMAIN_LABEL] = uid
    return out


# -- pods and the domain label ----------------------------------------------------------------

POD_LABEL_KEYS = (
    DOMAIN_LABEL, DOMAIN_LABEL, DOMAIN_LABEL, f"{constants.OWN_PREFIX}/Domain",
    f"{constants.OWN_PREFIX}/domains", "Computedomains.io/domain", f"{DOMAIN_LABEL} ",
    f"{constants.OWN_PREFIX}//domain", f"{constants.OWN_PREFIX}/", constants.COMPUTE_DOMAIN_LABEL,
)  # fmt: skip
"""The domain label (three times in ten) and near misses of its key."""
CLAIMS = ("its template", "another template", "both templates", "a claim by name", "no claim")


@st.composite
def pods(draw: st.DrawFn, template: str, uid: str) -> Example:
    """A pod that claims the channel of the domain ``uid`` (template ``template``), another
    template, a claim by name or nothing; with the label ``computedomains.io/domain`` (or a near
    miss of its key) written by hand, valued as the domain's UID, another's, or a near miss; or
    without it (one in six)."""
    claims = draw(st.sampled_from(CLAIMS))
    refs: list[dict[str, str]] = []
    if claims in ("its template", "both templates"):
        refs.append({"name": "ch", "resourceClaimTemplateName": template})
    if claims in ("another template", "both templates"):
        refs.append({"name": "other", "resourceClaimTemplateName": f"{template}-not"})
    if claims == "a claim by name":
        refs.append({"name": "byname", "resourceClaimName": "some-claim"})
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.37"}
    spec: dict[str, Any] = {"containers": [container]}
    if refs:
        spec["resourceClaims"] = refs
        container["resources"] = {"claims": [{"name": r["name"]} for r in refs]}
    base = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gen"}, "spec": spec}
    if _dice(draw, base).random() < 1 / 6:
        return Example(base, base, how=f"valid, claiming {claims}")
    key = draw(st.sampled_from(POD_LABEL_KEYS))
    values = st.one_of(
        st.sampled_from([uid, uid.upper(), f"{uid}x", *LABEL_VALUE_MISSES, 1, True, None]),
        st.uuids().map(str),
    )
    at = ("metadata", "labels", Entry(key))
    how = f"label, claiming {claims}"
    return change(base, at, how, draw(values), also=("metadata.labels", key))


def pod_works(
    sent: Mapping[str, Any], answer: Mapping[str, Any], template: str, uid: str
) -> str | None:
    """Why a pod the API server admitted (``answer``) would not work; None if it would.

    The domain label is the webhook's: the pod carries it, with the domain's UID, exactly when
    it claims the domain's template; a forged one never survives admission.
    """
    want = uid if template in podaffinity.claimed_templates(sent) else None
    got = ((answer.get("metadata") or {}).get("labels") or {}).get(DOMAIN_LABEL)
    if got != want:
        return f"admitted with {DOMAIN_LABEL}={got!r}, expected {want!r}"
    return None


# -- answers ----------------------------------------------------------------------------------


class Outcome(enum.StrEnum):
    """How the API server answered an example."""

    ACCEPTED = "accepted"
    NAMED = "refused naming the field"
    UNNAMED = "refused without naming the field"
    ERROR = "error"
    """Neither accepted nor refused: a 5xx (a webhook failing, say), no answer at all."""


REFUSALS = frozenset({400, 403, 422})
"""Statuses of a refusal: a bad request, a webhook's or policy's denial, an invalid object."""


def texts(status: Mapping[str, Any]) -> list[str]:
    """What a Status says: its message and each cause's field and message."""
    found = [str(status.get("message") or "")]
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, Mapping):
            found += [str(cause.get("field") or ""), str(cause.get("message") or "")]
    return found


def names_field(status: Mapping[str, Any], names: Iterable[str]) -> bool:
    """Whether the Status names one of ``names``: as itself, or a path inside it."""
    said = texts(status)
    return any(name and name in text for name in names for text in said)


def classify(example: Example, code: int, status: Mapping[str, Any]) -> Outcome:
    """The outcome of sending ``example``: HTTP status ``code``, response body ``status``."""
    if 200 <= code < 300:
        return Outcome.ACCEPTED
    if code in REFUSALS:
        return Outcome.NAMED if names_field(status, example.names) else Outcome.UNNAMED
    return Outcome.ERROR


@dataclasses.dataclass
class Tally:
    """The outcomes of one kind of input, and the failures to report."""

    what: str
    counts: collections.Counter[Outcome] = dataclasses.field(default_factory=collections.Counter)
    broken: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)

    def record(self, example: Example, code: int, status: Mapping[str, Any]) -> Outcome:
        """Count one answer; an unnamed refusal and an error are failures."""
        outcome = classify(example, code, status)
        self.counts[outcome] += 1
        if outcome in (Outcome.UNNAMED, Outcome.ERROR):
            said = " | ".join(t for t in texts(status) if t)
            self.failures.append(f"{outcome} ({code}): {example.describe()}: {said[:400]}")
        return outcome

    def fail(self, example: Example, why: str) -> None:
        """An accepted example that does not work."""
        self.broken += 1
        self.failures.append(f"accepted but not working: {example.describe()}: {why[:400]}")

    @property
    def examples(self) -> int:
        """Examples sent."""
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line of counts."""
        c = self.counts
        return (
            f"{self.what}: {self.examples} examples, {c[Outcome.ACCEPTED]} accepted "
            f"({self.broken} not working), {c[Outcome.NAMED]} refused naming the field, "
            f"{c[Outcome.UNNAMED]} refused without naming it, {c[Outcome.ERROR]} errors"
        )

    def report(self, limit: int = 25) -> str:
        """The summary and the first ``limit`` failures, for an assertion message."""
        shown = "\n".join(self.failures[:limit])
        more = f"\n... and {len(self.failures) - limit} more" if len(self.failures) > limit else ""
        return f"{self.summary()}\n{shown}{more}"
