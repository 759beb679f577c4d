"""caBundle patches: only the caBundle fields, only where they differ."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, cast

from computedomains import flags
from computedomains.api import crds, resources
from computedomains.kube import client
from computedomains.webhook import certs, config, inject, service, tlspolicy
from tests.support.fakeapi import FakeApi

BUNDLE = inject.encoded(b"-----BEGIN CERTIFICATE-----\n...\n")
OWNED = {
    "manager": inject.FIELD_MANAGER,
    "operation": "Apply",
    "fieldsV1": {"f:spec": {"f:conversion": {"f:strategy": {}, "f:webhook": {}}}},
}
"""The managed-fields entry of a conversion block this webhook co-owns already."""


def _crd(strategy: str = "Webhook", ca_bundle: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"service": {"name": "w", "namespace": "ns", "path": "/convert"}}
    if ca_bundle is not None:
        config["caBundle"] = ca_bundle
    conversion: dict[str, Any] = {"strategy": strategy}
    if strategy == "Webhook":
        conversion["webhook"] = {"clientConfig": config, "conversionReviewVersions": ["v1"]}
    return {"spec": {"conversion": conversion}}


def test_a_crd_without_the_bundle_gets_a_patch_of_the_bundle_alone() -> None:
    assert inject.crd_patch(_crd(), BUNDLE) == {
        "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": BUNDLE}}}}
    }
    assert inject.crd_patch(_crd(ca_bundle="b2xk"), BUNDLE) is not None


def test_a_crd_with_the_bundle_needs_no_patch() -> None:
    assert inject.crd_patch(_crd(ca_bundle=BUNDLE), BUNDLE) is None


def test_a_crd_without_webhook_conversion_is_left_alone() -> None:
    assert inject.crd_patch(_crd(strategy="None"), BUNDLE) is None
    assert inject.crd_patch({"spec": {}}, BUNDLE) is None


def test_only_webhooks_with_another_bundle_are_patched_by_name() -> None:
    configuration = {
        "webhooks": [
            {"name": "a.example.com", "clientConfig": {"caBundle": BUNDLE}},
            {"name": "b.example.com", "clientConfig": {"service": {"name": "w"}}},
        ]
    }
    assert inject.webhooks_patch(configuration, BUNDLE) == {
        "webhooks": [{"name": "b.example.com", "clientConfig": {"caBundle": BUNDLE}}]
    }
    configuration["webhooks"][1]["clientConfig"]["caBundle"] = BUNDLE
    assert inject.webhooks_patch(configuration, BUNDLE) is None


def test_empty_names_are_no_targets() -> None:
    targets = inject.targets(crd="computedomains.resource.nvidia.com", validating="v", mutating="")
    assert [t.label for t in targets] == [
        "customresourcedefinitions/computedomains.resource.nvidia.com",
        "validatingwebhookconfigurations/v",
    ]


def test_a_crd_pointing_elsewhere_is_pointed_at_this_webhook() -> None:
    ours = inject.ConversionService("cd-cd-webhook", "cd-system")
    patch = inject.crd_patch(_crd(ca_bundle=BUNDLE), BUNDLE, ours)
    assert patch == {
        "spec": {"conversion": {"webhook": {"clientConfig": {"service": ours.client_config()}}}}
    }
    by_url = _crd(ca_bundle=BUNDLE)
    config = by_url["spec"]["conversion"]["webhook"]["clientConfig"]
    del config["service"]
    config["url"] = "https://127.0.0.1:9443/convert"
    patched = inject.crd_patch(by_url, BUNDLE, ours)
    assert patched is not None
    assert patched["spec"]["conversion"]["webhook"]["clientConfig"]["url"] is None


def test_a_crd_already_pointing_here_needs_no_patch() -> None:
    ours = inject.ConversionService("w", "ns")
    crd = _crd(ca_bundle=BUNDLE)
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] = ours.client_config()
    assert inject.crd_patch(crd, BUNDLE, ours) is None


def test_the_webhook_co_owns_the_conversion_block_so_a_server_side_rollback_keeps_it_whole() -> (
    None
):
    """Helm 4 rolls back server-side: were the strategy Helm's alone and the caBundle this
    webhook's, dropping the block would leave a clientConfig without a strategy, which the API
    server refuses. Co-owned as it stands, once."""
    crd = {"metadata": {"name": "computedomains.resource.nvidia.com"}, **_crd(ca_bundle=BUNDLE)}
    body = inject.conversion_apply(crd)
    assert body is not None
    assert body["spec"] == crd["spec"]  # the values as they stand: nothing to conflict with
    assert body["metadata"] == {"name": "computedomains.resource.nvidia.com"}
    crd["metadata"]["managedFields"] = [OWNED]
    assert inject.owns_conversion(crd) and inject.conversion_apply(crd) is None
    assert inject.conversion_apply({"spec": {"conversion": {"strategy": "None"}}}) is None


def test_a_round_co_owns_the_conversion_of_a_crd_that_already_has_its_bundle() -> None:
    api = FakeApi()
    crd = {"metadata": {"name": crds.COMPUTE_DOMAIN.name, "resourceVersion": "1"},
           **_crd(ca_bundle=BUNDLE)}  # fmt: skip
    api.objects[CRD_PATH] = crd
    pem = b"-----BEGIN CERTIFICATE-----\n...\n"
    injector = inject.Injector(
        cast(client.Client, api), inject.targets(crd=crds.COMPUTE_DOMAIN.name, validating="",
                                                 mutating=""),
        secret_ca=lambda: pem,
    )  # fmt: skip
    injector.sync(pem)
    assert api.writes() == [("APPLY", CRD_PATH)]
    injector.sync(pem)
    assert api.writes() == [("APPLY", CRD_PATH)]  # once


# -- a round that read the Secret before another replica rotated it -----------------------------

NAMESPACE, SECRET = "cd-system", "cd-cd-webhook-tls"
CRD_PATH = resources.CRDS.path(crds.COMPUTE_DOMAIN.name)
SECRET_PATH = resources.SECRETS.path(SECRET, namespace=NAMESPACE)
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
VALIDITY = tlspolicy.Validity(
    ca=datetime.timedelta(days=365), ca_renew_before=datetime.timedelta(days=30),
    cert=datetime.timedelta(days=7), cert_renew_before=datetime.timedelta(days=2),
    grace=datetime.timedelta(minutes=5),
)  # fmt: skip
NAMES = tlspolicy.service_names("cd-cd-webhook", NAMESPACE, "cluster.local")


def _step(bundle: certs.Bundle | None, now: datetime.datetime) -> certs.Bundle:
    decision = certs.plan(bundle, now=now, names=NAMES, validity=VALIDITY)
    return certs.carry_out(decision, bundle, now=now, names=NAMES, validity=VALIDITY)


@dataclasses.dataclass
class _RotatedMeanwhile(FakeApi):
    """Another replica rotates the Secret and injects its bundle just as this round reads the
    CRD, after this round read the Secret."""

    rotated: certs.Bundle | None = None

    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if path == CRD_PATH and self.rotated is not None:
            self.objects[SECRET_PATH]["data"] = self.rotated.secret_data()
            _set_bundle(self.objects[CRD_PATH], self.rotated.ca_pem)
            self.rotated = None
        return super().get(path, **kwargs)


def _set_bundle(crd: dict[str, Any], ca_pem: bytes) -> None:
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = inject.encoded(ca_pem)


def _injected(api: FakeApi) -> str:
    return str(api.objects[CRD_PATH]["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"])


def test_a_round_never_puts_back_the_bundle_another_replica_just_replaced() -> None:
    old = _step(None, T0)
    rotated = _step(old, T0 + VALIDITY.ca - VALIDITY.ca_renew_before)  # the new CA joins
    assert rotated.cas[1:] == old.cas
    crd = {"metadata": {"name": crds.COMPUTE_DOMAIN.name, "resourceVersion": "1",
                        "managedFields": [OWNED]},
           **_crd(ca_bundle=inject.encoded(old.ca_pem))}  # fmt: skip
    secret = {"metadata": {"name": SECRET, "namespace": NAMESPACE, "resourceVersion": "2"},
              "data": old.secret_data()}  # fmt: skip
    api = _RotatedMeanwhile(objects={CRD_PATH: crd, SECRET_PATH: secret}, rotated=rotated)
    cfg = flags.parse(config.WebhookConfig, [
        f"--namespace={NAMESPACE}", "--service-name=cd-cd-webhook", f"--tls-secret={SECRET}",
        "--cert-manager",  # the round only reads the Secret: no clock
    ])  # fmt: skip
    webhook = service.Webhook(cfg, api=cast(client.Client, api))

    webhook.tls_round()  # read the old bundle; the CRD holds the rotated one by now
    assert _injected(api) == inject.encoded(rotated.ca_pem)
    assert api.writes() == []
    webhook.tls_round()  # reads the rotated bundle: already injected
    assert api.writes() == []
    # A Secret deliberately set back to an older CA (restored, say) is injected all the same.
    api.objects[SECRET_PATH]["data"] = old.secret_data()
    webhook.tls_round()
    assert _injected(api) == inject.encoded(old.ca_pem)
    assert api.writes() == [("PATCH", CRD_PATH)]
