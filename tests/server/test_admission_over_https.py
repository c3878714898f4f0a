"""AdmissionReviews over real HTTPS, answered as kube-apiserver expects: reviews shaped like the
Kubernetes documentation's examples, requests in kube-apiserver's shape for Deployments, Pods, PVCs,
Namespaces and Jobs, k8s.io/api's own AdmissionReview fixture, and RayJobs in workspace ``vision``
of examples/cluster.yaml, with the returned JSONPatch applied by ``jsonpatch``."""

from __future__ import annotations

import copy
import json
import re

import pytest

from taugate import labels
from taugate.webhook.routes import ROUTES
from tests.crdschema import crd_errors
from tests.paths import RAYJOB_CRD
from tests.server.conftest import APISERVER_REQUESTS, K8S_API_TESTDATA, K8S_DOCS
from tests.server.https import RESPONSE_KEYS, admission_review, apply, check_response, patch_of, workload_request

RUN_ID = re.compile(r"^[0-9a-f]{24}$")


def _templates(obj: dict) -> list[dict]:
    spec = obj["spec"]["rayClusterSpec"]
    return [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]


@pytest.mark.parametrize("name", sorted(p.name for p in K8S_DOCS.glob("response-*.json")))
def test_the_response_checker_accepts_the_kubernetes_documentation_examples(name):
    doc = json.loads((K8S_DOCS / name).read_text())
    resp = check_response(doc, "<value from request.uid>", denial_needs_reason=False)
    if "patch" in resp:
        assert patch_of(resp) == [{"op": "add", "path": "/spec/replicas", "value": 3}]


async def test_the_documented_scale_subresource_review_is_allowed_untouched_on_every_route(gate):
    review = json.loads((K8S_DOCS / "request-scale-subresource-update.json").read_text())
    uid = review["request"]["uid"]
    for route in ROUTES:
        r = await gate.post(route.path, review)
        assert r.status == 200, (route.path, r.text)
        resp = check_response(r.body, uid)
        assert resp == {"uid": uid, "allowed": True}


def test_the_response_checker_knows_every_field_of_k8s_ios_admission_response():
    fixture = json.loads((K8S_API_TESTDATA / "admission.k8s.io.v1.AdmissionReview.json").read_text())
    assert set(fixture["response"]) == RESPONSE_KEYS


async def test_k8s_ios_admission_review_fixture_with_every_request_field_set_is_answered_on_every_route(gate):
    """k8s.io/api's round-trip fixture sets every AdmissionRequest field with placeholder values
    (``operation: operationValue``, a custom type in namespace ``namespaceValue``): as sent, each
    route answers HTTP 400 naming the bad operation; with each real operation, allowed untouched."""
    fixture = json.loads((K8S_API_TESTDATA / "admission.k8s.io.v1.AdmissionReview.json").read_text())
    review = {"apiVersion": fixture["apiVersion"], "kind": fixture["kind"], "request": fixture["request"]}
    for route in ROUTES:
        r = await gate.post(route.path, review)
        assert r.status == 400, (route.path, r.text)
        assert "request.operation: is a string ('operationValue')" in r.body["error"], (route.path, r.text)
        for operation in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
            r = await gate.post(route.path, {**review, "request": {**review["request"], "operation": operation}})
            assert r.status == 200, (route.path, operation, r.text)
            assert check_response(r.body, "uidValue") == {"uid": "uidValue", "allowed": True}


def _apiserver_reviews():
    out = []
    for path in sorted(APISERVER_REQUESTS.glob("*.json")):
        doc = json.loads(path.read_text())
        review = doc if doc.get("kind") == "AdmissionReview" else admission_review(doc)
        out.append(pytest.param(review, id=path.stem))
    return out


APISERVER_REVIEWS = _apiserver_reviews()


def test_the_apiserver_requests_hold_bare_requests_and_full_reviews_of_every_operation():
    wrapped = [p for p in APISERVER_REQUESTS.glob("*.json") if '"request"' in p.read_text()[:200]]
    assert len(APISERVER_REVIEWS) == 9 and wrapped
    assert {p.values[0]["request"]["operation"] for p in APISERVER_REVIEWS} == {"CREATE", "UPDATE", "DELETE"}


@pytest.mark.parametrize("review", APISERVER_REVIEWS)
async def test_apiserver_requests_outside_workspaces_are_allowed_untouched(gate, review):
    """Deployments, Pods, PVCs, Namespaces and Jobs in non-workspace namespaces: CREATE, UPDATE
    and DELETE; every route answers allowed, uid echoed, no patch."""
    for route in ROUTES:
        r = await gate.post(route.path, review)
        assert r.status == 200, r.text
        resp = check_response(r.body, review["request"]["uid"])
        assert resp["allowed"] and "patch" not in resp, (route.path, resp)


async def test_a_minimal_job_create_moved_into_a_workspace_is_decided_in_one_call(gate):
    request = json.loads((APISERVER_REQUESTS / "job-create-minimal.json").read_text())
    request["namespace"] = "vision"
    job = request["object"]
    # The captured Job sets no cpu/memory requests: the one workload webhook says so, per field.
    r = await gate.post("/mutate", admission_review(request))
    resp = check_response(r.body, request["uid"])
    assert not resp["allowed"] and resp["status"]["code"] == 403
    assert "[requests-required] spec.template.spec.containers[0].resources.requests.cpu" in resp["status"]["message"]
    for c in job["spec"]["template"]["spec"]["containers"]:
        c.setdefault("resources", {})["requests"] = {"cpu": "1", "memory": "1Gi"}
    r = await gate.post("/mutate", admission_review(request))
    resp = check_response(r.body, request["uid"])
    assert resp["allowed"], resp
    mutated = apply(job, resp)
    assert mutated["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert mutated["spec"]["suspend"] is True
    assert RUN_ID.match(mutated["spec"]["template"]["metadata"]["labels"][labels.RUN_ID])


async def test_a_rayjob_with_generate_name_and_no_labels_gets_a_patch_that_yields_a_valid_queued_rayjob(gate, rayjob):
    request = workload_request(rayjob)
    r = await gate.post("/mutate", admission_review(request))
    resp = check_response(r.body, request["uid"])
    ops = patch_of(resp)
    assert {"op": "add", "path": "/metadata/labels"} in [{k: op[k] for k in ("op", "path")} for op in ops]
    out = apply(rayjob, resp)
    meta = out["metadata"]
    assert meta["generateName"] == "resnet-finetune-" and "name" not in meta
    assert meta["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert meta["labels"][labels.WORKSPACE] == "vision"
    run_id = meta["labels"][labels.RUN_ID]
    assert RUN_ID.match(run_id)
    assert all(t["metadata"]["labels"][labels.RUN_ID] == run_id for t in _templates(out))
    assert out["spec"]["suspend"] is True
    assert crd_errors(out, RAYJOB_CRD) == []
    # Reinvocation on our own output changes nothing: no patch, no patchType.
    again = workload_request(out)
    r = await gate.post("/mutate", admission_review(again))
    assert check_response(r.body, again["uid"]) == {"uid": again["uid"], "allowed": True}
    # The validating webhook admits the final object.
    r = await gate.post("/validate", admission_review(again))
    assert check_response(r.body, again["uid"])["allowed"]


def _masked(ops: list[dict]) -> str:
    # the run-id, also inside the admission record's JSON
    hex24 = r"(?<![0-9a-f])[0-9a-f]{24}(?![0-9a-f])"
    return RUN_ID.sub("RUN-ID", re.sub(hex24, "RUN-ID", json.dumps(ops, sort_keys=True)))


async def test_a_dry_run_request_gets_the_same_answer(gate, rayjob):
    real, dry = workload_request(rayjob), workload_request(rayjob, dry_run=True)
    r_real = check_response((await gate.post("/mutate", admission_review(real))).body, real["uid"])
    r_dry = check_response((await gate.post("/mutate", admission_review(dry))).body, dry["uid"])
    assert set(r_real) == set(r_dry) and r_real["allowed"] == r_dry["allowed"]
    assert _masked(patch_of(r_real)) == _masked(patch_of(r_dry))  # only the freshly minted run-id differs
    bad = copy.deepcopy(rayjob)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "16"},
        "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "16"}}
    answers = []
    for dry_run in (False, True):
        req = workload_request(bad, dry_run=dry_run)
        answers.append(check_response((await gate.post("/validate", admission_review(req))).body, req["uid"]))
    assert answers[0]["allowed"] is answers[1]["allowed"] is False
    assert answers[0]["status"] == answers[1]["status"]


async def test_a_status_subresource_update_is_allowed_untouched(gate, rayjob):
    obj = copy.deepcopy(rayjob)
    obj["metadata"]["name"] = "resnet-finetune-x7k2p"
    obj["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
    old = copy.deepcopy(obj)
    old["status"] = {"jobDeploymentStatus": "Initializing"}
    request = workload_request(obj, operation="UPDATE", old=old, sub_resource="status",
                               username="system:serviceaccount:ray-system:kuberay-operator")
    for path in ("/mutate", "/validate"):
        r = await gate.post(path, admission_review(request))
        assert check_response(r.body, request["uid"]) == {"uid": request["uid"], "allowed": True}


async def test_delete_and_connect_are_allowed_untouched(gate, rayjob):
    old = copy.deepcopy(rayjob)
    old["metadata"]["name"] = "resnet-finetune-x7k2p"
    delete = workload_request(None, operation="DELETE", old=old)
    exec_kind = {"group": "", "version": "v1", "kind": "PodExecOptions"}
    connect = {"uid": "c0ffee00-0000-4000-8000-000000000002", "kind": exec_kind, "requestKind": exec_kind,
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "exec",
               "name": "resnet-finetune-x7k2p-head-abcde", "namespace": "vision", "operation": "CONNECT",
               "userInfo": {"username": "alice@example.com"},
               "object": {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["nvidia-smi"], "stdout": True}}
    for request in (delete, connect):
        for path in ("/mutate", "/validate"):
            r = await gate.post(path, admission_review(request))
            assert check_response(r.body, request["uid"]) == {"uid": request["uid"], "allowed": True}


async def test_an_update_keeps_the_run_id_of_the_old_object(gate, rayjob):
    created = workload_request(rayjob)
    admitted = apply(rayjob, check_response((await gate.post("/mutate", admission_review(created))).body,
                                            created["uid"]))
    admitted["metadata"]["name"] = "resnet-finetune-x7k2p"
    run_id = admitted["metadata"]["labels"][labels.RUN_ID]
    # The user re-applies their manifest: labels rewritten without the run-id, one label changed.
    updated = copy.deepcopy(admitted)
    updated["metadata"]["labels"] = {k: v for k, v in updated["metadata"]["labels"].items() if k != labels.RUN_ID}
    updated["metadata"]["labels"]["example.com/stage"] = "tuning"
    request = workload_request(updated, operation="UPDATE", old=admitted)
    resp = check_response((await gate.post("/mutate", admission_review(request))).body, request["uid"])
    out = apply(updated, resp)
    assert out["metadata"]["labels"][labels.RUN_ID] == run_id
    assert out["metadata"]["labels"]["example.com/stage"] == "tuning"
    # And a change of the run-id is undone, not accepted.
    forged = copy.deepcopy(admitted)
    forged["metadata"]["labels"][labels.RUN_ID] = "0" * 24
    request = workload_request(forged, operation="UPDATE", old=admitted)
    resp = check_response((await gate.post("/mutate", admission_review(request))).body, request["uid"])
    assert apply(forged, resp)["metadata"]["labels"][labels.RUN_ID] == run_id


async def test_label_keys_with_slash_and_tilde_survive_the_json_pointer_escaping(gate, rayjob):
    user_labels = {"example.com/team": "perception", "odd~key": "x", "a/b~c": "y", "plain": "z"}
    rayjob["metadata"]["labels"] = dict(user_labels)
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    worker["metadata"] = {"labels": {"example.com/role~gpu": "worker"}}
    request = workload_request(rayjob)
    resp = check_response((await gate.post("/mutate", admission_review(request))).body, request["uid"])
    paths = [op["path"] for op in patch_of(resp)]
    assert "/metadata/labels/tau.azure.com~1run-id" in paths  # "/" in a key is "~1" in a JSON pointer
    out = apply(rayjob, resp)
    for k, v in user_labels.items():
        assert out["metadata"]["labels"][k] == v
    assert out["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"][
        "example.com/role~gpu"] == "worker"
    assert RUN_ID.match(out["metadata"]["labels"][labels.RUN_ID])
    assert not [k for k in out["metadata"]["labels"] if "~0" in k or "~1" in k]


async def test_a_gpu_request_no_node_can_hold_is_denied_with_every_problem_listed(gate, rayjob):
    res = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "16"
    request = workload_request(rayjob)
    resp = check_response((await gate.post("/validate", admission_review(request))).body, request["uid"])
    assert not resp["allowed"] and resp["status"]["code"] == 403
    message = resp["status"]["message"]
    assert "[gpu-per-pod-fits-node]" in message and "largest h100 node has 8 allocatable GPUs" in message
    assert 'workerGroupSpecs[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]' in message


async def test_a_quota_request_approved_by_its_own_author_is_refused_on_the_tau_route(gate):
    obj = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauQuotaRequest",
           "metadata": {"name": "more-h100", "namespace": "tau-platform",
                        "annotations": {labels.APPROVED: "true", labels.REVIEWED_BY: "alice@example.com"}},
           "spec": {"workspace": "vision", "resource": "nvidia.com/gpu", "requested": 16, "reason": "sweep"}}
    gvk = {"group": "tau.azure.com", "version": "v1alpha1", "kind": "TauQuotaRequest"}
    request = {"uid": "6b3f6c1e-0000-4000-8000-000000000001", "kind": gvk, "requestKind": gvk,
               "resource": {"group": "tau.azure.com", "version": "v1alpha1", "resource": "quotarequests"},
               "namespace": "tau-platform", "name": "more-h100", "operation": "CREATE",
               "userInfo": {"username": "alice@example.com", "groups": ["vision-researchers"]}, "object": obj}
    r = await gate.post("/validate-tau", admission_review(request))
    assert r.status == 200, r.text
    resp = check_response(r.body, request["uid"])
    assert not resp["allowed"]


async def test_a_warn_policy_admits_and_returns_its_message_in_warnings(gate, rayjob):
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    head["requests"]["nvidia.com/gpu"] = head["limits"]["nvidia.com/gpu"] = "1"  # head-without-gpu: warn
    rayjob["spec"]["shutdownAfterJobFinishes"] = True  # as the mutating webhook leaves it
    request = workload_request(rayjob)
    resp = check_response((await gate.post("/validate", admission_review(request))).body, request["uid"])
    assert resp["allowed"] and "status" not in resp
    assert [w for w in resp["warnings"] if w.startswith("[head-without-gpu] spec.rayClusterSpec.headGroupSpec")]
