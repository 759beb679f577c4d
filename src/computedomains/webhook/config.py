"""The webhook's settings: each field declares its flag (with its env twin) once."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
import re

from computedomains import flaggroups, flags
from computedomains.api import crds
from computedomains.webhook import tlspolicy

DEFAULT_BIND = "0.0.0.0:9443"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(value: str) -> datetime.timedelta:
    """Flag type: a number with a unit, ``90s``, ``30m``, ``720h`` or ``365d``."""
    match = _DURATION.match(value.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 30m, 720h or 365d: {value!r}"
        )
    return datetime.timedelta(seconds=float(match[1]) * _UNITS[match[2]])


@dataclasses.dataclass(frozen=True, kw_only=True)
class WebhookConfig:
    """Everything the webhook needs to know, validated."""

    namespace: str = flags.field(flaggroups.NAMESPACE)
    """The release namespace: the TLS Secret and the Service live there."""
    kubeconfig: pathlib.Path | None = flags.field(flaggroups.KUBECONFIG)
    """None in a pod: the ServiceAccount is used."""
    api_budget: flaggroups.ApiBudget = flags.group(flaggroups.ApiBudget)
    """Its API request budget."""
    bind: str = flags.option("--bind", default=DEFAULT_BIND, help="HTTPS host:port")
    """``host:port`` of the HTTPS endpoint (the chart binds the pod IP)."""
    http_bind: str = flags.field(flaggroups.HTTP_BIND)
    """``host:port`` of metrics and probes (plain HTTP)."""
    service_name: str = flags.option(
        "--service-name",
        required=True,
        help="the webhook's Service (the serving certificate names it)",
    )
    """The Service the API server calls: the serving certificate names it."""
    cluster_domain: str = flags.option(
        "--cluster-domain", default="cluster.local", help="the cluster DNS domain"
    )
    """The cluster's DNS domain, for the certificate's fully qualified name."""
    extra_names: tuple[str, ...] = flags.option(
        "--extra-names",
        default="",
        type=flags.names,
        help="comma-separated DNS names or IPs the certificate also names",
    )
    """More names (DNS names or IP addresses) for the serving certificate: for API servers
    that call the webhook by URL instead of through the Service."""
    tls_secret: str = flags.option(
        "--tls-secret",
        required=True,
        help="Secret in --namespace with ca.crt, tls.crt, tls.key (and ca.key)",
    )
    """The Secret with ``ca.crt``, ``tls.crt``, ``tls.key`` (and ``ca.key``)."""
    cert_manager: bool = flags.switch(
        "--cert-manager", help="cert-manager writes the Secret: only read it"
    )
    """cert-manager writes the Secret: only read it (and inject its ``ca.crt``)."""
    crd_name: str = flags.option(
        "--crd-name",
        default=crds.COMPUTE_DOMAIN.name,
        help="the CRD whose conversion gets the caBundle",
    )
    conversion_service: str = flags.option(
        "--conversion-service",
        default="",
        help="point the CRD's conversion at this Service in --namespace (empty: only inject "
        "the caBundle)",
    )
    """The Service the CRD's conversion must name ("" leaves the CRD's own)."""
    validating_webhook: str = flags.option(
        "--validating-webhook-configuration",
        default="",
        help="ValidatingWebhookConfiguration that gets the caBundle",
    )
    """The ValidatingWebhookConfiguration to inject into ("" for none)."""
    mutating_webhook: str = flags.option(
        "--mutating-webhook-configuration",
        default="",
        help="MutatingWebhookConfiguration that gets the caBundle",
    )
    """The MutatingWebhookConfiguration to inject into ("" for none)."""
    ca_validity: datetime.timedelta = flags.option(
        "--ca-validity", default="365d", type=duration, help="lifetime of a CA"
    )
    ca_renew_before: datetime.timedelta = flags.option(
        "--ca-renew-before",
        default="30d",
        type=duration,
        help="replace the CA this long before it ends",
    )
    cert_validity: datetime.timedelta = flags.option(
        "--cert-validity", default="7d", type=duration, help="lifetime of a serving certificate"
    )
    cert_renew_before: datetime.timedelta = flags.option(
        "--cert-renew-before",
        default="2d",
        type=duration,
        help="replace the serving certificate this long before it ends",
    )
    rotation_grace: datetime.timedelta = flags.option(
        "--rotation-grace",
        default="5m",
        type=duration,
        help="least time between the steps of a CA rotation (new CA trusted, new certificate "
        "served, old CA dropped); more than --resync-interval plus 60s",
    )
    resync_interval: float = flags.seconds(
        "--resync-interval",
        default="15",
        help="seconds between Secret checks and caBundle injections",
    )
    """Seconds between rounds of Secret check, certificate reload and caBundle injection: how
    soon a caBundle that Helm or Argo CD removed is back, and a rotated Secret is served."""
    shutdown_grace: float = flags.option(
        "--shutdown-grace",
        default="3",
        type=flags.not_negative,
        help="seconds of serving after SIGTERM",
    )
    """Seconds the endpoint keeps serving after SIGTERM, while the Service drops the pod."""
    spread_domains: bool = flags.switch(
        "--spread-domains",
        default=True,
        negatable=True,
        help="give a domain's pods a required anti-affinity (per node) against other domains' "
        "pods: domains placing at once take different nodes",
    )
    """Pods of a domain get a required anti-affinity against other domains' pods (placement)."""

    def __post_init__(self) -> None:
        if problems := self.validity.problems():
            raise ValueError("certificate settings: " + "; ".join(problems))
        # cert-manager rotates the Secret itself: this webhook then takes no rotation steps.
        resync = datetime.timedelta(seconds=self.resync_interval)
        problem = "" if self.cert_manager else tlspolicy.grace_problem(self.rotation_grace, resync)
        if problem:
            raise ValueError(f"--rotation-grace and --resync-interval: {problem}")

    @property
    def validity(self) -> tlspolicy.Validity:
        """The certificate lifetimes and rotation grace, together."""
        return tlspolicy.Validity(
            ca=self.ca_validity,
            ca_renew_before=self.ca_renew_before,
            cert=self.cert_validity,
            cert_renew_before=self.cert_renew_before,
            grace=self.rotation_grace,
        )

    @property
    def dns_names(self) -> tuple[str, ...]:
        """The serving certificate's names."""
        names = tlspolicy.service_names(self.service_name, self.namespace, self.cluster_domain)
        return (*names, *(n for n in self.extra_names if n not in names))
