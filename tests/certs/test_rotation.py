"""CA rotation without breaking clients: the new CA is trusted before anything it signed is
served, and the serving certificate is switched only after."""

from __future__ import annotations

import datetime as dt

import pytest

from taugate.certs import store
from taugate.certs.pki import CertError, fingerprint, issued_by, load_certificates
from taugate.certs.serving import ServingTLS
from taugate.cli import main

SVC, NS = "taugate-webhook", "taugate-system"


@pytest.fixture
def cert_dir(tmp_path):
    store.generate(tmp_path / "tls", service=SVC, namespace=NS)
    return tmp_path / "tls"


def _bundle(d):
    return load_certificates((d / "ca.crt").read_bytes())


def _leaf(d):
    return load_certificates((d / "tls.crt").read_bytes())[0]


def test_publishing_a_new_ca_keeps_the_old_one_trusted_and_the_serving_certificate_unchanged(cert_dir):
    old_ca, old_leaf = _bundle(cert_dir)[0], (cert_dir / "tls.crt").read_bytes()
    st = store.publish_new_ca(cert_dir)
    bundle = _bundle(cert_dir)
    assert [fingerprint(c) for c in bundle] == [fingerprint(old_ca), fingerprint(st.pending)]
    assert (cert_dir / "tls.crt").read_bytes() == old_leaf
    assert issued_by(_leaf(cert_dir), old_ca)
    # Publishing again while a rotation is pending changes nothing (resumable, no third CA).
    store.publish_new_ca(cert_dir)
    assert [fingerprint(c) for c in _bundle(cert_dir)] == [fingerprint(c) for c in bundle]


def test_switching_serves_a_certificate_of_the_new_ca_for_the_same_hosts(cert_dir):
    hosts = store.inspect(cert_dir).hosts
    new_ca = store.publish_new_ca(cert_dir).pending
    st = store.switch_serving(cert_dir)
    assert issued_by(_leaf(cert_dir), new_ca) and st.issuer == new_ca and st.pending is None
    assert st.hosts == hosts
    assert not (cert_dir / "ca-next.key").exists()
    assert len(_bundle(cert_dir)) == 2  # the old CA stays until the next rotation or a trim


def test_switching_before_publishing_is_refused(cert_dir):
    before = (cert_dir / "tls.crt").read_bytes()
    with pytest.raises(CertError, match="publish"):
        store.switch_serving(cert_dir)
    assert (cert_dir / "tls.crt").read_bytes() == before


def test_the_next_rotation_drops_the_oldest_ca_and_trim_keeps_only_the_issuer(cert_dir):
    first = _bundle(cert_dir)[0]
    store.rotate(cert_dir, wait_seconds=0)
    second = store.inspect(cert_dir).issuer
    st = store.publish_new_ca(cert_dir)
    assert [fingerprint(c) for c in _bundle(cert_dir)] == [fingerprint(second), fingerprint(st.pending)]
    assert fingerprint(first) not in {fingerprint(c) for c in _bundle(cert_dir)}
    with pytest.raises(CertError, match="in progress"):
        store.trim_bundle(cert_dir)
    store.switch_serving(cert_dir)
    st = store.trim_bundle(cert_dir)
    assert _bundle(cert_dir) == [st.issuer]


def test_rotate_waits_between_publishing_and_switching(cert_dir):
    steps = []
    store.rotate(cert_dir, wait_seconds=7.5, sleep=lambda s: steps.append(("sleep", s)),
                 on_step=lambda name, st: steps.append((name, len(st.bundle))))
    assert steps == [("publish", 2), ("sleep", 7.5), ("switch", 2)]


def test_the_live_context_reloads_a_rotated_certificate_and_ignores_a_half_written_pair(cert_dir, tmp_path):
    tls = ServingTLS(cert_dir)
    try:
        first = tls.fingerprint
        assert tls.check() is False  # nothing changed
        store.rotate(cert_dir, wait_seconds=0)
        assert tls.check() is True and tls.fingerprint == fingerprint(_leaf(cert_dir)) != first
        # A new certificate whose key has not been written yet: keep serving the current pair.
        serving_now = tls.fingerprint
        other = tmp_path / "other"
        store.generate(other, service=SVC, namespace=NS)
        (cert_dir / "tls.crt").write_bytes((other / "tls.crt").read_bytes())
        assert tls.check() is False and tls.fingerprint == serving_now
        (cert_dir / "tls.key").write_bytes((other / "tls.key").read_bytes())
        assert tls.check() is True and tls.fingerprint == fingerprint(_leaf(other))
        assert tls.reloads == 2
    finally:
        tls.close()


class _Run:
    def __init__(self, code, out, err):
        self.returncode, self.stdout, self.stderr = code, out, err


@pytest.fixture
def taugate(capsys):
    """Run the taugate command in process (what the console script runs), capturing its output."""
    def run(*args):
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return _Run(code, out, err)
    return run


def test_the_certs_commands_generate_rotate_and_report_bad_input_in_one_line(tmp_path, taugate):
    d = tmp_path / "certs"
    r = taugate("certs", "generate", "--dir", str(d), "--service", "gate", "--namespace", "ops")
    assert r.returncode == 0, r.stderr
    assert "gate.ops.svc.cluster.local" in r.stdout
    first = fingerprint(_leaf(d))
    r = taugate("certs", "rotate", "--dir", str(d), "--wait", "0")
    assert r.returncode == 0, r.stderr
    assert "publish: done" in r.stdout and "switch: done" in r.stdout
    assert fingerprint(_leaf(d)) != first and store.inspect(d).hosts[:2] == ["gate", "gate.ops"]
    r = taugate("certs", "rotate", "--dir", str(d), "--if-expiring-within", "30")
    assert r.returncode == 0 and "nothing to do" in r.stdout
    r = taugate("certs", "rotate", "--dir", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing: no such directory" in r.stderr
    (d / "tls.key").write_text("not a key")
    r = taugate("certs", "show", "--dir", str(d))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "tls.key" in r.stderr


def test_a_certificate_due_within_the_window_is_rotated(tmp_path, taugate):
    d = tmp_path / "short"
    store.generate(d, service=SVC, namespace=NS, days=3)
    assert store.inspect(d).expires - dt.datetime.now(dt.UTC) < dt.timedelta(days=4)
    r = taugate("certs", "rotate", "--dir", str(d), "--wait", "0", "--if-expiring-within", "30")
    assert r.returncode == 0 and "switch: done" in r.stdout, r.stderr
