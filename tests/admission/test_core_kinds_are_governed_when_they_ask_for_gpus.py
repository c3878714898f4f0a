"""Bare Pods, Deployments and StatefulSets in a workspace are governed when they ask for GPUs:
queued as Kueue's pod, deployment and statefulset integrations expect (never suspended), placed on
their GPU templates and given a run-id; CPU-only ones pass unchanged (issue 17)."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest
import yaml

from taugate import labels
from taugate.kinds import deployment, pod, statefulset
from taugate.policy_input import build_policy_input
from taugate.webhook.review import admit, mutate, request_for, validate
from tests.paths import DATA

CORE = DATA / "admission" / "core"
ALICE = {"username": "alice", "groups": ["vision-researchers", "system:authenticated"]}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _yaml(name: str) -> dict:
    return yaml.safe_load((CORE / name).read_text())


def gpu_pod(gpus: int = 1) -> dict:
    """The Kubernetes documentation's GPU Pod, asking for ``gpus`` nvidia.com/gpu, with the cpu
    and memory requests the policy library requires (``requests-required``)."""
    obj = _yaml("gpu-pod.yaml")
    obj["spec"]["containers"][0]["resources"]["limits"][labels.GPU_RESOURCE] = gpus
    obj["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4", "memory": "16Gi"}
    return obj


def gpu_deployment(replicas: int = 3, gpus: int = 1) -> dict:
    """Kueue's serving Deployment sample, its queue label taken off (taugate sets the queue) and
    ``gpus`` GPUs per pod."""
    obj = _yaml("sample-deployment.yaml")
    obj["spec"]["replicas"] = replicas
    del obj["spec"]["template"]["metadata"]["labels"][labels.KUEUE_QUEUE_NAME]
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {labels.GPU_RESOURCE: gpus}
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].update(
        {labels.GPU_RESOURCE: gpus, "memory": "16Gi"})
    return obj


def gpu_statefulset(replicas: int = 2, gpus: int = 1) -> dict:
    obj = gpu_deployment(replicas, gpus)
    obj["kind"] = "StatefulSet"
    obj["metadata"]["name"] = "nginx-sts"
    return obj


def _admit(obj, state, settings, engine, **kw):
    return admit(obj, state=state, settings=settings, engine=engine, namespace="vision", user_info=ALICE, **kw)


def _labels_of(obj: dict) -> dict:
    return obj["metadata"]["labels"]


# A bare GPU Pod


def test_a_bare_gpu_pod_is_queued_placed_and_given_a_run_id_without_being_suspended(state, settings, engine):
    d = _admit(gpu_pod(), state, settings, engine)
    assert d.allowed, d.message
    out = d.object
    assert _labels_of(out)[labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert len(_labels_of(out)[labels.RUN_ID]) == 24
    assert out["spec"]["nodeSelector"][settings.gpu_class_label] == "h100"
    assert GPU_TOLERATION in out["spec"]["tolerations"]
    assert "suspend" not in out["spec"]
    assert not any(op["path"].startswith("/spec/suspend") for op in d.patch)



def test_a_bare_gpu_pod_is_held_for_kueue_with_its_gate_finalizer_and_managed_label_once(state, settings, engine):
    # Kueue's pod webhook runs before taugate's and is never reinvoked (kueue v0.17
    # pod_webhook.go PodWebhook.Default): taugate holds the Pod itself, keeping gates of others.
    obj = gpu_pod()
    obj["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    d = _admit(obj, state, settings, engine)
    assert d.allowed, d.message
    out = d.object
    assert out["spec"]["schedulingGates"] == [{"name": "example.com/other"}, {"name": pod.KUEUE_ADMISSION_GATE}]
    assert out["metadata"]["finalizers"] == [pod.KUEUE_MANAGED]
    assert _labels_of(out)[pod.KUEUE_MANAGED] == "true"
    again = _admit(out, state, settings, engine)
    assert again.allowed and not again.patch
    assert again.object["spec"]["schedulingGates"] == out["spec"]["schedulingGates"]

def test_a_cpu_only_pod_in_a_workspace_passes_unchanged(state, settings, engine):
    notebook = _yaml("kueue-pod.yaml")
    d = _admit(notebook, state, settings, engine)
    assert d.allowed and d.patch is None
    assert labels.RUN_ID not in _labels_of(d.object)


@pytest.mark.parametrize(("container_list", "resource"), [("containers", "nvidia.com/mig-1g.10gb"),
                                                           ("initContainers", labels.GPU_RESOURCE)])
def test_a_pod_asking_for_a_mig_slice_or_a_gpu_in_an_init_container_is_governed(container_list, resource):
    obj = gpu_pod()
    del obj["spec"]["containers"][0]["resources"]["limits"]  # the main container: CPU only
    holder = {"name": "warmup", "image": "cuda", "resources": {}}
    obj["spec"].setdefault(container_list, []).append(holder)
    holder["resources"]["limits"] = {resource: 1}
    assert pod.KIND.governs(pod.KIND.pod_templates(obj))
    del obj["spec"][container_list][-1]["resources"]["limits"]
    assert not pod.KIND.governs(pod.KIND.pod_templates(obj))


def test_an_update_of_a_cpu_only_deployment_passes_unchanged(state, settings, engine):
    stored = {**_yaml("sample-deployment.yaml"), "metadata": {"name": "nginx-deployment", "namespace": "vision",
                                                             "uid": "u-3", "labels": {"app": "nginx"}}}
    scaled = copy.deepcopy(stored)
    scaled["spec"]["replicas"] = 5
    request = request_for(scaled, namespace="vision", operation="UPDATE", old=stored, user_info=ALICE)
    assert mutate(request, state, settings, engine).patch is None
    assert validate(request, state, settings, engine).allowed


def test_a_gpu_pod_without_cpu_and_memory_requests_is_refused_naming_the_pod(state, settings, engine):
    d = _admit(_yaml("gpu-pod.yaml"), state, settings, engine)
    assert not d.allowed
    assert "[requests-required] spec.containers[0].resources.requests.memory: container example-vector-add of " \
           "the Pod requests no memory" in d.message


def test_a_gpu_pod_is_admitted_again_with_an_empty_patch(state, settings, engine):
    first = _admit(gpu_pod(), state, settings, engine).object
    again = mutate(request_for(first, namespace="vision", user_info=ALICE), state, settings, engine)
    assert again.allowed and again.patch is None


def test_a_pod_of_a_kueue_pod_group_counts_the_whole_group(state, settings):
    grouped = gpu_pod(2)
    grouped["metadata"]["labels"] = {pod.POD_GROUP_NAME: "trainers"}
    grouped["metadata"]["annotations"] = {pod.POD_GROUP_TOTAL_COUNT: "4"}
    [t] = pod.KIND.pod_templates(grouped)
    assert (t.role, t.path, t.replicas, t.gpus_per_pod) == ("pod", (), 4, 2)
    doc = build_policy_input(obj=grouped, templates=[t], operation="CREATE", user_info=ALICE, namespace="vision",
                             workspace=None, profile=None, queue=None, state=state,
                             gpu_class_label=settings.gpu_class_label)
    assert doc["object"]["totalGpus"] == 8


@pytest.mark.parametrize(("group_labels", "notes", "field"), [
    ({pod.POD_GROUP_NAME: "trainers"}, {}, f'metadata.annotations["{pod.POD_GROUP_TOTAL_COUNT}"]'),
    ({}, {pod.POD_GROUP_TOTAL_COUNT: "4"}, f'metadata.labels["{pod.POD_GROUP_NAME}"]'),
    ({pod.POD_GROUP_NAME: "trainers"}, {pod.POD_GROUP_TOTAL_COUNT: "0"},
     f'metadata.annotations["{pod.POD_GROUP_TOTAL_COUNT}"]'),
])
def test_a_pod_group_without_both_its_label_and_a_positive_count_is_refused_as_kueue_would(
        group_labels, notes, field, state, settings, engine):
    bad = gpu_pod()
    bad["metadata"]["labels"], bad["metadata"]["annotations"] = dict(group_labels), dict(notes)
    d = _admit(bad, state, settings, engine)
    assert not d.allowed
    assert any(v.policy == "kueue-pod-group" and v.field == field for v in d.violations), d.message


def test_an_update_of_an_admitted_pod_never_touches_its_immutable_spec(state, settings, engine):
    admitted = _admit(gpu_pod(), state, settings, engine).object
    stored = copy.deepcopy(admitted)
    stored["metadata"].update(uid="u-1", resourceVersion="7")
    stored["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    ungated = copy.deepcopy(stored)
    del ungated["spec"]["schedulingGates"]
    del ungated["spec"]["nodeSelector"]  # a pod spec is immutable: restoring it would fail the UPDATE
    kueue = {"username": "system:serviceaccount:kueue-system:kueue-controller-manager"}
    request = request_for(ungated, namespace="vision", operation="UPDATE", old=stored, user_info=kueue)
    m = mutate(request, state, settings, engine)
    assert m.allowed and not any(op["path"].startswith("/spec") for op in m.patch or [])


# Deployments and StatefulSets


def test_a_gpu_deployment_carries_its_queue_to_the_pod_template_as_kueues_deployment_webhook_does(
        state, settings, engine):
    d = _admit(gpu_deployment(), state, settings, engine)
    assert d.allowed, d.message
    out, template = d.object, d.object["spec"]["template"]
    assert _labels_of(out)[labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert template["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert template["metadata"]["labels"][deployment.KUEUE_MANAGED] == "true"
    assert template["metadata"]["annotations"][deployment.KUEUE_SUSPENDING_PARENT] == "deployment"
    assert _labels_of(out)[labels.RUN_ID] == template["metadata"]["labels"][labels.RUN_ID]
    assert template["spec"]["nodeSelector"][settings.gpu_class_label] == "h100"
    assert GPU_TOLERATION in template["spec"]["tolerations"]
    assert "suspend" not in out["spec"]
    assert template["metadata"]["labels"]["app"] == "nginx"  # the selector still matches


def test_a_gpu_statefulset_gets_kueues_suspending_parent_annotation_and_no_queue_on_its_template(
        state, settings, engine):
    d = _admit(gpu_statefulset(), state, settings, engine)
    assert d.allowed, d.message
    template = d.object["spec"]["template"]
    assert _labels_of(d.object)[labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert template["metadata"]["annotations"][statefulset.KUEUE_SUSPENDING_PARENT] == "statefulset"
    assert labels.KUEUE_QUEUE_NAME not in template["metadata"]["labels"]
    assert template["metadata"]["labels"][labels.RUN_ID] == _labels_of(d.object)[labels.RUN_ID]
    assert GPU_TOLERATION in template["spec"]["tolerations"]


@pytest.mark.parametrize(("kind", "replicas", "pods"), [(deployment.KIND, 3, 3), (deployment.KIND, None, 1),
                                                        (statefulset.KIND, 4, 4), (statefulset.KIND, 0, 0)])
def test_a_deployment_or_statefulset_holds_replicas_times_the_gpus_of_one_pod(kind, replicas, pods):
    obj = gpu_deployment(2, gpus=2)
    obj["kind"] = kind.kind
    if replicas is None:
        del obj["spec"]["replicas"]
    else:
        obj["spec"]["replicas"] = replicas
    [t] = kind.pod_templates(obj)
    assert (t.role, t.path, t.replicas, t.gpus_per_pod) == ("replica", ("spec", "template"), pods, 2)


def test_a_cpu_only_deployment_in_a_workspace_passes_unchanged(state, settings, engine):
    d = _admit(_yaml("sample-deployment.yaml"), state, settings, engine)
    assert d.allowed and d.patch is None


def test_a_deployment_too_big_for_the_workspace_queue_is_refused_naming_its_replicas(state, settings, engine):
    d = _admit(gpu_deployment(replicas=40, gpus=1), state, settings, engine)
    assert not d.allowed
    assert "gpu-total-fits-queue" in d.message and "40" in d.message, d.message


def test_an_update_giving_gpus_to_a_deployment_created_without_any_is_refused(state, settings, engine):
    created = _admit(_yaml("sample-deployment.yaml"), state, settings, engine).object
    stored = copy.deepcopy(created)
    stored["metadata"].update(uid="u-2", resourceVersion="3")
    grown = copy.deepcopy(stored)
    grown["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {labels.GPU_RESOURCE: 8}
    v = validate(request_for(grown, namespace="vision", operation="UPDATE", old=stored, user_info=ALICE),
                 state, settings, engine)
    assert not v.allowed
    assert "[gpus-added-on-update] spec.template" in v.message and "create it again" in v.message


def test_the_admitted_deployment_json_patch_applies_to_the_api_servers_own_request(state, settings, engine):
    request = json.loads((DATA / "admission" / "apiserver-requests" / "deployment-create.json").read_text())
    obj = request["object"]
    obj["metadata"]["namespace"] = request["namespace"] = "vision"
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2", "memory": "8Gi"}, "limits": {labels.GPU_RESOURCE: 1}}
    m = mutate(request, state, settings, engine)
    assert m.allowed and m.patch
    out = jsonpatch.apply_patch(obj, m.patch)
    assert out["spec"]["template"]["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert validate({**request, "object": out}, state, settings, engine).allowed


# The workload profile's workers


def test_a_deployments_replicas_are_the_profiles_workers(state, settings, engine):
    # h100-1gpu (examples/cluster.yaml) is elastic with at most 4 workers of 1 GPU
    assert _admit(gpu_deployment(replicas=4), state, settings, engine).allowed
    d = _admit(gpu_deployment(replicas=5), state, settings, engine)
    assert not d.allowed
    assert "[workers-match-profile] spec.replicas: asks for 5 workers" in d.message, d.message


def test_a_bare_8_gpu_pod_under_a_fixed_two_worker_profile_is_refused_pointing_at_the_pod_group(
        state, settings, engine):
    # h100-8gpu is fixed at 2 workers of 8 GPUs: one pod is half of it, a pod group of 2 is all of it
    d = _admit(gpu_pod(8), state, settings, engine)
    assert not d.allowed
    assert f'[workers-match-profile] metadata.annotations["{pod.POD_GROUP_TOTAL_COUNT}"]: asks for 1 workers' \
        in d.message, d.message
    assert "fix: run 2 such pods as one Kueue pod group" in d.message
    pair = gpu_pod(8)
    pair["metadata"]["labels"] = {pod.POD_GROUP_NAME: "trainers"}
    pair["metadata"]["annotations"] = {pod.POD_GROUP_TOTAL_COUNT: "2"}
    assert _admit(pair, state, settings, engine).allowed


@pytest.mark.parametrize(("field", "value", "path"), [
    ("schedulingGates", "kueue", "spec.schedulingGates"),
    ("schedulingGates", [{"gate": "x"}], "spec.schedulingGates[0].name"),
    ("finalizers", "kueue.x-k8s.io/managed", "metadata.finalizers"),
])
def test_a_gpu_pod_whose_gates_or_finalizers_have_the_wrong_type_is_refused_not_overwritten(
        state, settings, engine, field, value, path):
    obj = gpu_pod()
    (obj["metadata"] if field == "finalizers" else obj["spec"])[field] = value
    d = _admit(obj, state, settings, engine)
    assert not d.allowed
    assert [v.field for v in d.violations] == [path], d.message
