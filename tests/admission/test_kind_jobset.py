"""JobSet (``taugate.kinds.jobset``): the pods Kueue reserves per replicated job, the policy input
it builds, its structure check, JobSet's and Kueue's rules, UPDATEs that never touch the pod
templates (JobSet's webhook keeps them immutable but for scheduling fields while suspended), and
the Jobs JobSet's controller creates, which inherit the run-id only."""

from __future__ import annotations

import copy

from taugate import labels
from taugate.kinds import jobset
from taugate.kinds.jobset import MAX_POD_SETS, replicated_job_pods
from taugate.pods import INT32_MAX
from taugate.policy_input import build_policy_input
from taugate.webhook.review import admit, mutate, request_for
from tests import workload_samples as ws

KIND = jobset.KIND


def _rjob(**job_spec):
    replicas = job_spec.pop("replicas", None)
    rjob = {"name": "w", "template": {"spec": {**job_spec, "template": {"spec": {"containers": [{"name": "c"}]}}}}}
    if replicas is not None:
        rjob["replicas"] = replicas
    return rjob


# The GPU arithmetic: kueue v0.17 jobset_controller.go podsCount.

def test_a_replicated_job_runs_replicas_times_min_of_parallelism_and_completions_pods():
    assert replicated_job_pods(_rjob(replicas=4, parallelism=3, completions=2)) == 8
    assert replicated_job_pods(_rjob(replicas=2, parallelism=3, completions=5)) == 6


def test_replicas_and_parallelism_default_to_one_pod():
    assert replicated_job_pods(_rjob()) == 1
    assert replicated_job_pods(_rjob(replicas=3)) == 3


def test_a_replicated_job_with_zero_replicas_or_zero_parallelism_reserves_no_pods():
    assert replicated_job_pods(_rjob(replicas=0, parallelism=4)) == 0
    assert replicated_job_pods(_rjob(replicas=4, parallelism=0)) == 0


def test_the_fine_tune_samples_trainer_nodes_hold_five_gpus_each_and_the_initializer_none():
    templates = KIND.pod_templates(ws.load(ws.JOBSET_FINE_TUNE))
    assert [(t.role, t.group, t.replicas, t.gpus_per_pod) for t in templates] == [
        ("replicated-job", "initializer", 1, 0), ("replicated-job", "trainer-node", 3, 5)]
    assert templates[1].path == ("spec", "replicatedJobs", 1, "template", "spec", "template")


def test_the_policy_input_counts_every_replicated_jobs_pods_as_workers(state, settings):
    obj = ws.load(ws.JOBSET_FINE_TUNE)
    obj["spec"]["replicatedJobs"][1]["replicas"] = 2
    doc = build_policy_input(obj=obj, templates=KIND.pod_templates(obj), operation="CREATE", user_info=None,
                             namespace="vision", workspace=None, profile=None, queue=None, state=state,
                             gpu_class_label=settings.gpu_class_label)
    assert doc["object"]["totalGpus"] == 2 * 3 * 5
    assert doc["object"]["workers"] == {"pods": 7, "maxPods": 7, "gpuPods": 6, "maxGpuPods": 6}
    trainer = doc["object"]["podTemplates"][1]
    assert trainer["replicasField"] == "spec.replicatedJobs[1].replicas" and trainer["role"] == "replicated-job"


# Admission of the upstream samples as written.

def test_the_kep_fine_tune_sample_as_written_is_denied_naming_each_containers_requests_and_the_worker_count(
        state, settings, engine):
    decision = admit(ws.load(ws.JOBSET_FINE_TUNE), state=state, settings=settings, engine=engine)
    assert not decision.allowed
    fields = {(v.policy, v.field) for v in decision.violations}
    assert ("requests-required",
            "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.requests.cpu") in fields
    # 5 GPUs a pod resolves the 8-GPU profile, which runs exactly 2 workers: 3 trainer nodes are asked.
    [workers] = [v for v in decision.violations if v.policy == "workers-match-profile"]
    assert workers.field == "spec.replicatedJobs[1].replicas"
    assert "asks for 3 workers (trainer-node: 3)" in workers.message


def test_a_cpu_only_jobset_is_queued_and_given_a_run_id_without_gpu_placement(state, settings, engine):
    obj = ws.runnable(ws.load(ws.JOBSET_DRIVER_WORKERS), profile="cpu-small")
    decision = admit(obj, state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    out = decision.object
    assert out["spec"]["suspend"] is True and out["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    for t in KIND.pod_templates(out):
        assert t.template["metadata"]["labels"][labels.RUN_ID] == out["metadata"]["labels"][labels.RUN_ID]
        assert settings.gpu_class_label not in (t.spec.get("nodeSelector") or {})


# Structure and rules.

def test_a_jobset_without_replicated_jobs_or_with_wrong_types_is_malformed_with_field_paths():
    assert [v.field for v in KIND.malformed({"kind": "JobSet", "spec": {}})] == ["spec.replicatedJobs"]
    obj = ws.load(ws.JOBSET_FINE_TUNE)
    obj["spec"]["replicatedJobs"][1]["replicas"] = "3"
    obj["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = -1
    obj["spec"]["suspend"] = "yes"
    assert sorted(v.field for v in KIND.malformed(obj)) == [
        "spec.replicatedJobs[1].replicas", "spec.replicatedJobs[1].template.spec.parallelism", "spec.suspend"]


def test_a_queued_jobset_of_more_than_eight_replicated_jobs_is_denied_by_kueues_pod_set_limit():
    obj = ws.load(ws.JOBSET_DRIVER_WORKERS)
    obj["spec"]["replicatedJobs"] = [dict(copy.deepcopy(obj["spec"]["replicatedJobs"][0]), name=f"j{i}")
                                     for i in range(MAX_POD_SETS + 1)]
    templates = KIND.pod_templates(obj)
    [v] = KIND.checks(obj, templates, queued=True, old=None, elastic_jobs=False)
    assert v.policy == "kueue-pod-sets" and v.field == "spec.replicatedJobs" and "has 9 replicated jobs" in v.message
    obj["spec"]["replicatedJobs"].pop()
    assert KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None, elastic_jobs=False) == []


def test_replicas_times_parallelism_beyond_int32_is_denied_as_jobset_does():
    obj = ws.load(ws.JOBSET_DRIVER_WORKERS)
    obj["spec"]["replicatedJobs"][1]["replicas"] = 2**16
    obj["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = 2**15
    [v] = KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None, elastic_jobs=False)
    assert v.policy == "jobset-replicas" and v.field == "spec.replicatedJobs[1].replicas"
    assert str(INT32_MAX) in v.message


# UPDATE: jobset v0.11.1 pkg/webhooks/jobset_webhook.go ValidateUpdate.

def _stored(state, settings, engine) -> dict:
    obj = ws.runnable(ws.load(ws.JOBSET_FINE_TUNE), gpus=4, profile="h100-4gpu")
    stored = admit(obj, state=state, settings=settings, engine=engine).object
    stored["metadata"]["uid"] = "5f1c0e9a-1b2c-4d3e-8f90-a1b2c3d4e5f6"
    return stored


def test_pod_templates_are_never_claimed_mutable_as_jobset_allows_only_scheduling_fields_to_change():
    assert not KIND.templates_mutable({"spec": {"suspend": True}})
    assert not KIND.templates_mutable({"spec": {"suspend": False}})


def test_an_update_of_a_running_jobset_never_patches_its_pod_templates(state, settings, engine):
    old = _stored(state, settings, engine)
    old["spec"]["suspend"] = False  # Kueue admitted it: JobSet's webhook now holds replicatedJobs immutable
    new = copy.deepcopy(old)
    del new["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"]["labels"][labels.RUN_ID]
    del new["metadata"]["labels"][labels.RUN_ID]
    decision = mutate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings, engine)
    assert decision.allowed
    assert [op["path"] for op in decision.patch] == [f"/metadata/labels/{labels.RUN_ID.replace('/', '~1')}"]


def test_an_update_of_a_suspended_jobset_without_the_data_volume_gets_no_pod_template_patch(state, settings, engine):
    # JobSet's webhook would refuse a volume added under spec.replicatedJobs, suspended or not.
    old = _stored(state, settings, engine)
    for rjob in old["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "tau-data"]
        for c in pod["containers"]:
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "tau-data"]
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["example.com/team"] = "vision"
    decision = mutate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings, engine)
    assert decision.allowed and decision.patch is None


# Children: the Jobs the JobSet controller creates inherit the JobSet's run-id only.

JOBSET_CONTROLLER = {"username": "system:serviceaccount:jobset-system:jobset-controller-manager",
                     "groups": ["system:serviceaccounts", "system:authenticated"]}


def _child_job(parent: dict) -> dict:
    """The Job JobSet creates for replicated job ``trainer-node`` (index 0), as JobSet's controller
    builds it: the replicated job's Job template, owned by the JobSet, suspended like its parent."""
    rjob = parent["spec"]["replicatedJobs"][1]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "fine-tune-llm-trainer-node-0", "namespace": "vision",
        "labels": {"jobset.sigs.k8s.io/jobset-name": "fine-tune-llm"},
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "fine-tune-llm",
                             "uid": "5f1c0e9a-1b2c-4d3e-8f90-a1b2c3d4e5f6", "controller": True,
                             "blockOwnerDeletion": True}]},
        "spec": {**copy.deepcopy(rjob["template"]["spec"]), "suspend": True}}


def test_a_job_the_jobset_controller_creates_inherits_the_run_id_and_is_not_queued_again(state, settings, engine):
    parent = _stored(state, settings, engine)
    child = _child_job(parent)  # JobSet copies the pod template, run-id label included, not the JobSet's labels
    assert labels.RUN_ID not in child["metadata"]["labels"]
    decision = admit(child, state=state, settings=settings, engine=engine, user_info=JOBSET_CONTROLLER)
    assert decision.allowed, decision.message
    run_id = parent["metadata"]["labels"][labels.RUN_ID]
    out = decision.object
    assert out["metadata"]["labels"][labels.RUN_ID] == out["spec"]["template"]["metadata"]["labels"][labels.RUN_ID] \
        == run_id
    assert labels.KUEUE_QUEUE_NAME not in out["metadata"]["labels"]


def test_the_same_job_from_a_researcher_is_a_top_level_job_queued_by_taugate(state, settings, engine):
    child = _child_job(_stored(state, settings, engine))
    decision = admit(child, state=state, settings=settings, engine=engine,
                     user_info={"username": "alice", "groups": ["vision-researchers"]})
    assert decision.object["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
