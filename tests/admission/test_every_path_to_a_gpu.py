"""Every way a pod in a workspace can reach a GPU is queued and placed, or refused with the way
that works (docs/gpu-paths.md): Kubernetes' own DRA objects (the scheduler's DRA benchmark
templates from the pinned k8s.io/kubernetes module, DeviceClass ``test-class`` taken as a GPU
class), k8s.io/api's fully populated ResourceClaimTemplate, other vendors' device-plugin
resources, device access without a request, and pod-level requests. Through ``review.admit``,
the webhook's own code path, and the real CLI."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from taugate import labels
from taugate.devices import claim_devices
from taugate.settings import Settings
from taugate.snapshot import build_state, load_snapshot
from taugate.webhook import review
from tests.paths import EXAMPLE_CLUSTER, K8S_API, K8S_DRA_TEMPLATES, REPO

NS = "vision"


def upstream(name: str, **values: str) -> dict:
    """One of Kubernetes' DRA benchmark objects, its ``{{.Index}}``-style placeholders filled in."""
    text = (K8S_DRA_TEMPLATES / name).read_text()
    for key, value in {"Index": "0", **values}.items():
        text = text.replace("{{." + key + "}}", value)
    doc = yaml.safe_load(text)
    doc["metadata"]["namespace"] = NS
    doc["metadata"].pop("generateName", None)
    doc["metadata"].setdefault("name", "test-dra")
    return doc


def state_with(*objects: dict):
    return build_state([*yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()), *objects], Settings())


def settings(**kw) -> Settings:
    return Settings(gpu_device_classes=("test-class",), **kw)


def with_requests(pod: dict) -> dict:
    """The upstream pod with cpu and memory requests (policy requests-required) and a name."""
    pod = copy.deepcopy(pod)
    for c in pod["spec"]["containers"]:
        c.setdefault("resources", {}).setdefault("requests", {}).update(cpu="1", memory="1Gi")
    return pod


CLASS = upstream("deviceclass.yaml")
NO_DEVICES = upstream("deviceclass-no-devices.yaml")
TEMPLATE = upstream("resourceclaimtemplate-for-two-devices.yaml")
POD = with_requests(upstream("pod-with-claim-template.yaml"))


def four_gpu_template() -> dict:
    """Kubernetes' two-device claim template asking for four (the vision workspace's profiles are
    1, 4 and 8 GPUs per pod)."""
    t = copy.deepcopy(TEMPLATE)
    t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    return t


def messages(decision) -> str:
    return decision.message or ""


def test_a_pod_asking_for_gpus_through_a_claim_template_is_refused_while_dra_is_not_queued():
    d = review.admit(POD, state=state_with(CLASS, TEMPLATE), settings=settings())
    assert not d.allowed
    assert "[gpu-dra] spec.resourceClaims[0].resourceClaimTemplateName" in messages(d)
    assert "asks for 2 GPU(s) of DeviceClass test-class" in messages(d)
    assert "gpu.draWorkloads: queue" in messages(d)


def test_a_pod_asking_for_gpus_through_a_claim_template_is_queued_and_placed_when_dra_is_queued():
    d = review.admit(POD, state=state_with(CLASS, four_gpu_template()), settings=settings(dra_gpu_workloads="queue"))
    assert d.allowed, messages(d)
    meta = d.object["metadata"]
    assert meta["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert meta["labels"][labels.WORKLOAD_PROFILE] == "h100-4gpu"
    assert d.object["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"
    assert "kueue.x-k8s.io/admission" in [g["name"] for g in d.object["spec"]["schedulingGates"]]


def test_a_job_of_dra_pods_counts_the_claim_templates_gpus_against_its_profile():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "dra-train", "namespace": NS},
           "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
               "restartPolicy": "Never", **{k: v for k, v in POD["spec"].items()}}}}}
    d = review.admit(job, state=state_with(CLASS, TEMPLATE), settings=settings(dra_gpu_workloads="queue"))
    assert any("matches 2 GPU(s) per pod" in w for w in d.warnings), d.warnings  # counted: 2 per pod
    d = review.admit(job, state=state_with(CLASS, four_gpu_template()), settings=settings(dra_gpu_workloads="queue"))
    assert d.allowed, messages(d)
    assert d.object["spec"]["suspend"] is True
    assert d.object["spec"]["template"]["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"


def test_a_claim_template_of_a_class_that_is_not_a_gpu_leaves_a_cpu_pod_alone():
    d = review.admit(POD, state=state_with(CLASS, TEMPLATE), settings=Settings())
    assert d.allowed and d.patch is None


def test_a_claim_template_that_does_not_exist_is_refused_naming_it():
    d = review.admit(POD, state=state_with(CLASS), settings=settings(dra_gpu_workloads="queue"))
    assert not d.allowed
    assert "ResourceClaimTemplate 'test-claim-template', which does not exist in namespace 'vision'" in messages(d)


def test_a_device_class_that_does_not_exist_is_refused_naming_it():
    d = review.admit(POD, state=state_with(TEMPLATE), settings=settings(dra_gpu_workloads="queue"))
    assert not d.allowed
    assert "DeviceClass 'test-class', which does not exist" in messages(d)


def test_first_available_gpus_are_refused_as_kueue_cannot_count_them():
    first = upstream("resourceclaimtemplate-first-available.yaml")
    d = review.admit(POD, state=state_with(CLASS, NO_DEVICES, first), settings=settings(dra_gpu_workloads="queue"))
    assert not d.allowed
    assert "FirstAvailable device selection is not supported" in messages(d)


def test_a_pod_sharing_a_resource_claim_of_gpus_is_refused_as_kueue_does_not_count_claims():
    claim = upstream("resourceclaim.yaml")
    pod = with_requests(upstream("pod-with-claim-ref.yaml", **{"DivideInt .Index 5": "0"}))
    pod["spec"]["resourceClaims"][0]["resourceClaimName"] = "test-claim-0"
    d = review.admit(pod, state=state_with(CLASS, claim), settings=settings(dra_gpu_workloads="queue"))
    assert not d.allowed
    assert "Kueue does not count the devices of a ResourceClaim" in messages(d)


@pytest.mark.parametrize("resource", ["example.com/gpu", "deviceclass.resource.kubernetes.io/test-class"])
def test_a_dra_extended_resource_is_a_gpu_request(resource):
    dc = copy.deepcopy(CLASS)
    dc["spec"]["extendedResourceName"] = "example.com/gpu"
    pod = with_requests(upstream("pod-with-extended-resource-scoring.yaml"))
    c = pod["spec"]["containers"][0]["resources"]
    c["requests"] = {"cpu": "1", "memory": "1Gi", resource: 1}
    c["limits"] = {resource: 1}
    d = review.admit(pod, state=state_with(dc), settings=settings())
    assert not d.allowed and "as the extended resource " + resource in messages(d)
    d = review.admit(pod, state=state_with(dc), settings=settings(dra_gpu_workloads="queue"))
    assert d.allowed, messages(d)
    assert d.object["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-1gpu"


def test_kubernetes_fully_populated_claim_template_is_judged_without_a_crash():
    full = json.loads((K8S_API / "testdata" / "HEAD" / "resource.k8s.io.v1.ResourceClaimTemplate.json").read_text())
    count = claim_devices(full["spec"]["spec"], ["deviceClassNameValue"], ["deviceClassNameValue"])
    assert count.classes == ("deviceClassNameValue",)
    assert {rel.rsplit(".", 1)[-1] for rel, _ in count.problems} >= {"selectors", "constraints", "config"}


@pytest.mark.parametrize("resource", ["amd.com/gpu", "nvidia.com/gpu.shared", "gpu.intel.com/i915",
                                      "nvidia.com/mig-1g.10gb"])
def test_another_vendors_or_a_shared_gpu_resource_is_a_gpu_pod_not_a_cpu_one(resource):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [
        {"name": "c", "image": "rocm/pytorch:latest", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                                   "limits": {resource: "1"}}}]}}
    d = review.admit(pod, state=state_with(), settings=Settings())
    # governed: a GPU pod asking for no whole nvidia.com/gpu needs a gpusPerWorker-0 profile, and gets one
    assert d.object is not None and d.patch, messages(d)
    assert d.object["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"


def cpu_pod(**container) -> dict:
    """A pod with a CUDA image asking for no GPU (its GPU node tolerations and selector are refused on
    their own: tests/admission/test_a_pod_without_gpus_stays_off_gpu_nodes.py)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell", "namespace": NS}, "spec": {
        "containers": [{"name": "shell", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}, **container}]}}


@pytest.mark.parametrize("container, field", [
    ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, "spec.containers[0].env[0]"),
    ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]},
     "spec.containers[0].env[0]"),
    ({"env": [{"name": "AMD_VISIBLE_DEVICES", "value": "0"}]}, "spec.containers[0].env[0]"),
    ({"securityContext": {"privileged": True}}, "spec.containers[0].securityContext.privileged"),
])
def test_a_cpu_pod_reaching_gpus_without_asking_is_refused(container, field):
    d = review.admit(cpu_pod(**container), state=state_with(), settings=Settings())
    assert not d.allowed
    assert f"[gpu-device-access] {field}" in messages(d)


@pytest.mark.parametrize("path", ["/dev/nvidia0", "/dev/dri", "/dev", "/", "/dev/../dev/nvidiactl", "//dev/kfd"])
def test_a_host_path_of_gpu_device_nodes_is_refused(path):
    pod = cpu_pod()
    pod["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": path}}]
    d = review.admit(pod, state=state_with(), settings=Settings())
    assert not d.allowed and "[gpu-device-access] spec.volumes[0].hostPath.path" in messages(d)


def test_a_cdi_annotation_is_refused():
    pod = cpu_pod()
    pod["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
    d = review.admit(pod, state=state_with(), settings=Settings())
    assert not d.allowed and '[gpu-device-access] metadata.annotations["cdi.k8s.io/gpu"]' in messages(d)


@pytest.mark.parametrize("value", ["void", "none", ""])
def test_a_variable_that_selects_no_device_is_left_alone(value):
    d = review.admit(cpu_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value},
                                  {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]),
                     state=state_with(), settings=Settings())
    assert d.allowed and d.patch is None


def test_device_access_is_governed_as_a_gpu_request_when_the_platform_says_so():
    d = review.admit(cpu_pod(securityContext={"privileged": True}), state=state_with(),
                     settings=Settings(device_access="govern"))
    assert d.object is not None and d.object["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"


def test_a_device_access_a_stored_object_already_had_does_not_fail_its_update():
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dash", "namespace": NS},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {
               "metadata": {"labels": {"a": "b"}}, "spec": cpu_pod(securityContext={"privileged": True})["spec"]}}}
    scaled = copy.deepcopy(dep)
    scaled["spec"]["replicas"] = 2
    st = state_with()
    assert not review.admit(dep, state=st, settings=Settings()).allowed
    assert review.admit(scaled, state=st, settings=Settings(), operation="UPDATE", old=dep).allowed
    added = copy.deepcopy(scaled)
    added["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    d = review.admit(added, state=st, settings=Settings(), operation="UPDATE", old=dep)
    assert not d.allowed and "NVIDIA_VISIBLE_DEVICES" in messages(d)


def test_a_gpu_pod_sized_by_pod_level_resources_is_admitted():
    sample = REPO / "policies" / "requests-required" / "samples" / "example_allowed_job_pod_level_resources.yaml"
    d = review.admit(yaml.safe_load(sample.read_text()), state=state_with(), settings=Settings())
    assert d.allowed, messages(d)
    assert d.object["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-1gpu"


def claim_review(obj: dict, username: str = "alice") -> dict:
    return review.request_for(obj, namespace=NS, user_info={"username": username, "groups": []})


def test_a_claim_template_for_more_gpus_than_a_pod_may_hold_is_refused():
    big = copy.deepcopy(TEMPLATE)
    big["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 64
    st, s = state_with(CLASS), settings(dra_gpu_workloads="queue")
    d = review.validate(claim_review(big), st, s)
    assert not d.allowed and "asks for 64 GPU(s) of DeviceClass test-class for one pod; allowed: at most 8" in d.message
    assert review.validate(claim_review(four_gpu_template()), st, s).allowed
    assert not review.validate(claim_review(four_gpu_template()), st, settings()).allowed  # DRA not queued


def test_a_resource_claim_for_gpus_is_refused_unless_made_for_a_pod_by_the_claim_controller():
    claim = upstream("resourceclaim.yaml")
    st, s = state_with(CLASS), settings(dra_gpu_workloads="queue")
    d = review.validate(claim_review(claim), st, s)
    assert not d.allowed and "make it a ResourceClaimTemplate" in d.message
    made = copy.deepcopy(claim)
    made["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "test-dra", "uid": "u",
                                            "controller": True}]
    assert review.validate(claim_review(made, "system:serviceaccount:kube-system:resource-claim-controller"),
                           st, s).allowed
    assert not review.validate(claim_review(made, "alice"), st, s).allowed


def test_the_platforms_own_device_resource_is_a_gpu_resource_through_the_cli(tmp_path):
    pod = cpu_pod()
    pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/tpu": "1"}
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(pod))

    def admit(env: dict) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([sys.executable, "-m", "taugate.cli", "admit", "-f", str(f), "--cluster",
                            str(EXAMPLE_CLUSTER), "-o", "json"], capture_output=True, text=True, cwd=REPO,
                           env={**os.environ, **env}, timeout=120)
        assert "Traceback" not in p.stderr, p.stderr
        return p

    by_default = admit({})  # a CPU pod to taugate: admitted untouched
    assert by_default.returncode == 0 and "labels" not in json.loads(by_default.stdout)["metadata"]
    governed = admit({"TAUGATE_GPU_DEVICE_RESOURCES": '["example.com/tpu"]'})  # a GPU pod, judged as one
    assert governed.returncode == 1
    assert "ClusterQueue vision-cq behind LocalQueue vision-queue has no quota for it" in governed.stderr


def test_dra_objects_are_read_from_a_snapshot_file(tmp_path):
    f = tmp_path / "cluster.yaml"
    f.write_text(EXAMPLE_CLUSTER.read_text() + "\n---\n" + yaml.safe_dump(CLASS) + "---\n" + yaml.safe_dump(TEMPLATE))
    st = load_snapshot(f, Settings())
    assert set(st.device_classes) == {"test-class", "gpu.nvidia.com"}
    assert (NS, "test-claim-template") in st.claim_templates


def test_a_snapshot_with_a_malformed_claim_template_is_refused_naming_the_field(tmp_path):
    bad = copy.deepcopy(TEMPLATE)
    bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "2"
    f = tmp_path / "cluster.yaml"
    f.write_text(EXAMPLE_CLUSTER.read_text() + "\n---\n" + yaml.safe_dump(bad))
    p = subprocess.run([sys.executable, "-m", "taugate.cli", "admit", "-f", str(Path(REPO / "examples" /
                        "rayjob-image-classifier.yaml")), "--cluster", str(f)], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert p.returncode == 2
    assert "spec.spec.devices.requests[0].exactly.count" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_an_update_of_a_resource_claim_is_never_judged():
    claim = upstream("resourceclaim.yaml")
    request = review.request_for(claim, namespace=NS, operation="UPDATE", old=claim,
                                 user_info={"username": "system:kube-scheduler", "groups": []})
    assert review.validate(request, state_with(CLASS), settings(dra_gpu_workloads="queue")).allowed


def test_a_privileged_debug_container_added_to_a_workspace_pod_is_refused():
    pod = cpu_pod()
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox",
                                                "securityContext": {"privileged": True}}]
    request = {**review.request_for(debugged, namespace=NS, operation="UPDATE", old=pod), "subResource":
               "ephemeralcontainers"}
    d = review.validate(request, state_with(), Settings())
    assert not d.allowed
    assert "[gpu-device-access] spec.ephemeralContainers[0].securityContext.privileged" in d.message
    plain = copy.deepcopy(debugged)
    del plain["spec"]["ephemeralContainers"][0]["securityContext"]
    assert review.validate({**request, "object": plain}, state_with(), Settings()).allowed
    # one added before (or before the rule) is excused: the UPDATE adding a second plain one passes
    again = copy.deepcopy(debugged)
    again["spec"]["ephemeralContainers"].append({"name": "second", "image": "busybox"})
    assert review.validate({**request, "object": again, "oldObject": debugged}, state_with(), Settings()).allowed


def test_the_dra_example_is_refused_by_default_and_queued_when_the_platform_queues_dra_through_the_cli():
    example = REPO / "examples" / "dra-job.yaml"

    def admit(env: dict) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "taugate.cli", "admit", "-f", str(example), "--cluster",
                               str(EXAMPLE_CLUSTER), "-o", "json"], capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, **env}, timeout=120)

    refused = admit({})
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "ResourceClaimTemplate four-h100 denied" in refused.stderr and "gpu.draWorkloads: queue" in refused.stderr
    queued = admit({"TAUGATE_DRA_GPU_WORKLOADS": "queue"})
    assert queued.returncode == 0, queued.stderr
    template, job = json.loads(queued.stdout)["items"]
    assert template["kind"] == "ResourceClaimTemplate"  # judged, then known to the Job after it
    assert job["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-4gpu"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_a_sixteen_replica_deployment_or_statefulset_of_dra_pods_is_governed(kind):
    obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "serve", "namespace": NS},
           "spec": {"replicas": 16, "selector": {"matchLabels": {"app": "serve"}}, "template": {
               "metadata": {"labels": {"app": "serve"}}, "spec": copy.deepcopy(POD["spec"])}}}
    if kind == "StatefulSet":
        obj["spec"]["serviceName"] = "serve"
    refused = review.admit(obj, state=state_with(CLASS, four_gpu_template()), settings=settings())
    assert not refused.allowed and "[gpu-dra] spec.template.spec.resourceClaims[0]" in messages(refused)
    queued = review.admit(obj, state=state_with(CLASS, four_gpu_template()),
                          settings=settings(dra_gpu_workloads="queue"))
    assert queued.allowed, messages(queued)
    assert queued.object["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert queued.object["spec"]["template"]["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"
    assert queued.object["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-4gpu"
