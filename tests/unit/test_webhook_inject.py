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
