"""caBundle patches: only the caBundle fields, only where they differ."""

from __future__ import annotations

from typing import Any

from computedomains.webhook import inject

BUNDLE = inject.encoded(b"-----BEGIN CERTIFICATE-----\n...\n")


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
