"""The webhook's certificates: what the TLS Secret holds, and when to rotate what (pure).

The Secret holds a CA and a serving certificate it signed (docs/webhook.md):

- ``ca.crt``: the CA bundle the API server must trust, PEM. The first certificate is the
  signing CA (the one ``ca.key`` belongs to); a previous CA follows it while a serving
  certificate it signed may still be in use. This is what goes into every ``caBundle``.
- ``ca.key``: the signing CA's private key (self-managed mode only; cert-manager keeps its own).
- ``tls.crt`` / ``tls.key``: the serving certificate and its key.

:func:`plan` decides, from the parsed Secret and the time, the one next step; :func:`carry_out`
makes the new keys and certificates for it. Neither reads the clock or talks to the API server:
the caller passes ``now`` and writes the result. A CA is rotated with overlap, in three steps
at least ``grace`` apart, so that no API server ever meets a serving certificate signed by a
CA it does not trust yet: the new CA joins the bundle; a serving certificate signed by it
replaces the old one; the old CA leaves the bundle.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import enum
import ipaddress
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from computedomains import certificates
from computedomains.webhook import tlspolicy

CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
CERT_KEY = "tls.crt"
KEY_KEY = "tls.key"
SECRET_TYPE = "kubernetes.io/tls"  # noqa: S105 - a Secret type, not a password
CA_COMMON_NAME = "compute-domains-webhook-ca"

Key = certificates.Key


class Invalid(ValueError):
    """The Secret's data cannot be read as a CA bundle, a certificate and a key."""


@dataclasses.dataclass(frozen=True)
class Bundle:
    """The parsed Secret: CAs (signing one first), optional CA key, serving cert and key."""

    cas: tuple[x509.Certificate, ...]
    ca_key: Key | None
    cert: x509.Certificate
    key: Key

    @property
    def ca_pem(self) -> bytes:
        """``ca.crt``: every trusted CA, PEM, the signing one first."""
        return b"".join(certificates.cert_pem(c) for c in self.cas)

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 values)."""
        raw = {
            CA_CERT_KEY: self.ca_pem,
            CERT_KEY: certificates.cert_pem(self.cert),
            KEY_KEY: certificates.key_pem(self.key),
        }
        if self.ca_key is not None:
            raw[CA_KEY_KEY] = certificates.key_pem(self.ca_key)
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    def issuer_of_cert(self) -> int | None:
        """Index in :attr:`cas` of the CA that signed the serving certificate, or None."""
        for index, ca in enumerate(self.cas):
            if _signed_by(self.cert, ca):
                return index
        return None


def from_secret_data(data: Mapping[str, str], *, need_ca_key: bool) -> Bundle:
    """Parse a Secret's ``data``; :class:`Invalid` says what is missing or unreadable."""
    try:
        raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
    except (binascii.Error, ValueError) as exc:
        raise Invalid(f"a value is not base64: {exc}") from None
    needed = [CA_CERT_KEY, CERT_KEY, KEY_KEY, *([CA_KEY_KEY] if need_ca_key else [])]
    missing = [k for k in needed if not raw.get(k)]
    if missing:
        raise Invalid(f"missing {', '.join(missing)}")
    try:
        cas = tuple(x509.load_pem_x509_certificates(raw[CA_CERT_KEY]))
        cert = x509.load_pem_x509_certificates(raw[CERT_KEY])[0]
        key = _load_key(raw[KEY_KEY])
        ca_key = _load_key(raw[CA_KEY_KEY]) if raw.get(CA_KEY_KEY) else None
    except ValueError as exc:
        raise Invalid(f"unreadable PEM: {exc}") from None
    return Bundle(cas=cas, ca_key=ca_key, cert=cert, key=key)


def _load_key(pem: bytes) -> Key:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("only EC private keys are used")
    return key


# -- deciding ---------------------------------------------------------------------------------


class Action(enum.Enum):
    """The one next step :func:`plan` chooses."""

    KEEP = "keep"
    BOOTSTRAP = "bootstrap"
    """A new CA and a serving certificate, trusting nothing older (nothing usable exists)."""
    NEW_CA = "new-ca"
    """A new signing CA, put in front of the bundle; the serving certificate is kept."""
    NEW_CERT = "new-cert"
    """A new serving certificate from the signing CA."""
    DROP_OLD_CAS = "drop-old-cas"
    """Only the signing CA stays in the bundle."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do and why (the reason is logged)."""

    action: Action
    reason: str


def issued_at(cert: x509.Certificate) -> datetime.datetime:
    """When ``cert`` was made (its start minus :data:`computedomains.certificates.BACKDATE`)."""
    return cert.not_valid_before_utc + certificates.BACKDATE


def plan(
    bundle: Bundle | None,
    *,
    now: datetime.datetime,
    names: Sequence[str],
    validity: tlspolicy.Validity,
) -> Decision:
    """The next step for the Secret holding ``bundle`` (None: no Secret, or an unusable one)."""
    if bundle is None or bundle.ca_key is None or not bundle.cas:
        return Decision(Action.BOOTSTRAP, "no usable CA")
    return (
        _ca_step(bundle, bundle.ca_key, now=now, validity=validity)
        or _cert_step(bundle, now=now, names=names, validity=validity)
        or Decision(Action.KEEP, "current")
    )


def _ca_step(
    bundle: Bundle, ca_key: Key, *, now: datetime.datetime, validity: tlspolicy.Validity
) -> Decision | None:
    signing = bundle.cas[0]
    if not _same_key(signing, ca_key):
        return Decision(Action.BOOTSTRAP, "ca.key does not belong to the first CA of ca.crt")
    if now >= signing.not_valid_after_utc:
        return Decision(Action.BOOTSTRAP, "the CA has expired")
    if now >= signing.not_valid_after_utc - validity.ca_renew_before and len(bundle.cas) == 1:
        return Decision(Action.NEW_CA, f"the CA ends {signing.not_valid_after_utc:%Y-%m-%d}")
    return None


def _cert_step(
    bundle: Bundle,
    *,
    now: datetime.datetime,
    names: Sequence[str],
    validity: tlspolicy.Validity,
) -> Decision | None:
    issuer = bundle.issuer_of_cert()
    if issuer is None:
        return Decision(Action.NEW_CERT, "the serving certificate is signed by no trusted CA")
    if issuer > 0:
        # Signed by the previous CA: moves to the new one once every API server trusts it.
        if now - issued_at(bundle.cas[0]) >= validity.grace:
            return Decision(Action.NEW_CERT, "the CA was replaced; the grace has passed")
        return Decision(Action.KEEP, "a new CA is reaching the API servers")
    if problem := _cert_problem(bundle, now=now, names=names, validity=validity):
        return Decision(Action.NEW_CERT, problem)
    if len(bundle.cas) > 1 and now - issued_at(bundle.cert) >= validity.grace:
        return Decision(Action.DROP_OLD_CAS, "every replica serves a certificate of the new CA")
    return None


def _cert_problem(
    bundle: Bundle, *, now: datetime.datetime, names: Sequence[str], validity: tlspolicy.Validity
) -> str:
    cert = bundle.cert
    if not _same_key(cert, bundle.key):
        return "tls.key does not belong to tls.crt"
    if set(dns_names(cert)) != set(names):
        return f"the certificate names {sorted(dns_names(cert))}, not {sorted(names)}"
    if now >= cert.not_valid_after_utc - validity.cert_renew_before:
        return f"the certificate ends {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    return ""


def dns_names(cert: x509.Certificate) -> list[str]:
    """The subject alternative names of ``cert``: DNS names, and IP addresses as text."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    return [*sans.get_values_for_type(x509.DNSName), *ips]


def _general_name(name: str) -> x509.GeneralName:
    """An IP address SAN for an address (a webhook called by URL at an IP), else a DNS SAN."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _same_key(cert: x509.Certificate, key: Key) -> bool:
    return bool(cert.public_key() == key.public_key())


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


# -- making -----------------------------------------------------------------------------------


def carry_out(
    decision: Decision,
    bundle: Bundle | None,
    *,
    now: datetime.datetime,
    names: Sequence[str],
    validity: tlspolicy.Validity,
) -> Bundle:
    """The bundle after ``decision`` (new keys are generated here; nothing is written)."""
    action = decision.action
    if action is Action.KEEP:
        assert bundle is not None, "KEEP is only planned for an existing bundle"
        return bundle
    if action is Action.BOOTSTRAP:
        ca_key = certificates.new_key()
        ca = new_ca(ca_key, now=now, lifetime=validity.ca)
        key = certificates.new_key()
        cert = new_cert(key, ca, ca_key, now=now, names=names, lifetime=validity.cert)
        return Bundle(cas=(ca,), ca_key=ca_key, cert=cert, key=key)
    assert bundle is not None and bundle.ca_key is not None, f"{action} needs a CA"
    if action is Action.NEW_CA:
        ca_key = certificates.new_key()
        ca = new_ca(ca_key, now=now, lifetime=validity.ca)
        return dataclasses.replace(bundle, cas=(ca, *bundle.cas), ca_key=ca_key)
    if action is Action.NEW_CERT:
        key = certificates.new_key()
        cert = new_cert(
            key, bundle.cas[0], bundle.ca_key, now=now, names=names, lifetime=validity.cert
        )
        return dataclasses.replace(bundle, cert=cert, key=key)
    return dataclasses.replace(bundle, cas=bundle.cas[:1])


def new_ca(key: Key, *, now: datetime.datetime, lifetime: datetime.timedelta) -> x509.Certificate:
    """A self-signed CA certificate for ``key``, valid from now (backdated) for ``lifetime``."""
    subject = certificates.name(CA_COMMON_NAME)
    return certificates.new_ca(key, subject=subject, now=now, not_after=now + lifetime)


def new_cert(
    key: Key,
    ca: x509.Certificate,
    ca_key: Key,
    *,
    now: datetime.datetime,
    names: Sequence[str],
    lifetime: datetime.timedelta,
) -> x509.Certificate:
    """A serving certificate for ``names`` signed by ``ca``; it never outlives the CA."""
    return certificates.new_leaf(
        key,
        ca=ca,
        ca_key=ca_key,
        subject=certificates.name(names[0][:64]),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[_general_name(n) for n in names],
        now=now,
        not_after=min(now + lifetime, ca.not_valid_after_utc),
    )
