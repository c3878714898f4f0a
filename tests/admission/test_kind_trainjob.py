"""Kubeflow Trainer TrainJob (``taugate.kinds.trainjob``): ``numNodes`` pods of ``resourcesPerNode``
as Kueue reserves them, run-id and placement in taugate's own runtime patch (first, before Kueue's),
suspended at ``spec.suspend``, refused when it leaves its size to the runtime, its GPU problems
reported at ``spec.trainer.resourcesPerNode``; on the trainer's own samples and its CRD."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from taugate import labels
from taugate.kinds import trainjob
from taugate.kinds.trainjob import MANAGER, own_patch
from taugate.policy_input import build_policy_input
from taugate.webhook.review import admit, mutate, request_for
from tests import workload_samples as ws
from tests.crdschema import crd_errors
from tests.paths import LAMMPS_TRAINJOB, TRAINJOB_CRD, TRAINJOB_TORCH_DDP

KIND = trainjob.KIND
TORCH_DDP = TRAINJOB_TORCH_DDP
KUEUE_PATCH = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
"""The entry Kueue's TrainJob webhook appends on CREATE (kueue v0.17 ``trainjob_webhook.go``
``Default``), before Kueue admits the job."""
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def torch_ddp(nodes: int = 2) -> dict:
    """The proposal's ``torch-ddp`` TrainJob with ``nodes`` nodes of 1 GPU (limit = request) and
    the cpu and memory requests the policy library asks for."""
    obj = ws.runnable(ws.load(TORCH_DDP), gpus=1)
    obj["spec"]["trainer"]["numNodes"] = nodes
    return obj


def _node_template(obj: dict, manager: str = MANAGER) -> dict:
    [patch] = [p for p in obj["spec"]["runtimePatches"] if p["manager"] == manager]
    [rjob] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    return rjob["template"]["spec"]["template"]


# The GPU arithmetic: trainer v2.2.0 trainingruntime.go newRuntimeInfo, plainml/torch EnforceMLPolicy.

def test_the_trainer_runs_num_nodes_pods_of_resources_per_node():
    obj = ws.load(TORCH_DDP)  # 5 nodes, 2 GPUs each
    [t] = KIND.pod_templates(obj)
    assert (t.role, t.group, t.replicas, t.gpus_per_pod) == ("node", "node", 5, 2)
    assert t.resources_path("containers", 0) == ("spec", "trainer", "resourcesPerNode")
    obj["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/mig-1g.10gb": 2}}
    [t] = KIND.pod_templates(obj)
    assert t.gpus_per_pod == 0 and t.mig_per_pod == {"nvidia.com/mig-1g.10gb": 2}


def test_the_policy_input_names_num_nodes_and_resources_per_node(state, settings):
    obj = torch_ddp(nodes=3)
    doc = build_policy_input(obj=obj, templates=KIND.pod_templates(obj), operation="CREATE", user_info=None,
                             namespace="vision", workspace=None, profile=None, queue=None, state=state,
                             gpu_class_label=settings.gpu_class_label)
    [t] = doc["object"]["podTemplates"]
    assert doc["object"]["totalGpus"] == 3 and doc["object"]["workers"]["gpuPods"] == 3
    assert t["replicasField"] == "spec.trainer.numNodes"
    assert t["containers"][0]["resourcesField"] == "spec.trainer.resourcesPerNode"


# Admission: taugate's runtime patch, first; Kueue's after it.

def test_a_trainjob_is_queued_suspended_and_its_node_pods_get_the_run_id_and_placement(state, settings, engine):
    obj = torch_ddp()
    decision = admit(obj, state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    out = decision.object
    meta = out["metadata"]["labels"]
    assert meta[labels.KUEUE_QUEUE_NAME] == "vision-queue" and out["spec"]["suspend"] is True
    node = _node_template(out)
    assert node["metadata"]["labels"][labels.RUN_ID] == meta[labels.RUN_ID]
    assert node["spec"]["nodeSelector"][settings.gpu_class_label] == "h100"
    assert GPU_TOLERATION in node["spec"]["tolerations"]
    assert {"name": "tau-data", "mountPath": "/data"} in node["spec"]["containers"][0]["volumeMounts"]
    assert jsonpatch.apply_patch(obj, decision.patch) == out
    again = mutate(request_for(out, namespace="vision"), state, settings, engine)
    assert again.allowed and again.patch is None


def test_taugates_runtime_patch_goes_before_kueues_so_the_admitted_flavor_has_the_last_word(state, settings, engine):
    # Kueue's webhook ran first (webhooks run in name order) and appended its own entry.
    obj = torch_ddp()
    obj["spec"]["runtimePatches"] = [copy.deepcopy(KUEUE_PATCH)]
    decision = admit(obj, state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    assert [p["manager"] for p in decision.object["spec"]["runtimePatches"]] == [MANAGER, KUEUE_PATCH["manager"]]
    assert decision.patch[0]["path"] == "/spec/runtimePatches/0" or any(
        op["path"] == "/spec/runtimePatches/0" and op["op"] == "add" for op in decision.patch)


def test_an_admitted_trainjob_is_still_valid_under_the_trainers_crd(state, settings, engine):
    obj = torch_ddp()
    assert crd_errors(obj, TRAINJOB_CRD, "v1alpha1") == []
    out = admit(obj, state=state, settings=settings, engine=engine).object
    assert crd_errors(out, TRAINJOB_CRD, "v1alpha1") == []


def test_the_placement_validation_sees_every_runtime_patch_merged_as_the_trainer_merges_them(state, settings,
                                                                                             engine):
    obj = torch_ddp()
    user = copy.deepcopy(own_patch())
    user["manager"] = "example.com/me"
    _node_template({"spec": {"runtimePatches": [user]}}, "example.com/me")["spec"]["nodeSelector"] = {
        settings.gpu_class_label: "a100"}
    obj["spec"]["runtimePatches"] = [user]  # after taugate's, so the user's selector wins in the merge
    decision = admit(obj, state=state, settings=settings, engine=engine)
    assert not decision.allowed
    assert any(v.policy == "gpu-class-matches-profile" for v in decision.violations), decision.message


def test_an_update_never_touches_the_runtime_patches(state, settings, engine):
    old = admit(torch_ddp(), state=state, settings=settings, engine=engine).object
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False  # Kueue admits it
    del _node_template(new)["metadata"]["labels"][labels.RUN_ID]
    decision = mutate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings, engine)
    assert decision.allowed and decision.patch is None


# taugate's rule: a TrainJob states its size; the GPU rules at the field the researcher wrote.

def test_the_trainers_own_sample_without_resources_per_node_is_refused_naming_the_field(state, settings, engine):
    decision = admit(ws.load(LAMMPS_TRAINJOB), state=state, settings=settings, engine=engine)
    assert not decision.allowed
    [v] = [v for v in decision.violations if v.policy == "trainjob-size"]
    assert v.field == "spec.trainer.resourcesPerNode" and "fix: set spec.trainer.numNodes" in v.message


def test_a_trainjob_without_num_nodes_is_refused_and_an_update_is_never_judged_by_the_rule():
    obj = torch_ddp()
    del obj["spec"]["trainer"]["numNodes"]
    [v] = KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None, elastic_jobs=False)
    assert v.field == "spec.trainer.numNodes" and "spec.trainer.numNodes" in v.message
    assert KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=obj, elastic_jobs=False) == []


def test_the_proposals_request_only_gpus_are_refused_at_resources_per_node(state, settings, engine):
    decision = admit(ws.load(TORCH_DDP), state=state, settings=settings, engine=engine)  # requests, no limits
    assert not decision.allowed
    fields = {(v.policy, v.field) for v in decision.violations}
    assert ("gpu-request-equals-limit", 'spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]') in fields
    assert ("requests-required", "spec.trainer.resourcesPerNode.requests.cpu") in fields


@pytest.mark.parametrize(("mangle", "field"), [
    (lambda s: s["trainer"].update(numNodes="2"), "spec.trainer.numNodes"),
    (lambda s: s.update(runtimePatches=[{"manager": MANAGER}]), "spec.runtimePatches[0]"),
    (lambda s: s.update(runtimePatches=[{"trainingRuntimeSpec": {}}]), "spec.runtimePatches[0].manager"),
])
def test_a_malformed_trainjob_is_denied_with_the_field_path(mangle, field):
    obj = torch_ddp()
    mangle(obj["spec"])
    assert [v.field for v in KIND.malformed(obj)] == [field]


# Children: the JobSet the trainer's controller creates for a TrainJob.

TRAINER_CONTROLLER = {"username": "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
                      "groups": ["system:serviceaccounts", "system:authenticated"]}


def _child_jobset(parent: dict) -> dict:
    """The JobSet the trainer builds from ``torch-distributed`` for ``parent`` (trainer v2.2.0
    ``plugins/jobset/jobset.go`` ``Build``): the runtime's ``node`` replicated job with
    taugate's runtime patch merged in (the run-id on the pod template), owned by the TrainJob,
    suspended like it; an initializer job the patch does not reach."""
    node = copy.deepcopy(_node_template(parent))
    node["spec"]["containers"] = [{"name": "node", "image": "pytorch/pytorch",
                                   "resources": parent["spec"]["trainer"]["resourcesPerNode"]}]
    init = {"spec": {"containers": [{"name": "dataset-initializer", "image": "initializer"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "torch-ddp", "namespace": "vision",
        "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "torch-ddp",
                             "uid": "0b7c5a52-3f6e-4c1e-9d2a-6f1e2d3c4b5a", "controller": True,
                             "blockOwnerDeletion": True}]},
        "spec": {"suspend": True, "replicatedJobs": [
            {"name": "dataset-initializer", "replicas": 1, "template": {"spec": {"template": init}}},
            {"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 2, "completions": 2,
                                                                  "template": node}}}]}}


def test_the_jobset_the_trainer_creates_inherits_the_run_id_everywhere_and_is_not_queued_again(state, settings,
                                                                                               engine):
    parent = admit(torch_ddp(), state=state, settings=settings, engine=engine).object
    run_id = parent["metadata"]["labels"][labels.RUN_ID]
    decision = admit(_child_jobset(parent), state=state, settings=settings, engine=engine,
                     user_info=TRAINER_CONTROLLER)
    assert decision.allowed, decision.message
    out = decision.object
    assert out["metadata"]["labels"][labels.RUN_ID] == run_id
    assert labels.KUEUE_QUEUE_NAME not in out["metadata"]["labels"]
    assert [r["template"]["spec"]["template"]["metadata"]["labels"][labels.RUN_ID]
            for r in out["spec"]["replicatedJobs"]] == [run_id, run_id]
    # the same JobSet from a researcher is a top-level JobSet, queued by taugate
    forged = admit(_child_jobset(parent), state=state, settings=settings, engine=engine,
                   user_info={"username": "alice", "groups": ["vision-researchers"]})
    assert forged.object["metadata"]["labels"].get(labels.KUEUE_QUEUE_NAME) == "vision-queue"
