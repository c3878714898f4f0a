"""Kubeflow PyTorchJob (``taugate.kinds.pytorchjob``): Master and Worker pods as Kueue reserves them,
suspended at ``spec.runPolicy.suspend`` (created when missing), training-operator's replica rules,
and the elastic HPA's maximum in the policy input."""

from __future__ import annotations

import copy

from taugate import labels
from taugate.kinds import pytorchjob
from taugate.kinds.pytorchjob import replica_pods
from taugate.policy_input import build_policy_input
from taugate.webhook.review import admit, mutate, request_for
from tests import workload_samples as ws
from tests.paths import PYTORCH_ELASTIC, PYTORCH_MNIST_NCCL

KIND = pytorchjob.KIND


def _input(obj, state, settings):
    return build_policy_input(obj=obj, templates=KIND.pod_templates(obj), operation="CREATE", user_info=None,
                              namespace="vision", workspace=None, profile=None, queue=None, state=state,
                              gpu_class_label=settings.gpu_class_label)


# The GPU arithmetic: kueue v0.17 kubeflowjob_controller.go PodSets, podsCount.

def test_a_replica_spec_runs_its_replicas_and_one_pod_when_unset():
    assert replica_pods({"replicas": 4}) == 4
    assert replica_pods({}) == 1
    assert replica_pods({"replicas": 0}) == 0


def test_the_master_comes_first_then_the_workers_each_with_its_replicas():
    obj = ws.load(PYTORCH_MNIST_NCCL)
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    templates = KIND.pod_templates(obj)
    assert [(t.role, t.group, t.replicas, t.gpus_per_pod) for t in templates] == [
        ("master", "Master", 1, 1), ("worker", "Worker", 3, 1)]
    assert templates[1].path == ("spec", "pytorchReplicaSpecs", "Worker", "template")


def test_the_policy_input_counts_the_master_among_the_workers_and_its_replicas_fields(state, settings):
    doc = _input(ws.load(PYTORCH_MNIST_NCCL), state, settings)
    assert doc["object"]["totalGpus"] == 2 and doc["object"]["workers"]["gpuPods"] == 2
    assert [t["replicasField"] for t in doc["object"]["podTemplates"]] == [
        "spec.pytorchReplicaSpecs.Master.replicas", "spec.pytorchReplicaSpecs.Worker.replicas"]


def test_an_elastic_hpa_may_grow_the_workers_to_max_replicas_and_only_with_metrics(state, settings):
    obj = ws.load(PYTORCH_ELASTIC)  # Worker replicas 2, elasticPolicy maxReplicas 3 with metrics
    assert KIND.autoscaling(obj)
    doc = _input(obj, state, settings)
    assert doc["object"]["autoscaling"] is True
    assert doc["object"]["workers"] == {"pods": 2, "maxPods": 3, "gpuPods": 0, "maxGpuPods": 0}
    del obj["spec"]["elasticPolicy"]["metrics"]  # no metrics: training-operator creates no HPA
    assert not KIND.autoscaling(obj)
    assert _input(obj, state, settings)["object"]["workers"]["maxPods"] == 2


def test_an_elastic_pytorchjob_whose_hpa_could_outgrow_the_profile_is_denied(state, settings, engine):
    obj = ws.runnable(ws.load(PYTORCH_ELASTIC), profile="cpu-small")
    obj["spec"]["elasticPolicy"]["maxReplicas"] = 6
    decision = admit(obj, state=state, settings=settings, engine=engine)
    [v] = decision.violations
    assert v.policy == "workers-match-profile" and "grow to 6 workers" in v.message and "at most 4" in v.message
    obj["spec"]["elasticPolicy"]["maxReplicas"] = 4
    assert admit(obj, state=state, settings=settings, engine=engine).allowed


# Admission: suspend lives in runPolicy.

def test_a_queued_pytorchjob_is_suspended_at_run_policy_created_when_missing(state, settings, engine):
    obj = ws.runnable(ws.load(PYTORCH_MNIST_NCCL))
    assert "runPolicy" not in obj["spec"]
    decision = admit(obj, state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    assert decision.object["spec"]["runPolicy"] == {"suspend": True} and "suspend" not in decision.object["spec"]
    assert {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}} in decision.patch
    obj["spec"]["runPolicy"] = {"suspend": False, "cleanPodPolicy": "None"}
    out = admit(obj, state=state, settings=settings, engine=engine).object
    assert out["spec"]["runPolicy"] == {"suspend": True, "cleanPodPolicy": "None"}


def test_the_training_operator_sample_as_written_is_denied_for_its_missing_requests(state, settings, engine):
    decision = admit(ws.load(PYTORCH_MNIST_NCCL), state=state, settings=settings, engine=engine)
    assert {(v.policy, v.field) for v in decision.violations} == {
        ("requests-required", f"spec.pytorchReplicaSpecs.{r}.template.spec.containers[0].resources.requests.{k}")
        for r in ("Master", "Worker") for k in ("cpu", "memory")}


# training-operator's rules (pytorchjob_webhook.go validatePyTorchReplicaSpecs, validateSpec).

def test_training_operators_replica_rules_are_refused_with_the_field():
    obj = ws.load(PYTORCH_MNIST_NCCL)
    specs = obj["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["replicas"] = 2
    specs["Worker"]["replicas"] = 0
    specs["Chief"] = copy.deepcopy(specs["Worker"])
    found = {v.field: v.message for v in KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None,
                                                     elastic_jobs=False)}
    assert set(found) == {"spec.pytorchReplicaSpecs.Chief", "spec.pytorchReplicaSpecs.Master.replicas",
                          "spec.pytorchReplicaSpecs.Worker.replicas"}
    assert '"must be 1"' in found["spec.pytorchReplicaSpecs.Master.replicas"]
    elastic = ws.load(PYTORCH_ELASTIC)
    del elastic["spec"]["pytorchReplicaSpecs"]["Worker"]
    [v] = KIND.checks(elastic, [], queued=True, old=None, elastic_jobs=False)
    assert v.field == "spec.pytorchReplicaSpecs.Worker" and "elastic policy" in v.message


def test_a_malformed_pytorchjob_is_denied_with_each_field_path():
    obj = ws.load(PYTORCH_MNIST_NCCL)
    obj["spec"]["runPolicy"] = {"suspend": "true"}
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "1"
    obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"] = []
    assert sorted(v.field for v in KIND.malformed(obj)) == [
        "spec.pytorchReplicaSpecs.Master.template", "spec.pytorchReplicaSpecs.Worker.replicas",
        "spec.runPolicy.suspend"]
    assert [v.field for v in KIND.malformed({"kind": "PyTorchJob", "spec": {}})] == ["spec.pytorchReplicaSpecs"]


def test_an_update_restores_the_run_id_on_the_pod_templates(state, settings, engine):
    old = admit(ws.runnable(ws.load(PYTORCH_MNIST_NCCL)), state=state, settings=settings, engine=engine).object
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"]["suspend"] = False  # Kueue admits it
    del new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"][labels.RUN_ID]
    decision = mutate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings, engine)
    assert [op["path"] for op in decision.patch] == [
        "/spec/pytorchReplicaSpecs/Worker/template/metadata/labels/tau.azure.com~1run-id"]
