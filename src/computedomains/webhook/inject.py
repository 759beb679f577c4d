"""caBundle injection: the ComputeDomain CRD's conversion and the two webhook configurations.

The chart renders these objects without a caBundle, so Helm and Argo CD never own the field;
the webhook sets it with patches that name only ``caBundle`` (a merge patch for the CRD, a
strategic merge patch keyed by webhook name for the configurations) under its own field
manager. A CRD re-applied by Helm or Argo CD keeps the field or, where a client-side apply
replaces the whole conversion block, loses it until the next check puts it back.

Every replica injects, every round, the bundle it read from the Secret at the start of the
round. A replica that read it just before another replica rotated it must not put the older
bundle back over the newer one: it writes only while the Secret still holds its bundle.

:func:`crd_patch` and :func:`webhooks_patch` decide (pure); :class:`Injector` reads and patches.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from computedomains.api import constants, resources
from computedomains.kube import client

log = logging.getLogger(__name__)
FIELD_MANAGER = "computedomains-webhook"
"""Field manager of every caBundle write: not Helm's, not Argo CD's."""


def encoded(ca_pem: bytes) -> str:
    """The caBundle value: the PEM bundle, base64."""
    return base64.b64encode(ca_pem).decode()


@dataclasses.dataclass(frozen=True)
class ConversionService:
    """Where the CRD's conversion must point: this webhook's Service."""

    name: str
    namespace: str

    def client_config(self) -> dict[str, Any]:
        """``clientConfig.service`` of the CRD's conversion webhook."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "path": constants.CONVERSION_PATH,
            "port": 443,
        }


def crd_patch(
    crd: Mapping[str, Any], ca_bundle: str, service: ConversionService | None = None
) -> dict[str, Any] | None:
    """The merge patch that sets the CRD's conversion caBundle, or None when none is needed.

    With ``service``, the conversion also points at that Service: CRDs managed outside this
    release (``crds.enabled=false``, an adopted or separately installed CRD) still convert
    through this webhook. Without it, only the caBundle is touched. A CRD whose conversion is
    not ``Webhook`` (an older chart's) gets nothing: the API server refuses a webhook block there.
    """
    conversion = crd.get("spec", {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    current = (conversion.get("webhook") or {}).get("clientConfig") or {}
    config: dict[str, Any] = {}
    if current.get("caBundle") != ca_bundle:
        config["caBundle"] = ca_bundle
    if service is not None and current.get("service") != service.client_config():
        config["service"] = service.client_config()
        if "url" in current:
            config["url"] = None  # one of url and service, never both
    if not config:
        return None
    return {"spec": {"conversion": {"webhook": {"clientConfig": config}}}}


def owns_conversion(crd: Mapping[str, Any]) -> bool:
    """Whether this webhook co-owns the CRD's conversion block by server-side apply."""
    for entry in (crd.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            conversion = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:conversion")
            if conversion and "f:strategy" in conversion:
                return True
    return False


def conversion_apply(crd: Mapping[str, Any]) -> dict[str, Any] | None:
    """The server-side apply by which this webhook co-owns the CRD's conversion as it stands.

    None when there is nothing to own (no webhook conversion) or it owns it already. Why own
    what Helm already sets: Helm 4 applies server-side, and its rollback to a chart whose CRD
    has no conversion (0.1.x) drops what Helm alone owns. Before, that was the strategy and the
    service while this webhook owned the caBundle inside the same block, which the API server
    refuses ("strategy: Required value ... webhookClientConfig: should not be set"), leaving the
    release failed half-way. Co-owned with the same values, the block stays whole (and unused:
    one version needs no conversion); a client-side apply (Helm 3, Argo CD without
    server-side apply) still replaces the block as before. The chart must never change these
    values without this webhook giving them up first, or Helm 4's apply would conflict.
    """
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook" or owns_conversion(crd):
        return None
    webhook = conversion.get("webhook") or {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": (crd.get("metadata") or {}).get("name", "")},
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": dict(webhook.get("clientConfig") or {}),
                    "conversionReviewVersions": list(
                        webhook.get("conversionReviewVersions") or ["v1"]
                    ),
                },
            }
        },
    }


def webhooks_patch(configuration: Mapping[str, Any], ca_bundle: str) -> dict[str, Any] | None:
    """The strategic merge patch that sets every webhook's caBundle, or None when all have it."""
    stale = [
        w["name"]
        for w in configuration.get("webhooks") or []
        if (w.get("clientConfig") or {}).get("caBundle") != ca_bundle
    ]
    if not stale:
        return None
    return {"webhooks": [{"name": n, "clientConfig": {"caBundle": ca_bundle}} for n in stale]}


@dataclasses.dataclass(frozen=True)
class Target:
    """One object that gets the caBundle."""

    resource: resources.Resource
    name: str

    @property
    def label(self) -> str:
        """``<plural>/<name>``, for logs."""
        return f"{self.resource.plural}/{self.name}"


def targets(*, crd: str, validating: str, mutating: str) -> tuple[Target, ...]:
    """The objects to inject into; an empty name leaves that object out."""
    named = (
        (resources.CRDS, crd),
        (resources.VALIDATING_WEBHOOK_CONFIGURATIONS, validating),
        (resources.MUTATING_WEBHOOK_CONFIGURATIONS, mutating),
    )
    return tuple(Target(resource, name) for resource, name in named if name)


SecretCA = Callable[[], bytes | None]
"""Reads the Secret's ``ca.crt`` now (None: no usable Secret)."""


class Injector:
    """Puts the caBundle into its targets wherever it is missing or stale."""

    def __init__(
        self,
        api: client.Client,
        targets: tuple[Target, ...],
        service: ConversionService | None = None,
        *,
        secret_ca: SecretCA,
    ) -> None:
        self._api = api
        self._targets = targets
        self._service = service
        self._secret_ca = secret_ca
        self._missing: set[str] = set()

    def sync(self, ca_pem: bytes) -> list[str]:
        """One round over every target; returns the ones patched.

        A missing target is skipped (logged once); any other failure is raised after the
        remaining targets were tried.
        """
        patched: list[str] = []
        failures: list[Exception] = []
        for target in self._targets:
            try:
                if self._sync_one(target, ca_pem):
                    patched.append(target.label)
            except client.API_ERRORS as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
        return patched

    def _sync_one(self, target: Target, ca_pem: bytes) -> bool:
        bundle = encoded(ca_pem)
        path = target.resource.path(target.name)
        obj = self._api.find(path)
        if obj is None:
            if target.label not in self._missing:
                log.warning("%s does not exist (yet): no caBundle to inject", target.label)
                self._missing.add(target.label)
            return False
        self._missing.discard(target.label)
        is_crd = target.resource == resources.CRDS
        patch = crd_patch(obj, bundle, self._service) if is_crd else webhooks_patch(obj, bundle)
        if patch is None:
            if is_crd:
                self._own_conversion(path, obj)
            return False
        # Only while the Secret, read after the target, still holds this bundle: a round that
        # read it before another replica rotated it (or cert-manager renewed it) would put the
        # older bundle back over the newer one that replica injected, for up to a resync.
        # Asking the Secret rather than comparing the CAs' ages still lets a deliberately
        # older CA in (a restored Secret, a switch to cert-manager's CA). A rotation after this
        # read either makes the patch below a 409 or is injected after it.
        if self._secret_ca() != ca_pem:
            log.info("%s: the Secret changed since this round read it; the next round injects "
                     "what it holds now", target.label)  # fmt: skip
            return False
        # Planned from what was just read: a change in between is a 409, tried again next round.
        patch["metadata"] = {"resourceVersion": obj["metadata"]["resourceVersion"]}
        query = {"fieldManager": FIELD_MANAGER}
        patched = self._api.patch(path, patch, strategic=not is_crd, query=query)
        log.info("injected the caBundle into %s", target.label)
        if is_crd:
            self._own_conversion(path, patched)
        return True

    def _own_conversion(self, path: str, crd: dict[str, Any]) -> None:
        """Co-own the CRD's conversion block (:func:`conversion_apply`), once."""
        body = conversion_apply(crd)
        if body is None:
            return
        body["metadata"]["resourceVersion"] = crd["metadata"]["resourceVersion"]
        self._api.apply(path, body, field_manager=FIELD_MANAGER)
        log.info("%s: co-owning its conversion block (kept whole by a server-side rollback)",
                 path)  # fmt: skip
