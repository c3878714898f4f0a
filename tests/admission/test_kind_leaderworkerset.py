"""LeaderWorkerSet (``taugate.kinds.leaderworkerset``): groups of a leader and workers, queued per
group by Kueue and never suspended (a serving workload): its pods are held by the annotations
Kueue's webhook would put on the pod templates, which taugate sets too; its pod templates are
left alone on UPDATE (Kueue holds them immutable)."""

from __future__ import annotations

import copy

from taugate import labels
from taugate.kinds import leaderworkerset
from taugate.kinds.leaderworkerset import FRAMEWORK, GROUP_SERVING, SUSPENDING_PARENT, group_pods
from taugate.pods import INT32_MAX
from taugate.policy_input import build_policy_input
from taugate.webhook.review import admit, mutate, request_for
from tests import workload_samples as ws
from tests.paths import LWS_SAMPLE, LWS_VLLM_GPU

KIND = leaderworkerset.KIND


# The GPU arithmetic: kueue v0.17 leaderworkerset_reconciler.go podSets, per group.

def test_replicas_and_size_default_to_one_group_of_one_pod():
    assert group_pods({}) == (1, 1)
    assert group_pods({"replicas": 3, "leaderWorkerTemplate": {"size": 4}}) == (3, 4)


def test_each_group_runs_one_leader_and_size_minus_one_workers():
    templates = KIND.pod_templates(ws.load(LWS_VLLM_GPU))  # 2 groups of size 2, 8 GPUs a pod
    assert [(t.role, t.group, t.replicas, t.min_replicas, t.gpus_per_pod) for t in templates] == [
        ("leader", "leader", 2, 1, 8), ("worker", "worker", 2, 1, 8)]
    assert sum(t.replicas * t.gpus_per_pod for t in templates) == 32


def test_without_a_leader_template_the_worker_template_runs_every_pod_of_a_group():
    [t] = KIND.pod_templates(ws.load(LWS_SAMPLE))  # 3 groups of 4 nginx pods
    assert (t.role, t.path, t.replicas, t.min_replicas) == (
        "worker", ("spec", "leaderWorkerTemplate", "workerTemplate"), 12, 4)


def test_a_leader_only_group_has_a_worker_template_of_no_pods_and_zero_groups_hold_nothing():
    obj = ws.load(LWS_VLLM_GPU)
    obj["spec"]["leaderWorkerTemplate"]["size"] = 1
    assert [t.replicas for t in KIND.pod_templates(obj)] == [2, 0]
    obj["spec"]["replicas"] = 0
    assert [(t.replicas, t.min_replicas) for t in KIND.pod_templates(obj)] == [(0, 0), (0, 0)]


def test_the_policy_input_needs_only_one_group_to_fit_the_queue(state, settings):
    obj = ws.load(LWS_VLLM_GPU)
    doc = build_policy_input(obj=obj, templates=KIND.pod_templates(obj), operation="CREATE", user_info=None,
                             namespace="vision", workspace=None, profile=None, queue=None, state=state,
                             gpu_class_label=settings.gpu_class_label)
    assert (doc["object"]["totalGpus"], doc["object"]["minTotalGpus"]) == (32, 16)
    assert {t["replicasField"] for t in doc["object"]["podTemplates"]} == {"spec.replicas"}
    assert doc["object"]["workers"]["gpuPods"] == 4


# Admission: queued without suspend, its pods gated through Kueue's pod-template annotations.

def test_a_queued_leaderworkerset_gets_no_suspend_and_kueues_gating_metadata_on_both_templates(
        state, settings, engine):
    decision = admit(ws.one_group(ws.load(LWS_VLLM_GPU)), state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    out = decision.object
    assert "suspend" not in out["spec"] and "suspend" not in out["spec"]["leaderWorkerTemplate"]
    for t in KIND.pod_templates(out):
        meta = t.template["metadata"]
        assert meta["annotations"] == {SUSPENDING_PARENT: FRAMEWORK, GROUP_SERVING: "true"}
        assert meta["labels"]["kueue.x-k8s.io/priority-class"] == out["metadata"]["labels"][
            "kueue.x-k8s.io/priority-class"] == "tau-train-default"
    assert out["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"


def test_the_vllm_sample_as_written_is_denied_for_four_workers_under_a_two_worker_profile(state, settings, engine):
    decision = admit(ws.load(LWS_VLLM_GPU), state=state, settings=settings, engine=engine)
    assert not decision.allowed
    [v] = decision.violations
    assert (v.policy, v.field) == ("workers-match-profile", "spec.replicas")
    assert "asks for 4 workers (leader: 2, worker: 2)" in v.message


def test_a_malformed_leaderworkerset_is_denied_with_each_field_path():
    obj = ws.load(LWS_VLLM_GPU)
    obj["spec"]["leaderWorkerTemplate"]["size"] = 0
    obj["spec"]["replicas"] = "2"
    del obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert sorted(v.field for v in KIND.malformed(obj)) == [
        "spec.leaderWorkerTemplate.size", "spec.leaderWorkerTemplate.workerTemplate", "spec.replicas"]


def test_groups_times_size_beyond_int32_is_denied_as_leaderworkerset_does():
    obj = ws.load(LWS_VLLM_GPU)
    obj["spec"]["replicas"] = 2**16
    obj["spec"]["leaderWorkerTemplate"]["size"] = 2**15
    [v] = KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None, elastic_jobs=False)
    assert v.policy == "leaderworkerset-replicas" and str(INT32_MAX) in v.message


def test_an_update_never_patches_the_pod_templates_kueue_holds_immutable(state, settings, engine):
    old = admit(ws.one_group(ws.load(LWS_VLLM_GPU)), state=state, settings=settings, engine=engine).object
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 2  # scale out by a group
    worker = new["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    del worker["metadata"]["labels"][labels.RUN_ID]
    del worker["spec"]["nodeSelector"]
    del new["metadata"]["labels"][labels.KUEUE_QUEUE_NAME]
    decision = mutate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings, engine)
    assert decision.allowed
    assert [op["path"] for op in decision.patch] == ["/metadata/labels/kueue.x-k8s.io~1queue-name"]
