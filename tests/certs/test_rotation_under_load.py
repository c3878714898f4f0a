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
from tests.waiting import until

BEFORE = 50
"""Reviews answered before the rotation starts, and with the new certificate before traffic stops."""
CLIENTS = 3


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
    done = asyncio.Event()
    new_leaf = ""

    async def client_loop():
        client = AdmissionClient(running.port, cert_dir / "ca.crt", fresh_connections=True)
        try:
            while not done.is_set():
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
        nonlocal new_leaf
        try:
            await until(lambda: len(results) >= BEFORE or failures, timeout=60, what=f"{BEFORE} reviews")
            await asyncio.to_thread(store.rotate, cert_dir, wait_seconds=2.0,
                                    on_step=lambda name, st: steps.append((time.monotonic() - t0, name)))
            new_leaf = fingerprint(load_certificates((cert_dir / "tls.crt").read_bytes())[0])
            await until(lambda: sum(fp == new_leaf for _, fp in results) >= BEFORE or failures, timeout=60,
                        what=f"{BEFORE} reviews served with the new certificate")
        finally:
            done.set()

    try:
        await asyncio.gather(*(client_loop() for _ in range(CLIENTS)), rotate())
    finally:
        await running.stop()
        tls.close()

    new_leaf_cert = load_certificates((cert_dir / "tls.crt").read_bytes())[0]
    new_ca = store.inspect(cert_dir).issuer
    assert failures == [], failures[:5]
    assert [name for _, name in steps] == ["publish", "switch"]
    before = {fp for t, fp in results if t < steps[0][0]}
    assert len(before) == 1 and before == {old_leaf}
    # Once a handshake served the new certificate, every later one does (but for the handshakes
    # the other clients had in flight at that moment).
    first_new = next(i for i, (_, fp) in enumerate(results) if fp == new_leaf)
    assert {fp for _, fp in results[first_new + CLIENTS:]} == {new_leaf} == {fingerprint(new_leaf_cert)}
    assert new_leaf != old_leaf
    assert issued_by(new_leaf_cert, new_ca) and not issued_by(new_leaf_cert, old_ca)
    assert server.metrics.registry.get_sample_value("taugate_certificate_reloads_total") == 1
