"""CDI as a container runtime reads it: strict spec parsing, device lookup, merged edits."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import yaml

from cdsim.kubelet import cdi


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cdiVersion": "0.6.0",
        "kind": "k8s.example.com/claim",
        "containerEdits": {"env": ["COMMON=1"]},
        "devices": [
            {"name": "u1-dev-0", "containerEdits": {"env": ["DEV=0"]}},
            {
                "name": "u1-dev-1",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/x1", "type": "c", "major": 235, "minor": 1}],
                    "mounts": [{"hostPath": "/h", "containerPath": "/c", "options": ["bind"]}],
                },
            },
        ],
    }
    spec.update(overrides)
    return spec


@pytest.mark.parametrize(
    "name", ["k8s.example.com/claim=u1-dev-0", "a/b=c", "v_1.x/cl-ass=0:name.1"]
)
def test_valid_qualified_names(name: str) -> None:
    assert str(cdi.parse_name(name)) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "vendor/class",
        "vendor=name",
        "/class=name",
        "1vendor/class=n",
        "v/c=-n",
        "v/c=n-",
        "v/c=",
    ],
)
def test_invalid_qualified_names(name: str) -> None:
    with pytest.raises(cdi.CdiError):
        cdi.parse_name(name)


def test_yaml_and_json_specs_parse_alike() -> None:
    from_yaml = cdi.parse_spec(yaml.safe_dump(_spec()), source="a.yaml")
    from_json = cdi.parse_spec(json.dumps(_spec()), source="a.json")
    assert from_yaml.devices == from_json.devices
    assert from_yaml.kind == "k8s.example.com/claim"
    assert from_yaml.edits == {"env": ["COMMON=1"]}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cdiVersion": "9.9.9"}, "invalid cdiVersion"),
        ({"cdiVersion": None}, "invalid cdiVersion"),
        ({"kind": "no-slash"}, "invalid kind"),
        ({"kind": "vendor/"}, "invalid kind"),
        ({"extra": 1}, "unknown field"),
        ({"devices": []}, "at least one device"),
        ({"devices": "nope"}, "expected a list"),
        ({"devices": [{"name": "d"}]}, "expected an object"),
        ({"devices": [{"name": "d", "containerEdits": {}}]}, "empty container edits"),
        ({"devices": [{"name": "-d", "containerEdits": {"env": ["A=1"]}}]}, "invalid device name"),
        ({"devices": [{"containerEdits": {"env": ["A=1"]}}]}, "invalid device name"),
        (
            {"devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}] * 2},
            "appears twice",
        ),
        ({"containerEdits": {"env": ["=1"]}}, "invalid environment variable"),
        ({"containerEdits": {"deviceNodes": [{"type": "c"}]}}, "empty"),
        ({"containerEdits": {"deviceNodes": [{"path": "/d", "type": "z"}]}}, "invalid type"),
        ({"containerEdits": {"deviceNodes": [{"path": "/d", "permissions": "rx"}]}}, "permissions"),
        ({"containerEdits": {"mounts": [{"hostPath": "/h"}]}}, "empty containerPath"),
        ({"containerEdits": {"hooks": [{"hookName": "later", "path": "/x"}]}}, "hook name"),
        ({"containerEdits": {"bogus": []}}, "unknown field"),
    ],
)
def test_malformed_specs_are_rejected_with_the_reason(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(cdi.CdiError, match=message):
        cdi.parse_spec(json.dumps(_spec(**overrides)), source="bad.json")


def test_not_yaml_at_all_is_rejected() -> None:
    with pytest.raises(cdi.CdiError, match="not YAML"):
        cdi.parse_spec("{unclosed", source="x.yaml")
    with pytest.raises(cdi.CdiError, match="expected an object"):
        cdi.parse_spec("- a list", source="x.yaml")


def test_resolve_applies_spec_edits_once_then_each_device() -> None:
    registry = cdi.build_registry([cdi.parse_spec(json.dumps(_spec()), source="a.json")])
    edits = cdi.resolve(
        ["k8s.example.com/claim=u1-dev-0", "k8s.example.com/claim=u1-dev-1"], registry
    )
    assert edits["env"] == ["COMMON=1", "DEV=0"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/x1"]
    assert edits["mounts"] == [{"hostPath": "/h", "containerPath": "/c", "options": ["bind"]}]
    assert cdi.resolve([], registry) == {}


def test_unknown_and_malformed_ids_fail_naming_them_and_the_skipped_files() -> None:
    registry = cdi.build_registry(
        [cdi.parse_spec(json.dumps(_spec()), source="a.json")], {"b.yaml": "invalid cdiVersion"}
    )
    with pytest.raises(cdi.CdiError) as caught:
        cdi.resolve(["k8s.example.com/claim=u2-dev-0", "not-an-id"], registry)
    message = str(caught.value)
    assert "unresolvable CDI device k8s.example.com/claim=u2-dev-0" in message
    assert "'not-an-id' is not a qualified CDI device name" in message
    assert "skipped b.yaml: invalid cdiVersion" in message


def test_a_device_defined_twice_resolves_to_neither() -> None:
    first = cdi.parse_spec(json.dumps(_spec()), source="a.json")
    second = cdi.parse_spec(json.dumps(_spec()), source="b.json")
    registry = cdi.build_registry([first, second])
    with pytest.raises(cdi.CdiError, match=r"unresolvable.*also defined in a\.json"):
        cdi.resolve(["k8s.example.com/claim=u1-dev-0"], registry)


def test_load_dir_reads_specs_skips_temp_files_and_records_bad_ones(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(_spec()))
    (tmp_path / ".good.yaml.tmp").write_text("half a sp")
    (tmp_path / "bad.json").write_text(json.dumps(_spec(cdiVersion="0.0.1")))
    (tmp_path / "notes.txt").write_text("ignored")
    registry = cdi.load_dir(tmp_path)
    assert sorted(registry.devices) == [
        "k8s.example.com/claim=u1-dev-0",
        "k8s.example.com/claim=u1-dev-1",
    ]
    assert list(registry.errors) == ["bad.json"]
    assert cdi.load_dir(tmp_path / "missing").devices == {}
