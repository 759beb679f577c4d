"""The webhook's objects render as docs/webhook.md says: one value, one assertion at a time."""

from __future__ import annotations

from computedomains.api import constants
from computedomains.webhook import podaffinity
from tests.chart import rendering as r
from tests.support import helm

WEBHOOK = "webhook"
NAME = "cd-compute-domains-webhook"
SECRET = "cd-compute-domains-webhook-tls"
SERVICE = "cd-cd-webhook"
WAVE = {"argocd.argoproj.io/sync-wave": "-1"}


def _container(objects: list[r.Obj]) -> r.Obj:
    return r.container(objects, "webhook")


def test_command_line_follows_the_contract(h: helm.Helm) -> None:
    c = _container(r.template(h))
    assert c["command"] == ["computedomains"]
    assert c["args"] == [
        "webhook",
        "--namespace=$(POD_NAMESPACE)",
        "--bind=$(POD_IP):9443",
        "--http-bind=$(POD_IP):8083",
        f"--service-name={SERVICE}",
        "--cluster-domain=cluster.local",
        f"--tls-secret={SECRET}",
        f"--conversion-service={SERVICE}",
        f"--validating-webhook-configuration={NAME}",
        f"--mutating-webhook-configuration={NAME}",
        "--resync-interval=15",
        "--spread-domains",
        "--ca-validity=365d",
        "--ca-renew-before=30d",
        "--cert-validity=7d",
        "--cert-renew-before=2d",
        "--rotation-grace=5m",
    ]


def test_spread_domains_can_be_turned_off(h4: helm.Helm) -> None:
    args = _container(r.rendered(h4, **{"webhook.spreadDomains": "false"}))["args"]
    assert "--no-spread-domains" in args and "--spread-domains" not in args


def test_the_command_line_parses(h4: helm.Helm) -> None:
    """Every flag the chart passes exists, with a value the webhook accepts."""
    from computedomains import cli  # noqa: PLC0415 - the parser, not the test module's import

    args = [a.replace("$(POD_IP)", "10.0.0.1").replace("$(POD_NAMESPACE)", "ns")
            for a in _container(r.template(h4))["args"]]  # fmt: skip
    assert cli.build_parser(args).parse_args(args).func is not None


def test_service_is_the_crd_conversion_target_port_443_to_https(h: helm.Helm) -> None:
    objects = r.template(h)
    service = r.find(objects, "Service", SERVICE)
    assert service["spec"]["ports"][0] == {
        "name": "https", "port": 443, "targetPort": "https", "protocol": "TCP",
    }  # fmt: skip
    assert (
        service["spec"]["selector"]
        == r.workload(objects, WEBHOOK)["spec"]["selector"]["matchLabels"]
    )
    crd = r.find(objects, "CustomResourceDefinition", "computedomains.resource.nvidia.com")
    target = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert (target["name"], target["namespace"], target["port"]) == (SERVICE, r.NAMESPACE, 443)
    assert target["path"] == constants.CONVERSION_PATH
    assert _container(objects)["ports"][0] == {
        "name": "https", "containerPort": 9443, "protocol": "TCP",
    }  # fmt: skip


def test_service_name_is_the_same_without_the_crds_subchart(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"crds.enabled": "false"})
    assert r.find(objects, "Service", SERVICE)
    assert r.flag(_container(objects), "service-name") == SERVICE


def test_two_replicas_and_a_pdb_that_lets_one_go(h: helm.Helm) -> None:
    objects = r.template(h)
    assert r.workload(objects, WEBHOOK)["spec"]["replicas"] == 2
    pdb = r.find(objects, "PodDisruptionBudget", NAME)
    assert pdb["spec"]["maxUnavailable"] == 1


def test_replicas_value(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"webhook.replicas": "3"})
    assert r.workload(objects, WEBHOOK)["spec"]["replicas"] == 3


def test_is_unprivileged_non_root_and_read_only(h: helm.Helm) -> None:
    objects = r.template(h)
    spec = r.pod_spec(objects, WEBHOOK)
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    assert all("hostPath" not in v for v in spec["volumes"])
    assert _container(objects)["securityContext"] == r.UNPRIVILEGED_CONTAINER


def test_run_as_user_null_leaves_the_uid_to_the_platform(h4: helm.Helm) -> None:
    objects = r.template(h4, "--set-json", "webhook.runAsUser=null")
    context = _container(objects)["securityContext"]
    assert "runAsUser" not in context and context["runAsNonRoot"] is True


def test_probes_on_the_http_port(h4: helm.Helm) -> None:
    c = _container(r.rendered(h4, **{"webhook.httpPort": "9099"}))
    assert r.flag(c, "http-bind") == "$(POD_IP):9099"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {"name": "http", "containerPort": 9099, "protocol": "TCP"} in c["ports"]


def test_replicas_spread_softly(h4: helm.Helm) -> None:
    spec = r.pod_spec(r.template(h4), WEBHOOK)
    [anti] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    [spread] = spec["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"


def test_every_webhook_object_is_in_sync_wave_minus_one(h: helm.Helm) -> None:
    objects = r.of_component(r.rendered(h, **{"webhook.certManager.enabled": "true"}), WEBHOOK)
    assert len(objects) == 17  # 13 and the two Issuers and two Certificates
    for obj in objects:
        assert obj["metadata"]["annotations"].items() >= WAVE.items(), obj["kind"]


def test_validating_configuration(h: helm.Helm) -> None:
    configuration = r.find(r.template(h), "ValidatingWebhookConfiguration", NAME)
    [webhook] = configuration["webhooks"]
    assert webhook["failurePolicy"] == "Fail" and webhook["sideEffects"] == "None"
    assert webhook["timeoutSeconds"] == 5
    [rule] = webhook["rules"]
    assert rule["apiVersions"] == ["v1beta1", "v1beta2"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["resources"] == ["computedomains"]
    assert webhook["clientConfig"]["service"] == {
        "name": SERVICE, "namespace": r.NAMESPACE, "path": "/validate/computedomains", "port": 443,
    }  # fmt: skip


def test_mutating_configuration(h: helm.Helm) -> None:
    configuration = r.find(r.template(h), "MutatingWebhookConfiguration", NAME)
    unlabelled, labelled = configuration["webhooks"]
    # One endpoint; a pod arriving with the domain label is refused while it cannot be checked.
    assert (unlabelled["failurePolicy"], labelled["failurePolicy"]) == ("Ignore", "Fail")
    label = "has(object.metadata.labels) && 'computedomains.io/domain' in object.metadata.labels"
    for webhook, carries in ((unlabelled, f"!({label})"), (labelled, label)):
        assert webhook["reinvocationPolicy"] == "Never"
        [rule] = webhook["rules"]
        assert rule["operations"] == ["CREATE"] and rule["resources"] == ["pods"]
        template, domain_label = webhook["matchConditions"]
        assert "resourceClaimTemplateName" in template["expression"]
        assert domain_label["expression"] == carries
        assert webhook["clientConfig"]["service"]["path"] == "/mutate/pods"


def test_no_ca_bundle_is_rendered_anywhere(h: helm.Helm) -> None:
    for values in ({}, {"webhook.certManager.enabled": "true"}):
        assert "caBundle" not in str(r.rendered(h, **values))


def test_timeout_seconds(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"webhook.timeoutSeconds": "2"})
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert r.find(objects, kind, NAME)["webhooks"][0]["timeoutSeconds"] == 2


def test_rbac_is_limited_to_its_own_objects(h: helm.Helm) -> None:
    objects = r.template(h)
    cluster_rules = r.find(objects, "ClusterRole", NAME)["rules"]
    assert cluster_rules == [
        {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": ["computedomains.resource.nvidia.com"], "verbs": ["get", "patch"]},
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
         "resourceNames": [NAME], "verbs": ["get", "patch"]},
    ]  # fmt: skip
    assert r.find(objects, "Role", NAME)["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET],
         "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]  # fmt: skip


def test_cert_manager_mode_only_reads_the_secret(h: helm.Helm) -> None:
    objects = r.rendered(h, **{"webhook.certManager.enabled": "true"})
    c = _container(objects)
    assert "--cert-manager" in c["args"] and r.flag(c, "ca-validity") is None
    assert r.find(objects, "Role", NAME)["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET], "verbs": ["get"]}
    ]


def test_cert_manager_default_is_a_ca_of_its_own(h4: helm.Helm) -> None:
    objects = r.rendered(h4, **{"webhook.certManager.enabled": "true"})
    assert sorted((o["kind"], o["metadata"]["name"]) for o in r.of_kind(objects, "Issuer")) == [
        ("Issuer", f"{NAME}-ca"), ("Issuer", f"{NAME}-selfsigned"),
    ]  # fmt: skip
    ca = r.find(objects, "Certificate", f"{NAME}-ca")
    assert ca["spec"]["isCA"] is True and ca["spec"]["issuerRef"]["name"] == f"{NAME}-selfsigned"
    serving = r.find(objects, "Certificate", SECRET)
    assert serving["spec"]["secretName"] == SECRET
    assert serving["spec"]["issuerRef"] == {
        "name": f"{NAME}-ca", "kind": "Issuer", "group": "cert-manager.io",
    }  # fmt: skip
    assert serving["spec"]["dnsNames"] == [
        SERVICE, f"{SERVICE}.{r.NAMESPACE}", f"{SERVICE}.{r.NAMESPACE}.svc",
        f"{SERVICE}.{r.NAMESPACE}.svc.cluster.local",
    ]  # fmt: skip


def test_cert_manager_issuer_ref_replaces_the_own_ca(h4: helm.Helm) -> None:
    objects = r.template(
        h4, "--set", "webhook.certManager.enabled=true", "--set-json",
        'webhook.certManager.issuerRef={"name":"corp","kind":"ClusterIssuer","group":"cert-manager.io"}',
    )  # fmt: skip
    assert r.of_kind(objects, "Issuer") == []
    assert [c["metadata"]["name"] for c in r.of_kind(objects, "Certificate")] == [SECRET]
    assert r.find(objects, "Certificate", SECRET)["spec"]["issuerRef"]["kind"] == "ClusterIssuer"


def test_an_issuer_ref_without_a_name_is_rejected(h4: helm.Helm) -> None:
    message = r.rejected(h4, "--set", "webhook.certManager.issuerRef.kind=Issuer")
    assert "/webhook/certManager/issuerRef" in message


def test_a_malformed_duration_is_rejected(h4: helm.Helm) -> None:
    assert "/webhook/tls/certValidity" in r.rejected(h4, "--set", "webhook.tls.certValidity=7days")


def test_a_rotation_grace_within_a_resync_is_rejected(h4: helm.Helm) -> None:
    message = r.rejected(h4, "--set", "webhook.resyncInterval=300")
    assert "webhook.tls.rotationGrace=5m does not exceed webhook.resyncInterval=300" in message
    assert "raise webhook.tls.rotationGrace above 360s" in message
    # cert-manager rotates the Secret itself: the webhook gets no grace.
    r.rendered(h4, **{"webhook.resyncInterval": "300", "webhook.certManager.enabled": "true"})


def test_tls_values_become_flags(h4: helm.Helm) -> None:
    c = _container(r.rendered(h4, **{"webhook.tls.certValidity": "1d"}))
    assert r.flag(c, "cert-validity") == "1d"


def test_disabled_renders_no_webhook_object(h4: helm.Helm) -> None:
    assert r.of_component(r.rendered(h4, **{"webhook.enabled": "false"}), WEBHOOK) == []


def test_the_pod_domain_label_helper_is_the_webhooks_label(h: helm.Helm) -> None:
    objects = r.template(h)
    policy = r.find(
        objects, "ValidatingAdmissionPolicy", f"{r.RELEASE}-compute-domains-pod-domain-label"
    )
    mutating = r.find(objects, "MutatingWebhookConfiguration", NAME)
    for rendered in (policy, mutating):
        assert f"'{podaffinity.DOMAIN_LABEL}' in object.metadata.labels" in str(rendered)
