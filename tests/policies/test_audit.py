"""The audit (webhook/audit.py, review.judge): a stored workload is judged by the policy set as a
CREATE of it would be now, every enforcement action included, with no mutation and no UPDATE
excuse, for every kind of the registry."""

from __future__ import annotations

import copy

import pytest
import yaml

from taugate.kinds import KINDS
from taugate.policy_report import build_reports
from taugate.webhook.audit import ENGINE_FAILURE, PolicyAuditor
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.review import admit
from tests.admission.test_kind_registry import SAMPLES
from tests.paths import REPO
from tests.policies.conftest import POLICIES

NINE_GPUS = REPO / "examples" / "rayjob-nine-gpus.yaml"
GPU_RULES = ("gpu-per-pod-fits-node", "gpu-per-pod-within-profile")


@pytest.fixture(scope="module")
def auditor(settings):
    return PolicyAuditor(load_policy_engine(POLICIES), settings)


def stored(obj: dict, state, settings, enforcement: dict[str, str], name: str) -> dict:
    """``obj`` as the API server would store it after admission under ``enforcement`` (with a
    name and uid, as a created object has)."""
    engine = load_policy_engine(POLICIES, enforcement=enforcement)
    decision = admit(obj, state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    out = copy.deepcopy(decision.object)
    out["metadata"].pop("generateName", None)
    out["metadata"].update(name=name, uid=f"uid-{name}")
    return out


def test_an_existing_nine_gpu_per_worker_rayjob_admitted_while_the_rule_was_dry_run_fails_it_now(
        auditor, example_state, settings):
    raw = yaml.safe_load(NINE_GPUS.read_text())
    rayjob = stored(raw, example_state, settings, dict.fromkeys(GPU_RULES, "dryrun"), "resnet-nine")
    (found,) = auditor.audit([rayjob], example_state)
    failing = {(v.policy, v.action) for v in found.violations}
    assert ("gpu-per-pod-fits-node", "deny") in failing
    report = build_reports([found], digest=auditor.digest).namespaced["vision"]
    fits = [r for r in report["results"] if r["policy"] == "gpu-per-pod-fits-node"]
    assert fits and fits[0]["result"] == "fail" and "9 GPUs per pod" in fits[0]["message"]
    assert fits[0]["resources"][0]["name"] == "resnet-nine"
    assert fits[0]["properties"]["field"].endswith('.resources.limits["nvidia.com/gpu"]')


def test_a_stored_object_is_not_mutated_before_it_is_judged(auditor, example_state):
    """The raw 9-GPU RayJob was never mutated: the default mutation would set
    shutdownAfterJobFinishes, and the audit reports it missing instead of setting it."""
    raw = yaml.safe_load(NINE_GPUS.read_text())
    raw["metadata"]["name"] = "raw"
    del raw["spec"]["shutdownAfterJobFinishes"]  # as a client that does not set it sends it
    before = copy.deepcopy(raw)
    (found,) = auditor.audit([raw], example_state)
    assert "spec.shutdownAfterJobFinishes" in {v.field for v in found.violations}
    assert raw == before


def test_dry_run_and_warn_policies_are_evaluated_with_their_action(settings, example_state):
    raw = yaml.safe_load(NINE_GPUS.read_text())
    rayjob = stored(raw, example_state, settings, dict.fromkeys(GPU_RULES, "dryrun"), "r")
    auditor = PolicyAuditor(load_policy_engine(POLICIES, enforcement={"gpu-per-pod-fits-node": "dryrun",
                                                                      "gpu-per-pod-within-profile": "warn"}), settings)
    (found,) = auditor.audit([rayjob], example_state)
    actions = {v.policy: v.action for v in found.violations}
    assert actions["gpu-per-pod-fits-node"] == "dryrun" and actions["gpu-per-pod-within-profile"] == "warn"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_registered_kind_is_audited_by_every_policy(kind, auditor, example_state):
    obj = copy.deepcopy(SAMPLES[kind.kind])
    obj["metadata"]["namespace"] = "vision"
    (found,) = auditor.audit([obj], example_state)
    assert (found.kind, found.name) == (kind.kind, obj["metadata"]["name"])
    assert found.evaluated == auditor.policies() and len(found.evaluated) >= 9


def test_objects_admission_leaves_alone_are_not_audited(auditor, example_state):
    job = copy.deepcopy(SAMPLES["Job"])
    outside = {**job, "metadata": {"name": "j", "namespace": "kube-system"}}
    child = {**job, "metadata": {"name": "submitter", "namespace": "vision", "ownerReferences": [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "r", "uid": "u", "controller": True}]}}
    pod = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "vision"}}
    assert auditor.audit([outside, child, pod], example_state) == []


def test_a_workload_no_profile_resolves_for_is_reported_without_policy_passes(auditor, example_state):
    obj = copy.deepcopy(SAMPLES["RayJob"])
    obj["metadata"].update(namespace="vision", labels={"tau.azure.com/workload-profile": "no-such-profile"})
    (found,) = auditor.audit([obj], example_state)
    assert found.violations and found.evaluated == frozenset() and found.passed == 0


def test_a_policy_that_fails_at_run_time_is_reported_as_that_policys_error(policy_copy, example_state, settings):
    target = policy_copy / "head-without-gpu" / "policy.rego"
    target.write_text(target.read_text() + '\nconflict := 1 if input.object.metadata.name == "boom"\n\n'
                      'conflict := 2 if input.object.metadata.name == "boom"\n\n'
                      'deny contains {"msg": "x", "field": "f", "policy": "head-without-gpu"} if conflict == 3\n')
    auditor = PolicyAuditor(load_policy_engine(policy_copy), settings)
    obj = copy.deepcopy(SAMPLES["RayJob"])
    obj["metadata"].update(name="boom", namespace="vision")
    (found,) = auditor.audit([obj], example_state)
    assert found.errors and found.errors[0][0] in ("head-without-gpu", ENGINE_FAILURE)
    assert build_reports([found], digest="d").failing


def test_a_child_whose_owner_is_audited_is_judged_through_its_owner_only(auditor, example_state):
    """KubeRay copies the RayJob's labels (tau.azure.com/workspace included) onto its RayCluster."""
    rayjob = copy.deepcopy(SAMPLES["RayJob"])
    rayjob["metadata"].update(namespace="vision", uid="uid-rj", labels={"tau.azure.com/workspace": "vision"})
    cluster = copy.deepcopy(SAMPLES["RayCluster"])
    cluster["metadata"].update(namespace="vision", uid="uid-rc", labels={"tau.azure.com/workspace": "vision"},
                               ownerReferences=[{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "r",
                                                 "uid": "uid-rj", "controller": True}])
    assert [a.kind for a in auditor.audit([rayjob, cluster], example_state)] == ["RayJob"]
    # With its owner gone (or never audited) it is judged as the stored object it is.
    assert [a.kind for a in auditor.audit([cluster], example_state)] == ["RayCluster"]


def test_a_bare_pod_kube_scheduler_bound_is_not_reported_for_its_node_name(auditor, example_state, settings):
    """The Kubernetes docs' GPU Pod, admitted in the workspace, then bound by kube-scheduler (which
    writes ``spec.nodeName`` through ``pods/binding``); a Deployment naming a node is still reported."""
    pod = yaml.safe_load((REPO / "tests" / "data" / "admission" / "core" / "gpu-pod.yaml").read_text())
    pod["metadata"]["namespace"] = "vision"
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
    bound = stored(pod, example_state, settings, {}, "vector-add")
    bound["spec"]["nodeName"] = "aks-h100-0"
    (found,) = auditor.audit([bound], example_state)
    assert "node-name" not in {v.policy for v in found.violations}, found.violations
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pinned", "namespace": "vision"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                      "metadata": {"labels": {"a": "b"}}, "spec": {**copy.deepcopy(bound["spec"])}}}}
    (found,) = auditor.audit([deployment], example_state)
    assert "node-name" in {v.policy for v in found.violations}, found.violations
