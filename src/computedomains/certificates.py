"""Making X.509 certificates with ``cryptography``: a self-signed CA and the leaves it signs.

The webhook's TLS bootstrap and the simulated control plane both run a small CA of their own;
what a CA and a leaf certificate look like, and how keys and certificates are written as PEM,
is decided here once. Callers choose the names, the lifetimes and the clock (``now`` is always
passed in); nothing here reads the time or touches a file.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

BACKDATE = datetime.timedelta(minutes=5)
"""Certificates start this long before they are made: the clocks of their verifiers may lag."""

Key = ec.EllipticCurvePrivateKey
"""The key type of every CA and leaf certificate (P-256)."""


def new_key() -> Key:
    """A fresh P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: Key | rsa.RSAPrivateKey) -> bytes:
    """``key`` as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    """``cert`` as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    """A subject of a common name and, for client certificates, organizations (groups)."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attrs)


def new_ca(
    key: Key, *, subject: x509.Name, now: datetime.datetime, not_after: datetime.datetime
) -> x509.Certificate:
    """A self-signed CA certificate for ``key`` that signs leaves only (path length 0)."""
    builder = (
        _base(subject, key.public_key(), now=now, not_after=not_after)
        .issuer_name(subject)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return builder.sign(key, hashes.SHA256())


def new_leaf(
    key: Key,
    *,
    ca: x509.Certificate,
    ca_key: Key,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[x509.GeneralName] = (),
    now: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.Certificate:
    """A certificate for ``key`` signed by ``ca``, for one extended ``usage`` (server or client).

    ``sans`` become its subject alternative names (none: no such extension, as for a client).
    """
    builder = (
        _base(subject, key.public_key(), now=now, not_after=not_after)
        .issuer_name(ca.subject)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _base(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    *,
    now: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
    )
