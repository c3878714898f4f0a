"""Certificates for the end-to-end control plane, made with ``cryptography`` (as envtest makes
its own): one CA that signs the API server's serving certificate and the client certificates
(the admin is ``O=system:masters``, Kubernetes' superuser group), and the service-account key
pair that signs and verifies bound tokens."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class CA:
    """A self-signed EC P-256 CA valid for one day (a test session)."""

    def __init__(self, common_name: str = "taugate-e2e-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    @property
    def pem(self) -> bytes:
        return _cert_pem(self.cert)

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (), server_hosts: tuple[str, ...] = (),
              client: bool = False) -> tuple[bytes, bytes]:
        """A leaf certificate and its key, as PEM ``(cert, key)``. ``server_hosts`` (DNS names or IP
        addresses) make it a serving certificate; ``client`` a client one (CN is the user name,
        each of ``organizations`` a group, as the API server reads client certificates)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = dt.datetime.now(dt.UTC)
        usages = (([ExtendedKeyUsageOID.SERVER_AUTH] if server_hosts else [])
                  + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []))
        b = (x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self.cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server_hosts:
            sans: list[x509.GeneralName] = []
            for h in server_hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    sans.append(x509.DNSName(h))
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _cert_pem(b.sign(self.key, hashes.SHA256())), _key_pem(key)


def write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """An RSA-2048 key pair for service-account tokens (``sa.key``, ``sa.pub``) in ``directory``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    priv, pub = directory / "sa.key", directory / "sa.pub"
    priv.write_bytes(_key_pem(key))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub
