"""Probes, Prometheus metrics and the TLS identity of the admission server."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time

import aiohttp
import pytest

from taugate.snapshot import load_snapshot
from tests.server.conftest import EXAMPLE_CLUSTER
from tests.server.https import AdmissionClient, admission_review, check_response, workload_request
from tests.waiting import until


async def test_healthz_and_readyz_answer_200_when_state_and_policies_are_loaded(gate):
    assert (await gate.get("/healthz")).status == 200
    r = await gate.get("/readyz")
    assert r.status == 200 and r.body["status"] == "ready"
    [condition] = r.body["conditions"]  # the policy store's: the set on disk is the one serving
    assert (condition["type"], condition["status"], condition["reason"]) == ("PolicySetCurrent", "True", "Serving")


class LateProvider:
    """A state provider whose first state arrives later (as a watch-based one's does)."""

    def __init__(self):
        self._state = None
        self._at = time.monotonic()

    @property
    def state(self):
        return self._state

    @property
    def ready(self) -> bool:
        return self._state is not None

    def age_seconds(self) -> float:
        return time.monotonic() - self._at

    def arrive(self, state) -> None:
        self._state, self._at = state, time.monotonic()


async def test_until_state_arrives_readyz_is_503_and_reviews_are_denied_with_503(start_server, settings, rayjob):
    provider = LateProvider()
    h = await start_server(provider=provider)
    r = await h.get("/readyz")
    assert r.status == 503 and r.body["reasons"] == ["no cluster state yet"]
    req = workload_request(rayjob)
    resp = check_response((await h.post("/mutate", admission_review(req))).body, req["uid"])
    assert not resp["allowed"] and resp["status"]["code"] == 503
    assert "not ready (no cluster state yet)" in resp["status"]["message"]
    provider.arrive(load_snapshot(EXAMPLE_CLUSTER, settings))
    assert (await h.get("/readyz")).status == 200
    resp = check_response((await h.post("/mutate", admission_review(req))).body, req["uid"])
    assert resp["allowed"] and "patch" in resp


async def test_without_a_policy_library_the_server_is_not_ready(start_server):
    h = await start_server(engine_=None)
    r = await h.get("/readyz")
    assert r.status == 503 and r.body["reasons"] == ["no policy library loaded"]


async def test_metrics_count_reviews_by_webhook_kind_operation_and_decision_with_sub_ms_buckets(gate, rayjob):
    for _ in range(3):
        req = workload_request(rayjob)
        check_response((await gate.post("/mutate", admission_review(req))).body, req["uid"])
    old = dict(rayjob, metadata={**rayjob["metadata"], "name": "x"})
    req = workload_request(None, operation="DELETE", old=old)
    check_response((await gate.post("/validate", admission_review(req))).body, req["uid"])
    text = await gate.metrics()
    requests = "taugate_admission_requests_total"
    assert f'{requests}{{decision="patched",kind="RayJob",operation="CREATE",webhook="/mutate"}} 3.0' in text
    assert f'{requests}{{decision="allowed",kind="RayJob",operation="DELETE",webhook="/validate"}} 1.0' in text
    assert 'taugate_admission_duration_seconds_count{webhook="/mutate"} 3.0' in text
    assert 'taugate_admission_duration_seconds_bucket{le="0.0005",webhook="/mutate"}' in text
    assert 'taugate_admission_deadline_exceeded_total{webhook="/validate-tau"} 0.0' in text
    age = float(re.search(r"^taugate_state_age_seconds (\S+)$", text, re.M).group(1))
    assert 0 <= age < 60
    assert "taugate_policy_reloads_total" in text  # the policy engine's own metrics are exposed too


async def test_a_kind_outside_the_known_set_cannot_mint_metric_labels(gate):
    req = {"uid": "u-1", "kind": {"group": "evil.example.com", "version": "v1", "kind": "Injected\"Label"},
           "operation": "CREATE", "namespace": "default", "object": {"metadata": {"name": "x"}}}
    check_response((await gate.post("/validate", admission_review(req))).body, "u-1")
    text = await gate.metrics()
    assert "Injected" not in text and 'kind="other",operation="CREATE",webhook="/validate"} 1.0' in text


async def test_a_client_trusting_only_the_ca_verifies_the_in_cluster_name_and_nothing_else_does(gate, cert_dir):
    port = gate.running.port
    for name in ("taugate-webhook.taugate-system.svc", "taugate-webhook.taugate-system.svc.cluster.local",
                 "localhost"):
        c = AdmissionClient(port, cert_dir / "ca.crt", server_hostname=name)
        try:
            r = await c.get("/healthz")
            assert r.status == 200 and r.peer_sha256 == gate.tls.fingerprint
        finally:
            await c.close()
    wrong = AdmissionClient(port, cert_dir / "ca.crt", server_hostname="taugate-webhook.other.svc")
    try:
        with pytest.raises(aiohttp.ClientConnectorCertificateError, match="mismatch"):
            await wrong.get("/healthz")
    finally:
        await wrong.close()
    async with aiohttp.ClientSession() as s:  # the system trust store does not know taugate's CA
        with pytest.raises(aiohttp.ClientConnectorCertificateError, match="self-signed|unable to get local issuer"):
            await s.get(f"https://127.0.0.1:{port}/healthz", ssl=ssl.create_default_context(),
                        server_hostname="taugate-webhook.taugate-system.svc")


async def test_plain_http_gets_no_admission_answer(gate):
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            async with s.post(f"http://127.0.0.1:{gate.running.port}/mutate", data=b"{}") as r:
                await r.read()


async def test_only_post_is_served_on_admission_paths(gate):
    r = await gate.get("/mutate")
    assert r.status == 405


async def test_while_draining_readyz_is_503_but_reviews_are_still_decided(gate, rayjob):
    stopping = asyncio.ensure_future(gate.running.stop(drain_seconds=0.5))
    await until(lambda: gate.server.draining, what="the server to start draining")
    r = await gate.get("/readyz")
    assert r.status == 503 and r.body["reasons"] == ["shutting down"]
    req = workload_request(rayjob)
    resp = check_response((await gate.post("/mutate", admission_review(req))).body, req["uid"])
    assert resp["allowed"] and "patch" in resp
    await stopping


class BrokenStateProvider(LateProvider):
    """A provider whose state is not a ClusterState: every decision raises inside review code."""

    def __init__(self):
        super().__init__()
        self.arrive(object())


async def test_a_crash_inside_a_decision_is_a_valid_denial_with_code_500_and_a_logged_traceback(start_server, rayjob,
                                                                                                 caplog):
    h = await start_server(provider=BrokenStateProvider())
    req = workload_request(rayjob)
    with caplog.at_level(logging.ERROR, logger="taugate.webhook"):
        r = await h.post("/mutate", admission_review(req))
    [logged] = [rec for rec in caplog.records if rec.exc_info]
    assert logged.exc_info[0] is AttributeError and req["uid"] in logged.getMessage()
    assert r.status == 200
    resp = check_response(r.body, req["uid"])
    assert resp["allowed"] is False and resp["status"]["code"] == 500
    assert "internal error (AttributeError)" in resp["status"]["message"]
    assert 'decision="error",kind="RayJob",operation="CREATE",webhook="/mutate"} 1.0' in await h.metrics()
