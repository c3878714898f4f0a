"""Pods a governed workload's controller creates are children (the parent's run-id only, never
queued again); GPU workloads of kinds taugate does not manage are refused, or warned when the
platform allows them (``Settings.unmanaged_gpu_workloads``); trust comes from who creates the
object, never from what its labels or ownerReferences claim."""

from __future__ import annotations

import copy

import pytest

from taugate import labels
from taugate.settings import Settings
from taugate.webhook.review import admit, mutate, request_for, validate
from tests.admission.test_core_kinds_are_governed_when_they_ask_for_gpus import ALICE, gpu_deployment, gpu_pod

RUN_ID = "0123456789abcdef01234567"
JOB_CONTROLLER = {"username": "system:serviceaccount:kube-system:job-controller"}
RS_CONTROLLER = {"username": "system:serviceaccount:kube-system:replicaset-controller"}
DEPLOYMENT_CONTROLLER = {"username": "system:serviceaccount:kube-system:deployment-controller"}
DS_CONTROLLER = {"username": "system:serviceaccount:kube-system:daemon-set-controller"}


def owned(obj: dict, api_version: str, kind: str, run_id: str | None = RUN_ID) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": "parent",
                                           "uid": "9d0c3c4e-1111-4c2d-9e0f-1a2b3c4d5e6f", "controller": True}]
    if run_id:
        obj["metadata"]["labels"] = {labels.RUN_ID: run_id}
    return obj


def replicaset(gpus: int = 1) -> dict:
    dep = gpu_deployment(2, gpus) if gpus else gpu_deployment(2, 0)
    if not gpus:
        del dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        del dep["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][labels.GPU_RESOURCE]
    return {**dep, "kind": "ReplicaSet", "metadata": {"name": "nginx-7c5ddbdf54"}}


def _decide(obj, state, settings, engine, user):
    return admit(obj, state=state, settings=settings, engine=engine, namespace="vision", user_info=user)


# Children


@pytest.mark.parametrize(("api_version", "kind", "user"), [
    ("batch/v1", "Job", JOB_CONTROLLER),
    ("apps/v1", "StatefulSet", {"username": "system:serviceaccount:kube-system:statefulset-controller"}),
    ("apps/v1", "ReplicaSet", RS_CONTROLLER),
])
def test_a_pod_its_governed_parents_controller_creates_inherits_the_run_id_and_is_not_queued_again(
        api_version, kind, user, state, settings, engine):
    child = owned(gpu_pod(8), api_version, kind)
    d = _decide(child, state, settings, engine, user)
    assert d.allowed and d.patch is None, d.message
    assert labels.KUEUE_QUEUE_NAME not in d.object["metadata"]["labels"]
    assert "nodeSelector" not in d.object["spec"]


def test_the_same_pod_created_by_a_researcher_claiming_a_job_owner_is_a_top_level_pod(state, settings, engine):
    forged = owned(gpu_pod(), "batch/v1", "Job")
    d = _decide(forged, state, settings, engine, ALICE)
    assert d.allowed, d.message
    assert d.object["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert d.object["spec"]["nodeSelector"][settings.gpu_class_label] == "h100"


def test_a_deployments_replicaset_created_by_the_deployment_controller_passes_as_its_child(state, settings, engine):
    rs = owned(replicaset(), "apps/v1", "Deployment")
    d = _decide(rs, state, settings, engine, DEPLOYMENT_CONTROLLER)
    assert d.allowed and not d.warnings and d.patch is None


def test_a_pod_the_replicaset_controller_creates_is_a_child_of_its_replicaset_even_without_a_run_id(
        state, settings, engine):
    # the ReplicaSet was judged when it was created (a Deployment's child, or an unmanaged kind)
    legacy = owned(gpu_pod(), "apps/v1", "ReplicaSet", run_id=None)
    d = _decide(legacy, state, settings, engine, RS_CONTROLLER)
    assert d.allowed and d.patch is None and not d.warnings


def test_a_gpu_pod_another_operator_creates_for_its_own_kind_is_an_unmanaged_pod(state, settings, engine):
    stray = owned(gpu_pod(), "example.com/v1", "Notebook", run_id=None)
    d = _decide(stray, state, settings, engine, {"username": "system:serviceaccount:nb:notebook-operator"})
    assert not d.allowed
    assert "[unmanaged-kind] metadata.ownerReferences: a Pod controlled by Notebook 'parent' asks for GPUs" \
        in d.message
    warned = _decide(stray, state, Settings(unmanaged_gpu_workloads="warn"), engine, ALICE)
    assert warned.allowed and warned.patch is None and warned.warnings[0].startswith("[unmanaged-kind]")


def test_a_cpu_only_pod_another_operator_creates_passes_unchanged(state, settings, engine):
    pod = gpu_pod()
    del pod["spec"]["containers"][0]["resources"]
    d = _decide(owned(pod, "example.com/v1", "Notebook", run_id=None), state, settings, engine, ALICE)
    assert d.allowed and d.patch is None and not d.warnings


# Unmanaged kinds


def test_a_bare_gpu_replicaset_is_refused_naming_the_managed_kinds_and_the_fix(state, settings, engine):
    d = _decide(replicaset(), state, settings, engine, ALICE)
    assert not d.allowed
    assert "[unmanaged-kind] spec.template: a ReplicaSet asks for GPUs (1 nvidia.com/gpu per pod x 2 pod(s))" \
        in d.message
    assert "Deployment (apps/v1)" in d.message and "Pod (v1)" in d.message and "RayJob (ray.io/v1)" in d.message
    assert "a Deployment, not a bare ReplicaSet" in d.message and "unmanagedGpuWorkloads: warn" in d.message


def test_a_bare_gpu_replicaset_is_allowed_with_a_warning_when_the_platform_says_warn(state, engine):
    lenient = Settings(unmanaged_gpu_workloads="warn")
    d = _decide(replicaset(), state, lenient, engine, ALICE)
    assert d.allowed and d.patch is None
    assert [w for w in d.warnings if w.startswith("[unmanaged-kind] spec.template: a ReplicaSet asks for GPUs")]


def test_a_cpu_only_replicaset_passes_unchanged(state, settings, engine):
    d = _decide(replicaset(gpus=0), state, settings, engine, ALICE)
    assert d.allowed and not d.warnings and d.patch is None


def test_a_gpu_daemonset_is_refused_and_the_pods_of_an_existing_one_are_its_children(state, settings, engine):
    ds = {**replicaset(), "kind": "DaemonSet", "metadata": {"name": "gpu-burn"}}
    ds["spec"].pop("replicas")
    d = _decide(ds, state, settings, engine, ALICE)
    assert not d.allowed and "a DaemonSet asks for GPUs (1 nvidia.com/gpu per pod x 1 pod(s))" in d.message
    its_pod = owned(gpu_pod(), "apps/v1", "DaemonSet", run_id=None)
    assert _decide(its_pod, state, settings, engine, DS_CONTROLLER).allowed


def test_a_researchers_gpu_pod_claiming_a_replicaset_owner_is_judged_as_an_unmanaged_pod_never_a_child(
        state, settings, engine):
    forged = owned(gpu_pod(), "apps/v1", "ReplicaSet")  # with a run-id, as a Deployment's pods carry
    d = _decide(forged, state, settings, engine, ALICE)
    assert not d.allowed
    assert "[unmanaged-kind] metadata.ownerReferences: a Pod controlled by ReplicaSet 'parent'" in d.message


def test_an_unmanaged_gpu_workload_outside_a_workspace_is_not_looked_at(state, settings, engine):
    d = admit(replicaset(), state=state, settings=settings, engine=engine, namespace="default", user_info=ALICE)
    assert d.allowed and not d.warnings


def test_an_update_of_an_existing_unmanaged_gpu_object_is_never_refused(state, settings, engine):
    stored = {**replicaset(), "metadata": {"name": "nginx-7c5ddbdf54", "namespace": "vision", "uid": "u"}}
    scaled = copy.deepcopy(stored)
    scaled["spec"]["replicas"] = 0
    request = request_for(scaled, namespace="vision", operation="UPDATE", old=stored, user_info=ALICE)
    assert mutate(request, state, settings, engine).allowed
    assert validate(request, state, settings, engine).allowed


def test_an_update_giving_gpus_to_a_cpu_only_replicaset_is_refused(state, settings, engine):
    stored = {**replicaset(gpus=0), "metadata": {"name": "nginx-7c5ddbdf54", "namespace": "vision", "uid": "u"}}
    grown = copy.deepcopy(stored)
    grown["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {labels.GPU_RESOURCE: 1}
    request = request_for(grown, namespace="vision", operation="UPDATE", old=stored, user_info=ALICE)
    assert not validate(request, state, settings, engine).allowed


def test_kueue_ungating_a_deployments_pod_passes_with_no_patch(state, settings, engine):
    # Kueue's pod integration gates each pod of a queued Deployment and ungates it on admission
    stored = owned(gpu_pod(), "apps/v1", "ReplicaSet")
    stored["metadata"].update(name="nginx-7c5ddbdf54-x2k9q", namespace="vision", uid="p-1")
    stored["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] = "vision-queue"
    stored["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    ungated = copy.deepcopy(stored)
    del ungated["spec"]["schedulingGates"]
    ungated["spec"]["nodeSelector"] = {"tau.azure.com/gpu-class": "h100"}  # the flavor's node labels
    kueue = {"username": "system:serviceaccount:kueue-system:kueue-controller-manager"}
    request = request_for(ungated, namespace="vision", operation="UPDATE", old=stored, user_info=kueue)
    m = mutate(request, state, settings, engine)
    assert m.allowed and m.patch is None
    assert validate(request, state, settings, engine).allowed
