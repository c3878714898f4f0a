"""Built-in validation: Kubernetes, KubeRay and Kueue rules, caught at `kubectl apply` with the
field path, what was asked, what is allowed and how to fix it, all reported together."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from taugate import labels
from taugate.webhook.resolution import Resolution, Unresolved, resolve
from taugate.webhook.review import Context, admit, mutate, request_for, subject_of, validate

WORKER = ("spec", "rayClusterSpec", "workerGroupSpecs", 0)


def _worker(obj):
    g = obj
    for p in WORKER:
        g = g[p]
    return g


def _denied(obj, state, settings, **kw):
    d = admit(obj, state=state, settings=settings, namespace="vision", **kw)
    assert not d.allowed
    return {v.policy: v for v in d.violations}, d


def test_a_gpu_request_different_from_its_limit_is_denied_with_both_numbers(classifier, state, settings):
    _worker(classifier)["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    found, _ = _denied(classifier, state, settings)
    v = found["gpu-request-equals-limit"]
    assert v.field == ('spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources'
                       '.requests["nvidia.com/gpu"]')
    assert "requests 2" in v.message and "limits 1" in v.message and "fix:" in v.message


def test_a_fraction_of_a_gpu_is_denied(classifier, state, settings):
    res = _worker(classifier)["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "500m"
    found, _ = _denied(classifier, state, settings)
    assert "whole GPUs" in found["gpu-whole-numbers"].message


def test_ray_num_gpus_above_the_containers_gpu_limit_is_denied(classifier, state, settings):
    _worker(classifier)["rayStartParams"]["num-gpus"] = "4"
    found, _ = _denied(classifier, state, settings)
    v = found["ray-num-gpus"]
    assert v.field == "spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams.num-gpus"
    assert "4 GPU(s)" in v.message and "at most 1" in v.message


def test_a_rayjob_name_over_47_characters_and_a_long_generate_name_are_denied(classifier, state, settings):
    named = copy.deepcopy(classifier)
    del named["metadata"]["generateName"]
    named["metadata"]["name"] = "x" * 48
    found, _ = _denied(named, state, settings)
    assert "48 characters" in found["rayjob-name-length"].message and "47" in found["rayjob-name-length"].message
    classifier["metadata"]["generateName"] = "y" * 43
    found, _ = _denied(classifier, state, settings)
    assert found["rayjob-name-length"].field == "metadata.generateName"


def test_more_than_seven_worker_groups_cannot_be_queued_by_kueue(classifier, state, settings):
    groups = classifier["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    for i in range(7):
        g = copy.deepcopy(groups[0])
        g["groupName"] = f"g{i}"
        groups.append(g)
    found, _ = _denied(classifier, state, settings)
    assert "8 worker groups" in found["kueue-worker-groups"].message


def _refusing(settings):
    """The platform setting that refuses a queued RayJob saying shutdownAfterJobFinishes: false."""
    return settings.model_copy(update={"ray_shutdown_after_job_finishes": "refuse"})


def test_shutdown_false_and_a_cluster_selector_are_both_reported_together(classifier, state, settings):
    classifier["spec"]["shutdownAfterJobFinishes"] = False
    classifier["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    found, d = _denied(classifier, state, _refusing(settings))
    assert {"rayjob-shutdown", "rayjob-cluster-selector"} <= set(found)
    assert d.message.count("\n- ") >= 2


def test_deletion_rules_on_a_queued_rayjob_are_denied_naming_the_kueue_and_kuberay_rules(classifier, state, settings):
    classifier["spec"].pop("shutdownAfterJobFinishes", None)
    classifier["spec"]["deletionStrategy"] = {"deletionRules": [
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}}]}
    found, _ = _denied(classifier, state, settings)
    v = found["rayjob-shutdown"]
    assert v.field == "spec.deletionStrategy.deletionRules"
    assert "Kueue requires" in v.message and "fix: remove spec.deletionStrategy.deletionRules" in v.message


def test_a_delete_none_policy_on_a_queued_rayjob_is_denied_with_the_policies_allowed(classifier, state, settings):
    classifier["spec"]["shutdownAfterJobFinishes"] = True
    classifier["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteCluster"},
                                              "onFailure": {"policy": "DeleteNone"}}
    found, _ = _denied(classifier, state, settings)
    v = found["rayjob-shutdown"]
    assert v.field == "spec.deletionStrategy.onFailure.policy" and "DeleteCluster" in v.message


def test_a_rayjob_that_never_says_shutdown_after_job_finishes_is_denied_as_kueue_would(classifier, state, settings):
    del classifier["spec"]["shutdownAfterJobFinishes"]
    request = request_for(classifier, namespace="vision")  # not through the mutating webhook
    d = validate(request, state, settings)
    assert not d.allowed
    assert {v.policy: v for v in d.violations}["rayjob-shutdown"].message.startswith("is missing; allowed: true")


def test_a_queue_label_of_another_workspace_is_denied_listing_the_allowed_queue(classifier, state, settings):
    classifier["metadata"]["labels"] = {labels.KUEUE_QUEUE_NAME: "nlp-queue"}
    found, _ = _denied(classifier, state, settings)
    v = found["queue"]
    assert "workspace 'nlp'" in v.message and "allowed: vision-queue" in v.message


def test_an_unknown_or_foreign_profile_is_denied_listing_the_candidates(classifier, state, settings):
    classifier["metadata"]["labels"] = {labels.WORKLOAD_PROFILE: "a100-4gpu"}
    found, _ = _denied(classifier, state, settings)
    msg = found["workload-profile"].message
    assert "does not apply" in msg and "h100-1gpu" in msg and "h100-8gpu" in msg
    classifier["metadata"]["labels"] = {labels.WORKLOAD_PROFILE: "nope"}
    found, _ = _denied(classifier, state, settings)
    assert "does not exist" in found["workload-profile"].message


def test_a_priority_class_other_than_the_profiles_is_denied(classifier, state, settings):
    classifier["metadata"]["labels"] = {labels.KUEUE_PRIORITY_CLASS: "urgent"}
    found, _ = _denied(classifier, state, settings)
    assert "'tau-train-default'" in found["priority-class"].message


def test_validation_on_update_blocks_only_new_problems(classifier, state, settings):
    created = admit(classifier, state=state, settings=settings, namespace="vision").object
    old = copy.deepcopy(created)
    old["spec"]["shutdownAfterJobFinishes"] = False  # admitted under older rules
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False  # Kueue unsuspends it
    d = validate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings)
    assert d.allowed
    new["metadata"]["labels"][labels.RUN_ID] = "a" * 24
    d = validate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings)
    assert not d.allowed and d.violations[0].policy == "run-id"


def test_an_update_is_excused_a_problem_the_old_object_had_at_the_same_field_whatever_its_message_says(
        classifier, state, settings):
    created = admit(classifier, state=state, settings=settings, namespace="vision").object
    old = copy.deepcopy(created)
    gpu = _worker(old)["template"]["spec"]["containers"][0]["resources"]
    gpu["requests"]["nvidia.com/gpu"] = "2"  # admitted under older rules: request 2, limit 1
    new = copy.deepcopy(old)
    _worker(new)["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "3"
    old_found = validate(request_for(old, namespace="vision"), state, settings).violations
    new_found = validate(request_for(new, namespace="vision"), state, settings).violations
    [before] = [v for v in old_found if v.policy == "gpu-request-equals-limit"]
    [after] = [v for v in new_found if v.policy == "gpu-request-equals-limit"]
    assert before.field == after.field and before.message != after.message  # the message quotes the request
    assert validate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings).allowed
    _worker(new)["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0.5"
    d = validate(request_for(new, namespace="vision", operation="UPDATE", old=old), state, settings)
    assert not d.allowed and {v.policy for v in d.violations} == {"gpu-whole-numbers"}


def test_a_mutated_request_that_fails_resolution_is_denied_already_by_the_mutating_webhook(classifier, state, settings):
    classifier["metadata"]["labels"] = {labels.KUEUE_QUEUE_NAME: "missing"}
    d = mutate(request_for(classifier, namespace="vision"), state, settings)
    assert not d.allowed and d.code == 403
    assert "does not exist in namespace 'vision'" in d.message


def test_nine_gpus_per_worker_on_the_8_gpu_class_is_denied_with_the_field_and_both_numbers(classifier, state, settings,
                                                                                             engine):
    res = _worker(classifier)["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "9"
    d = admit(classifier, state=state, settings=settings, engine=engine, namespace="vision")
    assert not d.allowed
    field = 'spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]'
    fits = [v for v in d.violations if v.policy == "gpu-per-pod-fits-node"]
    assert fits and fits[0].field == field
    assert "9" in fits[0].message and "8" in fits[0].message


def test_every_violation_is_reported_together_built_in_and_policy(classifier, state, settings, engine):
    worker = _worker(classifier)
    res = worker["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "9"
    worker["rayStartParams"]["num-gpus"] = "12"
    classifier["spec"]["shutdownAfterJobFinishes"] = False
    d = admit(classifier, state=state, settings=_refusing(settings), engine=engine, namespace="vision")
    policies = {v.policy for v in d.violations}
    assert {"ray-num-gpus", "rayjob-shutdown", "gpu-per-pod-fits-node"} <= policies


def test_a_decision_cannot_be_changed_once_it_is_built(classifier, state, settings):
    d = admit(classifier, state=state, settings=settings, namespace="vision")
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.allowed = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.patch = None  # type: ignore[misc]


def test_a_profile_that_cannot_be_resolved_is_a_typed_result_carrying_the_violations(classifier, state, settings):
    classifier["metadata"].setdefault("labels", {})[labels.WORKLOAD_PROFILE] = "no-such-profile"
    request = request_for(classifier, namespace="vision")
    subject = subject_of(Context.of(request, state, settings))
    res = resolve(classifier, subject.templates, subject.workspace, state, settings)
    assert isinstance(res, Unresolved) and not isinstance(res, Resolution)
    assert [v.policy for v in res.violations] == ["workload-profile"] and "no-such-profile" in res.violations[0].message
    d = mutate(request, state, settings)
    assert not d.allowed and list(d.violations) == list(res.violations)


def test_workload_checks_and_taugates_own_kinds_report_the_one_violation_type(classifier, state, settings):
    from taugate import violation
    from taugate.tau_admission import validate_tau_object
    from taugate.webhook import decision

    assert decision.Violation is violation.Violation
    _worker(classifier)["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    found, _ = _denied(classifier, state, settings)
    assert all(type(v) is violation.Violation for v in found.values())
    cluster = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauCluster", "metadata": {"name": "not-cluster"},
               "spec": {}}
    tau = validate_tau_object({"operation": "CREATE", "kind": {"kind": "TauCluster"}, "object": cluster}, settings)
    assert tau and all(type(v) is violation.Violation for v in tau)
