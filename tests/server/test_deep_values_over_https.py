"""A value nested ~1000 levels deep anywhere admission reads (a container's limits, labels,
annotations, rayStartParams, env, ...) is denied over HTTPS naming the field, on the fast path
(a small body decided on the event loop) and on the threaded one (a body over the inline limit),
by /mutate and /validate alike: never ``code 500 internal error`` (issue 27 item 8)."""

from __future__ import annotations

import copy

import pytest

from tests.deep_values import SHAPES, deep_json, field, with_deep
from tests.server.https import admission_review, check_response, workload_request

PATHS = ["/mutate", "/validate"]


def _padded(obj: dict, size: int) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {})["example.com/padding"] = "x" * size
    return obj


@pytest.mark.parametrize("path", SHAPES)
@pytest.mark.parametrize("body_size", ["small", "large"])
async def test_a_value_nested_1000_levels_is_denied_naming_its_field_never_a_500(gate, rayjob, path, body_size):
    obj = with_deep(_padded(rayjob, 100_000) if body_size == "large" else rayjob, path)
    request = workload_request(obj)
    body = deep_json(admission_review(request))
    assert (len(body) > gate.server.inline_limit) == (body_size == "large")
    for route in PATHS:
        r = await gate.post(route, body)
        assert r.status == 200, (route, r.text[:300])
        resp = check_response(r.body, request["uid"])
        assert not resp["allowed"] and resp["status"]["code"] == 403, (route, resp["status"])
        message = resp["status"]["message"]
        assert f"[object-shape] {field(path)}.a.a.a" in message and "nests more than 100 levels deep" in message, \
            (route, message[:400])
    metrics = await gate.metrics()
    assert 'decision="error"' not in metrics


@pytest.mark.parametrize("path", [p for p in SHAPES if p.id in ("limits-cpu", "label-value", "env")])
async def test_an_update_to_a_deep_value_is_denied_naming_its_field(gate, rayjob, path):
    stored = copy.deepcopy(rayjob)
    stored["metadata"]["name"] = "classifier"
    request = workload_request(with_deep(copy.deepcopy(stored), path), operation="UPDATE", old=stored)
    body = deep_json(admission_review(request))
    for route in PATHS:
        r = await gate.post(route, body)
        resp = check_response(r.body, request["uid"])
        assert not resp["allowed"] and resp["status"]["code"] == 403, (route, resp["status"])
        assert f"{field(path)}.a.a" in resp["status"]["message"], resp["status"]["message"][:400]


@pytest.mark.parametrize("path", [("spec", "reason"), ("metadata", "annotations", "note"), ("spec", "extra")])
async def test_a_deep_value_in_a_quota_request_is_denied_on_the_tau_route_naming_its_field(gate, path):
    obj = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauQuotaRequest",
           "metadata": {"name": "more-h100", "namespace": "tau-platform"},
           "spec": {"workspace": "vision", "resource": "nvidia.com/gpu", "requested": 16, "reason": "sweep"}}
    gvk = {"group": "tau.azure.com", "version": "v1alpha1", "kind": "TauQuotaRequest"}
    request = {"uid": "6b3f6c1e-0000-4000-8000-000000000027", "kind": gvk, "requestKind": gvk,
               "resource": {"group": "tau.azure.com", "version": "v1alpha1", "resource": "quotarequests"},
               "namespace": "tau-platform", "name": "more-h100", "operation": "CREATE",
               "userInfo": {"username": "alice@example.com", "groups": ["vision-researchers"]},
               "object": with_deep(obj, path)}
    r = await gate.post("/validate-tau", deep_json(admission_review(request)))
    resp = check_response(r.body, request["uid"])
    assert not resp["allowed"] and resp["status"]["code"] == 403, resp["status"]
    assert f"[object-shape] {field(path)}.a.a" in resp["status"]["message"], resp["status"]["message"][:300]
