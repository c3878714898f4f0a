"""GPUs asked through Dynamic Resource Allocation and the other paths of docs/gpu-paths.md, through
the whole stack (``tests/e2e/stack``): Kubernetes v1.37's DRA (resource.k8s.io/v1, DRA extended
resources GA), kube-scheduler allocating from the ResourceSlices NVIDIA's DRA driver would publish
for the H100 Nodes (``stack.dra_objects``), Kueue v0.17 with its DynamicResourceAllocation and
DRAExtendedResources gates mapping ``gpu.nvidia.com`` onto ``nvidia.com/gpu``
(``stack.KUEUE_DRA_RESOURCES``), and taugate installed with the chart value
``gpu.draWorkloads: queue``. Everything is created with kubectl, as a researcher would.

The module deletes what it made at the end, so the quota and the GPU Nodes are free again for the
other files of the tier.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.stack import DRA_DRIVER, LONG_RUNNING_CONTAINER, Stack
from tests.e2e.workloads import GPU_CLASS_SELECTOR, QUEUE, RUN_ID, WORKSPACE, WORKSPACE_QUEUE
from tests.paths import REPO

H100_NODES = "aks-h100-"
CPU = {"cpu": "1", "memory": "1Gi"}
MADE = "taugate-e2e/gpu-path"
"""The label on everything this module makes (deleted at its end)."""


def _template(name: str, gpus: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": WORKSPACE, "labels": {MADE: "yes"}},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": DRA_DRIVER, "count": gpus}}]}}}}


def _job(name: str, pods: int, template: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": WORKSPACE, "labels": {MADE: "yes"}},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "restartPolicy": "Never",
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                # kwok completes a Job's pods at once, unless their first container is this one
                "containers": [{"name": LONG_RUNNING_CONTAINER, "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                                "command": ["python", "train.py"],
                                "resources": {"requests": CPU, "limits": CPU, "claims": [{"name": "gpus"}]}}]}}}}


def _pod(name: str, spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": WORKSPACE, "labels": {MADE: "yes"}},
            "spec": {"restartPolicy": "Never", **spec}}


def _create(stack: Stack, obj: dict, check: bool = True):
    return stack.cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj), check=check)


def _create_together(stack: Stack, *objects: dict) -> list[dict]:
    """``kubectl create -f`` of one file holding ``objects`` in order (a claim template, then the
    workload naming it, back to back: taugate reads a template its watch has not delivered yet)."""
    text = _create(stack, {"apiVersion": "v1", "kind": "List", "items": list(objects)}).stdout
    out, at, decoder = [], 0, json.JSONDecoder()
    while text[at:].strip():  # kubectl prints each created object as its own JSON document
        obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        out.append(obj)
        at = end
    return out


def _workload_of(stack: Stack, kind: str, name: str) -> dict | None:
    for w in stack.cp.get_json("workloads.kueue.x-k8s.io", "-n", WORKSPACE)["items"]:
        if any(r["kind"] == kind and r["name"] == name for r in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def _admitted_gpus(w: dict | None) -> int | None:
    """The nvidia.com/gpu Kueue reserved for workload ``w`` when it is admitted, else None."""
    admission = ((w or {}).get("status") or {}).get("admission")
    if not admission:
        return None
    return sum(int(a.get("resourceUsage", {}).get("nvidia.com/gpu", "0")) for a in admission["podSetAssignments"])


def _bound_pods(stack: Stack, selector: str, count: int) -> list[dict] | None:
    pods = stack.cp.get_json("pods", "-n", WORKSPACE, "-l", selector)["items"]
    bound = [p for p in pods if p["spec"].get("nodeName")]
    return bound if len(bound) == count else None


@pytest.fixture(scope="module")
def stack(whole_stack):
    """The whole stack, and at the end everything this module made deleted, its pods gone."""
    try:
        yield whole_stack
    finally:
        cp = whole_stack.cp
        cp.kubectl("delete", "jobs,pods,resourceclaimtemplates", "-n", WORKSPACE, "-l", f"{MADE}=yes",
                   "--ignore-not-found", "--wait=true", "--cascade=foreground", timeout=180, check=False)


def test_a_dra_job_is_queued_admitted_by_kueue_against_the_gpu_quota_and_bound_to_h100_nodes(stack):
    cp = stack.cp
    _, stored = _create_together(stack, _template("four-gpus", 4), _job("dra-train", 2, "four-gpus"))
    assert stored["metadata"]["labels"][QUEUE] == WORKSPACE_QUEUE
    assert stored["metadata"]["labels"]["tau.azure.com/workload-profile"] == "h100-4gpu"
    assert stored["spec"]["template"]["spec"]["nodeSelector"][GPU_CLASS_SELECTOR] == "h100"
    assert stored["spec"]["template"]["metadata"]["labels"][RUN_ID] == stored["metadata"]["labels"][RUN_ID]
    # Kueue counts the template's 4 GPUs per pod as nvidia.com/gpu (deviceClassMappings), 8 in all.
    w = stack.wait_for("Kueue to admit dra-train", lambda: _admitted_gpus(_workload_of(stack, "Job", "dra-train"))
                       is not None and _workload_of(stack, "Job", "dra-train"), 120)
    assert _admitted_gpus(w) == 8
    # kube-scheduler allocates each pod's claim from its node's ResourceSlice before binding it.
    def allocated() -> list[tuple[dict, dict]] | None:
        pods = _bound_pods(stack, "job-name=dra-train", 2)
        claims = {c["metadata"]["name"]: c for c in cp.get_json("resourceclaims", "-n", WORKSPACE)["items"]}
        pairs = [(p, claims.get(s["resourceClaimName"])) for p in pods or []
                 for s in (p.get("status") or {}).get("resourceClaimStatuses") or []]
        ok = pods and len(pairs) == 2 and all(c and (c.get("status") or {}).get("allocation") for _, c in pairs)
        return pairs if ok else None  # type: ignore[return-value]

    for pod, claim in stack.wait_for("dra-train's 2 pods bound with their claims allocated", allocated, 120):
        assert pod["spec"]["nodeName"].startswith(H100_NODES)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4 and {r["driver"] for r in results} == {DRA_DRIVER}
        assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}


def test_a_pod_asking_gpus_as_a_dra_extended_resource_is_queued_admitted_and_bound_to_an_h100_node(stack):
    resource = f"deviceclass.resource.kubernetes.io/{DRA_DRIVER}"
    pod = _pod("dra-extended", {"containers": [{
        "name": "eval", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "resources": {"requests": {**CPU, resource: "1"}, "limits": {**CPU, resource: "1"}}}]})
    stored = json.loads(_create(stack, pod).stdout)
    assert stored["metadata"]["labels"]["tau.azure.com/workload-profile"] == "h100-1gpu"
    assert {"name": "kueue.x-k8s.io/admission"} in stored["spec"]["schedulingGates"]
    w = stack.wait_for("Kueue to admit dra-extended", lambda: (w := _workload_of(stack, "Pod", "dra-extended"))
                       and _admitted_gpus(w) is not None and w, 120)
    assert _admitted_gpus(w) == 1  # the resource transformation: one nvidia.com/gpu per device
    (bound,) = stack.wait_for("dra-extended to be bound", lambda: _bound_pods(
        stack, f"{RUN_ID}={stored['metadata']['labels'][RUN_ID]}", 1), 120)
    assert bound["spec"]["nodeName"].startswith(H100_NODES)


def test_a_dra_job_over_the_queues_gpu_quota_waits_suspended_for_quota(stack):
    _create_together(stack, _template("four-gpus-big", 4), _job("dra-big", 6, "four-gpus-big"))  # 24 GPUs on top of 9

    def pending_for_quota() -> dict | None:
        w = _workload_of(stack, "Job", "dra-big")
        cond = next((c for c in ((w or {}).get("status") or {}).get("conditions") or []
                     if c["type"] == "QuotaReserved"), {})
        return w if cond.get("status") == "False" and "insufficient" in cond.get("message", "") else None

    w = stack.wait_for("Kueue to leave dra-big pending for GPU quota", pending_for_quota, 120)
    assert "nvidia.com/gpu" in json.dumps(w["status"]["conditions"])
    job = stack.cp.get_json("job", "dra-big", "-n", WORKSPACE)
    assert job["spec"]["suspend"] is True
    assert not stack.cp.get_json("pods", "-n", WORKSPACE, "-l", "job-name=dra-big")["items"]


def test_a_claim_template_for_more_gpus_than_a_pod_may_hold_is_refused_at_create(stack):
    p = _create(stack, _template("sixty-four", 64), check=False)
    assert p.returncode != 0
    assert "asks for 64 GPU(s) of DeviceClass gpu.nvidia.com for one pod; allowed: at most 8" in p.stderr


def test_a_pod_reaching_gpus_through_nvidia_visible_devices_is_refused(stack):
    pod = _pod("sneaky", {
        "nodeSelector": {GPU_CLASS_SELECTOR: "h100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [{"name": "shell", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                        "resources": {"requests": CPU}}]})
    p = _create(stack, pod, check=False)
    assert p.returncode != 0
    assert "[gpu-device-access] spec.containers[0].env[0]" in p.stderr
    assert "NVIDIA_VISIBLE_DEVICES=\"all\"" in p.stderr


def test_a_gpu_pod_sized_by_pod_level_resources_is_admitted_and_queued(stack):
    pod = _pod("pod-level", {"resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2",
                                                                                               "memory": "8Gi"}},
                             "containers": [{"name": "eval", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]})
    stored = json.loads(_create(stack, pod).stdout)
    assert stored["metadata"]["labels"][QUEUE] == WORKSPACE_QUEUE
    assert stored["spec"]["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}


def test_a_privileged_debug_container_on_a_workspace_pod_is_refused(stack):
    p = stack.cp.kubectl("debug", "pod/dra-extended", "-n", WORKSPACE, "--image=busybox", "--profile=sysadmin",
                         "--container=debugger", check=False)
    assert p.returncode != 0
    assert "[gpu-device-access] spec.ephemeralContainers[0].securityContext.privileged" in p.stderr
    plain = stack.cp.kubectl("debug", "pod/dra-extended", "-n", WORKSPACE, "--image=busybox",
                             "--profile=general", "--container=looker")
    assert plain.returncode == 0


def test_the_dra_example_applies_as_written_and_its_job_is_queued_as_four_gpus_per_pod_on_h100(stack):
    """``kubectl apply -f examples/dra-job.yaml`` as the file says: the claim template, then the Job."""
    cp, path = stack.cp, str(REPO / "examples" / "dra-job.yaml")
    try:
        out = cp.kubectl("apply", "-f", path)
        assert out.stdout.split() == ["resourceclaimtemplate.resource.k8s.io/four-h100", "created",
                                      "job.batch/dra-finetune", "created"]
        job = cp.get_json("job", "dra-finetune", "-n", WORKSPACE)
        assert job["metadata"]["labels"][QUEUE] == WORKSPACE_QUEUE
        assert job["metadata"]["labels"]["tau.azure.com/workload-profile"] == "h100-4gpu"
        assert job["spec"]["template"]["spec"]["nodeSelector"][GPU_CLASS_SELECTOR] == "h100"
        w = stack.wait_for("Kueue's Workload of dra-finetune", lambda: _workload_of(stack, "Job", "dra-finetune"), 60)
        (pod_set,) = w["spec"]["podSets"]
        assert pod_set["count"] == 2
    finally:
        cp.kubectl("delete", "-f", path, "--ignore-not-found", "--wait=true", "--cascade=foreground", timeout=180)
