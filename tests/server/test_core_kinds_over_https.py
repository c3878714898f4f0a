"""Bare GPU Pods, Deployments, StatefulSets and unmanaged GPU workloads over real HTTPS, in
workspace ``vision`` of examples/cluster.yaml, as kube-apiserver sends them (the core group's
``kind.group`` is ``""``): the JSONPatch applied by ``jsonpatch`` yields a queued, placed object
the validating route admits; an unmanaged GPU ReplicaSet is refused (or warned, when the
platform's setting says ``warn``)."""

from __future__ import annotations

from taugate import labels
from taugate.kinds import deployment
from taugate.settings import Settings
from tests.admission.test_core_kinds_are_governed_when_they_ask_for_gpus import gpu_deployment, gpu_pod
from tests.admission.test_pods_of_governed_workloads_and_unmanaged_kinds import replicaset
from tests.server.https import admission_review, apply, check_response, patch_of, workload_request

RUN_ID = "0123456789abcdef01234567"


def _with_requests(obj: dict) -> dict:
    """``obj`` with cpu and memory requests on its first container (policy requests-required)."""
    spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    spec["containers"][0]["resources"].setdefault("requests", {}).update(cpu="4", memory="16Gi")
    return obj


async def _admit(gate, obj: dict, **kw) -> tuple[dict, dict]:
    """``/mutate`` then ``/validate`` on the patched object: (the patched object, the validating
    response)."""
    request = workload_request(obj, **kw)
    assert request["kind"]["group"] == ("" if obj["apiVersion"] == "v1" else obj["apiVersion"].split("/")[0])
    r = await gate.post("/mutate", admission_review(request))
    assert r.status == 200, r.text
    out = apply(obj, check_response(r.body, request["uid"]))
    final = workload_request(out, **kw)
    r = await gate.post("/validate", admission_review(final))
    assert r.status == 200, r.text
    return out, check_response(r.body, final["uid"])


async def test_a_bare_gpu_pod_is_queued_placed_and_admitted_over_https(gate):
    out, verdict = await _admit(gate, _with_requests(gpu_pod(1)))
    assert verdict["allowed"], verdict
    assert out["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert out["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"
    assert "suspend" not in out["spec"]


async def test_a_gpu_deployments_pods_carry_the_placement_and_the_queue_over_https(gate):
    out, verdict = await _admit(gate, _with_requests(gpu_deployment(2, 1)))
    assert verdict["allowed"], verdict
    template = out["spec"]["template"]
    assert template["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert template["metadata"]["annotations"][deployment.KUEUE_SUSPENDING_PARENT] == "deployment"
    assert template["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"
    assert template["metadata"]["labels"][labels.RUN_ID] == out["metadata"]["labels"][labels.RUN_ID]


async def test_a_cpu_only_pod_gets_no_patch_over_https(gate):
    pod = gpu_pod()
    del pod["spec"]["containers"][0]["resources"]
    request = workload_request(pod)
    r = await gate.post("/mutate", admission_review(request))
    assert patch_of(check_response(r.body, request["uid"])) is None


async def test_a_child_pod_created_by_the_job_controller_is_not_queued_again_over_https(gate):
    child = gpu_pod(8)
    child["metadata"]["labels"] = {labels.RUN_ID: RUN_ID}
    child["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                             "uid": "u-1", "controller": True}]
    out, verdict = await _admit(gate, child, username="system:serviceaccount:kube-system:job-controller")
    assert verdict["allowed"] and out == child


async def test_an_unmanaged_gpu_replicaset_is_refused_over_https_and_warned_when_the_platform_allows_it(
        gate, start_server):
    request = workload_request(replicaset())
    r = await gate.post("/validate", admission_review(request))
    resp = check_response(r.body, request["uid"])
    assert not resp["allowed"] and resp["status"]["code"] == 403
    assert "[unmanaged-kind] spec.template: a ReplicaSet asks for GPUs" in resp["status"]["message"]
    lenient = await start_server(settings_=Settings(unmanaged_gpu_workloads="warn"))
    r = await lenient.post("/validate", admission_review(request))
    resp = check_response(r.body, request["uid"])
    assert resp["allowed"] and resp["warnings"][0].startswith("[unmanaged-kind] spec.template: a ReplicaSet")


async def test_gpus_reached_without_a_request_or_through_an_unknown_claim_template_are_refused_over_https(gate):
    sneaky = gpu_pod()
    container = sneaky["spec"]["containers"][0]
    del container["resources"]
    container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    dra = _with_requests(gpu_pod())
    del dra["spec"]["containers"][0]["resources"]["limits"]
    dra["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    for obj, field in ((sneaky, "spec.containers[0].env[0]"),
                       (dra, "spec.resourceClaims[0].resourceClaimTemplateName")):
        for path in ("/mutate", "/validate"):
            request = workload_request(obj)
            r = await gate.post(path, admission_review(request))
            resp = check_response(r.body, request["uid"])
            assert not resp["allowed"] and resp["status"]["code"] == 403, (path, resp)
            assert field in resp["status"]["message"], resp["status"]["message"]
