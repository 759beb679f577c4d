"""The chart renders, lints and keeps its contracts with helm 3 and helm 4; no cluster needed.

A default render per profile, then one-value-one-assert cases: each sets one value and checks
the one place it must show up.
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import re
import shutil
from typing import Any

import pytest
import yaml

from computedomains import flaggroups
from computedomains.api import constants
from computedomains.nodeinit import plan as node_plan
from tests.chart import rendering as r
from tests.support import helm

DRIVER = constants.DRIVER_NAME
FABRIC_TAINT = constants.FABRIC_TAINT


# -- every major x every profile ----------------------------------------------------------


@pytest.mark.parametrize("profile", [None, *r.PROFILES])
def test_lint_strict_and_template_pass(h: helm.Helm, profile: str | None) -> None:
    args = ["--namespace", r.NAMESPACE]
    if profile:
        args += ["--values", str(r.PROFILES[profile])]
    h.run("lint", "--strict", str(r.CHART), *args)
    objects = r.template(h, *args[2:])
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == r.expected_kinds(profile)


@pytest.mark.parametrize("profile", [None, *r.PROFILES])
def test_every_object_carries_the_standard_labels(h: helm.Helm, profile: str | None) -> None:
    args = ["--values", str(r.PROFILES[profile])] if profile else []
    objects = r.template(h, *args)
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        missing = [key for key in r.STANDARD_LABELS if key not in labels]
        assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/instance"] == r.RELEASE
        assert labels["app.kubernetes.io/part-of"] == "compute-domains"
        if obj["kind"] != "CustomResourceDefinition":
            assert labels["app.kubernetes.io/version"] == r.APP_VERSION


def test_rendering_is_deterministic(h: helm.Helm) -> None:
    """Argo CD compares renders: no random values, no lookups, no timestamps."""
    args = ["--values", str(r.PROFILES["sim"])]
    assert r.template(h, *args) == r.template(h, *args)


PRODUCTION_BEHAVIOUR = re.compile(
    r"updatestrategy|probe|timeout|replicas|deadline|disruption|minavailable|maxunavailable",
    re.IGNORECASE,
)
"""Value names the simulation's overlay must leave to the production profiles."""


def _leaves(values: Any, path: str = "") -> list[str]:
    if isinstance(values, dict):
        return [leaf for k, v in values.items() for leaf in _leaves(v, f"{path}.{k}".lstrip("."))]
    return [path]


def _justified(lines: list[str], index: int) -> bool:
    """A comment at the key's own indentation opens the block of siblings it stands in."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    for line in reversed(lines[:index]):
        lead = len(line) - len(line.lstrip())
        if not line.strip() or lead < indent:
            return False
        if lead == indent and line.lstrip().startswith("#"):
            return True
    return False


def test_the_simulation_overlay_changes_only_what_the_simulation_needs() -> None:
    """values/sim.yaml goes on a production profile: no update strategy, probe, timeout,
    replica count or disruption budget of its own, and every value it sets says why."""
    text = r.PROFILES["sim"].read_text()
    overriding = [p for p in _leaves(yaml.safe_load(text)) if PRODUCTION_BEHAVIOUR.search(p)]
    assert not overriding, f"values/sim.yaml overrides production behaviour: {overriding}"
    lines = text.splitlines()
    keys = [i for i, line in enumerate(lines) if re.match(r"^  [A-Za-z][\w-]*:", line)]
    assert keys, "the overlay sets values below the top-level sections"
    unexplained = [lines[i].strip() for i in keys if not _justified(lines, i)]
    assert not unexplained, (
        f"values/sim.yaml sets these without a comment saying why: {unexplained}"
    )


def test_the_overlay_check_catches_an_override() -> None:
    strategy = {"imexAgent": {"updateStrategy": {"type": "RollingUpdate"}}}
    assert [p for p in _leaves(strategy) if PRODUCTION_BEHAVIOUR.search(p)]
    lines = ["imexAgent:", "  # why", "  hostsFile: x", "", "  extra: y"]
    assert _justified(lines, 2) and not _justified(lines, 4)


SNAPSHOT = pathlib.Path(__file__).with_name("snapshots") / "default.yaml"
UPDATE_ENV = "COMPUTE_DOMAINS_UPDATE_SNAPSHOTS"


def test_default_render_matches_the_snapshot(tmp_path: pathlib.Path) -> None:
    """The whole default render (CRDs aside: the crds subchart is generated), reviewed as a diff.

    Both helm majors must render the same objects (helm 3 puts kinds its install order does
    not know, such as webhook configurations, last; helm 4 knows them: so compared in one
    order). After an intended change, rewrite it with COMPUTE_DOMAINS_UPDATE_SNAPSHOTS=1 and
    review the diff.
    """
    renders = [
        sorted(
            (
                o
                for o in r.template(r.helm_for(m, tmp_path / m))
                if o["kind"] != "CustomResourceDefinition"
            ),
            key=lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )
        for m in r.MAJORS
    ]
    assert renders[0] == renders[1], "helm 3 and helm 4 render different objects"
    text = yaml.safe_dump_all(renders[1], sort_keys=True, width=100)
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(text)
    expected = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                str(SNAPSHOT),
                "rendered",
            )
        )
        pytest.fail(f"the default render changed; if intended, rerun with {UPDATE_ENV}=1\n{diff}")


# -- names and labels ---------------------------------------------------------------------


def test_pods_are_named_compute_domains_even_with_a_name_override(h4: helm.Helm) -> None:
    """The simulated kubelet runs the pods labelled app.kubernetes.io/name=compute-domains."""
    objects = r.rendered(h4, nameOverride="cd")
    ds = r.workload(objects)
    assert ds["metadata"]["name"] == "cd-kubelet-plugin"
    assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == (
        "compute-domains"
    )


def test_names_fit_in_63_characters_with_the_longest_release_name(h: helm.Helm) -> None:
    release = "r" * 53  # helm's limit
    objects = r.template(h, release=release)
    names = [o["metadata"]["name"] for o in objects]
    assert all(len(n) <= 63 for n in names), max(names, key=len)
    kinds_and_names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(set(kinds_and_names)) == len(kinds_and_names)
    policies = [o["metadata"]["name"] for o in r.of_kind(objects, "ValidatingAdmissionPolicy")]
    assert len(set(policies)) == 7, "shortening the release name must keep the suffixes apart"


def test_fullname_override_names_the_objects(h4: helm.Helm) -> None:
    objects = r.rendered(h4, fullnameOverride="gb200")
    assert r.workload(objects)["metadata"]["name"] == "gb200-kubelet-plugin"


def test_common_labels_reach_every_object_and_the_pods(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"commonLabels.team": "gpu-platform"})
    chart_objects = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    assert all(o["metadata"]["labels"]["team"] == "gpu-platform" for o in chart_objects)
    ds = r.workload(objects)
    assert ds["spec"]["template"]["metadata"]["labels"]["team"] == "gpu-platform"
    assert "team" not in ds["spec"]["selector"]["matchLabels"]


# -- one value, one assert ----------------------------------------------------------------


def test_driver_root_flows_into_the_mount_and_the_flag(h: helm.Helm) -> None:
    objects = r.rendered(h, driverRoot="/run/nvidia/driver")
    assert r.volume(objects, "driver-root")["hostPath"]["path"] == "/run/nvidia/driver"
    for name in ("node-init", "kubelet-plugin"):
        c = r.container(objects, name)
        m = r.mount(c, "driver-root")
        assert m is not None and m["readOnly"] is True
        assert r.flag(c, "driver-root") == m["mountPath"]


def test_gpu_operator_profile_sets_the_driver_container_root(h4: helm.Helm) -> None:
    objects = r.template(h4, "--values", str(r.PROFILES["gpu-operator"]))
    assert r.volume(objects, "driver-root")["hostPath"]["path"] == "/run/nvidia/driver"


def test_priority_class_name(h: helm.Helm) -> None:
    assert r.pod_spec(r.template(h))["priorityClassName"] == "system-node-critical"
    objects = r.rendered(h, **{"kubeletPlugin.priorityClassName": "gpu-infra"})
    assert r.pod_spec(objects)["priorityClassName"] == "gpu-infra"
    objects = r.rendered(h, **{"kubeletPlugin.priorityClassName": ""})
    assert "priorityClassName" not in r.pod_spec(objects)


def test_tolerations_add_to_the_fabric_taint(h: helm.Helm) -> None:
    objects = r.template(
        h,
        "--set",
        "kubeletPlugin.tolerations[0].key=dedicated",
        "--set",
        "kubeletPlugin.tolerations[0].operator=Equal",
        "--set",
        "kubeletPlugin.tolerations[0].value=gpu",
        "--set",
        "kubeletPlugin.tolerations[0].effect=NoExecute",
    )
    tolerations = r.pod_spec(objects)["tolerations"]
    assert {"key": FABRIC_TAINT, "operator": "Exists"} in tolerations
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"} in (
        tolerations
    )
    assert not any(t.get("key") == "nvidia.com/gpu" for t in tolerations)


def test_default_tolerations_cover_gpu_nodes(h4: helm.Helm) -> None:
    tolerations = r.pod_spec(r.template(h4))["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"key": FABRIC_TAINT, "operator": "Exists"} in tolerations


def test_node_selector_defaults_to_gpu_nodes_and_is_overridable(h4: helm.Helm) -> None:
    assert r.pod_spec(r.template(h4))["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # Helm merges maps with the defaults: a key is dropped by setting it to null.
    objects = r.template(
        h4,
        "--set-json",
        'kubeletPlugin.nodeSelector={"nvidia.com/gpu.product":"NVIDIA-GB200",'
        '"nvidia.com/gpu.present":null}',
    )
    assert r.pod_spec(objects)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GB200"}


def test_affinity(h4: helm.Helm) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r0"]}]}
                ]
            }
        }
    }
    objects = r.template(h4, "--set-json", f"kubeletPlugin.affinity={json.dumps(affinity)}")
    assert r.pod_spec(objects)["affinity"] == affinity


def test_crds_enabled_false_drops_the_crds(h: helm.Helm) -> None:
    assert len(r.of_kind(r.template(h), "CustomResourceDefinition")) == 2
    assert r.of_kind(r.rendered(h, **{"crds.enabled": "false"}), "CustomResourceDefinition") == []


def test_the_simulation_finds_nvml_as_a_gpu_node_does(h: helm.Helm) -> None:
    """node-init asks the NVML under the driver root, in the simulation as on GPU nodes: the
    overlay changes nothing of how it is found (the fake library sits in the driver root)."""
    production = r.template(h, "--values", str(r.PROFILES[r.PRODUCTION_PROFILE]))
    simulated = r.template(h, *r.sim_values())
    assert r.container(simulated, "node-init") == r.container(production, "node-init")
    assert r.volume(simulated, "driver-root") == r.volume(production, "driver-root")
    node_init = r.container(simulated, "node-init")
    assert r.flag(node_init, "driver-root") == r.mount(node_init, "driver-root")["mountPath"]
    assert r.volume(simulated, "driver-root")["hostPath"]["path"] == "/"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in node_init["env"]
    for c in (node_init, r.container(simulated, "kubelet-plugin")):
        assert [a for a in c["args"] if "fabric-backend" in a or "fake" in a] == []


def test_kubelet_dir_moves_mounts_and_flags_together(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"kubeletPlugin.kubeletDir": "/var/lib/k0s/kubelet"})
    plugin = r.container(objects, "kubelet-plugin")
    for volume, flag in (
        ("plugins-registry", "kubelet-registry-dir"),
        ("plugins", "kubelet-plugins-dir"),
    ):
        host = r.volume(objects, volume)["hostPath"]["path"]
        assert host.startswith("/var/lib/k0s/kubelet/")
        m = r.mount(plugin, volume)
        assert m is not None and m["mountPath"] == host == r.flag(plugin, flag)


def test_http_port_flows_into_bind_port_and_probes(h: helm.Helm) -> None:
    plugin = r.container(r.rendered(h, **{"kubeletPlugin.httpPort": "9400"}), "kubelet-plugin")
    assert r.flag(plugin, "http-bind") == "$(POD_IP):9400"
    assert plugin["ports"] == [{"name": "http", "containerPort": 9400, "protocol": "TCP"}]
    assert plugin["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert plugin["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


@pytest.mark.parametrize(
    ("key", "value", "container", "flag"),
    [
        ("kubeletPlugin.channelSlots", "32", "kubelet-plugin", "channel-slots"),
        ("kubeletPlugin.imexReadyTimeout", "90", "kubelet-plugin", "imex-ready-timeout"),
        ("kubeletPlugin.collectionInterval", "7", "kubelet-plugin", "collection-interval"),
        ("nodeInit.faultGrace.checks", "5", "node-init", "fault-grace-checks"),
        ("nodeInit.faultGrace.checks", "5", "kubelet-plugin", "fault-grace-checks"),
        ("nodeInit.faultGrace.seconds", "90", "node-init", "fault-grace-seconds"),
        ("nodeInit.faultGrace.seconds", "90", "kubelet-plugin", "fault-grace-seconds"),
        ("nodeInit.transitionalGrace", "300", "node-init", "transitional-grace"),
        ("nodeInit.transitionalGrace", "300", "kubelet-plugin", "transitional-grace"),
        ("nodeInit.recheckInterval", "15", "kubelet-plugin", "fabric-recheck-interval"),
    ],
)
def test_value_becomes_flag(h4: helm.Helm, key: str, value: str, container: str, flag: str) -> None:
    assert r.flag(r.container(r.rendered(h4, **{key: value}), container), flag) == value


@pytest.mark.parametrize(
    ("container", "flag"),
    [
        ("kubelet-plugin", "channel-slots"),
        ("kubelet-plugin", "imex-ready-timeout"),
        ("node-init", "transitional-grace"),
    ],
)
def test_optional_flags_are_left_to_the_program_by_default(
    h4: helm.Helm, container: str, flag: str
) -> None:
    assert r.flag(r.container(r.template(h4), container), flag) is None


def test_binding_conditions_on_by_default_and_off_by_value(h4: helm.Helm) -> None:
    assert "--binding-conditions" in r.container(r.template(h4), "kubelet-plugin")["args"]
    objects = r.rendered(h4, **{"kubeletPlugin.bindingConditions": "false"})
    assert "--no-binding-conditions" in r.container(objects, "kubelet-plugin")["args"]


def test_taint_broken(h4: helm.Helm) -> None:
    assert "--no-taint-broken" in r.container(r.template(h4), "node-init")["args"]
    objects = r.rendered(h4, **{"nodeInit.taintBroken": "true"})
    assert "--taint-broken" in r.container(objects, "node-init")["args"]
    assert "--taint-broken" in r.container(objects, "kubelet-plugin")["args"]


def test_node_init_runs_once_then_the_plugin_re_checks_with_the_same_check(h4: helm.Helm) -> None:
    objects = r.template(h4)
    once = r.container(objects, "node-init")
    plugin = r.container(objects, "kubelet-plugin")
    assert [c["name"] for c in r.pod_spec(objects)["initContainers"]] == ["node-init"]
    assert [c["name"] for c in r.pod_spec(objects)["containers"]] == ["kubelet-plugin"]
    assert once["args"][0] == "node-init" and "--watch" not in once["args"]
    shared = [a for a in once["args"][1:] if not a.startswith("--node-name")]
    assert set(shared) <= set(plugin["args"])  # the re-check judges the fabric as node-init did
    assert r.flag(plugin, "fabric-recheck-interval") == "60"
    # The re-check writes the verdict and reads NVML through the GPUs the runtime injects.
    assert r.mount(plugin, "run").get("readOnly") is not True
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in plugin["env"]


def test_the_re_check_in_a_sidecar_leaves_the_plugin_without_gpu_and_driver_root(
    h4: helm.Helm,
) -> None:
    objects = r.rendered(h4, **{"nodeInit.recheckIn": "sidecar"})
    once = r.container(objects, "node-init")
    watch = r.container(objects, "node-init-watch")
    plugin = r.container(objects, "kubelet-plugin")
    assert watch["args"] == [*once["args"], "--watch", "--recheck-interval=60"]
    assert r.flag(plugin, "fabric-recheck-interval") is None
    assert r.flag(plugin, "driver-root") is None
    assert r.mount(plugin, "driver-root") is None
    assert r.mount(plugin, "run")["readOnly"] is True
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in plugin["env"]
    assert r.mount(watch, "driver-root") is not None


def _every_container(objects: list[r.Obj]) -> list[r.Obj]:
    return [c for component in r.WORKLOADS for c in r.all_containers(objects, component)]


def test_image_tag_defaults_to_app_version_and_digest_wins(h4: helm.Helm) -> None:
    images = {c["image"] for c in _every_container(r.template(h4))}
    assert images == {f"ghcr.io/compute-domains/compute-domains:{r.APP_VERSION}"}
    digest = "sha256:" + "a" * 64
    objects = r.rendered(h4, **{"image.repository": "reg.example/cd", "image.digest": digest})
    assert {c["image"] for c in _every_container(objects)} == {f"reg.example/cd@{digest}"}
    objects = r.rendered(h4, **{"image.tag": "0.2.0-rc.1"})
    assert {c["image"] for c in _every_container(objects)} == {
        "ghcr.io/compute-domains/compute-domains:0.2.0-rc.1"
    }


def test_image_pull_policy_and_secrets(h4: helm.Helm) -> None:
    objects = r.template(
        h4, "--set", "image.pullPolicy=Always", "--set", "imagePullSecrets[0].name=regcred"
    )
    assert {c["imagePullPolicy"] for c in _every_container(objects)} == {"Always"}
    for component in r.WORKLOADS:
        assert r.pod_spec(objects, component)["imagePullSecrets"] == [{"name": "regcred"}]


def test_resources(h4: helm.Helm) -> None:
    objects = r.rendered(
        h4,
        **{"kubeletPlugin.resources.limits.memory": "1Gi", "nodeInit.resources.requests.cpu": "5m"},
    )
    assert r.container(objects, "kubelet-plugin")["resources"]["limits"]["memory"] == "1Gi"
    assert r.container(objects, "node-init")["resources"]["requests"]["cpu"] == "5m"


def test_pod_and_service_account_annotations(h4: helm.Helm) -> None:
    objects = r.rendered(
        h4,
        **{
            "kubeletPlugin.podAnnotations.scrape": "yes",
            "kubeletPlugin.serviceAccount.annotations.owner": "gpu",
        },
    )
    ds = r.workload(objects)
    assert ds["spec"]["template"]["metadata"]["annotations"] == {"scrape": "yes"}
    sa = r.find(objects, "ServiceAccount", "cd-compute-domains-kubelet-plugin")
    assert sa["metadata"]["annotations"] == {"owner": "gpu"}
    others = [o for o in r.of_kind(objects, "ServiceAccount") if o is not sa]
    assert others and all("owner" not in o["metadata"].get("annotations", {}) for o in others)


def test_update_strategy(h4: helm.Helm) -> None:
    ds = r.workload(r.template(h4))
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    simulated = r.template(h4, *r.sim_values())
    assert r.workload(simulated)["spec"]["updateStrategy"] == ds["spec"]["updateStrategy"]
    agent = r.workload(simulated, "imex-agent")
    assert agent["spec"]["updateStrategy"] == {"type": "OnDelete"}, "the production profile's"
    ds = r.workload(
        r.rendered(
            h4,
            **{
                "kubeletPlugin.updateStrategy.type": "OnDelete",
                "kubeletPlugin.updateStrategy.rollingUpdate": "null",
            },
        )
    )
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_device_classes_select_channel_zero_and_the_daemon(h: helm.Helm) -> None:
    objects = r.template(h)
    classes = {o["metadata"]["name"]: o for o in r.of_kind(objects, "DeviceClass")}
    assert set(classes) == {constants.CHANNEL_DEVICE_CLASS, constants.DAEMON_DEVICE_CLASS}
    assert {o["apiVersion"] for o in classes.values()} == {"resource.k8s.io/v1"}
    channel = classes[constants.CHANNEL_DEVICE_CLASS]["spec"]["selectors"][0]["cel"]["expression"]
    daemon = classes[constants.DAEMON_DEVICE_CLASS]["spec"]["selectors"][0]["cel"]["expression"]
    for expression in (channel, daemon):
        assert f"device.driver == '{DRIVER}'" in expression
    assert f"device.attributes['{DRIVER}'].type == 'channel'" in channel
    assert f"device.attributes['{DRIVER}'].id == 0" in channel
    assert f"device.attributes['{DRIVER}'].type == 'daemon'" in daemon


def test_resource_api_version_override(h4: helm.Helm) -> None:
    objects = r.rendered(h4, resourceApiVersion="resource.k8s.io/v1beta2")
    assert {o["apiVersion"] for o in r.of_kind(objects, "DeviceClass")} == {
        "resource.k8s.io/v1beta2"
    }


# -- invalid values fail with a message that names the fix ------------------------------


def test_invalid_enum_is_rejected_by_the_schema(h: helm.Helm) -> None:
    message = r.rejected(h, "--set", "logging.format=jsn")
    assert "/logging/format" in message and "'text', 'json'" in message


def test_wrong_type_is_rejected_by_the_schema(h: helm.Helm) -> None:
    message = r.rejected(h, "--set", "kubeletPlugin.httpPort=http")
    assert "/kubeletPlugin/httpPort" in message


@pytest.mark.parametrize(
    ("key", "typo", "where"),
    [
        ("kubeletPlugin.priorityClassname", "priorityClassname", "'/kubeletPlugin'"),
        ("driverroot", "driverroot", "''"),
        ("crds.enabeld", "enabeld", "'/crds'"),
        ("nodeInit.resources.request.cpu", "request", "'/nodeInit/resources'"),
    ],
)
def test_misspelt_key_is_rejected(h: helm.Helm, key: str, typo: str, where: str) -> None:
    message = r.rejected(h, "--set", f"{key}=x")
    assert f"at {where}: additional properties '{typo}' not allowed" in message


def test_retired_value_fails_with_its_replacement(h: helm.Helm) -> None:
    message = r.rejected(h, "--set", "nvidiaDriverRoot=/run/nvidia/driver")
    assert "set driverRoot=/run/nvidia/driver instead" in message
    message = r.rejected(h, "--set", "resources.computeDomains.enabled=true")
    assert "resources (resources.computeDomains.*" in message


@pytest.mark.parametrize("value", ["fabric.backend=nvml", "fabric.fakeNvmlFile=/etc/f.json"])
def test_retired_fabric_values_fail_and_say_what_to_do(h: helm.Helm, value: str) -> None:
    message = r.rejected(h, "--set", value)
    assert "fabric (fabric.backend, fabric.fakeNvmlFile) is retired" in message
    assert "the libnvidia-ml.so.1 under driverRoot" in message and "remove the key" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("driverRoot", "run/nvidia/driver"),
        ("driverRoot", "/run/../driver"),
        ("kubeletPlugin.kubeletDir", "/var/lib//kubelet"),
    ],
)
def test_unusable_node_path_is_rejected_with_an_example(
    h4: helm.Helm, key: str, value: str
) -> None:
    message = r.rejected(h4, "--set", f"{key}={value}")
    assert f"{key}={value} is not an absolute, resolved path on the node: write it like /" in (
        message
    )


def test_reserved_common_label_is_rejected(h4: helm.Helm) -> None:
    message = r.rejected(h4, "--set", "commonLabels.app\\.kubernetes\\.io/name=x")
    assert "commonLabels.app.kubernetes.io/name: the chart sets" in message


def test_empty_node_selection_is_rejected(h4: helm.Helm) -> None:
    message = r.rejected(
        h4, "--set-json", 'kubeletPlugin.nodeSelector={"nvidia.com/gpu.present":null}'
    )
    assert "the plugin would run on every node" in message


# -- security -----------------------------------------------------------------------------


@pytest.mark.parametrize("profile", list(r.PROFILES))
def test_containers_are_unprivileged_and_locked_down(h4: helm.Helm, profile: str) -> None:
    objects = r.template(h4, "--values", str(r.PROFILES[profile]))
    spec = r.pod_spec(objects)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    for c in r.all_containers(objects):
        sc = c["securityContext"]
        assert sc["privileged"] is False, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]
        # Root only because each container writes a root-owned node folder.
        writable = [m for m in c["volumeMounts"] if not m.get("readOnly") and m["name"] != "tmp"]
        assert sc["runAsUser"] == 0 and writable, c["name"]
        assert all(
            m.get("mountPropagation", "None") in ("None", "HostToContainer")
            for m in c["volumeMounts"]
        ), c["name"]


def test_node_folders_are_mounted_at_their_host_paths(h4: helm.Helm) -> None:
    objects = r.template(h4)
    same_path = {
        "plugins-registry": str(constants.KUBELET_REGISTRY_DIR),
        "plugins": str(constants.KUBELET_PLUGINS_DIR),
        "cdi": str(constants.CDI_ROOT),
        "run": str(constants.RUN_DIR),
    }
    for c in r.all_containers(objects):
        for m in c["volumeMounts"]:
            if m["name"] in same_path:
                assert m["mountPath"] == same_path[m["name"]]
                assert r.volume(objects, m["name"])["hostPath"]["path"] == same_path[m["name"]]
    proc = r.volume(objects, "host-proc")["hostPath"]["path"]
    assert proc == "/proc"
    for c in r.all_containers(objects):
        m = r.mount(c, "host-proc")
        assert m == {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
        assert r.flag(c, "proc-root") == "/host/proc"


def test_plugin_flags_name_the_node_files_of_the_contract(h4: helm.Helm) -> None:
    objects = r.template(h4)
    plugin = r.container(objects, "kubelet-plugin")
    assert r.flag(plugin, "node-name") == "$(NODE_NAME)"
    assert r.flag(plugin, "namespace") == "$(NAMESPACE)"
    assert r.flag(plugin, "cdi-root") == str(constants.CDI_ROOT)
    assert r.flag(plugin, "fabric-verdict-file") == str(constants.FABRIC_VERDICT_FILE)
    assert r.flag(plugin, "imex-status-file") == str(constants.IMEX_STATUS_FILE)
    assert r.flag(r.container(objects, "node-init"), "fabric-verdict-file") == str(
        constants.FABRIC_VERDICT_FILE
    )
    env = {e["name"]: e for e in plugin["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def _documented_flags(command: str) -> set[str]:
    """The flags docs/node-side.md or docs/control-side.md list for ``computedomains <command>``."""
    text = "\n".join(
        (r.REPO / "docs" / page).read_text() for page in ("node-side.md", "control-side.md")
    )
    row = next(
        line for line in text.splitlines() if line.startswith(f"| `computedomains {command}`")
    )
    columns = re.split(r"(?<!\\)\|", row)  # a cell may hold an escaped \|
    return set(re.findall(r"--[a-z][a-z-]*", columns[2]))


@pytest.mark.parametrize(
    ("container", "command"),
    [
        ("node-init", "node-init"),
        ("kubelet-plugin", "kubelet-plugin"),
        ("controller", "controller"),
        ("imex-agent", "imex-agent"),
    ],
)
def test_every_flag_the_chart_passes_is_documented(
    h4: helm.Helm, container: str, command: str
) -> None:
    documented = _documented_flags(command)
    everything = r.template(
        h4,
        "--values",
        str(r.PROFILES["sim"]),
        *r.set_args(
            {
                "kubeletPlugin.channelSlots": "8",
                "kubeletPlugin.imexReadyTimeout": "9",
                "nodeInit.transitionalGrace": "10",
            }
        ),
    )
    c = r.container(everything, container)
    assert c["command"] == ["computedomains"]
    assert c["args"][0] == command
    used = {a.split("=", 1)[0] for a in c["args"][1:]}
    assert used <= documented, used - documented


# -- RBAC and admission -------------------------------------------------------------------

READ = {"get", "list", "watch"}
ALLOWED_CLUSTER_WRITES = {
    ("resource.k8s.io", "resourceslices"): {"create", "update", "patch", "delete"},
    ("", "nodes"): {"patch"},
    ("", "nodes/status"): {"patch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("resource.k8s.io", "resourceclaims/driver"): {
        "associated-node:update",
        "associated-node:patch",
    },
}
"""Every write a cluster-wide grant of this chart may contain; nothing else."""


def test_no_object_grants_more_than_the_plugin_needs(h: helm.Helm) -> None:
    objects = r.of_component(r.template(h), "kubelet-plugin")
    roles = r.of_kind(objects, "ClusterRole") + r.of_kind(objects, "Role")
    assert [o["metadata"]["name"] for o in roles] == ["cd-compute-domains-kubelet-plugin"] * 2
    for role in roles:
        namespaced = role["kind"] == "Role"
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            assert "*" not in rule["apiGroups"] and "nonResourceURLs" not in rule, rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert resource not in ("secrets", "pods/exec", "serviceaccounts/token")
                    writes = set(rule["verbs"]) - READ
                    if namespaced:
                        assert not writes, (role["kind"], group, resource, writes)
                        continue
                    allowed = ALLOWED_CLUSTER_WRITES.get((group, resource), set())
                    assert writes <= allowed, (group, resource, writes - allowed)
            if "resourceclaims/driver" in rule["resources"]:
                assert rule["resourceNames"] == [DRIVER]


@pytest.mark.parametrize("component", list(r.WORKLOADS))
def test_role_bindings_bind_only_the_component_service_account(
    h: helm.Helm, component: str
) -> None:
    rendered = r.template(h)
    objects = r.of_component(rendered, component)
    sa = r.find(objects, "ServiceAccount")["metadata"]["name"]
    assert sa == f"cd-compute-domains-{component}"
    assert r.pod_spec(rendered, component)["serviceAccountName"] == sa
    bindings = r.of_kind(objects, "ClusterRoleBinding") + r.of_kind(objects, "RoleBinding")
    assert len(bindings) == 2
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": r.NAMESPACE}
        ]
        assert binding["roleRef"]["name"] == sa


def test_admission_policies_match_the_plugin_service_account(h: helm.Helm) -> None:
    """The incumbent's policy names a ServiceAccount its pods do not use; ours must not."""
    objects = r.of_component(r.template(h), "kubelet-plugin")
    sa = r.pod_spec(objects)["serviceAccountName"]
    user = f"system:serviceaccount:{r.NAMESPACE}:{sa}"
    policies = {p["metadata"]["name"]: p for p in r.of_kind(objects, "ValidatingAdmissionPolicy")}
    bindings = r.of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert {b["spec"]["policyName"] for b in bindings} == set(policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    resources = set()
    for policy in policies.values():
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConditions"][0]["expression"] == f"request.userInfo.username == '{user}'"
        assert "authentication.kubernetes.io/node-name" in spec["variables"][0]["expression"]
        for rule in spec["matchConstraints"]["resourceRules"]:
            resources.update(rule["resources"])
    assert resources == {"resourceslices", "nodes", "nodes/status"}


def _policy_parts(objects: list[r.Obj], suffix: str) -> tuple[dict[str, str], str]:
    """A bound, denying policy's variables (name: expression) and all its validation text."""
    name = f"cd-compute-domains-{suffix}"
    policy = r.find(objects, "ValidatingAdmissionPolicy", name)
    binding = r.find(objects, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    validations = " ".join(
        f"{v['expression']} {v.get('message', '')} {v.get('messageExpression', '')}"
        for v in policy["spec"]["validations"]
    )
    return variables, validations


def test_plugin_node_policy_allows_exactly_what_plugin_and_node_init_write(h: helm.Helm) -> None:
    """The labels, condition and taint node-init and the plugin own (api.constants) and no
    other; the cluster test (with_chart/test_tenancy.py) checks what the API server makes of it."""
    variables, validations = _policy_parts(r.template(h), "kubelet-plugin-node")
    owned = f"['{constants.COMPUTE_DOMAIN_LABEL}', '{constants.CLIQUE_LABEL}']"
    assert variables["ownLabels"] == owned
    assert variables["ownCondition"] == f"'{constants.FABRIC_CONDITION}'"
    assert variables["ownTaint"] == f"'{FABRIC_TAINT}'"
    effect = f"t.key == variables.ownTaint && t.effect == '{node_plan.TAINT_EFFECT}'"
    assert effect in variables["otherNewTaints"] and effect in variables["otherOldTaints"]
    for check in (
        "request.name == variables.nodeName",
        "size(variables.foreignLabels) == 0",
        "size(variables.foreignConditions) == 0",
        "variables.otherNewTaints == variables.otherOldTaints",
        "object.spec.unschedulable",
        "object.metadata.annotations",
    ):
        assert check in validations, check


def test_plugin_slice_policy_pins_driver_and_pool(h: helm.Helm) -> None:
    variables, validations = _policy_parts(r.template(h), "kubelet-plugin-slices")
    assert variables["driver"] == f"'{DRIVER}'"
    for check in (
        "object.spec.nodeName == variables.nodeName",
        "object.spec.driver == variables.driver",
        "object.spec.pool.name == variables.nodeName",
        "oldObject.spec.driver == variables.driver",
    ):
        assert check in validations, check


@pytest.mark.parametrize("namespace", [r.NAMESPACE, "gpu-system"])
def test_daemon_class_policy_refuses_the_class_outside_the_release_namespace(
    h: helm.Helm, namespace: str
) -> None:
    objects = r.template(h, namespace=namespace)
    variables, validations = _policy_parts(objects, "daemon-device-class")
    policy = r.find(objects, "ValidatingAdmissionPolicy", "cd-compute-domains-daemon-device-class")
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": ["resource.k8s.io"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
    }
    assert policy["spec"]["matchConditions"] == [
        {"name": "outside-release-namespace", "expression": f"request.namespace != '{namespace}'"}
    ]
    assert variables["class"] == f"'{constants.DAEMON_DEVICE_CLASS}'"
    assert "r.exactly.deviceClassName == variables.class" in variables["daemonRequests"]
    assert (
        "r.firstAvailable.exists(s, s.deviceClassName == variables.class)"
        in (variables["daemonRequests"])
    )
    assert "size(variables.daemonRequests) == 0" in validations
    assert f"IMEX agent in namespace {namespace} may" in validations
    assert "spec.channel.resourceClaimTemplate.name" in validations  # the fix
    # The agent's own template lives where the policy does not look.
    template = r.find(objects, "ResourceClaimTemplate")
    assert template["metadata"]["namespace"] == namespace


def test_controller_may_delete_only_stranded_workload_pods(h4: helm.Helm) -> None:
    objects = r.template(h4)
    policy = r.find(objects, "ValidatingAdmissionPolicy", "cd-compute-domains-controller-pods")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["DELETE"])
    (check,) = policy["spec"]["validations"]
    for needed in ("'Pending'", "resourceClaims", "ownerReferences"):
        assert needed in check["expression"]
    binding = r.find(objects, "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"])
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_daemon_class_policy_can_be_turned_off(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"daemonDeviceClass.restrictToReleaseNamespace": "false"})
    names = [o["metadata"]["name"] for o in r.of_kind(objects, "ValidatingAdmissionPolicy")]
    assert len(names) == 6 and "cd-compute-domains-daemon-device-class" not in names
    assert not [
        b
        for b in r.of_kind(objects, "ValidatingAdmissionPolicyBinding")
        if b["metadata"]["name"] == "cd-compute-domains-daemon-device-class"
    ]


# -- chart hygiene ------------------------------------------------------------------------


@pytest.mark.parametrize("major", r.MAJORS)
def test_chart_lock_is_reproduced_by_dependency_build(major: str, tmp_path: pathlib.Path) -> None:
    copy = tmp_path / "chart"
    shutil.copytree(r.CHART, copy, ignore=shutil.ignore_patterns("*.tgz"))
    r.helm_for(major, tmp_path / "home").run("dependency", "build", str(copy))
    committed = yaml.safe_load((r.CHART / "Chart.lock").read_text())
    rebuilt = yaml.safe_load((copy / "Chart.lock").read_text())
    committed.pop("generated")
    rebuilt.pop("generated")
    assert rebuilt == committed


def test_templates_use_no_lookup_and_no_random_values() -> None:
    forbidden = re.compile(
        r"\b(lookup|rand\w*|uuidv4|now|genCA|genPrivateKey|genSelfSignedCert\w*)\b"
    )
    for path in (r.CHART / "templates").iterdir():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for action in re.findall(r"\{\{(.*?)\}\}", line):
                assert not forbidden.search(action), f"{path.name}:{number}: {action.strip()}"


def test_helpers_carry_the_chart_prefix_and_a_contract() -> None:
    for path in (r.CHART / "templates").glob("_*.tpl"):
        text = path.read_text()
        for match in re.finditer(r'\{\{-? define "([^"]+)"', text):
            name = match.group(1)
            assert name.startswith("compute-domains."), f"{path.name}: {name}"
            before = text[: match.start()].rstrip()
            assert before.endswith("*/}}"), f"{path.name}: {name} has no contract comment"
            comment = before[before.rindex("{{/*") :]
            assert name in comment and "Takes:" in comment and "Returns:" in comment, name
    for path in (r.CHART / "templates").glob("*.yaml"):
        assert " define " not in path.read_text(), f"{path.name}: helpers belong in a _*.tpl file"


def _leaf_paths(values: object, prefix: str = "") -> set[str]:
    """Dotted paths of values.yaml; free-form maps (node selector, resources) count as one."""
    if not isinstance(values, dict) or not values:
        return {prefix}
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if key in ("nodeSelector", "resources", "updateStrategy") and prefix:
            paths.add(path)
        else:
            paths |= _leaf_paths(value, path)
    return paths


def _resolve(sub: object, root: dict[str, object]) -> object:
    """``sub`` with a local ``$ref`` (``#/definitions/x``) replaced by what it names."""
    while isinstance(sub, dict) and "$ref" in sub:
        ref = sub["$ref"]
        assert isinstance(ref, str) and ref.startswith("#/definitions/"), ref
        definitions = root["definitions"]
        assert isinstance(definitions, dict)
        sub = definitions[ref.removeprefix("#/definitions/")]
    return sub


def _schema_paths(
    schema: dict[str, object], prefix: str = "", root: dict[str, object] | None = None
) -> set[str]:
    root = root or schema
    paths: set[str] = set()
    properties = schema.get("properties")
    assert isinstance(properties, dict)
    for key, declared in properties.items():
        path = f"{prefix}.{key}" if prefix else key
        paths.add(path)
        sub = _resolve(declared, root)
        if (
            isinstance(sub, dict)
            and sub.get("additionalProperties") is False
            and "properties" in sub
        ):
            paths |= _schema_paths(sub, path, root)
    return paths


def _optional_keys(schema_paths: set[str]) -> set[str]:
    """Schema paths whose key values.yaml documents but leaves commented out."""
    text = (r.CHART / "values.yaml").read_text()
    commented = set(re.findall(r"^\s*# ([A-Za-z]+): ", text, re.M))
    return {p for p in schema_paths if p.rsplit(".", 1)[-1] in commented}


def test_every_value_is_in_the_schema_the_readme_and_a_template() -> None:
    values = yaml.safe_load((r.CHART / "values.yaml").read_text())
    schema = json.loads((r.CHART / "values.schema.json").read_text())
    readme = (r.CHART / "README.md").read_text()
    templates = "\n".join(p.read_text() for p in (r.CHART / "templates").iterdir())
    schema_paths = _schema_paths(schema)
    optional = _optional_keys(schema_paths)
    assert optional == {
        "kubeletPlugin.channelSlots",
        "kubeletPlugin.imexReadyTimeout",
        "nodeInit.transitionalGrace",
    }
    for path in _leaf_paths(values) | optional:
        assert path in schema_paths, f"{path} is not in values.schema.json"
        assert f"`{path}`" in readme, f"{path} is not in chart/README.md"
        if path.startswith("crds."):
            continue  # read by the subchart and by the dependency condition
        parts = path.split(".")
        prefixes = [".".join(parts[:n]) for n in range(len(parts), min(2, len(parts)) - 1, -1)]
        read = any(re.search(re.escape(f".Values.{p}") + r"\b", templates) for p in prefixes)
        assert read, f"no template reads {path}"


NODE_CONTAINERS = ["node-init", "kubelet-plugin", "imex-agent"]
CONTAINER_ONLY_PATHS = {"--driver-root", "--proc-root"}
"""Paths the chart mounts elsewhere in the container (the host's driver root and /proc)."""


@pytest.mark.parametrize("name", NODE_CONTAINERS)
def test_node_path_flags_follow_the_one_table(h4: helm.Helm, name: str) -> None:
    """Every node path flag the chart passes is the table's default, or a mount of the host's."""
    c = r.container(r.template(h4), name)
    passed = {f: r.flag(c, f.removeprefix("--")) for f in flaggroups.NODE_PATHS}
    passed = {f: v for f, v in passed.items() if v is not None}
    assert passed, f"{name} passes no node path"
    mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
    for flag, value in passed.items():
        if flag in CONTAINER_ONLY_PATHS:
            assert value in mounts, f"{name} {flag}={value} is not mounted"
        else:
            assert value == str(flaggroups.NODE_PATHS[flag].default), (name, flag)
