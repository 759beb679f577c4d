"""Run the webhook: a ComputeDomain cache, the TLS round, the HTTPS endpoint, metrics, probes.

Start-up: the cache starts listing; the TLS round gets a certificate (self-managed: creates
or rotates the Secret; cert-manager: waits for it) and injects the caBundle; then the HTTPS
endpoint opens. The round repeats every ``resync_interval``: a rotated Secret is served from
the next connection on, a caBundle that Helm or Argo CD removed is put back.

Ready means a certificate is served: from then on ``/convert`` answers, which needs nothing
else. Validation and placement read the ComputeDomain cache and answer 503 until it has
synced, so the API server applies their ``failurePolicy``. Waiting for the cache before Ready
would deadlock: the cache lists at v1beta2, and objects still stored at v1beta1 (after an
upgrade or an adoption) are converted by this webhook, through its Service, which routes only
to ready pods.
"""

from __future__ import annotations

import functools
import http.server
import logging
import signal
import socket
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

import prometheus_client

from computedomains import httpserver, waiting
from computedomains.api import constants, conversion, domainview, resources
from computedomains.kube import client as kube_client
from computedomains.kube import informer
from computedomains.webhook import (
    certs,
    config,
    inject,
    metrics,
    podaffinity,
    review,
    server,
    tlssecret,
    validation,
)

log = logging.getLogger(__name__)
FIRST_ROUND_RETRY = 2.0
"""Seconds between attempts at the first certificate (cert-manager may still be issuing)."""

CACHE_WAIT = 3.0
"""Seconds a review waits for a first list of the cache; below the chart's 5 s webhook timeout."""
ROUND_ERRORS: tuple[type[Exception], ...] = (tlssecret.NotYet, *kube_client.API_ERRORS)
"""What a TLS round may meet and retry: no usable Secret yet, an API server refusal or silence."""

Known = Callable[[], list[domainview.Domain]]


def routes(known: Known, *, spread: bool = False) -> dict[str, server.Route]:
    """The three review paths; validation and placement see the domains ``known()`` returns.

    ``spread``: placement keeps domains apart (``--spread-domains``).
    """
    return {
        constants.CONVERSION_PATH: lambda body: review.conversion(
            body, conversion.convert, errors=(conversion.ConversionError,)
        ),
        "/validate/computedomains": lambda body: review.admission(
            body, lambda request: validated(request, known())
        ),
        "/mutate/pods": lambda body: review.admission(
            body, lambda request: placed(request, known(), spread=spread)
        ),
    }


def _shown(request: Mapping[str, Any]) -> str:
    """``namespace/name`` of the request's object (``generateName*`` before it has a name)."""
    meta = (request.get("object") or {}).get("metadata") or {}
    namespace = request.get("namespace") or meta.get("namespace") or ""
    name = meta.get("name") or request.get("name") or f"{meta.get('generateName', '')}*"
    return f"{namespace}/{name}"


def validated(request: dict[str, Any], known: list[domainview.Domain]) -> review.Verdict:
    """:func:`validation.validate`'s verdict, logged at DEBUG with what it was made from."""
    verdict = validation.validate(request, known)
    log.debug(
        "%s of ComputeDomain %s (template %r, before %r): %s; %d ComputeDomain(s) known",
        request.get("operation") or "review", _shown(request),
        domainview.template_of(request.get("object") or {}),
        domainview.template_of(request.get("oldObject") or {}),
        "accept" if verdict.allowed else f"deny ({verdict.message})", len(known),
    )  # fmt: skip
    return verdict


def placed(
    request: dict[str, Any], known: list[domainview.Domain], *, spread: bool
) -> review.Verdict:
    """:func:`podaffinity.place`'s verdict, logged at DEBUG with the domains it placed by."""
    verdict = podaffinity.place(request, known, spread=spread)
    if not log.isEnabledFor(logging.DEBUG):
        return verdict  # the domains the pod claims are looked up again only for the line
    terms = sum(op["path"].startswith("/spec/affinity") for op in verdict.patch)
    label = next(
        (op["op"] for op in verdict.patch if op["path"].startswith("/metadata/labels")), ""
    )
    templates = podaffinity.claimed_templates(request.get("object") or {})
    claimed = podaffinity.claimed_domains(request, known) if templates else []
    log.debug(
        "pod %s: %s, label %s; claims %s; domains %s; spread %s",
        _shown(request),
        f"affinity injected ({terms} term(s))" if terms else "no affinity injected",
        {"add": "set", "remove": "removed"}.get(label, "kept"),
        ", ".join(sorted(templates)) or "no template",
        ", ".join(f"{d.key} ({d.uid}, clique {d.clique.value})" for d in claimed) or "none",
        "on" if spread else "off",
    )  # fmt: skip
    return verdict


class Webhook:
    """One replica: the domain cache, the TLS round and both endpoints."""

    def __init__(self, cfg: config.WebhookConfig, *, api: kube_client.Client) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.draining = threading.Event()
        """Set on SIGTERM: still serving, no longer ready."""
        self.stats = metrics.WebhookMetrics(prometheus_client.CollectorRegistry())
        self.certificates = server.Certificates()
        self.stats.track(self.certificates.not_after)
        self.cache = informer.Informer(api, path=resources.COMPUTE_DOMAINS.path())
        self.store = tlssecret.Store(api, namespace=cfg.namespace, name=cfg.tls_secret)
        conversion = (
            inject.ConversionService(cfg.conversion_service, cfg.namespace)
            if cfg.conversion_service
            else None
        )
        self.injector = inject.Injector(api, inject.targets(
            crd=cfg.crd_name, validating=cfg.validating_webhook, mutating=cfg.mutating_webhook,
        ), conversion, secret_ca=functools.partial(tlssecret.current_ca, self.store))  # fmt: skip
        self.https: http.server.ThreadingHTTPServer | None = None
        self._round = threading.Thread(target=self._rounds, name="tls-round", daemon=True)

    def synced(self, wait: float = 0.0) -> bool:
        """Whether the ComputeDomain cache has listed once (waiting up to ``wait`` seconds)."""
        try:
            self.cache.wait_synced(wait)
        except waiting.WaitTimeout:
            return False
        return True

    def known(self) -> list[domainview.Domain]:
        """Every cached ComputeDomain; :class:`review.NotReady` before the cache has synced.

        A fresh replica is Ready before its first list returns: a review waits a little for
        it (:data:`CACHE_WAIT`, within the API server's timeout) before it gives up.
        """
        if not self.synced(CACHE_WAIT):
            raise review.NotReady(
                "the webhook's ComputeDomain cache has not synced yet; retry in a few seconds"
            )
        return [domainview.Domain.peek(o) for o in self.cache.items()]

    def tls_round(self) -> None:
        """Get the certificate (rotating it when due), serve it, inject its CA bundle."""
        if self.cfg.cert_manager:
            bundle = tlssecret.read_bundle(self.store)
        else:
            bundle = tlssecret.ensure(
                self.store, names=self.cfg.dns_names, validity=self.cfg.validity
            )
        if self.certificates.load(bundle):
            log.info("serving the certificate for %s, ending %s", ", ".join(
                certs.dns_names(bundle.cert)), bundle.cert.not_valid_after_utc)  # fmt: skip
        for target in self.injector.sync(bundle.ca_pem):
            self.stats.injections.labels(target.split("/", 1)[0]).inc()

    def start(self) -> bool:
        """Cache, first TLS round, HTTPS endpoint, later rounds; False when stopped first."""
        self.cache.start()
        while not self.stop.is_set():
            try:
                self.tls_round()
                break
            except ROUND_ERRORS as exc:
                self.stats.tls_errors.inc()
                log.warning("no certificate yet (%s); retrying in %.0fs", exc, FIRST_ROUND_RETRY)
                self.stop.wait(FIRST_ROUND_RETRY)
        if self.stop.is_set():
            return False
        self.https = server.serve(self.cfg.bind, certificates=self.certificates,
                                  routes=routes(self.known, spread=self.cfg.spread_domains),
                                  stats=self.stats,
                                  draining=self.draining.is_set)  # fmt: skip
        log.info("serving HTTPS on %s", self.cfg.bind)
        self._round.start()
        return True

    def _rounds(self) -> None:
        while not self.stop.wait(self.cfg.resync_interval):
            try:
                self.tls_round()
            except ROUND_ERRORS as exc:
                self.stats.tls_errors.inc()
                log.warning("TLS round failed (%s); next in %.0fs", exc, self.cfg.resync_interval)
            except Exception:
                self.stats.tls_errors.inc()
                log.exception("TLS round failed; next in %.0fs", self.cfg.resync_interval)

    def healthz(self) -> tuple[bool, str]:
        """Live: before the endpoint opens, the process itself; then its socket accepts."""
        if self.https is None:
            return True, "waiting for the first certificate"
        if not self._round.is_alive() and not self.stop.is_set():
            return False, "the TLS round thread has ended"
        host, port = self.https.server_address[:2]
        target = host if isinstance(host, str) and host not in ("0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
        try:
            with socket.create_connection((target, int(port)), timeout=2):
                return True, f"HTTPS endpoint {target}:{port} accepts connections"
        except OSError as exc:
            return False, f"HTTPS endpoint {target}:{port}: {exc}"

    def readyz(self) -> tuple[bool, str]:
        """Ready once a certificate is served (conversion needs nothing more), until draining.

        The cache is reported, not required: see the module's docstring.
        """
        serving = self.https is not None and self.certificates.context() is not None
        ok = serving and not self.draining.is_set()
        detail = f"certificate served: {serving}, ComputeDomains synced: {self.synced()}"
        return ok, detail + (", draining" if self.draining.is_set() else "")

    def shutdown(self) -> None:
        """Close the endpoint and stop the cache."""
        if self.https is not None:
            self.https.shutdown()
            self.https.server_close()
        self.cache.stop()


def run(cfg: config.WebhookConfig) -> int:
    """Serve until SIGTERM/SIGINT; 0 then."""
    webhook = Webhook(cfg, api=kube_client.connect(cfg.kubeconfig, cfg.api_budget))
    stopping = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    probes = {"/healthz": webhook.healthz, "/readyz": webhook.readyz}
    http = httpserver.serve(cfg.http_bind, registry=webhook.stats.registry, probes=probes)
    starter = threading.Thread(target=webhook.start, name="start", daemon=True)
    starter.start()
    try:
        stopping.wait()
        webhook.draining.set()
        if webhook.https is not None:
            # Keep answering while the endpoints controller takes this pod out of the Service.
            log.info("stopping: serving %.0fs more", cfg.shutdown_grace)
            webhook.stop.wait(cfg.shutdown_grace)
        webhook.stop.set()
        starter.join(timeout=5)
        return 0
    finally:
        webhook.shutdown()
        http.shutdown()
