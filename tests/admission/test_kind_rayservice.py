"""KubeRay RayService (``taugate.kinds.rayservice``): the RayCluster arithmetic of
``spec.rayClusterConfig`` (shared with RayCluster and RayJob, not copied), suspended there as
Kueue's RayService integration does, and Kueue's and KubeRay's RayService rules."""

from __future__ import annotations

import copy

from taugate import labels
from taugate.kinds import raycluster, rayservice
from taugate.policy_input import build_policy_input
from taugate.webhook.review import admit, mutate, request_for
from tests import workload_samples as ws
from tests.paths import STABLE_DIFFUSION

KIND = rayservice.KIND


def _cluster_as_raycluster(obj: dict) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c"},
            "spec": copy.deepcopy(obj["spec"]["rayClusterConfig"])}


def test_a_rayservices_pods_are_the_raycluster_pods_of_its_cluster_config():
    obj = ws.load(STABLE_DIFFUSION)
    obj["spec"]["rayClusterConfig"]["workerGroupSpecs"][0].update(replicas=1, minReplicas=3, numOfHosts=2)
    templates = KIND.pod_templates(obj)
    # KubeRay clamps replicas to minReplicas: 3 replicas of 2 hosts.
    assert [(t.role, t.group, t.replicas, t.gpus_per_pod) for t in templates] == [
        ("head", "head", 1, 0), ("worker", "gpu-group", 6, 1)]
    assert [(t.role, t.replicas) for t in templates] == [
        (t.role, t.replicas) for t in raycluster.KIND.pod_templates(_cluster_as_raycluster(obj))]
    assert templates[1].path == ("spec", "rayClusterConfig", "workerGroupSpecs", 0, "template")


def test_with_in_tree_autoscaling_the_policy_input_reaches_max_replicas_times_hosts(state, settings):
    obj = ws.load(STABLE_DIFFUSION)
    cluster = obj["spec"]["rayClusterConfig"]
    cluster["enableInTreeAutoscaling"] = True
    cluster["workerGroupSpecs"][0].update(maxReplicas=4, numOfHosts=2)
    doc = build_policy_input(obj=obj, templates=KIND.pod_templates(obj), operation="CREATE", user_info=None,
                             namespace="vision", workspace=None, profile=None, queue=None, state=state,
                             gpu_class_label=settings.gpu_class_label)
    assert doc["object"]["autoscaling"] is True
    assert doc["object"]["workers"] == {"pods": 2, "maxPods": 8, "gpuPods": 2, "maxGpuPods": 8}
    assert doc["object"]["podTemplates"][1]["replicasField"] == "spec.rayClusterConfig.workerGroupSpecs[0].replicas"


def test_a_queued_rayservice_is_suspended_in_its_cluster_config_and_placed_on_the_gpu_group_only(
        state, settings, engine):
    decision = admit(ws.load(STABLE_DIFFUSION), state=state, settings=settings, engine=engine)
    assert decision.allowed, decision.message
    out = decision.object
    assert out["spec"]["rayClusterConfig"]["suspend"] is True and "suspend" not in out["spec"]
    head, worker = KIND.pod_templates(out)
    assert settings.gpu_class_label in worker.spec["nodeSelector"]
    assert "nodeSelector" not in head.spec
    assert head.template["metadata"]["labels"][labels.RUN_ID] == out["metadata"]["labels"][labels.RUN_ID]


def test_kueues_rules_on_worker_groups_and_autoscaling_apply_to_the_cluster_config(state, settings, engine):
    obj = ws.load(STABLE_DIFFUSION)
    cluster = obj["spec"]["rayClusterConfig"]
    cluster["enableInTreeAutoscaling"] = True
    cluster["workerGroupSpecs"] = [dict(copy.deepcopy(cluster["workerGroupSpecs"][0]), groupName=f"g{i}")
                                   for i in range(raycluster.MAX_WORKER_GROUPS + 1)]
    found = {v.policy: v.field for v in KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None,
                                                    elastic_jobs=False)}
    assert found == {"kueue-worker-groups": "spec.rayClusterConfig.workerGroupSpecs",
                     "kueue-autoscaling": "spec.rayClusterConfig.enableInTreeAutoscaling"}


def test_a_head_service_name_is_refused_as_kuberay_refuses_it():
    obj = ws.load(STABLE_DIFFUSION)
    obj["spec"]["rayClusterConfig"]["headGroupSpec"]["headService"] = {"metadata": {"name": "mine"}}
    [v] = KIND.checks(obj, KIND.pod_templates(obj), queued=True, old=None, elastic_jobs=False)
    assert v.field == "spec.rayClusterConfig.headGroupSpec.headService.metadata.name"


def test_a_rayservice_without_a_cluster_config_or_with_a_wrong_suspend_is_malformed():
    assert [v.field for v in KIND.malformed({"kind": "RayService", "spec": {}})] == ["spec.rayClusterConfig"]
    obj = ws.load(STABLE_DIFFUSION)
    obj["spec"]["rayClusterConfig"]["suspend"] = "no"
    assert [v.field for v in KIND.malformed(obj)] == ["spec.rayClusterConfig.suspend"]


def test_kueues_unsuspend_of_a_rayservice_is_allowed_without_a_patch(state, settings, engine):
    old = admit(ws.load(STABLE_DIFFUSION), state=state, settings=settings, engine=engine).object
    new = copy.deepcopy(old)
    new["spec"]["rayClusterConfig"]["suspend"] = False
    kueue = {"username": "system:serviceaccount:kueue-system:kueue-controller-manager"}
    decision = mutate(request_for(new, namespace="vision", operation="UPDATE", old=old, user_info=kueue),
                      state, settings, engine)
    assert decision.allowed and decision.patch is None
