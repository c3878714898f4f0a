"""A child (the RayCluster a RayJob creates, KubeRay's submitter Job) inherits its parent's
run-id and is otherwise left to its parent's queue and checks, but only when the owning
controller creates it: trust comes from the requester's identity, not from an ownerReference,
which anyone may write (issue 14: a researcher's RayCluster claiming a RayJob owner skipped both
webhooks, 64 workers x 8 GPUs against a 32-GPU queue)."""

from __future__ import annotations

import copy

import jsonpatch
import yaml

from taugate import labels
from taugate.webhook.review import admit, mutate, request_for, validate
from tests import upstream_manifests as m
from tests.paths import KUBERAY_SAMPLES

OWNER = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "resnet", "uid": "3c1f6a0e-7a8b-4c2d-9e0f-1a2b3c4d5e6f",
          "controller": True, "blockOwnerDeletion": True}]
RESEARCHER = {"username": "alice", "groups": ["vision-researchers", "system:authenticated"]}
KUBERAY = {"username": m.KUBERAY, "groups": ["system:serviceaccounts", "system:authenticated"]}


def _huge_raycluster() -> dict:
    """KubeRay's RayCluster sample in ``vision`` as 64 workers x 8 GPUs, claiming a RayJob owner."""
    rc = m.in_workspace(yaml.safe_load((KUBERAY_SAMPLES / "ray-cluster.complete.yaml").read_text()))
    group = rc["spec"]["workerGroupSpecs"][0]
    group.update(replicas=64, minReplicas=64, maxReplicas=64)
    res = group["template"]["spec"]["containers"][0].setdefault("resources", {})
    res.setdefault("limits", {})[labels.GPU_RESOURCE] = "8"
    res.setdefault("requests", {})[labels.GPU_RESOURCE] = "8"
    rc["metadata"]["ownerReferences"] = copy.deepcopy(OWNER)
    return rc


def test_a_researchers_raycluster_with_a_forged_rayjob_owner_is_queued_placed_and_denied_as_top_level(state, settings,
                                                                                                      engine):
    rc = _huge_raycluster()
    d = admit(rc, state=state, settings=settings, engine=engine, user_info=RESEARCHER)
    assert not d.allowed
    assert "[gpu-total-fits-queue] spec.workerGroupSpecs[0].replicas: the workload asks for 512 GPUs" in d.message
    assert "can admit at most 32 nvidia.com/gpu" in d.message
    mutated = mutate(request_for(rc, namespace="vision", user_info=RESEARCHER), state, settings)
    out = jsonpatch.apply_patch(rc, mutated.patch) if mutated.patch else rc
    assert out["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert out["spec"]["suspend"] is True


def test_the_same_raycluster_created_by_kuberays_operator_is_a_child_that_inherits_the_run_id_only(state, settings):
    rc = _huge_raycluster()
    rc["metadata"]["labels"] = {labels.RUN_ID: m.RUN_ID}
    d = mutate(request_for(rc, namespace="vision", user_info=KUBERAY), state, settings)
    out = jsonpatch.apply_patch(rc, d.patch) if d.patch else rc
    assert labels.KUEUE_QUEUE_NAME not in out["metadata"]["labels"]
    assert validate(request_for(out, namespace="vision", user_info=KUBERAY), state, settings).allowed


def test_an_update_of_a_top_level_object_that_claims_an_owner_is_validated_as_top_level(state, settings, engine):
    small = _huge_raycluster()
    group = small["spec"]["workerGroupSpecs"][0]
    group.update(replicas=1, minReplicas=1, maxReplicas=1)
    res = group["template"]["spec"]["containers"][0]["resources"]
    res["limits"][labels.GPU_RESOURCE] = res["requests"][labels.GPU_RESOURCE] = "1"
    created = admit(small, state=state, settings=settings, engine=engine, user_info=RESEARCHER)
    assert labels.WORKSPACE in created.object["metadata"]["labels"]
    stored = m.stored(created.object, "forged-x7k2p")
    grown = copy.deepcopy(stored)
    grown["spec"]["workerGroupSpecs"][0].update(replicas=64, minReplicas=64, maxReplicas=64)
    gres = grown["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    gres["limits"][labels.GPU_RESOURCE] = gres["requests"][labels.GPU_RESOURCE] = "8"
    v = validate(request_for(grown, namespace="vision", operation="UPDATE", old=stored, user_info=RESEARCHER),
                 state, settings, engine)
    assert not v.allowed


def test_the_garbage_collectors_update_of_a_genuine_child_stays_a_child(state, settings, engine):
    rc = _huge_raycluster()
    rc["metadata"]["labels"] = {labels.RUN_ID: m.RUN_ID}
    stored = m.stored(rc, "resnet-raycluster-x7k2p")
    stored["metadata"]["finalizers"] = ["ray.io/gcs-ft-redis-cleanup-finalizer"]
    gone = copy.deepcopy(stored)
    gone["metadata"]["finalizers"] = []
    gone["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    request = request_for(gone, namespace="vision", operation="UPDATE", old=stored, user_info={"username": m.GC})
    assert mutate(request, state, settings).patch is None
    assert validate(request, state, settings, engine).allowed
