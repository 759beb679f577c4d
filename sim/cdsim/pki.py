"""Certificates and keys for the local control plane: one CA, serving and client certs.

Everything is generated per cluster into its own directory, valid for a day: the cluster
is throw-away, and nothing here is ever used outside loopback.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from computedomains import certificates

_VALIDITY = datetime.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class CertFiles:
    """A certificate and its private key on disk (PEM)."""

    cert: pathlib.Path
    key: pathlib.Path


@dataclasses.dataclass(frozen=True)
class ClusterPKI:
    """The files the control-plane processes are started with."""

    ca: CertFiles
    serving: CertFiles
    service_account_key: pathlib.Path
    """RSA private key: signs service-account tokens (its public half verifies them)."""
    service_account_pub: pathlib.Path


def _write_key(path: pathlib.Path, key: certificates.Key | rsa.RSAPrivateKey) -> None:
    path.write_bytes(certificates.key_pem(key))
    path.chmod(0o600)


class CertificateAuthority:
    """A throw-away CA that signs the cluster's serving and client certificates."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self._key = certificates.new_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = certificates.name("compute-domains-sim-ca")
        self._cert = certificates.new_ca(
            self._key, subject=subject, now=now, not_after=now + _VALIDITY
        )
        self.files = CertFiles(directory / "ca.crt", directory / "ca.key")
        self.files.cert.write_bytes(certificates.cert_pem(self._cert))
        _write_key(self.files.key, self._key)

    def issue(
        self,
        stem: str,
        *,
        common_name: str,
        organizations: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
    ) -> CertFiles:
        """Sign a leaf certificate: a serving one with ``ips``/``dns_names``, else a client one."""
        key = certificates.new_key()
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        cert = certificates.new_leaf(
            key,
            ca=self._cert,
            ca_key=self._key,
            subject=certificates.name(common_name, organizations),
            usage=ExtendedKeyUsageOID.SERVER_AUTH if sans else ExtendedKeyUsageOID.CLIENT_AUTH,
            sans=sans,
            now=now,
            not_after=now + _VALIDITY,
        )
        files = CertFiles(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        files.cert.write_bytes(certificates.cert_pem(cert))
        _write_key(files.key, key)
        return files


def create_cluster_pki(
    directory: pathlib.Path, *, service_ip: str
) -> tuple[CertificateAuthority, ClusterPKI]:
    """Generate the CA, the API server's serving cert and the service-account signing keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory)
    serving = ca.issue(
        "apiserver",
        common_name="kube-apiserver",
        ips=("127.0.0.1", service_ip),
        dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_private = directory / "service-account.key"
    sa_public = directory / "service-account.pub"
    _write_key(sa_private, sa_key)
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ca, ClusterPKI(ca.files, serving, sa_private, sa_public)
