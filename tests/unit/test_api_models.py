"""The typed API models: defaults, enums, strict and lenient parsing, opaque configs."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from computedomains.api import constants, models
from computedomains.api.models import (
    AllocationMode,
    ChannelConfig,
    CliqueDaemon,
    ComputeDomain,
    ComputeDomainClique,
    ComputeDomainNode,
    ComputeDomainStatus,
    DaemonConfig,
    Status,
    parse_opaque_config,
)
from computedomains.api.schema import ValidationError


def cd(**spec: Any) -> dict[str, Any]:
    """A minimal ComputeDomain manifest; ``spec`` keys replace those of the spec."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "cd1", "namespace": "ns", "uid": "uid-1"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "rct"}}, **spec},
    }


def full_cd() -> dict[str, Any]:
    """A ComputeDomain with every field set, as the API server returns it."""
    return {
        **cd(
            numNodes=2, channel={"resourceClaimTemplate": {"name": "rct"}, "allocationMode": "All"}
        ),
        "status": {
            "status": "Ready",
            "nodesReady": "2/2",
            "nodes": [
                {
                    "name": "n0",
                    "ipAddress": "10.0.0.1",
                    "cliqueID": "c.1",
                    "index": 0,
                    "status": "Ready",
                },
                {
                    "name": "n1",
                    "ipAddress": "10.0.0.2",
                    "cliqueID": "",
                    "index": -1,
                    "status": "Ready",
                },
            ],
        },
    }


def channel_config(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.CHANNEL_CONFIG_KIND, **fields}


def rejected(data: Any, *, strict: bool = True, kind: type[Any] = ComputeDomain) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        kind.from_dict(data, strict=strict)
    return info.value


# -- defaults and enums -------------------------------------------------------------------


def test_defaults_fill_what_the_manifest_leaves_out() -> None:
    parsed = ComputeDomain.from_dict(cd())
    assert parsed.spec is not None
    assert parsed.spec.num_nodes == 0
    assert parsed.spec.channel.allocation_mode is AllocationMode.SINGLE
    assert parsed.spec.channel.resource_claim_template.name == "rct"
    assert parsed.status is None
    assert (parsed.name, parsed.namespace, parsed.uid) == ("cd1", "ns", "uid-1")

    status = ComputeDomainStatus.from_dict(
        {"nodes": [{"name": "n", "ipAddress": "", "cliqueID": ""}]}
    )
    assert status.status is Status.NOT_READY
    assert status.nodes_ready is None
    assert status.nodes[0].status is Status.NOT_READY
    assert status.nodes[0].index is None


def test_enums_carry_the_wire_values() -> None:
    assert [m.value for m in AllocationMode] == ["All", "Single"]
    assert [m.value for m in Status] == ["Ready", "NotReady"]
    assert AllocationMode("All") is AllocationMode.ALL
    assert f"{Status.NOT_READY}" == "NotReady"


def test_unknown_enum_value_names_field_and_choices() -> None:
    err = rejected(cd(channel={"resourceClaimTemplate": {"name": "r"}, "allocationMode": "Many"}))
    assert err.field == "spec.channel.allocationMode"
    assert '"Many"' in err.message and '"All", "Single"' in err.message


def test_models_are_frozen_and_hashable() -> None:
    parsed = ComputeDomain.from_dict(full_cd())
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.spec = None  # type: ignore[misc]
    assert hash(parsed) == hash(ComputeDomain.from_dict(full_cd()))


# -- strict and lenient parsing -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "where"),
    [
        ("spec.channel.allocatonMode", lambda d: d["spec"]["channel"]),
        ("spec.numNode", lambda d: d["spec"]),
        (
            "spec.channel.resourceClaimTemplate.namespace",
            lambda d: d["spec"]["channel"]["resourceClaimTemplate"],
        ),
        ("status.nodes[1].ip", lambda d: d["status"]["nodes"][1]),
        ("status.ready", lambda d: d["status"]),
        ("extra", lambda d: d),
    ],
)
def test_strict_rejects_an_unknown_field_by_its_full_path(path: str, where: Any) -> None:
    data = full_cd()
    where(data)[path.rsplit(".", 1)[-1]] = "x"
    err = rejected(data)
    assert (err.field, err.message) == (path, "unknown field")
    assert str(err) == f"{path}: unknown field"


def test_lenient_drops_unknown_fields() -> None:
    data = full_cd()
    data["spec"]["channel"]["newField"] = {"a": 1}
    data["status"]["nodes"][0]["zone"] = "z"
    data["futureTopLevel"] = []
    assert ComputeDomain.from_dict(data, strict=False) == ComputeDomain.from_dict(full_cd())


def test_lenient_parses_objects_from_before_the_optional_fields() -> None:
    # Written before numNodes became optional and before allocationMode, index and the
    # per-node status existed.
    data = cd()
    data["status"] = {
        "status": "NotReady",
        "nodes": [{"name": "n", "ipAddress": "1.2.3.4", "cliqueID": "c"}],
    }
    parsed = ComputeDomain.from_dict(data, strict=False)
    assert parsed.status is not None
    assert parsed.status.nodes == (
        ComputeDomainNode(name="n", ip_address="1.2.3.4", clique_id="c"),
    )


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: d["spec"].update(numNodes="3"), "spec.numNodes", "expected integer, got string"),
        (
            lambda d: d["spec"].update(numNodes=True),
            "spec.numNodes",
            "expected integer, got boolean",
        ),
        (
            lambda d: d["spec"].update(numNodes=-1),
            "spec.numNodes",
            "must be greater than or equal to 0",
        ),
        (lambda d: d["spec"].pop("channel"), "spec.channel", "required field missing"),
        (
            lambda d: d["spec"]["channel"]["resourceClaimTemplate"].pop("name"),
            "spec.channel.resourceClaimTemplate.name",
            "required field missing",
        ),
        (
            lambda d: d["spec"]["channel"].update(resourceClaimTemplate="rct"),
            "spec.channel.resourceClaimTemplate",
            "expected an object, got string",
        ),
        (lambda d: d["status"].update(nodes={}), "status.nodes", "expected an array, got object"),
        (
            lambda d: d["status"]["nodes"][1].update(index=1.5),
            "status.nodes[1].index",
            "expected integer, got number",
        ),
        (
            lambda d: d["status"]["nodes"][0].update(status="Up"),
            "status.nodes[0].status",
            'unsupported value "Up"',
        ),
        (
            lambda d: d["status"]["nodes"][1].update(name="n0"),
            "status.nodes[1].name",
            "duplicate entry",
        ),
        (lambda d: d.update(metadata=[]), "metadata", "expected an object, got array"),
        (lambda d: d.update(kind="Pod"), "kind", "expected 'ComputeDomain', got 'Pod'"),
        (
            lambda d: d.update(apiVersion="v1"),
            "apiVersion",
            "expected 'resource.nvidia.com/v1beta1'",
        ),
    ],
)
def test_errors_name_the_field_in_both_modes(
    change: Any, field: str, message: str, strict: bool
) -> None:
    data = full_cd()
    change(data)
    err = rejected(data, strict=strict)
    assert err.field == field
    assert message in err.message


def test_null_counts_as_absent() -> None:
    data = cd(numNodes=None)
    data["status"] = None
    parsed = ComputeDomain.from_dict(data)
    assert parsed.spec is not None and parsed.spec.num_nodes == 0
    assert parsed.status is None


def test_a_cd_without_spec_parses_as_the_incumbent_allows_it() -> None:
    data = cd()
    del data["spec"]
    assert ComputeDomain.from_dict(data).spec is None


def test_metadata_is_copied_not_shared() -> None:
    data = cd()
    parsed = ComputeDomain.from_dict(data)
    data["metadata"]["name"] = "changed"
    assert parsed.name == "cd1"


def test_clique_parses_strictly_and_rejects_duplicate_nodes() -> None:
    daemon = {"nodeName": "n0", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 3}
    data = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CLIQUE_KIND,
        "metadata": {"name": "uid.c.1"},
        "daemons": [daemon],
    }
    clique = ComputeDomainClique.from_dict(data)
    assert clique.daemons == (
        CliqueDaemon(node_name="n0", ip_address="10.0.0.1", clique_id="c.1", index=3),
    )
    assert clique.daemons[0].status is Status.NOT_READY

    err = rejected(
        {**data, "daemons": [daemon, {**daemon, "ipAddress": "x"}]}, kind=ComputeDomainClique
    )
    assert err.field == "daemons[1].nodeName"
    err = rejected({**data, "daemons": [{**daemon, "name": "n0"}]}, kind=ComputeDomainClique)
    assert (err.field, err.message) == ("daemons[0].name", "unknown field")
    assert ComputeDomainClique.from_dict({**data, "status": {}}, strict=False) == clique
    assert ComputeDomainClique.from_dict({**data, "daemons": []}).daemons == ()


# -- round trips --------------------------------------------------------------------------


def test_round_trip_of_a_full_object_is_exact() -> None:
    data = full_cd()
    parsed = ComputeDomain.from_dict(data)
    assert parsed.to_dict() == data
    assert ComputeDomain.from_dict(parsed.to_dict()) == parsed


def test_to_dict_writes_defaults_and_leaves_out_unset_fields() -> None:
    out = ComputeDomain.from_dict(cd()).to_dict()
    assert out["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "rct"}, "allocationMode": "Single"},
    }
    assert "status" not in out
    status = ComputeDomainStatus.from_dict({"status": "Ready", "nodes": []})
    assert status.to_dict() == {"status": "Ready"}


def test_clique_round_trip() -> None:
    data = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CLIQUE_KIND,
        "metadata": {"name": "uid.c.1", "ownerReferences": [{"kind": "Pod", "name": "p"}]},
        "daemons": [
            {
                "nodeName": "n0",
                "ipAddress": "1.1.1.1",
                "cliqueID": "c.1",
                "index": 0,
                "status": "Ready",
            }
        ],
    }
    assert ComputeDomainClique.from_dict(data).to_dict() == data


# -- opaque configs -----------------------------------------------------------------------


def test_channel_config_valid() -> None:
    parsed = parse_opaque_config(channel_config(domainID="uid-1"))
    assert parsed == ChannelConfig(domain_id="uid-1", allocation_mode=AllocationMode.SINGLE)
    parsed = parse_opaque_config(channel_config(domainID="uid-1", allocationMode="All"))
    assert isinstance(parsed, ChannelConfig)
    assert parsed.allocation_mode is AllocationMode.ALL
    assert parsed.to_dict() == channel_config(domainID="uid-1", allocationMode="All")


def test_daemon_config_valid() -> None:
    data = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.DAEMON_CONFIG_KIND,
        "domainID": "u",
    }
    parsed = parse_opaque_config(data)
    assert parsed == DaemonConfig(domain_id="u")
    assert parsed.to_dict() == data


@pytest.mark.parametrize(
    ("parameters", "field", "message"),
    [
        (channel_config(), "domainID", "required field missing"),
        (channel_config(domainID=""), "domainID", "must not be empty"),
        (channel_config(domainID=7), "domainID", "expected string, got integer"),
        (channel_config(domainID="u", allocationMod="All"), "allocationMod", "unknown field"),
        (
            channel_config(domainID="u", allocationMode="all"),
            "allocationMode",
            'unsupported value "all"',
        ),
        (
            {
                "apiVersion": constants.API_VERSION,
                "kind": constants.DAEMON_CONFIG_KIND,
                "domainID": "u",
                "allocationMode": "All",
            },
            "allocationMode",
            "unknown field",
        ),
        (
            {
                "apiVersion": constants.API_VERSION,
                "kind": constants.DAEMON_CONFIG_KIND,
                "domainID": "",
            },
            "domainID",
            "must not be empty",
        ),
        (
            {**channel_config(domainID="u"), "kind": "GpuConfig"},
            "kind",
            "expected 'ComputeDomainChannelConfig' or 'ComputeDomainDaemonConfig', got 'GpuConfig'",
        ),
        (
            {**channel_config(domainID="u"), "apiVersion": "gpu.nvidia.com/v1beta1"},
            "apiVersion",
            "expected 'resource.nvidia.com/v1beta1'",
        ),
        ({"domainID": "u"}, "apiVersion", "got None"),
    ],
)
def test_opaque_config_errors_name_the_field(
    parameters: dict[str, Any], field: str, message: str
) -> None:
    original = copy.deepcopy(parameters)
    with pytest.raises(ValidationError) as info:
        parse_opaque_config(parameters)
    assert info.value.field == field
    assert message in info.value.message
    assert parameters == original


def test_opaque_config_must_be_an_object() -> None:
    with pytest.raises(ValidationError, match="expected an object"):
        parse_opaque_config([])


@pytest.mark.parametrize(
    ("annotations", "num_nodes"),
    [({}, 0), ({constants.NUM_NODES_ANNOTATION: "4"}, 4),
     ({constants.NUM_NODES_ANNOTATION: "four"}, 0), ({constants.NUM_NODES_ANNOTATION: "-1"}, 0)],
)  # fmt: skip
def test_v1beta2_reads_num_nodes_from_its_annotation(
    annotations: dict[str, str], num_nodes: int
) -> None:
    obj: dict[str, Any] = {
        "apiVersion": constants.API_VERSION_V1BETA2, "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "cd", "generation": 2, "annotations": annotations},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}},
    }  # fmt: skip
    parsed = models.ComputeDomainV1Beta2.from_dict(obj)
    assert (parsed.num_nodes, parsed.generation) == (num_nodes, 2)
    assert parsed.clique_placement is models.CliquePlacement.NONE
    obj["spec"]["placement"] = {}
    assert (
        models.ComputeDomainV1Beta2.from_dict(obj).clique_placement is models.CliquePlacement.NONE
    )
    obj["spec"]["placement"] = {"clique": "Required"}
    placed = models.ComputeDomainV1Beta2.from_dict(obj)
    assert placed.clique_placement is models.CliquePlacement.REQUIRED
    with pytest.raises(ValidationError) as info:
        models.ComputeDomainV1Beta2.from_dict({**obj, "spec": {**obj["spec"], "numNodes": 2}})
    assert info.value.field == "spec.numNodes"  # v1beta2 has none


@pytest.mark.parametrize("version", [constants.API_VERSION, constants.API_VERSION_V1BETA2])
def test_a_clique_object_reads_at_either_version(version: str) -> None:
    """A watch that fell back to v1beta1 (a CRD rolled back to 0.1.x) reads its objects too."""
    daemon = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0}
    obj = {"apiVersion": version, "kind": constants.CLIQUE_KIND, "metadata": {"name": "x"},
           "daemons": [daemon]}  # fmt: skip
    assert [d.node_name for d in models.parse_clique(obj, strict=False).daemons] == ["n1"]
