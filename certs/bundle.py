"""A webhook's certificate set as bytes, under a ``kubernetes.io/tls`` Secret's names (``ca.crt``
the ``caBundle``, ``ca.key``, ``tls.crt``, ``tls.key``, ``ca-next.key`` mid-rotation), and the pure
steps of its life. A CA rotates in the order the API server needs, since it verifies with the
configurations' ``caBundle``, which lags the stored set: ``publish`` adds the new CA (the serving
certificate verifies under both), every client takes the new bundle, then ``switch`` issues the
serving certificate from it; the old CA stays until the next ``publish`` or ``trim``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, replace

from cryptography import x509

from taugate.certs.pki import (
    DEFAULT_CA_DAYS,
    DEFAULT_SERVING_DAYS,
    LOCAL_HOSTS,
    CertError,
    KeyPair,
    bundle_pem,
    check_validity,
    generate_ca,
    generate_serving,
    issued_by,
    load_certificates,
    load_private_key,
    public_keys_match,
    service_dns_names,
)

CA_BUNDLE = "ca.crt"
CA_KEY = "ca.key"
CA_NEXT_KEY = "ca-next.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
ITEMS = (CA_BUNDLE, CA_KEY, TLS_CERT, TLS_KEY, CA_NEXT_KEY)


@dataclass(frozen=True)
class CertSet:
    """The five items as PEM bytes (``ca_next_key`` None outside a rotation)."""

    ca_bundle: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes
    ca_next_key: bytes | None = None

    def items(self) -> dict[str, bytes]:
        """Item name -> bytes, ``ca-next.key`` only when present."""
        out = {CA_BUNDLE: self.ca_bundle, CA_KEY: self.ca_key, TLS_CERT: self.tls_crt, TLS_KEY: self.tls_key}
        if self.ca_next_key is not None:
            out[CA_NEXT_KEY] = self.ca_next_key
        return out

    @classmethod
    def from_items(cls, items: dict[str, bytes | None], where: Callable[[str], str] = str) -> CertSet:
        """``CertError`` names the first missing required item."""
        def required(name: str) -> bytes:
            value = items.get(name)
            if not value:
                raise CertError(f"{where(name)}: missing")
            return value

        # Arguments are evaluated in order: the first missing item is the one named.
        return cls(required(CA_BUNDLE), required(CA_KEY), required(TLS_CERT), required(TLS_KEY),
                   items.get(CA_NEXT_KEY) or None)


@dataclass(frozen=True)
class CertStatus:
    """A checked ``CertSet``: ``bundle`` in order, ``issuer`` (the CA of ``ca.key``), ``serving``,
    ``pending`` (the CA of ``ca-next.key``, None outside a rotation). Times are UTC."""

    bundle: tuple[x509.Certificate, ...]
    issuer: x509.Certificate
    serving: x509.Certificate
    pending: x509.Certificate | None

    @property
    def hosts(self) -> list[str]:
        """The serving certificate's SANs, as text, in order."""
        return serving_hosts(self.serving)

    @property
    def expires(self) -> _dt.datetime:
        """When the first of the serving certificate and its CA expires."""
        return min(self.serving.not_valid_after_utc, self.issuer.not_valid_after_utc)


def serving_hosts(cert: x509.Certificate) -> list[str]:
    """The SubjectAlternativeName's DNS names and IP addresses, in order."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    out: list[str] = []
    for name in san:
        if isinstance(name, x509.DNSName):
            out.append(name.value)
        elif isinstance(name, x509.IPAddress):
            out.append(str(name.value))
    return out


def _certs(data: bytes, name: str, where: Callable[[str], str]) -> list[x509.Certificate]:
    try:
        return load_certificates(data)
    except CertError as e:
        raise CertError(f"{where(name)}: {e}") from None


def _key(data: bytes, name: str, where: Callable[[str], str]):
    try:
        return load_private_key(data)
    except CertError as e:
        raise CertError(f"{where(name)}: {e}") from None


def _find(bundle, key) -> x509.Certificate | None:
    return next((c for c in bundle if public_keys_match(c, key)), None)


def check(cs: CertSet, where: Callable[[str], str] = str) -> CertStatus:
    """Cross-check: ``ca.key`` has its certificate in ``ca.crt``, ``tls.key`` belongs to
    ``tls.crt``, and that CA (or the pending one, mid rotation) signed ``tls.crt``. ``CertError``
    names the item (``where(item)``) and the problem."""
    bundle = _certs(cs.ca_bundle, CA_BUNDLE, where)
    issuer = _find(bundle, _key(cs.ca_key, CA_KEY, where))
    if issuer is None:
        raise CertError(f"{where(CA_KEY)}: no certificate for this key in {where(CA_BUNDLE)}")
    serving = _certs(cs.tls_crt, TLS_CERT, where)[0]
    if not public_keys_match(serving, _key(cs.tls_key, TLS_KEY, where)):
        raise CertError(f"{where(TLS_KEY)}: does not belong to {where(TLS_CERT)}")
    pending = None
    if cs.ca_next_key is not None:
        pending = _find(bundle, _key(cs.ca_next_key, CA_NEXT_KEY, where))
        if pending is not None and pending == issuer:  # a switch interrupted after promoting the key
            pending = None
    if not issued_by(serving, issuer) and not (pending is not None and issued_by(serving, pending)):
        raise CertError(f"{where(TLS_CERT)}: not signed by the CA of {where(CA_KEY)}")
    return CertStatus(tuple(bundle), issuer, serving, pending)


def create(*, service: str, namespace: str, extra_hosts: tuple[str, ...] = LOCAL_HOSTS,
           ca_days: int = DEFAULT_CA_DAYS, days: int = DEFAULT_SERVING_DAYS,
           now: _dt.datetime | None = None) -> CertSet:
    """A new CA and a serving certificate for ``service_dns_names`` plus ``extra_hosts``. Raises
    ``CertError`` before generating anything for invalid names or periods (``check_validity``)."""
    check_validity(ca_days=ca_days, days=days)
    hosts = [*service_dns_names(service, namespace), *extra_hosts]
    ca = generate_ca(days=ca_days, now=now)
    serving = generate_serving(ca, hosts, days=days, now=now)
    return CertSet(ca.cert_pem, ca.key_pem, serving.cert_pem, serving.key_pem)


def publish(cs: CertSet, *, ca_days: int = DEFAULT_CA_DAYS, now: _dt.datetime | None = None,
            where: Callable[[str], str] = str) -> CertSet:
    """Rotation step 1: ``ca.crt`` = issuer + a new CA (older CAs dropped); ``tls.*`` unchanged.
    A set with a rotation pending is returned as is."""
    st = check(cs, where)
    if st.pending is not None:
        return cs
    ca = generate_ca(days=ca_days, now=now)
    return replace(cs, ca_bundle=bundle_pem([st.issuer, ca.cert]), ca_next_key=ca.key_pem)


def switch(cs: CertSet, *, days: int = DEFAULT_SERVING_DAYS, now: _dt.datetime | None = None,
           where: Callable[[str], str] = str) -> CertSet:
    """Rotation step 2: a serving certificate for the same hosts from the pending CA, which
    becomes the issuer. ``CertError`` when no rotation is pending."""
    st = check(cs, where)
    if st.pending is None or cs.ca_next_key is None:
        raise CertError(f"{where(CA_NEXT_KEY)}: no new CA is published; rotation step 'publish' comes first")
    if not st.hosts:
        raise CertError(f"{where(TLS_CERT)}: has no SubjectAlternativeName to carry over")
    serving = generate_serving(KeyPair(bundle_pem([st.pending]), cs.ca_next_key), st.hosts, days=days, now=now)
    return CertSet(cs.ca_bundle, cs.ca_next_key, serving.cert_pem, serving.key_pem, None)


def trim(cs: CertSet, where: Callable[[str], str] = str) -> CertSet:
    """Keep only the issuer in ``ca.crt`` (``CertError`` while a rotation is pending)."""
    st = check(cs, where)
    if st.pending is not None:
        raise CertError(f"{where(CA_NEXT_KEY)}: a rotation is in progress; finish it with 'switch' first")
    return replace(cs, ca_bundle=bundle_pem([st.issuer]), ca_next_key=None)


def reissue(cs: CertSet, hosts: list[str], *, days: int = DEFAULT_SERVING_DAYS, now: _dt.datetime | None = None,
            where: Callable[[str], str] = str) -> CertSet:
    """A new serving certificate from the current issuer (no trust change): when the serving
    certificate, not the CA, is due, or the Service name changed."""
    st = check(cs, where)
    serving = generate_serving(KeyPair(bundle_pem([st.issuer]), cs.ca_key), hosts, days=days, now=now)
    return replace(cs, tls_crt=serving.cert_pem, tls_key=serving.key_pem)
