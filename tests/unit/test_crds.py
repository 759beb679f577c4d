"""The committed CRD templates are the generator's output, and they agree with the models."""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import re
import typing
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from computedomains.api import constants, crds, models, schema

CHART = pathlib.Path(__file__).parents[2] / "chart" / "charts" / "crds"
V1, V2 = constants.VERSION, constants.VERSION_V1BETA2
HELM_VALUES = {
    # What the template's expressions render to with the default values (the chart tests
    # render them with Helm itself).
    '{{ include "compute-domains-crds.webhookServiceName" . }}': crds.DEFAULT_WEBHOOK.service,
    "{{ .Release.Namespace }}": crds.DEFAULT_WEBHOOK.namespace,
    '{{ eq .Values.storageVersion "v1beta1" }}': "false",
    '{{ eq .Values.storageVersion "v1beta2" }}': "true",
}


def committed(resource: crds.CustomResource) -> dict[str, Any]:
    """The committed template as YAML, rendered with the default values; the metadata lines
    that include the chart's labels and annotations are left out."""
    text = (CHART / "templates" / resource.filename).read_text()
    text = "\n".join(line for line in text.splitlines() if "{{-" not in line)
    for expression, value in HELM_VALUES.items():
        text = text.replace(expression, value)
    assert "{{" not in text, "an expression the test does not know"
    return dict(yaml.safe_load(text))


def committed_version(resource: crds.CustomResource, name: str) -> dict[str, Any]:
    (version,) = [v for v in committed(resource)["spec"]["versions"] if v["name"] == name]
    return dict(version)


def root_schema(resource: crds.CustomResource, version: str = V1) -> dict[str, Any]:
    return dict(committed_version(resource, version)["schema"]["openAPIV3Schema"])


def at(schema_: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The schema of ``path`` (``spec.channel``, ``status.nodes[]``) inside an object schema."""
    # A printer column's filter selects list items: `a[?(@.type=="Ready")].b` is `a[].b`.
    path = re.sub(r"\[\?\(.*?\)\]", "[]", path)
    for part in path.split("."):
        is_list = part.endswith("[]")
        schema_ = schema_["properties"][part.removesuffix("[]")]
        if is_list:
            schema_ = schema_["items"]
    return dict(schema_)


# -- generated == committed ---------------------------------------------------------------


def test_committed_templates_are_the_generated_ones() -> None:
    assert crds.stale_templates(CHART) == {}, "run `make crds`"
    assert crds.main(["--check", "--chart-dir", str(CHART)]) == 0


def test_check_and_write(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main(["--check", "--chart-dir", str(tmp_path)]) == 1
    assert crds.main(["--write", "--chart-dir", str(tmp_path)]) == 0
    assert crds.main(["--check", "--chart-dir", str(tmp_path)]) == 0
    target = tmp_path / "templates" / crds.CLIQUE.filename
    target.write_text(target.read_text().replace("cdclique", "cdq"))
    assert crds.main(["--check", "--chart-dir", str(tmp_path)]) == 1
    assert f"stale CRD template: {target}" in capsys.readouterr().out


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_committed_yaml_is_the_manifest(resource: crds.CustomResource) -> None:
    doc = committed(resource)
    want = crds.manifest(resource)
    assert doc["spec"] == want["spec"]
    assert doc["metadata"]["name"] == want["metadata"]["name"] == resource.name
    assert (doc["apiVersion"], doc["kind"]) == (
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    )


# -- models <-> schema, field by field ----------------------------------------------------


def expected_type(tp: Any) -> dict[str, Any]:
    """What the schema must say about a field of Python type ``tp`` (type and enum only)."""
    tp = schema.unwrap_optional(tp)
    if typing.get_origin(tp) is tuple:
        return {"type": "array"}
    if typing.get_origin(tp) is Mapping or (isinstance(tp, type) and issubclass(tp, schema.Model)):
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        return {"type": "string", "enum": [m.value for m in tp]}
    return {"type": {str: "string", int: "integer", bool: "boolean"}[tp]}


def check_model(cls: type[schema.Model], object_schema: Mapping[str, Any], path: str) -> int:
    """Assert that ``cls`` and ``object_schema`` agree on every field; returns fields checked."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    names = {schema.info_of(f).json for f in fields}
    extra = (
        set(object_schema["properties"]) - names - ({"apiVersion", "kind"} if not path else set())
    )
    assert not extra, f"{path or '<root>'}: schema properties without a model field: {extra}"
    required = set(object_schema.get("required", []))
    checked = 0
    for f in fields:
        info = schema.info_of(f)
        where = f"{path}.{info.json}" if path else info.json
        prop = object_schema["properties"][info.json]
        tp = schema.unwrap_optional(hints[f.name])
        assert {k: prop[k] for k in expected_type(tp) if k in prop} == expected_type(tp), where
        assert (info.json in required) == info.required, where
        # A field the model may omit must be optional in the schema or defaulted there.
        if not schema.has_default(f):
            assert info.json in required, where
        assert prop.get("default") == schema.schema_default(f), where
        assert prop.get("minimum") == info.minimum, where
        fmt = info.string_format
        assert prop.get("minLength") == (fmt.min_length if fmt else info.min_length), where
        assert prop.get("maxLength") == (fmt.max_length if fmt else None), where
        rules = [r["rule"] for r in prop.get("x-kubernetes-validations", [])]
        wanted = ["false"] if info.refused else []
        wanted += ["self == oldSelf"] if info.immutable else []
        assert rules == wanted + ([fmt.cel_rule()] if fmt else []), where
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
        if typing.get_origin(tp) is tuple:
            keys = prop.get("x-kubernetes-list-map-keys", [])
            assert keys == list(info.list_map_keys), where
            prop = prop["items"]
        if isinstance(item, type) and issubclass(item, schema.Model):
            checked += check_model(item, prop, where + ("[]" if item is not tp else ""))
        checked += 1
    return checked


@pytest.mark.parametrize(
    ("resource", "version"),
    [(r, v) for r in crds.RESOURCES for v in r.versions],
    ids=lambda x: x.kind if isinstance(x, crds.CustomResource) else x.name,
)
def test_every_model_field_matches_the_committed_schema(
    resource: crds.CustomResource, version: crds.Version
) -> None:
    assert check_model(version.model, root_schema(resource, version.name), "") >= 5


# -- the incumbent's API, fact by fact ----------------------------------------------------

# path: (type, default, enum, required in its parent); from the incumbent's v1beta1 CRDs.
COMPUTE_DOMAIN_FACTS: dict[str, tuple[str, Any, list[str] | None, bool]] = {
    "spec": ("object", None, None, False),
    "spec.numNodes": ("integer", 0, None, False),
    "spec.channel": ("object", None, None, True),
    "spec.channel.resourceClaimTemplate": ("object", None, None, True),
    "spec.channel.resourceClaimTemplate.name": ("string", None, None, True),
    "spec.channel.allocationMode": ("string", "Single", ["All", "Single"], False),
    "status": ("object", None, None, False),
    "status.status": ("string", "NotReady", ["Ready", "NotReady"], True),
    "status.nodes": ("array", None, None, False),
    "status.nodes[].name": ("string", None, None, True),
    "status.nodes[].ipAddress": ("string", None, None, True),
    "status.nodes[].cliqueID": ("string", None, None, True),
    "status.nodes[].index": ("integer", None, None, False),
    "status.nodes[].status": ("string", "NotReady", ["Ready", "NotReady"], False),
    "status.nodesReady": ("string", None, None, False),  # ours, additive
}
CLIQUE_FACTS: dict[str, tuple[str, Any, list[str] | None, bool]] = {
    "daemons": ("array", None, None, False),
    "daemons[].nodeName": ("string", None, None, True),
    "daemons[].ipAddress": ("string", None, None, True),
    "daemons[].cliqueID": ("string", None, None, True),
    "daemons[].index": ("integer", None, None, False),
    "daemons[].status": ("string", "NotReady", ["Ready", "NotReady"], False),
}


@pytest.mark.parametrize(
    ("resource", "facts"),
    [(crds.COMPUTE_DOMAIN, COMPUTE_DOMAIN_FACTS), (crds.CLIQUE, CLIQUE_FACTS)],
    ids=["ComputeDomain", "ComputeDomainClique"],
)
def test_schema_matches_the_incumbent(
    resource: crds.CustomResource, facts: dict[str, tuple[str, Any, list[str] | None, bool]]
) -> None:
    root = root_schema(resource)
    for path, (type_, default, enum_, required) in facts.items():
        prop = at(root, path)
        assert (prop["type"], prop.get("default"), prop.get("enum")) == (type_, default, enum_), (
            path
        )
        parent, _, name = path.rpartition(".")
        parent_schema = at(root, parent) if parent else root
        assert (name.removesuffix("[]") in parent_schema.get("required", [])) == required, path


def test_compute_domain_crd_details() -> None:
    root = root_schema(crds.COMPUTE_DOMAIN)
    assert at(root, "spec.numNodes")["minimum"] == 0
    assert at(root, "spec")["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]
    nodes = at(root, "status.nodes")
    assert (nodes["x-kubernetes-list-type"], nodes["x-kubernetes-list-map-keys"]) == (
        "map",
        ["name"],
    )
    spec = committed(crds.COMPUTE_DOMAIN)["spec"]
    assert (spec["group"], spec["scope"]) == ("resource.nvidia.com", "Namespaced")
    assert spec["names"]["shortNames"] == ["cd"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        (V1, True, False),
        (V2, True, True),
    ]
    assert all(v["subresources"] == {"status": {}} for v in spec["versions"])
    assert spec["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            # No caBundle: the webhook injects it, so no apply fights over it.
            "clientConfig": {"service": {"name": crds.DEFAULT_WEBHOOK.service,
                                         "namespace": crds.DEFAULT_WEBHOOK.namespace,
                                         "path": "/convert", "port": 443}},
        },
    }  # fmt: skip


PRINTER_COLUMNS = {
    V1: {
        "Status": ".status.status",
        "Nodes": ".status.nodesReady",
        "Age": ".metadata.creationTimestamp",
    },
    V2: {
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Reason": '.status.conditions[?(@.type=="Ready")].reason',
        "Nodes": ".status.nodesReady",
        "Placement": ".spec.placement.clique",
        "Age": ".metadata.creationTimestamp",
    },
}


@pytest.mark.parametrize("version", [V1, V2])
def test_compute_domain_printer_columns(version: str) -> None:
    served = committed_version(crds.COMPUTE_DOMAIN, version)
    columns = {c["name"]: c["jsonPath"] for c in served["additionalPrinterColumns"]}
    assert columns == PRINTER_COLUMNS[version]
    for path in columns.values():
        if not path.startswith(".metadata."):
            # the column shows a field the schema has
            at(root_schema(crds.COMPUTE_DOMAIN, version), path.removeprefix("."))


def test_v1beta2_drops_num_nodes_and_adds_placement_and_conditions() -> None:
    root = root_schema(crds.COMPUTE_DOMAIN, V2)
    assert set(at(root, "spec")["properties"]) == {"channel", "placement", "numNodes"}
    # numNodes is named only to refuse it: a v1beta2 write that sets it fails, naming it.
    refused = at(root, "spec.numNodes")["x-kubernetes-validations"]
    assert refused == [{"rule": "false", "message": models.NUM_NODES_REFUSED}]
    assert at(root, "spec.channel") == at(root_schema(crds.COMPUTE_DOMAIN), "spec.channel")
    clique = at(root, "spec.placement.clique")
    assert (clique["enum"], clique["default"]) == (["Required", "Preferred", "None"], "None")
    conditions = at(root, "status.conditions")
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    condition = conditions["items"]
    assert set(condition["required"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
    }
    assert at(root, "status.conditions[].status")["enum"] == ["True", "False", "Unknown"]
    assert at(root, "status.cliques")["x-kubernetes-list-map-keys"] == ["id"]
    assert set(at(root, "status.cliques[]")["properties"]) == {"id", "nodes", "readyNodes"}


def test_clique_crd_details() -> None:
    spec = committed(crds.CLIQUE)["spec"]
    assert [(v["name"], v["storage"]) for v in spec["versions"]] == [(V1, False), (V2, True)]
    for version in spec["versions"]:
        assert "subresources" not in version
        assert "additionalPrinterColumns" not in version
    assert root_schema(crds.CLIQUE, V1) == root_schema(crds.CLIQUE, V2)  # one schema
    assert spec["conversion"] == {"strategy": "None"}
    assert spec["names"]["shortNames"] == ["cdclique"]
    daemons = at(root_schema(crds.CLIQUE), "daemons")
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]
    assert set(root_schema(crds.CLIQUE)["properties"]) == {
        "apiVersion",
        "kind",
        "metadata",
        "daemons",
    }


def test_claim_template_name_is_checked_as_kubernetes_checks_object_names() -> None:
    name = at(root_schema(crds.COMPUTE_DOMAIN), "spec.channel.resourceClaimTemplate.name")
    assert (name["minLength"], name["maxLength"]) == (1, 253)
    [rule] = name["x-kubernetes-validations"]
    assert rule == {
        "rule": "self.matches('^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?"
        "([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$')",
        "message": schema.DNS1123_SUBDOMAIN.message,
    }
    assert "lowercase RFC 1123 subdomain" in rule["message"]


def _with_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "spec": {"channel": {"resourceClaimTemplate": {"name": name}}},
    }


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("cd-channel", None),
        ("a", None),
        ("0", None),
        ("nccl.allreduce-1", None),
        ("a" * 253, None),
        ("", "must not be empty"),
        ("a" * 254, "must be no more than 253 characters"),
        ("Channel", "lowercase RFC 1123 subdomain"),
        ("cd_channel", "lowercase RFC 1123 subdomain"),
        ("-channel", "lowercase RFC 1123 subdomain"),
        ("channel-", "lowercase RFC 1123 subdomain"),
        ("a..b", "lowercase RFC 1123 subdomain"),
        (".a", "lowercase RFC 1123 subdomain"),
        ("a/b", "lowercase RFC 1123 subdomain"),
        ("a b", "lowercase RFC 1123 subdomain"),
    ],
)
def test_model_checks_the_template_name_like_the_crd(name: str, problem: str | None) -> None:
    if problem is None:
        parsed = models.ComputeDomain.from_dict(_with_template(name))
        assert parsed.spec is not None
        assert parsed.spec.channel.resource_claim_template.name == name
        return
    with pytest.raises(schema.ValidationError) as info:
        models.ComputeDomain.from_dict(_with_template(name))
    assert info.value.field == "spec.channel.resourceClaimTemplate.name"
    assert problem in info.value.message
    # Read back, an object stored before the CRD checked the name still parses: the controller
    # then tries the template, and the API server's refusal becomes an Event and a status.
    lenient = models.ComputeDomain.from_dict(_with_template(name), strict=False)
    assert lenient.spec is not None
    assert lenient.spec.channel.resource_claim_template.name == name


def test_metadata_schema_is_left_to_the_api_server() -> None:
    for resource in crds.RESOURCES:
        for version in (V1, V2):
            assert root_schema(resource, version)["properties"]["metadata"] == {"type": "object"}


def test_storage_version_is_a_parameter_of_the_manifest() -> None:
    for resource in crds.RESOURCES:
        default = crds.manifest(resource)["spec"]["versions"]
        assert [v["name"] for v in default if v["storage"]] == [constants.STORAGE_VERSION]
        back = crds.manifest(resource, storage_version=V1)["spec"]["versions"]
        assert [v["name"] for v in back if v["storage"]] == [V1]
    assert crds.COMPUTE_DOMAIN.model is models.ComputeDomainV1Beta2
    assert crds.CLIQUE.model is models.ComputeDomainCliqueV1Beta2
