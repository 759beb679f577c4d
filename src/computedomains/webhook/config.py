"""The webhook's settings, resolved once from flags (each with an env twin)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
import re

from computedomains import settings as flags
from computedomains.api import crds, flaggroups
from computedomains.webhook import tlspolicy

DEFAULT_BIND = "0.0.0.0:9443"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclasses.dataclass(frozen=True)
class WebhookConfig:
    """Everything the webhook needs to know, validated."""

    namespace: str
    """The release namespace: the TLS Secret and the Service live there."""
    kubeconfig: pathlib.Path | None
    """None in a pod: the ServiceAccount is used."""
    bind: str
    """``host:port`` of the HTTPS endpoint (the chart binds the pod IP)."""
    http_bind: str
    """``host:port`` of metrics and probes (plain HTTP)."""
    service_name: str
    """The Service the API server calls: the serving certificate names it."""
    cluster_domain: str
    """The cluster's DNS domain, for the certificate's fully qualified name."""
    extra_names: tuple[str, ...]
    """More names (DNS names or IP addresses) for the serving certificate: for API servers
    that call the webhook by URL instead of through the Service."""
    tls_secret: str
    """The Secret with ``ca.crt``, ``tls.crt``, ``tls.key`` (and ``ca.key``)."""
    cert_manager: bool
    """cert-manager writes the Secret: only read it (and inject its ``ca.crt``)."""
    crd_name: str
    conversion_service: str
    """The Service the CRD's conversion must name ("" leaves the CRD's own)."""
    validating_webhook: str
    """The ValidatingWebhookConfiguration to inject into ("" for none)."""
    mutating_webhook: str
    """The MutatingWebhookConfiguration to inject into ("" for none)."""
    validity: tlspolicy.Validity
    resync_interval: float
    """Seconds between rounds of Secret check, certificate reload and caBundle injection: how
    soon a caBundle that Helm or Argo CD removed is back, and a rotated Secret is served."""
    shutdown_grace: float
    """Seconds the endpoint keeps serving after SIGTERM, while the Service drops the pod."""
    spread_domains: bool = True
    """Pods of a domain get a required anti-affinity against other domains' pods (placement)."""
    api_budget: flaggroups.ApiBudget = flaggroups.NODE_BUDGET
    """Its API request budget (``--kube-api-qps``, ``--kube-api-burst``)."""

    @property
    def dns_names(self) -> tuple[str, ...]:
        """The serving certificate's names."""
        names = tlspolicy.service_names(self.service_name, self.namespace, self.cluster_domain)
        return (*names, *(n for n in self.extra_names if n not in names))


def duration(value: str) -> datetime.timedelta:
    """Flag type: a number with a unit, ``90s``, ``30m``, ``720h`` or ``365d``."""
    match = _DURATION.match(value.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 30m, 720h or 365d: {value!r}"
        )
    return datetime.timedelta(seconds=float(match[1]) * _UNITS[match[2]])


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the webhook's flags."""
    flaggroups.add_kube(parser)
    flags.add(parser, "--bind", default=DEFAULT_BIND, help="HTTPS host:port")
    flaggroups.add_http(parser)
    flags.add(parser, "--service-name", default=None, required=True,
              help="the webhook's Service (the serving certificate names it)")  # fmt: skip
    flags.add(parser, "--cluster-domain", default="cluster.local", help="the cluster DNS domain")
    flags.add(parser, "--extra-names", default="", type=_names,
              help="comma-separated DNS names or IPs the certificate also names")  # fmt: skip
    flags.add(parser, "--tls-secret", default=None, required=True,
              help="Secret in --namespace with ca.crt, tls.crt, tls.key (and ca.key)")  # fmt: skip
    flags.add_switch(parser, "--cert-manager", default=False,
                     help="cert-manager writes the Secret: only read it")  # fmt: skip
    flags.add(parser, "--crd-name", default=crds.COMPUTE_DOMAIN.name,
              help="the CRD whose conversion gets the caBundle")  # fmt: skip
    flags.add(parser, "--conversion-service", default="",
              help="point the CRD's conversion at this Service in --namespace (empty: only "
              "inject the caBundle)")  # fmt: skip
    flags.add(parser, "--validating-webhook-configuration", default="",
              help="ValidatingWebhookConfiguration that gets the caBundle")  # fmt: skip
    flags.add(parser, "--mutating-webhook-configuration", default="",
              help="MutatingWebhookConfiguration that gets the caBundle")  # fmt: skip
    flags.add(parser, "--ca-validity", default="365d", type=duration, help="lifetime of a CA")
    flags.add(parser, "--ca-renew-before", default="30d", type=duration,
              help="replace the CA this long before it ends")  # fmt: skip
    flags.add(parser, "--cert-validity", default="7d", type=duration,
              help="lifetime of a serving certificate")  # fmt: skip
    flags.add(parser, "--cert-renew-before", default="2d", type=duration,
              help="replace the serving certificate this long before it ends")  # fmt: skip
    flags.add(parser, "--rotation-grace", default="5m", type=duration,
              help="least time between the steps of a CA rotation (new CA trusted, new "
              "certificate served, old CA dropped)")  # fmt: skip
    flags.add(parser, "--resync-interval", default="15", type=float,
              help="seconds between Secret checks and caBundle injections")  # fmt: skip
    flags.add(parser, "--shutdown-grace", default="3", type=float,
              help="seconds of serving after SIGTERM")  # fmt: skip
    flags.add_switch(parser, "--spread-domains", default=True, negatable=True,
                     help="give a domain's pods a required anti-affinity (per node) against "
                     "other domains' pods: domains placing at once take different "
                     "nodes")  # fmt: skip


def from_args(args: argparse.Namespace) -> WebhookConfig:
    """Resolve parsed flags into the config, validating what argparse cannot."""
    validity = tlspolicy.Validity(
        ca=args.ca_validity,
        ca_renew_before=args.ca_renew_before,
        cert=args.cert_validity,
        cert_renew_before=args.cert_renew_before,
        grace=args.rotation_grace,
    )
    if problems := validity.problems():
        raise SystemExit("certificate settings: " + "; ".join(problems))
    if args.resync_interval <= 0:
        raise SystemExit(f"--resync-interval must be positive, got {args.resync_interval}")
    if args.shutdown_grace < 0:
        raise SystemExit(f"--shutdown-grace must not be negative, got {args.shutdown_grace}")
    return WebhookConfig(
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        api_budget=flaggroups.api_budget(args),
        bind=args.bind,
        http_bind=args.http_bind,
        service_name=args.service_name,
        cluster_domain=args.cluster_domain,
        extra_names=args.extra_names,
        tls_secret=args.tls_secret,
        cert_manager=args.cert_manager,
        crd_name=args.crd_name,
        conversion_service=args.conversion_service,
        validating_webhook=args.validating_webhook_configuration,
        mutating_webhook=args.mutating_webhook_configuration,
        validity=validity,
        resync_interval=args.resync_interval,
        shutdown_grace=args.shutdown_grace,
        spread_domains=args.spread_domains,
    )
