"""What the server does with bodies that are not normal AdmissionReviews: garbage (HTTP 400
with a reason), oversize (HTTP 413 with a reason), large but valid (decided off the event loop),
a review not decided within the deadline (a valid AdmissionReview: denied, 504), and a body that
arrives slowly (decided when it arrives in time, HTTP 408 when it never does)."""

from __future__ import annotations

import asyncio
import copy
import json
import time

import pytest

from taugate.settings import Settings
from taugate.webhook import server
from taugate.webhook.server import READ_GRACE_SECONDS
from tests.server.https import SERVICE_NAME, admission_review, apply, check_response, client_context, workload_request
from tests.waiting import until

GARBAGE = [
    pytest.param(b"", "not JSON", id="empty"),
    pytest.param(b"\x00\xff\xfe binary", "not JSON", id="binary"),
    pytest.param(b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"Adm", "not JSON", id="truncated"),
    pytest.param(b"[1, 2, 3]", "an array", id="json-list"),
    pytest.param(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request: is missing",
                 id="no-request"),
    pytest.param(b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}', "AdmissionReview", id="a-pod"),
    pytest.param(json.dumps(admission_review({"kind": {"kind": "RayJob"}, "operation": "CREATE"})).encode(), "uid",
                 id="no-uid"),
    pytest.param(json.dumps(admission_review({"uid": "u1", "kind": {"kind": "RayJob"}, "operation": "PATCH"})).encode(),
                 "operation", id="bad-operation"),
    pytest.param(json.dumps(admission_review({"uid": "u1", "kind": {"kind": "RayJob"}, "operation": "CREATE",
                                              "object": ["not", "an", "object"]})).encode(), "object",
                 id="object-list"),
]


@pytest.mark.parametrize("body, reason", GARBAGE)
async def test_a_malformed_review_is_http_400_with_the_reason_in_the_body(gate, body, reason):
    for path in ("/mutate", "/validate", "/validate-tau"):
        r = await gate.post(path, body)
        assert r.status == 400, (path, r.text)
        assert set(r.body) == {"error"} and reason in r.body["error"], r.body
    assert 'decision="invalid",kind="",operation="",webhook="/mutate"} 1.0' in await gate.metrics()


def _padded(rayjob: dict, size: int) -> dict:
    """A RayJob whose review body is about ``size`` bytes (a long annotation, as a managedFields-
    heavy or configuration-carrying object has)."""
    obj = copy.deepcopy(rayjob)
    obj["metadata"]["annotations"] = {"example.com/notes": "x" * size}
    return obj


async def test_a_body_over_8_mib_is_http_413_with_a_reason(gate, rayjob):
    body = json.dumps(admission_review(workload_request(_padded(rayjob, 9 * 1024 * 1024)))).encode()
    assert len(body) > 9 * 1024 * 1024
    r = await gate.post("/mutate", body)
    assert r.status == 413 and "limit is 8388608 bytes (8 MiB)" in r.body["error"], r.text

    async def chunks():  # no Content-Length: the limit is enforced while reading
        for i in range(0, len(body), 1 << 20):
            yield body[i:i + (1 << 20)]

    r = await gate.post("/validate", chunks())
    assert r.status == 413 and "8388608" in r.body["error"], r.text
    # The server is unharmed: the next review is answered.
    small = workload_request(rayjob)
    r = await gate.post("/mutate", admission_review(small))
    assert check_response(r.body, small["uid"])["allowed"]
    metrics = await gate.metrics()
    assert 'decision="too_large",kind="",operation="",webhook="/mutate"} 1.0' in metrics
    assert 'decision="too_large",kind="",operation="",webhook="/validate"} 1.0' in metrics


async def test_a_large_valid_review_is_decided_in_the_thread_pool_while_small_ones_keep_flowing(gate, rayjob,
                                                                                            monkeypatch):
    import threading

    big = workload_request(_padded(rayjob, 7 * 1024 * 1024))
    body = json.dumps(admission_review(big)).encode()
    assert gate.server.inline_limit < len(body) < gate.server.settings.max_body_bytes
    finished: list[str] = []
    probed = threading.Event()  # the decision waits for the probes: they can only pass if the loop is free
    decide = server._DECIDERS["mutate.workloads.tau.azure.com"]

    def held(*args):
        assert probed.wait(30), "the probes were not answered while the review was decided"
        return decide(*args)

    monkeypatch.setitem(server._DECIDERS, "mutate.workloads.tau.azure.com", held)
    threads = _where_decided(monkeypatch, "mutate.workloads.tau.azure.com")  # recorded before it waits

    async def big_review():
        r = await gate.post("/mutate", body)
        finished.append("big")
        return r

    async def probes():
        await until(lambda: threads, what="the big review to be in its decision")
        for _ in range(5):
            r = await gate.get("/healthz")
            assert r.status == 200
        finished.append("probes")
        probed.set()

    r, _ = await asyncio.gather(big_review(), probes())
    resp = check_response(r.body, big["uid"])
    out = apply(big["object"], resp)
    assert out["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision-queue"
    assert len(out["metadata"]["annotations"]["example.com/notes"]) == 7 * 1024 * 1024
    assert finished == ["probes", "big"]  # the event loop answered while the big review was decided
    assert threads[0].startswith("taugate-admit"), threads


async def test_a_compressed_body_is_sized_by_what_it_decodes_to_not_by_its_content_length(gate, rayjob, monkeypatch):
    """Found by trying: a gzip body of 4 KB that decodes to over the inline limit was decided on the
    event loop, since its Content-Length counts the encoded bytes."""
    import gzip

    threads = _where_decided(monkeypatch, "mutate.workloads.tau.azure.com")
    big = workload_request(_padded(rayjob, 2 * gate.server.inline_limit))
    body = gzip.compress(json.dumps(admission_review(big)).encode())
    assert len(body) < gate.server.inline_limit
    r = await gate.post("/mutate", body, headers={"Content-Encoding": "gzip"})
    resp = check_response(r.body, big["uid"])
    assert apply(big["object"], resp)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision-queue"
    small = workload_request(rayjob)
    r = await gate.post("/mutate", admission_review(small))
    assert check_response(r.body, small["uid"])["allowed"]
    assert threads[0].startswith("taugate-admit") and threads[1] == "MainThread", threads


def _where_decided(monkeypatch, route: str) -> list[str]:
    """The names of the threads that decide ``route``'s reviews from now on, in order."""
    import threading

    threads: list[str] = []
    decide = server._DECIDERS[route]

    def recorded(*args):
        threads.append(threading.current_thread().name)
        return decide(*args)

    monkeypatch.setitem(server._DECIDERS, route, recorded)
    return threads


def _many_containers(rayjob: dict, n: int) -> dict:
    obj = copy.deepcopy(rayjob)
    template = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    template["containers"] += [{"name": f"sidecar-{i}", "image": "busybox"} for i in range(n)]
    return obj


@pytest.mark.parametrize("route, path", [("mutate.workloads.tau.azure.com", "/mutate"),
                                         ("validate.workloads.tau.azure.com", "/validate")])
async def test_a_small_review_with_many_containers_is_decided_in_the_thread_pool_by_its_work(gate, rayjob,
                                                                                             monkeypatch, route, path):
    """Issue 27 item 9: one 64 KiB review with 1,000 containers was decided on the event loop
    (~350 ms). It is sized by the objects it holds, not only its bytes."""
    threads = _where_decided(monkeypatch, route)
    heavy = workload_request(_many_containers(rayjob, 1000))
    body = json.dumps(admission_review(heavy), separators=(",", ":")).encode()
    assert len(body) < gate.server.inline_limit and body.count(b"{") > gate.server.inline_objects
    check_response((await gate.post(path, body)).body, heavy["uid"])
    light = workload_request(_many_containers(rayjob, 8))  # a pod with a few sidecars stays on the loop
    check_response((await gate.post(path, admission_review(light))).body, light["uid"])
    assert threads[0].startswith("taugate-admit") and threads[1] == "MainThread", threads


async def test_a_review_not_decided_within_the_deadline_is_denied_with_a_valid_504_answer(start_server, rayjob):
    h = await start_server(settings_=Settings(admission_deadline_seconds=0.005))
    req = workload_request(_padded(rayjob, 4 * 1024 * 1024))  # receiving and parsing 4 MiB take longer than 5 ms
    r = await h.post("/mutate", admission_review(req))
    assert r.status == 200, r.text
    resp = check_response(r.body, req["uid"])
    assert resp["allowed"] is False and "patch" not in resp
    assert resp["status"]["code"] == 504
    assert "within its 0.005 s admission deadline" in resp["status"]["message"]
    metrics = await h.metrics()
    assert 'taugate_admission_deadline_exceeded_total{webhook="/mutate"} 1.0' in metrics
    assert 'decision="deadline",kind="RayJob",operation="CREATE",webhook="/mutate"} 1.0' in metrics


async def test_the_default_deadline_is_shorter_than_the_webhook_timeout(gate):
    assert gate.server.settings.admission_deadline_seconds == 2.0 < 3


async def _post_in_two_parts(h, cert_dir, body: bytes, *, first: int, pause: float,
                             send_rest: bool) -> tuple[int, bytes]:
    """POST ``body`` to /mutate over TLS: the headers and ``first`` bytes, then after ``pause``
    seconds the rest (or nothing); the HTTP status and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", h.running.port,
                                                   ssl=client_context(cert_dir / "ca.crt"),
                                                   server_hostname=SERVICE_NAME)
    head = (f"POST /mutate HTTP/1.1\r\nHost: {SERVICE_NAME}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    writer.write(head + body[:first])
    await writer.drain()
    await asyncio.sleep(pause)
    if send_rest:
        writer.write(body[first:])
        await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    answer = await asyncio.wait_for(reader.readexactly(length), 10)
    writer.close()
    return int(head.split()[1]), answer


async def test_a_body_arriving_in_two_parts_within_the_deadline_is_decided(start_server, cert_dir, rayjob):
    h = await start_server(settings_=Settings(admission_deadline_seconds=2.0))
    req = workload_request(rayjob)
    status, body = await _post_in_two_parts(h, cert_dir, json.dumps(admission_review(req)).encode(),
                                            first=100, pause=0.2, send_rest=True)
    assert status == 200
    resp = check_response(json.loads(body), req["uid"])
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"


async def test_a_body_that_never_arrives_whole_is_http_408_after_the_deadline_and_its_grace(start_server, cert_dir,
                                                                                        rayjob):
    h = await start_server(settings_=Settings(admission_deadline_seconds=0.2))
    started = time.monotonic()
    status, body = await _post_in_two_parts(h, cert_dir,
                                            json.dumps(admission_review(workload_request(rayjob))).encode(),
                                            first=100, pause=0, send_rest=False)
    waited = time.monotonic() - started
    assert status == 408
    assert "not received within 1.2 s" in json.loads(body)["error"]
    assert 0.2 + READ_GRACE_SECONDS - 0.1 <= waited < 0.2 + READ_GRACE_SECONDS + 2
    assert 'decision="timeout"' in await h.metrics()
