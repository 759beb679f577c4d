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
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def _write_key(path: pathlib.Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attrs)


class CertificateAuthority:
    """A throw-away CA that signs the cluster's serving and client certificates."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name("compute-domains-sim-ca")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
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
            .sign(self._key, hashes.SHA256())
        )
        self.files = CertFiles(directory / "ca.crt", directory / "ca.key")
        self.files.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
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
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        serving = bool(ips or dns_names)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if serving else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        )
        if serving:
            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        files = CertFiles(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
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
