"""The controller, the IMEX agent and the optional objects render as their contracts say.

docs/control-side.md fixes the command lines and the names; these cases check that the chart
passes them, one value at a time, with helm 3 and helm 4 where the major could matter.
"""

from __future__ import annotations

import json

import pytest
import yaml

from computedomains.api import constants, placement
from tests.chart import rendering as r
from tests.support import helm

AGENT = "imex-agent"
CONTROLLER = "controller"
IMEX_DIR = str(constants.IMEX_DIR)


def _profile(h: helm.Helm, profile: str) -> list[r.Obj]:
    return r.template(h, "--values", str(r.PROFILES[profile]))


def _names(objects: list[r.Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


# -- the controller -----------------------------------------------------------------------


def test_controller_command_line_follows_the_contract(h: helm.Helm) -> None:
    objects = r.template(h)
    c = r.container(objects, "controller")
    assert c["command"] == ["computedomains"]
    assert c["args"] == [
        "controller",
        "--leader-elect",
        "--lease-name=cd-compute-domains-controller",
        "--namespace=$(POD_NAMESPACE)",
        "--pod-name=$(POD_NAME)",
        "--http-bind=$(POD_IP):8080",
        "--max-nodes-per-clique=18",
        "--placement-turns",
    ]
    env = r.env(c)
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "void"


def test_controller_runs_two_replicas_by_default(h: helm.Helm) -> None:
    assert r.workload(r.template(h), CONTROLLER)["spec"]["replicas"] == 2
    assert (
        r.workload(r.rendered(h, **{"controller.replicas": "3"}), CONTROLLER)["spec"]["replicas"]
        == 3
    )


def test_controller_is_unprivileged_non_root_and_read_only(h: helm.Helm) -> None:
    objects = r.template(h)
    spec = r.pod_spec(objects, CONTROLLER)
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    assert all("hostPath" not in v for v in spec["volumes"])
    [c] = list(r.all_containers(objects, CONTROLLER))
    assert c["securityContext"] == r.UNPRIVILEGED_CONTAINER


def test_controller_run_as_user_null_leaves_the_uid_to_the_platform(h: helm.Helm) -> None:
    objects = r.template(h, "--set-json", "controller.runAsUser=null")
    sc = r.container(objects, "controller")["securityContext"]
    assert "runAsUser" not in sc and "runAsGroup" not in sc
    assert sc["runAsNonRoot"] is True
    objects = r.rendered(h, **{"controller.runAsUser": "1000"})
    assert r.container(objects, "controller")["securityContext"]["runAsUser"] == 1000


def test_controller_run_as_user_zero_is_rejected(h4: helm.Helm) -> None:
    assert "/controller/runAsUser" in r.rejected(h4, "--set", "controller.runAsUser=0")


def test_controller_http_port_flows_into_bind_probes_and_service(h: helm.Helm) -> None:
    objects = r.rendered(h, **{"controller.httpPort": "9090"})
    c = r.container(objects, "controller")
    assert r.flag(c, "http-bind") == "$(POD_IP):9090"
    assert c["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    service = r.find(objects, "Service", "cd-compute-domains-controller")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "http", "protocol": "TCP"}
    ]
    assert (
        service["spec"]["selector"]
        == r.workload(objects, CONTROLLER)["spec"]["selector"]["matchLabels"]
    )


def test_controller_priority_class(h4: helm.Helm) -> None:
    assert r.pod_spec(r.template(h4), CONTROLLER)["priorityClassName"] == (
        "system-cluster-critical"
    )
    objects = r.rendered(h4, **{"controller.priorityClassName": ""})
    assert "priorityClassName" not in r.pod_spec(objects, CONTROLLER)


def test_controller_node_selector_and_tolerations(h4: helm.Helm) -> None:
    default = r.pod_spec(r.template(h4), CONTROLLER)
    assert "nodeSelector" not in default and "tolerations" not in default
    objects = r.template(
        h4,
        "--set-json",
        'controller.nodeSelector={"node-role.kubernetes.io/control-plane":""}',
        "--set-json",
        'controller.tolerations=[{"key":"node-role.kubernetes.io/control-plane",'
        '"operator":"Exists","effect":"NoSchedule"}]',
    )
    spec = r.pod_spec(objects, CONTROLLER)
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert spec["tolerations"] == [
        {
            "key": "node-role.kubernetes.io/control-plane",
            "operator": "Exists",
            "effect": "NoSchedule",
        }
    ]


def test_controller_replicas_spread_unless_affinity_is_set(h4: helm.Helm) -> None:
    objects = r.template(h4)
    [term] = r.pod_spec(objects, CONTROLLER)["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = r.workload(objects, CONTROLLER)["spec"]["selector"]["matchLabels"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["sys"]}]}
                ]
            }
        }
    }
    objects = r.template(h4, "--set-json", f"controller.affinity={json.dumps(affinity)}")
    assert r.pod_spec(objects, CONTROLLER)["affinity"] == affinity


def test_controller_resources(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"controller.resources.limits.memory": "2Gi"})
    assert r.container(objects, "controller")["resources"]["limits"]["memory"] == "2Gi"


def test_controller_pod_disruption_budget(h: helm.Helm) -> None:
    objects = r.template(h)
    pdb = r.find(objects, "PodDisruptionBudget", "cd-compute-domains-controller")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == r.workload(objects, CONTROLLER)["spec"]["selector"]
    pdb = r.find(
        r.rendered(h, **{"controller.podDisruptionBudget.maxUnavailable": "50%"}),
        "PodDisruptionBudget",
        "cd-compute-domains-controller",
    )
    assert pdb["spec"]["maxUnavailable"] == "50%"
    objects = r.rendered(h, **{"controller.podDisruptionBudget.enabled": "false"})
    assert r.of_kind(r.of_component(objects, CONTROLLER), "PodDisruptionBudget") == []


def test_controller_pod_and_service_account_annotations(h4: helm.Helm) -> None:
    objects = r.rendered(
        h4,
        **{
            "controller.podAnnotations.scrape": "yes",
            "controller.serviceAccount.annotations.owner": "gpu",
        },
    )
    template = r.workload(objects, CONTROLLER)["spec"]["template"]
    assert template["metadata"]["annotations"] == {"scrape": "yes"}
    sa = r.find(objects, "ServiceAccount", "cd-compute-domains-controller")
    assert sa["metadata"]["annotations"] == {"owner": "gpu"}


def test_max_nodes_per_clique_reaches_controller_and_agent(h: helm.Helm) -> None:
    objects = r.rendered(h, maxNodesPerClique="9")
    assert r.flag(r.container(objects, "controller"), "max-nodes-per-clique") == "9"
    assert r.flag(r.container(objects, "imex-agent"), "max-nodes-per-clique") == "9"


@pytest.mark.parametrize(("component", "key"), [(CONTROLLER, "controller"), (AGENT, "imexAgent")])
def test_component_can_be_turned_off(h: helm.Helm, component: str, key: str) -> None:
    objects = r.rendered(h, **{f"{key}.enabled": "false"})
    assert r.of_component(objects, component) == []
    assert r.of_component(objects, "kubelet-plugin"), "the plugin stays"


# -- the IMEX agent -----------------------------------------------------------------------


def test_agent_command_line_follows_the_contract(h: helm.Helm) -> None:
    c = r.container(r.template(h), "imex-agent")
    assert c["command"] == ["computedomains"]
    assert c["args"] == [
        "imex-agent",
        "--node-name=$(NODE_NAME)",
        "--namespace=$(POD_NAMESPACE)",
        "--pod-name=$(POD_NAME)",
        "--pod-uid=$(POD_UID)",
        "--pod-ip=$(POD_IP)",
        "--driver-root=/driver-root",
        f"--imex-dir={IMEX_DIR}",
        "--hosts-file=/etc/hosts",
        f"--fabric-verdict-file={constants.FABRIC_VERDICT_FILE}",
        "--fault-grace-checks=3",
        "--fault-grace-seconds=180",
        "--max-nodes-per-clique=18",
        "--heartbeat-interval=5",
        "--http-bind=$(POD_IP):8082",
    ]
    env = r.env(c)
    fields = {
        "NODE_NAME": "spec.nodeName",
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_UID": "metadata.uid",
        "POD_IP": "status.podIP",
    }
    for name, field in fields.items():
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == field, name
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "void"


def test_agent_runs_only_on_nodes_of_a_clique(h: helm.Helm) -> None:
    spec = r.pod_spec(r.template(h), AGENT)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchExpressions": [{"key": constants.CLIQUE_LABEL, "operator": "Exists"}]}]
    assert "nodeSelector" not in spec


def test_agent_node_selector_adds_to_the_clique_requirement(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"imexAgent.nodeSelector.pool": "gb200"})
    spec = r.pod_spec(objects, AGENT)
    assert spec["nodeSelector"] == {"pool": "gb200"}
    assert spec["affinity"]["nodeAffinity"]


def test_agent_claims_the_daemon_device_through_its_template(h: helm.Helm) -> None:
    objects = r.template(h)
    spec = r.pod_spec(objects, AGENT)
    assert spec["resourceClaims"] == [
        {"name": "daemon", "resourceClaimTemplateName": "cd-compute-domains-imex-agent-daemon"}
    ]
    assert r.container(objects, "imex-agent")["resources"]["claims"] == [{"name": "daemon"}]
    template = r.find(objects, "ResourceClaimTemplate", "cd-compute-domains-imex-agent-daemon")
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["metadata"]["namespace"] == r.NAMESPACE
    assert template["spec"]["spec"] == {
        "devices": {
            "requests": [
                {"name": "daemon", "exactly": {"deviceClassName": constants.DAEMON_DEVICE_CLASS}}
            ]
        }
    }, "no opaque config: the plugin prepares an agent claim without domain identity"


def test_agent_claim_template_follows_the_resource_api_version(h4: helm.Helm) -> None:
    objects = r.rendered(h4, resourceApiVersion="resource.k8s.io/v1beta1")
    template = r.find(objects, "ResourceClaimTemplate")
    assert template["apiVersion"] == "resource.k8s.io/v1beta1"
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "daemon", "deviceClassName": constants.DAEMON_DEVICE_CLASS}
    ]


def test_agent_mounts_driver_root_read_only_and_the_imex_folder_writable(h: helm.Helm) -> None:
    objects = r.rendered(h, driverRoot="/run/nvidia/driver")
    c = r.container(objects, "imex-agent")
    driver = r.mount(c, "driver-root")
    assert driver == {
        "name": "driver-root",
        "mountPath": "/driver-root",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    assert r.flag(c, "driver-root") == driver["mountPath"]
    assert r.volume(objects, "driver-root", AGENT)["hostPath"]["path"] == "/run/nvidia/driver"
    imex = r.mount(c, "imex")
    assert imex == {"name": "imex", "mountPath": IMEX_DIR}
    assert r.volume(objects, "imex", AGENT)["hostPath"] == {
        "path": IMEX_DIR,
        "type": "DirectoryOrCreate",
    }
    assert r.flag(c, "imex-dir") == IMEX_DIR
    run = r.mount(c, "run")
    assert run == {"name": "run", "mountPath": str(constants.RUN_DIR), "readOnly": True}
    assert r.flag(c, "fabric-verdict-file") == str(constants.FABRIC_VERDICT_FILE)


def test_agent_is_unprivileged_root_without_capabilities(h: helm.Helm) -> None:
    objects = r.template(h)
    spec = r.pod_spec(objects, AGENT)
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    sc = r.container(objects, "imex-agent")["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # Root only to write the root-owned IMEX folder on the node and the pod's /etc/hosts.
    assert sc["runAsUser"] == 0


def test_agent_http_port_flows_into_bind_probes_and_headless_service(h: helm.Helm) -> None:
    objects = r.rendered(h, **{"imexAgent.httpPort": "9402"})
    c = r.container(objects, "imex-agent")
    assert r.flag(c, "http-bind") == "$(POD_IP):9402"
    assert {"name": "http", "containerPort": 9402, "protocol": "TCP"} in c["ports"]
    for probe in ("startupProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    service = r.find(objects, "Service", "cd-compute-domains-imex-agent")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"][0]["port"] == 9402


@pytest.mark.parametrize("port", ["50000", "50005"])
def test_agent_http_port_may_not_take_an_imex_port(h4: helm.Helm, port: str) -> None:
    assert "/imexAgent/httpPort" in r.rejected(h4, "--set", f"imexAgent.httpPort={port}")


def test_agent_priority_class(h4: helm.Helm) -> None:
    assert r.pod_spec(r.template(h4), AGENT)["priorityClassName"] == "system-node-critical"
    objects = r.rendered(h4, **{"imexAgent.priorityClassName": "gpu-infra"})
    assert r.pod_spec(objects, AGENT)["priorityClassName"] == "gpu-infra"


def test_agent_tolerations_default_like_the_plugin(h4: helm.Helm) -> None:
    objects = r.template(h4)
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert r.pod_spec(objects, AGENT)["tolerations"] == [gpu]
    assert gpu in r.pod_spec(objects)["tolerations"]
    objects = r.template(h4, "--set-json", 'imexAgent.tolerations=[{"operator":"Exists"}]')
    assert r.pod_spec(objects, AGENT)["tolerations"] == [{"operator": "Exists"}]


def test_agent_update_strategy_defaults_to_on_delete(h4: helm.Helm) -> None:
    ds = r.workload(r.template(h4), AGENT)
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    ds = r.workload(
        r.template(
            h4,
            "--set-json",
            'imexAgent.updateStrategy={"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}',
        ),
        AGENT,
    )
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }


def test_agent_resources_are_guaranteed(h: helm.Helm) -> None:
    resources = r.container(r.template(h), "imex-agent")["resources"]
    assert resources["requests"] == resources["limits"]
    assert set(resources["limits"]) == {"cpu", "memory"}
    objects = r.rendered(
        h,
        **{
            "imexAgent.resources.requests.cpu": "1",
            "imexAgent.resources.limits.cpu": "1",
        },
    )
    assert r.container(objects, "imex-agent")["resources"]["limits"]["cpu"] == 1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"imexAgent.resources.requests.memory": "100Mi"},
            "imexAgent.resources.requests.memory=100Mi differs from "
            "imexAgent.resources.limits.memory=384Mi",
        ),
        (
            {"imexAgent.resources.limits.cpu": "null", "imexAgent.resources.requests.cpu": "null"},
            "imexAgent.resources.limits.cpu is not set: the IMEX agent must be in the "
            "Guaranteed QoS class",
        ),
    ],
)
def test_agent_resources_that_are_not_guaranteed_are_rejected(
    h4: helm.Helm, values: dict[str, str], message: str
) -> None:
    assert message in r.rejected(h4, *r.set_args(values))


def test_agent_hosts_file(h: helm.Helm) -> None:
    hosts = f"{IMEX_DIR}/hosts"
    objects = r.rendered(h, **{"imexAgent.hostsFile": hosts})
    assert r.flag(r.container(objects, "imex-agent"), "hosts-file") == hosts


@pytest.mark.parametrize("path", ["/tmp/hosts", "hosts", f"{IMEX_DIR}/../hosts", f"{IMEX_DIR}/"])
def test_agent_hosts_file_elsewhere_is_rejected(h4: helm.Helm, path: str) -> None:
    message = r.rejected(h4, "--set", f"imexAgent.hostsFile={path}")
    assert f"imexAgent.hostsFile={path} is neither the pod's own /etc/hosts" in message
    assert "Use /etc/hosts" in message


def test_agent_extra_env_comes_after_the_chart_env(h4: helm.Helm) -> None:
    objects = r.template(h4, "--set-json", 'imexAgent.extraEnv=[{"name":"IMEX_DEBUG","value":"1"}]')
    env = r.container(objects, "imex-agent")["env"]
    assert env[-1] == {"name": "IMEX_DEBUG", "value": "1"}
    assert [e["name"] for e in env[:-1]] == [
        "NODE_NAME",
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_UID",
        "POD_IP",
        "NVIDIA_VISIBLE_DEVICES",
    ]


def test_agent_extra_env_needs_one_value_source(h4: helm.Helm) -> None:
    message = r.rejected(
        h4,
        "--set-json",
        'imexAgent.extraEnv=[{"name":"X","value":"1","valueFrom":{"fieldRef":'
        '{"fieldPath":"metadata.name"}}}]',
    )
    assert "/imexAgent/extraEnv/0" in message


def test_agent_pod_and_service_account_annotations(h4: helm.Helm) -> None:
    objects = r.rendered(
        h4,
        **{
            "imexAgent.podAnnotations.scrape": "yes",
            "imexAgent.serviceAccount.annotations.owner": "gpu",
        },
    )
    template = r.workload(objects, AGENT)["spec"]["template"]
    assert template["metadata"]["annotations"] == {"scrape": "yes"}
    sa = r.find(objects, "ServiceAccount", "cd-compute-domains-imex-agent")
    assert sa["metadata"]["annotations"] == {"owner": "gpu"}


def test_agent_pods_carry_the_component_label_the_controller_watches(h: helm.Helm) -> None:
    labels = r.workload(r.template(h), AGENT)["spec"]["template"]["metadata"]["labels"]
    assert labels[r.COMPONENT] == "imex-agent"
    assert labels["app.kubernetes.io/name"] == "compute-domains", "the simulated kubelet runs it"


# -- node-side pods on SELinux and OpenShift ----------------------------------------------


def test_se_linux_type_reaches_both_node_side_pods_only(h: helm.Helm) -> None:
    default = r.template(h)
    for component in ("kubelet-plugin", AGENT):
        assert "seLinuxOptions" not in r.pod_spec(default, component)["securityContext"]
    objects = r.rendered(h, **{"nodePods.seLinuxType": "spc_t"})
    for component in ("kubelet-plugin", AGENT):
        assert r.pod_spec(objects, component)["securityContext"]["seLinuxOptions"] == {
            "type": "spc_t"
        }
    assert "seLinuxOptions" not in r.pod_spec(objects, CONTROLLER)["securityContext"]


def test_security_context_constraints_grant_use_to_the_node_side_accounts(h: helm.Helm) -> None:
    assert r.of_component(r.template(h), "platform") == []
    objects = r.rendered(h, **{"nodePods.securityContextConstraints": "privileged"})
    role = r.find(objects, "Role", "cd-compute-domains-node-scc")
    assert role["rules"] == [
        {
            "apiGroups": ["security.openshift.io"],
            "resources": ["securitycontextconstraints"],
            "resourceNames": ["privileged"],
            "verbs": ["use"],
        }
    ]
    binding = r.find(objects, "RoleBinding", "cd-compute-domains-node-scc")
    assert binding["roleRef"]["name"] == "cd-compute-domains-node-scc"
    assert [s["name"] for s in binding["subjects"]] == [
        "cd-compute-domains-kubelet-plugin",
        "cd-compute-domains-imex-agent",
    ]


# -- metrics and quota --------------------------------------------------------------------


def test_every_component_has_a_metrics_service(h: helm.Helm) -> None:
    objects = r.template(h)
    for component in r.WORKLOADS:
        [service] = r.of_kind(r.of_component(objects, component), "Service")
        selector = r.workload(objects, component)["spec"]["selector"]["matchLabels"]
        assert service["spec"]["selector"] == selector
        # The webhook's Service also carries its HTTPS port (tests/chart/test_render_webhook.py).
        [metrics] = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
        assert metrics["targetPort"] == "http"


def test_service_monitor_only_when_enabled(h: helm.Helm) -> None:
    assert r.of_kind(r.template(h), "ServiceMonitor") == []
    objects = r.rendered(h, **{"metrics.serviceMonitor.enabled": "true"})
    monitor = r.find(objects, "ServiceMonitor", "cd-compute-domains-metrics")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s"}
    ]
    selector = monitor["spec"]["selector"]
    assert selector["matchLabels"] == {
        "app.kubernetes.io/name": "compute-domains",
        "app.kubernetes.io/instance": r.RELEASE,
    }
    assert selector["matchExpressions"] == [
        {
            "key": r.COMPONENT,
            "operator": "In",
            "values": ["kubelet-plugin", "controller", "imex-agent", "webhook"],
        }
    ]


def test_service_monitor_interval_and_labels(h4: helm.Helm) -> None:
    objects = r.rendered(
        h4,
        **{
            "metrics.serviceMonitor.enabled": "true",
            "metrics.serviceMonitor.interval": "15s",
            "metrics.serviceMonitor.labels.release": "kube-prometheus-stack",
        },
    )
    monitor = r.find(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["metadata"]["labels"][r.COMPONENT] == "metrics"


@pytest.mark.parametrize(
    ("disabled", "scraped"),
    [
        ("controller", ["kubelet-plugin", "imex-agent", "webhook"]),
        ("webhook", ["kubelet-plugin", "controller", "imex-agent"]),
    ],
)
def test_service_monitor_skips_disabled_components(
    h4: helm.Helm, disabled: str, scraped: list[str]
) -> None:
    objects = r.rendered(
        h4, **{"metrics.serviceMonitor.enabled": "true", f"{disabled}.enabled": "false"}
    )
    expression = r.find(objects, "ServiceMonitor")["spec"]["selector"]["matchExpressions"][0]
    assert expression["values"] == scraped


def test_critical_pods_quota(h: helm.Helm) -> None:
    assert r.of_kind(r.template(h), "ResourceQuota") == []
    objects = r.rendered(
        h, **{"criticalPodsQuota.enabled": "true", "criticalPodsQuota.pods": "4096"}
    )
    quota = r.find(objects, "ResourceQuota", "cd-compute-domains-critical-pods")
    assert quota["spec"] == {
        "hard": {"pods": "4096"},
        "scopeSelector": {
            "matchExpressions": [
                {
                    "scopeName": "PriorityClass",
                    "operator": "In",
                    "values": ["system-cluster-critical", "system-node-critical"],
                }
            ]
        },
    }


def test_critical_pods_quota_without_any_priority_class_is_rejected(h4: helm.Helm) -> None:
    message = r.rejected(
        h4,
        *r.set_args(
            {
                "criticalPodsQuota.enabled": "true",
                "kubeletPlugin.priorityClassName": "",
                "controller.priorityClassName": "",
                "imexAgent.priorityClassName": "",
            }
        ),
    )
    assert "criticalPodsQuota.enabled=true, but no component has a priorityClassName" in message


# -- RBAC and admission -------------------------------------------------------------------

CONTROLLER_CLUSTER_RULES = {
    ("resource.nvidia.com", "computedomains"): {"get", "list", "watch", "update", "patch"},
    ("resource.nvidia.com", "computedomains/status"): {"update", "patch"},
    ("resource.nvidia.com", "computedomains/finalizers"): {"update"},
    ("resource.k8s.io", "resourceclaimtemplates"): {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "delete",
    },
    ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},
    ("resource.k8s.io", "resourceclaims/status"): {"update"},
    ("resource.k8s.io", "resourceclaims/driver"): {"arbitrary-node:update"},
    ("", "nodes"): {"get", "list", "watch", "patch"},
    ("", "pods"): {"get", "delete"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
CONTROLLER_NAMESPACED_RULES = {
    ("resource.nvidia.com", "computedomaincliques"): {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
    },
    ("", "pods"): {"get", "list", "watch"},
    ("coordination.k8s.io", "leases"): {"create", "get", "update"},
    ("", "configmaps"): {"create", "update"},
}
AGENT_CLUSTER_RULES = {
    ("", "nodes"): {"get", "list", "watch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
AGENT_NAMESPACED_RULES = {
    ("resource.nvidia.com", "computedomaincliques"): {"get", "list", "watch"},
    ("", "pods"): {"get"},
    ("", "pods/status"): {"patch"},
}


def _grants(role: r.Obj) -> dict[tuple[str, str], set[str]]:
    """(group, resource) → verbs of a Role or ClusterRole; no wildcard allowed anywhere."""
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


@pytest.mark.parametrize(
    ("component", "cluster_wide", "namespaced"),
    [
        (CONTROLLER, CONTROLLER_CLUSTER_RULES, CONTROLLER_NAMESPACED_RULES),
        (AGENT, AGENT_CLUSTER_RULES, AGENT_NAMESPACED_RULES),
    ],
)
def test_component_rbac_is_exactly_what_it_needs(
    h: helm.Helm,
    component: str,
    cluster_wide: dict[tuple[str, str], set[str]],
    namespaced: dict[tuple[str, str], set[str]],
) -> None:
    objects = r.of_component(r.template(h), component)
    name = f"cd-compute-domains-{component}"
    assert _grants(r.find(objects, "ClusterRole", name)) == cluster_wide
    role = r.find(objects, "Role", name)
    assert role["metadata"]["namespace"] == r.NAMESPACE
    assert _grants(role) == namespaced


def test_the_placement_turn_is_one_object_named_as_the_code_names_it(h4: helm.Helm) -> None:
    objects = r.template(h4)
    for component in (CONTROLLER, "kubelet-plugin"):
        role = r.find(objects, "Role", f"cd-compute-domains-{component}")
        rules = [rule for rule in role["rules"] if rule["resources"] == ["configmaps"]]
        named = [rule for rule in rules if "resourceNames" in rule]
        assert [rule["resourceNames"] for rule in named] == [[placement.TURN_CONFIGMAP]]
        # Only a create cannot be narrowed to a name.
        assert all(rule["verbs"] == ["create"] for rule in rules if rule not in named)


def test_controller_lease_writes_are_limited_to_its_own_lease(h4: helm.Helm) -> None:
    objects = r.template(h4)
    role = r.find(objects, "Role", "cd-compute-domains-controller")
    leases = [rule for rule in role["rules"] if rule["resources"] == ["leases"]]
    assert leases == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["cd-compute-domains-controller"],
            "verbs": ["get", "update"],
        },
    ]
    assert r.flag(r.container(objects, "controller"), "lease-name") == (
        "cd-compute-domains-controller"
    )


def _policy(objects: list[r.Obj], name: str) -> r.Obj:
    policy = r.find(objects, "ValidatingAdmissionPolicy", name)
    [binding] = [
        b
        for b in r.of_kind(objects, "ValidatingAdmissionPolicyBinding")
        if b["spec"]["policyName"] == name
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    return policy


def test_agent_policy_confines_pod_writes_to_the_pod_in_the_token(h: helm.Helm) -> None:
    policy = _policy(r.template(h), "cd-compute-domains-imex-agent-pod")
    spec = policy["spec"]
    user = f"system:serviceaccount:{r.NAMESPACE}:cd-compute-domains-imex-agent"
    assert spec["matchConditions"][0]["expression"] == f"request.userInfo.username == '{user}'"
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"pods", "pods/status"}
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    extra = "request.userInfo.extra['authentication.kubernetes.io/pod-name'][0]"
    assert extra in variables["podName"]
    assert variables["subResource"] == "has(request.subResource) ? request.subResource : ''"
    expressions = " ".join(v["expression"] for v in spec["validations"])
    assert "request.name == variables.podName" in expressions
    assert "variables.subResource == 'status'" in expressions


def test_controller_policy_confines_node_writes_to_the_domain_label(h: helm.Helm) -> None:
    policy = _policy(r.template(h), "cd-compute-domains-controller-nodes")
    spec = policy["spec"]
    user = f"system:serviceaccount:{r.NAMESPACE}:cd-compute-domains-controller"
    assert spec["matchConditions"][0]["expression"] == f"request.userInfo.username == '{user}'"
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"nodes", "nodes/status"}
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["label"] == f"'{constants.COMPUTE_DOMAIN_LABEL}'"


# -- profiles -----------------------------------------------------------------------------


def test_sim_profile_points_the_agent_and_the_fake_imex_at_one_hosts_file(h: helm.Helm) -> None:
    objects = _profile(h, "sim")
    agent = r.container(objects, "imex-agent")
    hosts = f"{IMEX_DIR}/hosts"
    assert r.flag(agent, "hosts-file") == hosts
    assert r.env(agent)["COMPUTE_DOMAINS_FAKE_IMEX_HOSTS"] == {
        "name": "COMPUTE_DOMAINS_FAKE_IMEX_HOSTS",
        "value": hosts,
    }
    assert r.workload(objects, CONTROLLER)["spec"]["replicas"] == 2, "failover is tested"
    assert "--leader-elect" in r.container(objects, "controller")["args"]


@pytest.mark.parametrize("profile", list(r.PROFILES))
def test_every_profile_keeps_the_agent_guaranteed_and_the_controller_non_root(
    h4: helm.Helm, profile: str
) -> None:
    objects = _profile(h4, profile)
    resources = r.container(objects, "imex-agent")["resources"]
    assert resources["requests"] == resources["limits"]
    assert r.container(objects, "controller")["securityContext"]["runAsNonRoot"] is True


def test_gb200_profile(h4: helm.Helm) -> None:
    objects = _profile(h4, "gb200-nvl72")
    assert r.flag(r.container(objects, "imex-agent"), "max-nodes-per-clique") == "18"
    assert r.volume(objects, "driver-root", AGENT)["hostPath"]["path"] == "/"
    assert "--taint-broken" in r.container(objects, "node-init")["args"]


def test_gke_profile(h4: helm.Helm) -> None:
    objects = _profile(h4, "gke")
    driver = "/home/kubernetes/bin/nvidia"
    assert r.volume(objects, "driver-root")["hostPath"]["path"] == driver
    assert r.volume(objects, "driver-root", AGENT)["hostPath"]["path"] == driver
    assert r.pod_spec(objects)["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-gb200"
    }
    assert r.find(objects, "ResourceQuota")["spec"]["hard"] == {"pods": "2048"}


def test_eks_profile(h4: helm.Helm) -> None:
    objects = _profile(h4, "eks")
    selector = {"node.kubernetes.io/instance-type": "p6e-gb200.36xlarge"}
    assert r.pod_spec(objects)["nodeSelector"] == selector
    assert r.pod_spec(objects, AGENT)["nodeSelector"] == selector
    assert r.volume(objects, "driver-root")["hostPath"]["path"] == "/"


def test_openshift_profile(h4: helm.Helm) -> None:
    objects = _profile(h4, "openshift")
    assert r.volume(objects, "driver-root", AGENT)["hostPath"]["path"] == "/run/nvidia/driver"
    for component in ("kubelet-plugin", AGENT):
        assert r.pod_spec(objects, component)["securityContext"]["seLinuxOptions"] == {
            "type": "spc_t"
        }
    assert "runAsUser" not in r.container(objects, "controller")["securityContext"]
    assert r.find(objects, "Role", "cd-compute-domains-node-scc")["rules"][0]["resourceNames"] == [
        "privileged"
    ]


# -- examples -----------------------------------------------------------------------------


def test_examples_name_the_same_claim_template_and_no_namespace() -> None:
    docs = [
        d
        for path in sorted((r.REPO / "examples").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    assert all("namespace" not in d["metadata"] for d in docs), "applied into any namespace"
    [domain] = [d for d in docs if d["kind"] == constants.COMPUTE_DOMAIN_KIND]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    [workload] = [d for d in docs if d["kind"] == "StatefulSet"]
    spec = workload["spec"]["template"]["spec"]
    assert [c["resourceClaimTemplateName"] for c in spec["resourceClaims"]] == [template]
    claim = spec["resourceClaims"][0]["name"]
    assert all({"name": claim} in c["resources"]["claims"] for c in spec["containers"])
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert labels.get("app.kubernetes.io/name") != "compute-domains", "not a chart pod"


@pytest.mark.parametrize(
    ("component", "ports"),
    [("controller", [8080]), ("webhook", [9443, 8083]), ("kubelet-plugin", [8081])],
)
def test_network_policies_let_in_only_the_components_ports_and_out_only_the_api_server(
    h4: helm.Helm, component: str, ports: list[int]
) -> None:
    policy = r.find(r.template(h4), "NetworkPolicy", f"{r.RELEASE}-compute-domains-{component}")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"][r.COMPONENT] == component
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": p} for p in ports]}]
    assert spec["egress"] == [{"ports": [{"protocol": "TCP", "port": p} for p in (443, 6443)]}]


def test_network_policies_can_be_turned_off(h4: helm.Helm) -> None:
    assert r.of_kind(r.template(h4, "--set", "networkPolicy.enabled=false"), "NetworkPolicy") == []


def test_the_webhook_budget_lets_a_drain_through_with_one_replica(h4: helm.Helm) -> None:
    objects = r.template(h4, *r.set_args({"webhook.replicas": "1"}))
    pdb = r.find(objects, "PodDisruptionBudget", f"{r.RELEASE}-compute-domains-webhook")
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1} and "minAvailable" not in pdb["spec"]
    error = r.rejected(h4, *r.set_args({"webhook.podDisruptionBudget.minAvailable": "1"}))
    assert "webhook.podDisruptionBudget.minAvailable is retired" in error


def _our_containers(objects: list[r.Obj]) -> dict[str, r.Obj]:
    """Every container (init containers too) that runs ``computedomains``, by object/name."""
    found: dict[str, r.Obj] = {}
    for obj in objects:
        spec = obj.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or {}
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            if c.get("command") == ["computedomains"]:
                found[f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"] = c
    return found


def test_logging_values_reach_every_component_hook_and_node_init(h4: helm.Helm) -> None:
    values = {"logging.format": "json", "logging.verbosity": "2",
              "nodeInit.recheckIn": "sidecar"}  # fmt: skip
    ours = _our_containers(r.rendered(h4, **values))
    kinds = {key.split("/")[0] for key in ours}
    assert kinds == {"Deployment", "DaemonSet", "Job"}, ours.keys()
    assert any(key.endswith("/node-init-watch") for key in ours), ours.keys()
    missing = [k for k, c in ours.items()
               if not {"--log-format=json", "--verbosity=2"} <= set(c["args"])]  # fmt: skip
    assert missing == []
    # At the defaults (text, 0) no container carries a logging flag.
    flags = ("--log-format", "--verbosity")
    defaults = _our_containers(r.template(h4))
    assert not [k for k, c in defaults.items() if any(a.startswith(flags) for a in c["args"])]
