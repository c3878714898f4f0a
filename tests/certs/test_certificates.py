"""The webhook's CA and serving certificate: what Kubernetes and TLS clients require of them,
and how they are written to disk."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from taugate.certs import store
from taugate.certs.pki import (
    CertError,
    generate_ca,
    generate_serving,
    issued_by,
    load_certificates,
    load_private_key,
    public_keys_match,
    service_dns_names,
)

SVC, NS = "taugate-webhook", "taugate-system"


@pytest.fixture
def cert_dir(tmp_path):
    store.generate(tmp_path / "tls", service=SVC, namespace=NS)
    return tmp_path / "tls"


def _cert(path) -> x509.Certificate:
    return load_certificates(path.read_bytes())[0]


def test_the_serving_certificate_names_every_dns_name_of_the_service_plus_localhost(cert_dir):
    cert = _cert(cert_dir / "tls.crt")
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "taugate-webhook", "taugate-webhook.taugate-system", "taugate-webhook.taugate-system.svc",
        "taugate-webhook.taugate-system.svc.cluster.local", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_keys_are_ec_p256_and_the_chain_has_the_extensions_go_and_strict_openssl_require(cert_dir):
    ca, leaf = _cert(cert_dir / "ca.crt"), _cert(cert_dir / "tls.crt")
    for key_file in ("ca.key", "tls.key"):
        key = load_private_key((cert_dir / key_file).read_bytes())
        assert isinstance(key.curve, ec.SECP256R1)
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    assert issued_by(leaf, ca)
    assert public_keys_match(leaf, load_private_key((cert_dir / "tls.key").read_bytes()))


def test_an_openssl_client_trusting_only_the_ca_accepts_the_in_cluster_name_and_rejects_others(cert_dir):
    """A TLS handshake in memory (no sockets): strict X.509 verification as Python 3.13 enables it."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")

    def handshake(name: str) -> None:
        client_ctx = ssl.create_default_context(cafile=cert_dir / "ca.crt")
        client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        client = client_ctx.wrap_bio(c_in, c_out, server_hostname=name)
        server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(10):
            for side, out, peer_in in ((client, c_out, s_in), (server, s_out, c_in)):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
                peer_in.write(out.read())
        assert client.version() in ("TLSv1.2", "TLSv1.3")

    handshake("taugate-webhook.taugate-system.svc")
    handshake("127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake("taugate-webhook.other-namespace.svc")


def test_validity_starts_before_now_for_clock_skew_and_the_leaf_never_outlives_its_ca():
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    ca = generate_ca(days=10, now=now)
    leaf = generate_serving(ca, service_dns_names("s", "n"), days=365, now=now).cert
    assert leaf.not_valid_before_utc < now
    assert leaf.not_valid_after_utc == ca.cert.not_valid_after_utc == now + dt.timedelta(days=10)


def test_private_keys_are_written_mode_0600_and_certificates_0644(cert_dir):
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in cert_dir.iterdir() if not p.name.startswith(".")}
    assert modes == {"ca.key": 0o600, "tls.key": 0o600, "ca.crt": 0o644, "tls.crt": 0o644}


def test_generate_refuses_to_replace_a_live_ca_unless_forced(cert_dir):
    before = (cert_dir / "ca.crt").read_bytes()
    with pytest.raises(CertError, match="already exists.*rotate"):
        store.generate(cert_dir, service=SVC, namespace=NS)
    assert (cert_dir / "ca.crt").read_bytes() == before
    store.generate(cert_dir, service=SVC, namespace=NS, force=True)
    assert (cert_dir / "ca.crt").read_bytes() != before


def test_a_reader_never_sees_a_partial_file_while_it_is_rewritten(tmp_path):
    target = tmp_path / "bundle.pem"
    versions = [bytes([65 + i]) * 200_000 for i in range(4)]
    store.write_atomic(target, versions[0])
    stop = threading.Event()
    seen: set[bytes] = set()

    def read():
        while not stop.is_set():
            seen.add(target.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(200):
        store.write_atomic(target, versions[i % 4])
    stop.set()
    reader.join()
    assert seen <= set(versions) and len(seen) >= 2
    assert [p.name for p in tmp_path.iterdir()] == ["bundle.pem"]  # no temporary file left behind


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "tls.key"
    store.write_atomic(target, b"old", 0o600)
    with pytest.raises(TypeError):
        store.write_atomic(target, "not bytes", 0o600)  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["tls.key"]


def test_inspect_names_the_file_that_does_not_belong(cert_dir, tmp_path):
    other = tmp_path / "other"
    store.generate(other, service=SVC, namespace=NS)
    (cert_dir / "tls.key").write_bytes((other / "tls.key").read_bytes())
    with pytest.raises(CertError, match=r"tls\.key: does not belong to .*tls\.crt"):
        store.inspect(cert_dir)
    (cert_dir / "ca.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    with pytest.raises(CertError, match=r"ca\.crt: "):
        store.inspect(cert_dir)


def test_the_serving_certificates_expiry_is_exported_as_a_metric(tmp_path):
    from prometheus_client import REGISTRY

    from taugate.certs import store
    from taugate.certs.serving import ServingTLS

    store.generate(tmp_path, service="taugate-webhook", namespace="taugate-system", days=30)
    tls = ServingTLS(tmp_path)
    try:
        expiry = REGISTRY.get_sample_value("taugate_certificate_expiry_timestamp_seconds")
        import time
        assert 29 * 86400 < expiry - time.time() <= 30 * 86400 + 60
    finally:
        tls.close()
