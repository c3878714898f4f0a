"""CA and serving certificates for the webhook (pure: bytes in, bytes out). Keys are EC P-256
(0.3 ms to generate, 82 ms for RSA-2048). Extensions are what Go ``crypto/x509`` (the apiserver)
and Python's strict ``ssl`` require: a critical ``path_length=0`` CA with keyCertSign + cRLSign;
a serving certificate with serverAuth and its host names as SANs (Go ignores the Common Name since
Go 1.15). Validity starts 5 minutes back, for clock skew between nodes.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLOCK_SKEW = _dt.timedelta(minutes=5)
DEFAULT_CA_DAYS = 365
DEFAULT_SERVING_DAYS = 365
LOCAL_HOSTS = ("localhost", "127.0.0.1")
MAX_DAYS = 36500
"""The longest validity accepted, in days (100 years): far past any sensible certificate, and
well inside what ``datetime`` and X.509 ``GeneralizedTime`` (year 9999) can represent."""

# Kubernetes object-name rules (k8s.io/apimachinery/pkg/util/validation): a Namespace name is a
# DNS-1123 label (IsDNS1123Label); a Service name is a DNS-1035 label (IsDNS1035Label, used by
# ValidateServiceName): the same, but it must start with a letter. Both: at most 63 characters.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_MAX = 63


class CertError(ValueError):
    """A certificate or key that cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded (``cert_pem`` may hold a chain;
    the first certificate is the one ``key_pem`` belongs to)."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        """The first certificate of ``cert_pem``."""
        return load_certificates(self.cert_pem)[0]


def check_days(days: int, what: str = "validity") -> None:
    """Raise ``CertError`` unless ``days`` is a whole number from 1 to ``MAX_DAYS``; ``what``
    names the value in the message (``"--days"``)."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise CertError(f"{what} {days!r}: must be a whole number of days from 1 to {MAX_DAYS}")


def check_validity(*, ca_days: int, days: int, ca_what: str = "CA validity",
                   what: str = "serving certificate validity") -> None:
    """Raise ``CertError`` unless both periods are within 1..``MAX_DAYS`` days and ``days`` do not
    exceed ``ca_days`` (clients stop trusting a certificate when its CA expires). ``ca_what`` and
    ``what`` name the values in the message (``"--ca-days"``, ``"--days"``)."""
    check_days(ca_days, ca_what)
    check_days(days, what)
    if days > ca_days:
        raise CertError(f"{what} {days} exceeds {ca_what} {ca_days}: a serving certificate cannot outlive "
                        f"its CA; give at most {ca_days} days, or a longer CA validity")


def name_problem(name: str, kind: str = "Namespace") -> str | None:
    """Why ``name`` is not a valid ``kind`` name (``"Service"``: DNS-1035 label, anything else
    DNS-1123), or None. Rule: k8s.io/apimachinery ``IsDNS1035Label`` / ``IsDNS1123Label``."""
    if not isinstance(name, str) or not name:
        return f"a {kind} name is required"
    service = kind == "Service"
    pattern, label = (_DNS1035_LABEL, "DNS-1035") if service else (_DNS1123_LABEL, "DNS-1123")
    if len(name) > _LABEL_MAX or not pattern.fullmatch(name):
        first = "a lowercase letter" if service else "a lowercase letter or digit"
        return (f"{name!r} is not a valid {kind} name: a Kubernetes {kind} name is a {label} label: at most "
                f"{_LABEL_MAX} characters, lowercase letters, digits and '-', starting with {first} and "
                f"ending with a lowercase letter or digit")
    return None


def service_dns_names(service: str, namespace: str) -> list[str]:
    """``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.cluster.local`` (Kubernetes DNS for
    Services; the apiserver calls a webhook at ``https://SVC.NS.svc:PORT/PATH``).

    Raises ``CertError`` when ``service`` is not a DNS-1035 label or ``namespace`` not a DNS-1123
    label: Kubernetes could never reach it."""
    for name, kind in ((service, "Service"), (namespace, "Namespace")):
        problem = name_problem(name, kind)
        if problem:
            raise CertError(problem)
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def generate_ca(common_name: str = "taugate-ca", *, days: int = DEFAULT_CA_DAYS,
                now: _dt.datetime | None = None) -> KeyPair:
    """A self-signed CA valid ``days`` days from ``now`` (UTC). The Common Name gets the issue
    time appended (``taugate-ca@2026-11-29T10:00:00Z``), so CAs in one bundle differ by name too."""
    check_days(days, "CA validity")
    now = now or _now()
    key = _new_key()
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}@{stamp}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def generate_serving(ca: KeyPair, hosts: list[str] | tuple[str, ...], *, days: int = DEFAULT_SERVING_DAYS,
                     now: _dt.datetime | None = None) -> KeyPair:
    """Signed by ``ca`` for ``hosts`` (DNS names and/or IP addresses; the first is the Common
    Name), valid ``days`` days but never beyond the CA's own expiry (a rotation issues from a CA
    that has used part of its life; callers refuse more days than the CA has with
    ``check_validity`` first). Raises ``CertError`` for no hosts, ``days`` outside
    1..``MAX_DAYS``, or an unusable ``ca``."""
    hosts = [h for h in hosts if h]
    if not hosts:
        raise CertError("a serving certificate needs at least one host name")
    check_days(days, "serving certificate validity")
    now = now or _now()
    ca_cert = ca.cert
    ca_key = load_private_key(ca.key_pem)
    if not public_keys_match(ca_cert, ca_key):
        raise CertError("the CA certificate and the CA key do not belong together")
    sans: list[x509.GeneralName] = []
    for h in dict.fromkeys(hosts):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = _new_key()
    not_after = min(now + _dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """In order; ``CertError`` when there is none or the PEM is damaged."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise CertError(f"not a PEM certificate bundle: {e}") from None
    if not certs:
        raise CertError("no certificate in the PEM data")
    return certs


def load_private_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    """An unencrypted PEM private key (``CertError`` if damaged, encrypted or not EC)."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as e:
        raise CertError(f"not an unencrypted PEM private key: {str(e).splitlines()[0] if str(e) else e}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"expected an EC private key, found {type(key).__name__}")
    return key


def public_keys_match(cert: x509.Certificate, key) -> bool:
    """True when ``key`` (a private key) is the key of ``cert``."""
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when ``ca`` signed ``cert`` (names and signature checked)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256, lowercase hex."""
    return cert.fingerprint(hashes.SHA256()).hex()


def bundle_pem(certs: list[x509.Certificate]) -> bytes:
    """A PEM bundle of ``certs`` in order, duplicates (same fingerprint) dropped."""
    seen: set[str] = set()
    out = b""
    for c in certs:
        fp = fingerprint(c)
        if fp not in seen:
            seen.add(fp)
            out += c.public_bytes(serialization.Encoding.PEM)
    return out
