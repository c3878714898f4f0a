"""A CA rotation while the webhook is under continuous HTTPS traffic: no request fails, and the
clients (which re-read the CA bundle for every new connection, as the apiserver re-reads
caBundle) end up verifying the new serving certificate, issued by the new CA."""

from __future__ import annotations

import asyncio
import time

import pytest
import yaml

from taugate.certs import store
from taugate.certs.pki import fingerprint, issued_by, load_certificates
from taugate.certs.serving import ServingTLS
from taugate.settings import Settings
from taugate.webhook import lifecycle
from taugate.webhook import server as srv
from taugate.webhook.providers import SnapshotStateProvider
from tests.server.conftest import EXAMPLE_CLUSTER, EXAMPLE_RAYJOB
from tests.server.https import AdmissionClient, admission_review, check_response, workload_request

DURATION = 10.0
ROTATE_AT = 3.0


@pytest.fixture(scope="module")
def engine():
    from taugate.webhook.engines import load_policy_engine

    return load_policy_engine(Settings().policy_dir)


async def test_rotating_the_ca_under_continuous_traffic_fails_no_request(tmp_path, engine):
    cert_dir = tmp_path / "tls"
    store.generate(cert_dir, service="taugate-webhook", namespace="taugate-system")
    old_ca = load_certificates((cert_dir / "ca.crt").read_bytes())[0]
    old_leaf = fingerprint(load_certificates((cert_dir / "tls.crt").read_bytes())[0])
    settings = Settings()
    server = srv.AdmissionServer(SnapshotStateProvider(EXAMPLE_CLUSTER, settings), settings, engine)
    tls = ServingTLS(cert_dir)
    running = await lifecycle.start(server, tls, port=0)
    rayjob = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    results: list[tuple[float, str]] = []
    failures: list[str] = []
    steps: list[tuple[float, str]] = []
    t0 = time.monotonic()

    async def client_loop():
        client = AdmissionClient(running.port, cert_dir / "ca.crt", fresh_connections=True)
        try:
            while time.monotonic() - t0 < DURATION:
                req = workload_request(rayjob)
                try:
                    r = await client.post("/mutate", admission_review(req))
                    assert r.status == 200, r.text
                    assert check_response(r.body, req["uid"])["allowed"]
                    results.append((time.monotonic() - t0, r.peer_sha256))
                except Exception as e:  # every failure is collected and reported
                    failures.append(f"{time.monotonic() - t0:.2f}s: {type(e).__name__}: {e}")
        finally:
            await client.close()

    async def rotate():
        await asyncio.sleep(ROTATE_AT)
        await asyncio.to_thread(store.rotate, cert_dir, wait_seconds=2.0,
                                on_step=lambda name, st: steps.append((time.monotonic() - t0, name)))

    try:
        await asyncio.gather(client_loop(), client_loop(), client_loop(), rotate())
    finally:
        await running.stop()
        tls.close()

    new_leaf_cert = load_certificates((cert_dir / "tls.crt").read_bytes())[0]
    new_ca = store.inspect(cert_dir).issuer
    assert failures == [], failures[:5]
    assert [name for _, name in steps] == ["publish", "switch"]
    assert len(results) >= 200, len(results)  # continuous traffic: hundreds of handshakes
    switch_at = steps[1][0]
    before = {fp for t, fp in results if t < steps[0][0]}
    after = {fp for t, fp in results if t > switch_at + 1.5}  # the server reloads within ~1 s
    assert before == {old_leaf}
    assert after == {fingerprint(new_leaf_cert)} and fingerprint(new_leaf_cert) != old_leaf
    assert issued_by(new_leaf_cert, new_ca) and not issued_by(new_leaf_cert, old_ca)
    assert server.metrics.registry.get_sample_value("taugate_certificate_reloads_total") == 1
