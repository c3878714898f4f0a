"""Errors decide the HTTP status, through the real HTTPS server, with the OPA backend on a real OPA
server (``opa run --server``): answers as with the embedded engine while OPA serves; HTTP 503 with
the reason when OPA is down or later than its timeout (nothing is decided, so the webhook's
``failurePolicy`` applies), while the event loop keeps answering; mutation, which needs no policy,
goes on. (HTTP 400 for a malformed review: test_limits_and_deadline.py; a bug is a valid denial
with code 500 and a logged traceback: test_probes_metrics_and_tls.py.)"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
import pytest_asyncio
import yaml

from taugate.webhook.engines import load_policy_engine
from tests.paths import POLICIES
from tests.server.https import admission_review, apply, check_response, workload_request
from tests.waiting import until

DENIED_SAMPLE = POLICIES / "gpu-total-fits-queue" / "samples" / "example_disallowed_image_classifier_64.yaml"


@pytest_asyncio.fixture
async def opa_gate(opa_server, start_server):
    """``await opa_gate(timeout_s)``: the server with the OPA backend on ``opa_server``."""
    engines = []

    async def start(timeout_s: float = 1.0):
        engine = await asyncio.to_thread(load_policy_engine, POLICIES, backend="opa", opa_url=opa_server.url,
                                         opa_timeout_s=timeout_s)
        engines.append(engine)
        return await start_server(engine_=engine)

    yield start
    for engine in engines:
        await asyncio.to_thread(engine.close)


async def _validate_after_mutate(gate, obj: dict):
    """POST /mutate, apply the patch, POST /validate: (reply, request uid)."""
    created = workload_request(obj, namespace=obj["metadata"].get("namespace", "vision"))
    mutated = apply(obj, check_response((await gate.post("/mutate", admission_review(created))).body, created["uid"]))
    req = workload_request(mutated, namespace=created["namespace"])
    return await gate.post("/validate", admission_review(req)), req["uid"]


async def test_with_the_opa_backend_the_server_answers_as_with_the_embedded_engine(opa_gate, gate, rayjob):
    opa = await opa_gate()
    for obj in (rayjob, yaml.safe_load(DENIED_SAMPLE.read_text())):
        answers = []
        for server in (gate, opa):
            r, uid = await _validate_after_mutate(server, obj)
            assert r.status == 200
            resp = check_response(r.body, uid)
            answers.append((resp["allowed"], (resp.get("status") or {}).get("message"), resp.get("warnings")))
        assert answers[0] == answers[1]
    assert answers[0][0] is False and "[gpu-total-fits-queue]" in answers[0][1]


async def test_an_opa_server_that_is_down_is_http_503_with_the_reason_and_nothing_decided(opa_gate, opa_server,
                                                                                          rayjob, caplog):
    gate = await opa_gate()
    opa_server.stop()
    created = workload_request(rayjob)
    with caplog.at_level(logging.WARNING):
        r = await gate.post("/mutate", admission_review(created))  # the one workload call: mutate, then policies
    assert r.status == 503, r.text
    assert r.body["kind"] == "Status" and r.body["code"] == 503 and r.body["reason"] == "ServiceUnavailable"
    assert f"OPA server at {opa_server.url} failed" in r.body["message"] and "failurePolicy" in r.body["message"]
    assert not any(rec.exc_info for rec in caplog.records), "no traceback: the backend is down, not a bug"
    metrics = await gate.metrics()
    assert 'decision="policy_unavailable",kind="RayJob",operation="CREATE",webhook="/mutate"} 1.0' in metrics


async def test_a_late_opa_server_is_http_503_within_its_timeout_while_the_event_loop_keeps_answering(
        opa_gate, opa_server, rayjob, monkeypatch):
    gate = await opa_gate(timeout_s=0.5)
    asked = threading.Event()  # set when the review reaches the real engine (which then waits on OPA)
    evaluate = gate.server.engine.evaluate
    monkeypatch.setattr(gate.server.engine, "evaluate", lambda doc: (asked.set(), evaluate(doc))[1])
    created = workload_request(rayjob)
    mutated = apply(rayjob, check_response((await gate.post("/mutate", admission_review(created))).body,
                                           created["uid"]))
    opa_server.pause()
    try:
        started = time.monotonic()
        review = asyncio.create_task(gate.post("/validate", admission_review(workload_request(mutated))))
        await until(asked.is_set, what="the review to be sent to OPA")
        probe_started = time.monotonic()
        health = await gate.get("/healthz")
        assert health.status == 200 and time.monotonic() - probe_started < 0.2, "the loop waited on OPA"
        assert not review.done()
        r = await review
        elapsed = time.monotonic() - started
    finally:
        opa_server.resume()
    assert r.status == 503 and "did not answer within 0.5 s" in r.body["message"], r.text
    assert 0.45 <= elapsed < gate.server.settings.admission_deadline_seconds, elapsed
    r = await gate.post("/validate", admission_review(workload_request(mutated)))
    assert r.status == 200 and r.body["response"]["allowed"]


@pytest.mark.parametrize("timeout_s", [2.0, 3.0])
def test_an_opa_timeout_not_below_the_admission_deadline_is_refused(timeout_s):
    from pydantic import ValidationError

    from taugate.settings import Settings

    with pytest.raises(ValidationError, match="must be below admission_deadline_seconds"):
        Settings(policy_backend="opa", opa_url="http://127.0.0.1:8181", opa_timeout_seconds=timeout_s)
