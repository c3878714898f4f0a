"""A fuzzer over real KubeRay and Kueue samples (hypothesis): each example is a sample workload
with one to four fields changed (another JSON value of any type, a removed field, a value at the
edge: "-1", "1m", 2^31, 2^63, a deep nesting), admitted as a CREATE review through the mutating
then the validating webhook. Asserted for every answer:

- HTTP 200 and a valid admission.k8s.io/v1 AdmissionReview for the request's uid (never 5xx:
  ``status.code`` below 500, so no internal error, no policy failure);
- a patch applies (``jsonpatch``) and is idempotent: mutating the patched object again gives no
  patch;
- no user field is changed but ``spec.suspend`` and the fields taugate sets with a Warning saying
  so (a RayJob's ``spec.shutdownAfterJobFinishes``, ``taugate/kinds/rayjob.py``): the patched
  object holds every other field of the original with the same value (taugate only adds its
  labels, placement and queue).

Part of the budget runs over HTTPS against a real ``taugate serve`` process, the rest in process
through the same functions the server calls. Bounded for the normal test run (about 60 s in
all); ``TAUGATE_FUZZ_SCALE=10`` runs ten times as many examples. Examples are derandomized so a
failure reproduces; hypothesis prints the minimal failing object."""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import os
import socket
import time

import jsonpatch
import orjson
import pytest
import yaml
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from taugate.cli.admit import load_engine
from taugate.settings import Settings
from taugate.snapshot import load_snapshot
from taugate.webhook import review
from tests.paths import DATA, EXAMPLE_CLUSTER, KUBERAY_SAMPLES, KUEUE_EXAMPLES
from tests.server.https import SERVICE_NAME, admission_review, check_response, client_context, workload_request
from tests.server.process import serve, startup_lines

WORKLOAD_KINDS = {"RayJob", "RayCluster", "Job"}
SCALE = float(os.environ.get("TAUGATE_FUZZ_SCALE", "1"))


def _corpus() -> list[dict]:
    out = []
    for root in (KUBERAY_SAMPLES, KUEUE_EXAMPLES, DATA / "kueue"):
        for path in sorted(root.rglob("*.yaml")):
            try:
                docs = list(yaml.safe_load_all(path.read_text()))
            except yaml.YAMLError:
                continue
            out += [d for d in docs if isinstance(d, dict) and d.get("kind") in WORKLOAD_KINDS
                    and isinstance(d.get("metadata"), dict)]
    return out


CORPUS = _corpus()
HOT = ("replicas", "minReplicas", "maxReplicas", "numOfHosts", "parallelism", "completions", "suspend",
       "nvidia.com/gpu", "num-gpus", "affinity", "tolerations", "nodeSelector", "labels", "annotations",
       "containers", "resources", "limits", "requests", "rayStartParams", "template", "metadata", "spec",
       "workerGroupSpecs", "headGroupSpec", "ownerReferences", "priorityClassName", "values", "key", "operator")

EDGES = ["1", "0", "-1", "-5", "1m", "0.5", "1e30", "8Gi", "h100", "NaN", "2147483648", "", " 1", "true"]
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, -1]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12), st.sampled_from(EDGES))
values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


POD_FIELDS = [
    ("affinity", lambda v: v),
    ("affinity", lambda v: {"nodeAffinity": v}),
    ("affinity",
     lambda v: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": v}}}),
    ("affinity", lambda v: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": v}]}]}}}),
    ("affinity", lambda v: {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": v, "preference": {"matchExpressions": [{"key": "tau.azure.com/gpu-class", "operator": "In",
                                                           "values": ["h100"]}]}}]}}),
    ("tolerations", lambda v: v),
    ("tolerations", lambda v: [v]),
    ("tolerations", lambda v: [{"key": v, "operator": "Exists"}]),
    ("tolerations", lambda v: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": v, "tolerationSeconds": v}]),
    ("nodeSelector", lambda v: v),
    ("nodeSelector", lambda v: {"tau.azure.com/gpu-class": v}),
    ("priorityClassName", lambda v: v),
]
"""Pod template fields that placement and the policies read, written with a fuzzed value."""


def _paths(value, path=()):
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(path + (k,))
            out += _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append(path + (i,))
            out += _paths(v, path + (i,))
    return out


def _nested(levels: int) -> dict:
    v: dict = {}
    for _ in range(levels):
        v = {"a": v}
    return v


@st.composite
def workloads(draw) -> dict:
    """A sample workload in a workspace namespace (sometimes not) with 1-4 fields changed."""
    obj = copy.deepcopy(draw(st.sampled_from(CORPUS)))
    obj["metadata"]["namespace"] = draw(st.sampled_from(["vision", "vision", "vision", "nlp", "default"]))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(obj) if p not in (("apiVersion",), ("kind",), ("metadata",),
                                                     ("metadata", "namespace"))]
        hot = [p for p in paths if p[-1] in HOT]
        if not paths:
            break
        path = draw(st.sampled_from(hot if hot and draw(st.booleans()) else paths))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["value", "value", "value", "remove", "nest", "pod", "pod"]))
        pod_specs = [p for p in _paths(obj) if p[-2:] == ("template", "spec") or p == ("spec", "template", "spec")]
        if action == "pod" and pod_specs:  # a field placement reads, absent from most samples
            spec = obj
            for key in draw(st.sampled_from(pod_specs)):
                spec = spec[key]
            if isinstance(spec, dict):
                field, shaped = draw(st.sampled_from(POD_FIELDS))
                spec[field] = shaped(draw(values))
            continue
        if action == "remove":
            del parent[path[-1]]
        elif action == "nest":
            parent[path[-1]] = _nested(draw(st.integers(90, 240)))
        else:
            parent[path[-1]] = draw(values)
    try:  # what the API server can send: JSON (orjson stops at 255 levels, as a review would)
        orjson.dumps(admission_review({"object": obj}))
    except TypeError:
        assume(False)
    return obj


def _contains(orig, new, path=(), warned=()) -> str | None:
    """Where ``new`` lost or changed a field of ``orig`` (``spec.suspend`` may change, and so may a
    field whose dotted path a Warning of ``warned`` names as set by taugate; a null field is an
    absent one, as the API server stores it, so taugate may fill it); None."""
    if path == ("spec", "suspend") or orig is None:
        return None
    if path and any(w.startswith(f"taugate set {'.'.join(map(str, path))}: ") for w in warned):
        return None
    if isinstance(orig, dict):
        if not isinstance(new, dict):
            return f"{path}: an object became {type(new).__name__}"
        for k, v in orig.items():
            if k not in new:
                return f"{path + (k,)}: removed"
            found = _contains(v, new[k], path + (k,), warned)
            if found:
                return found
        return None
    if isinstance(orig, list):
        if not isinstance(new, list) or len(new) < len(orig):
            return f"{path}: a list shrank or changed type"
        for i, v in enumerate(orig):
            found = _contains(v, new[i], path + (i,), warned)
            if found:
                return found
        return None
    if orig != new or type(orig) is not type(new):
        return f"{path}: {orig!r} became {new!r}"
    return None


def _patch(resp: dict) -> list | None:
    return json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else None


def _request(obj: dict) -> dict:
    """The CREATE AdmissionRequest the API server would send: ``request.name`` is the
    object's name when it is a string (the API server fills it), else empty."""
    req = workload_request(obj, namespace=obj["metadata"]["namespace"])
    name = (obj.get("metadata") or {}).get("name")
    req["name"] = name if isinstance(name, str) else ""
    return req


def check_round(decide, obj: dict) -> None:
    """Mutate ``obj`` then validate the result, through ``decide(path, review) -> (status, body)``,
    asserting the invariants of the module docstring."""
    req = _request(obj)
    status, body = decide("/mutate", admission_review(req))
    assert status == 200, (status, body)
    resp = check_response(body, req["uid"])
    assert (resp.get("status") or {}).get("code", 200) < 500, resp
    ops = _patch(resp)
    if ops is None:
        if resp["allowed"]:  # the API server then calls the validating webhook on the object as sent
            final = _request(obj)
            status, body = decide("/validate", admission_review(final))
            assert status == 200, (status, body)
            assert (check_response(body, final["uid"]).get("status") or {}).get("code", 200) < 500, body
        return
    patched = jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    changed = _contains(obj, patched, warned=resp.get("warnings") or ())
    assert changed is None, f"a user field changed: {changed}; patch {ops}"
    again = _request(patched)
    status, body = decide("/mutate", admission_review(again))
    resp2 = check_response(body, again["uid"])
    assert status == 200 and resp2["allowed"] and "patch" not in resp2, ("not idempotent", _patch(resp2))
    final = _request(patched)
    status, body = decide("/validate", admission_review(final))
    assert status == 200, (status, body)
    assert (check_response(body, final["uid"]).get("status") or {}).get("code", 200) < 500, body


FUZZ = hsettings(deadline=None, derandomize=True, database=None, print_blob=True,
                 suppress_health_check=list(HealthCheck))


# --- in process ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def in_process():
    s = Settings()
    state = load_snapshot(EXAMPLE_CLUSTER, s)
    engine = load_engine(type("A", (), {"no_policies": False, "policies": None, "enforcement": None})(), s)
    deciders = {"/mutate": lambda req: review.mutate(req, state, s, engine, in_place=True),
                "/validate": lambda req: review.validate(req, state, s, engine)}

    def decide(path: str, body: dict):
        raw = orjson.dumps(body)  # what the server receives and parses
        try:
            rev = review.parse_review(raw)
        except review.ReviewError as e:
            return 400, {"error": str(e)}
        return 200, orjson.loads(orjson.dumps(review.review_response(rev, deciders[path](rev["request"]))))

    return decide


def test_fuzzed_samples_in_process_are_answered_correctly(in_process):
    assert len(CORPUS) >= 40
    started = time.monotonic()

    @hsettings(FUZZ, max_examples=int(3000 * SCALE))
    @given(workloads())
    def run(obj):
        check_round(in_process, obj)

    run()
    assert time.monotonic() - started < 120 * SCALE


# --- over HTTPS against a real taugate serve -------------------------------------------------

class _Connection(http.client.HTTPSConnection):
    """Keep-alive HTTPS to 127.0.0.1 verified for the Service name, as the API server connects."""

    def __init__(self, port: int, ca):
        super().__init__("127.0.0.1", port, timeout=30)
        self._ctx = client_context(ca)

    def connect(self):
        self.sock = self._ctx.wrap_socket(socket.create_connection((self.host, self.port), self.timeout),
                                          server_hostname=SERVICE_NAME)


@pytest.fixture(scope="module")
def over_https():
    proc = serve("--cluster", str(EXAMPLE_CLUSTER), "--port", "0", "--deadline", "30")
    try:
        port, ca = asyncio.run(startup_lines(proc))
        conn = _Connection(port, ca)

        def decide(path: str, body: dict):
            conn.request("POST", path, body=orjson.dumps(body), headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            return r.status, json.loads(data)

        yield decide
        conn.close()
    finally:
        err = proc.stop()
        assert "Traceback" not in err, err[-3000:]


def test_fuzzed_samples_over_https_are_answered_correctly(over_https):
    @hsettings(FUZZ, max_examples=int(300 * SCALE))
    @given(workloads())
    def run(obj):
        check_round(over_https, obj)

    run()
