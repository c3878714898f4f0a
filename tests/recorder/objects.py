"""Builders of the objects the recorder reads, shaped like what the API server returns.

The RayJob is KubeRay's own GPU sample (``ray-job.pytorch-image-classifier.yaml``: a CPU head and
4 GPU workers in group ``gpu-group``) with what taugate's webhook adds (run-id, queue, workspace
and profile labels, the admission record annotation). Workloads follow Kueue's ``Workload`` CRD
(v1beta2, Kueue v0.17's storage version; validated against Kueue's own CRD in the tests), Pods and
Nodes the core API (the Node is ``tests/data/nodes``' DGX A100, shaped like NVIDIA knavigator's).
KubeRay's and Kueue's files are
read from the pinned Go modules (``tests/paths.py``).
"""

from __future__ import annotations

import copy
import json

import yaml

from taugate import labels
from taugate import record as admission_record_signing
from tests.paths import DATA, IMAGE_CLASSIFIER, KUEUE_CRDS, KUEUE_JOB

RAYJOB_SAMPLE = IMAGE_CLASSIFIER
NODE_SAMPLE = DATA / "nodes" / "gpu-node-dgx-a100-80gb.yaml"
WORKLOAD_CRD = KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml"

RUN_ID = "5f0c2a9b7d1e4c3a8b6f0d12"
NS = "team-a"
T0 = "2026-11-29T10:00:00Z"
ADMISSION_KEY = "test-admission-key-shared-by-webhook-and-operator"
"""The ``TAUGATE_ADMISSION_KEY`` the records below are signed with (``Settings(admission_key=...)``)."""


def admission_record(**overrides) -> dict:
    """What the webhook writes into ``tau.azure.com/admission``."""
    rec = {
        "profile": "a100-4x", "profileSetHash": "sha256:7c1e0b", "workspace": "team-a", "queue": "team-a-queue",
        "changes": [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "why": "workspace queue"},
                    {"op": "add", "path": "/spec/suspend", "why": "Kueue admits the run"}],
        "policyDigest": "sha256:0d9f3e",
        "decisions": [{"policy": "gpu-per-pod-fits-node", "action": "deny", "result": "pass"}],
    }
    rec.update(overrides)
    return rec


def rayjob(name: str = "train-resnet", run_id: str = RUN_ID, uid: str = "b1f2c3d4-0000-4000-8000-00000000aa01",
           record: dict | None = None, workers: int = 4, created: str = T0) -> dict:
    """The RayJob as stored after taugate's webhook: ``record`` is written as the annotation as
    given; without one, the webhook's record, signed with ``ADMISSION_KEY`` and bound to it."""
    obj = yaml.safe_load(RAYJOB_SAMPLE.read_text())
    obj["metadata"] = {
        "name": name, "namespace": NS, "uid": uid, "creationTimestamp": created,
        "labels": {labels.RUN_ID: run_id, labels.MANAGED_BY: labels.MANAGED_BY_VALUE, labels.WORKSPACE: "team-a",
                   labels.WORKLOAD_PROFILE: "a100-4x", labels.KUEUE_QUEUE_NAME: "team-a-queue"},
    }
    if record is None:
        record = admission_record_signing.sign(admission_record(), obj, ADMISSION_KEY.encode())
    obj["metadata"]["annotations"] = {labels.ADMISSION_RECORD: json.dumps(record)}
    obj["spec"]["suspend"] = True
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = workers
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = workers
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["maxReplicas"] = workers
    for tpl in _templates(obj):
        tpl.setdefault("metadata", {}).setdefault("labels", {})[labels.RUN_ID] = run_id
    return obj


def _templates(obj: dict) -> list[dict]:
    rcs = obj["spec"]["rayClusterSpec"]
    return [rcs["headGroupSpec"]["template"]] + [g["template"] for g in rcs["workerGroupSpecs"]]


def rayjob_status(obj: dict, deployment: str, job: str = "", reason: str | None = None, message: str | None = None,
                  end: str | None = None) -> dict:
    """``obj`` with a KubeRay status (``jobDeploymentStatus``, ``jobStatus``...)."""
    obj = copy.deepcopy(obj)
    st = {"jobDeploymentStatus": deployment, "rayClusterName": f"{obj['metadata']['name']}-raycluster-x7k2p",
          "startTime": "2026-11-29T10:01:00Z", "observedGeneration": 1}
    if job:
        st["jobStatus"] = job
        st["jobId"] = f"{obj['metadata']['name']}-8s4qz"
    if reason:
        st["reason"] = reason
    if message:
        st["message"] = message
    if end:
        st["endTime"] = end
    obj["status"] = st
    return obj


def workload(owner: dict, state: str = "pending", *, by_label: bool = True, message: str | None = None) -> dict:
    """A Kueue Workload for ``owner`` in ``state``: pending, reserved, admitted, evicted, finished."""
    meta = owner["metadata"]
    rcs = owner["spec"]["rayClusterSpec"]
    pod_sets = [{"name": "head", "count": 1, "template": copy.deepcopy(rcs["headGroupSpec"]["template"])}]
    for g in rcs["workerGroupSpecs"]:
        pod_sets.append({"name": g["groupName"], "count": g["replicas"], "template": copy.deepcopy(g["template"])})
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {
            "name": f"rayjob-{meta['name']}-3f2a1", "namespace": meta["namespace"], "uid": f"wl-{meta['uid']}",
            "creationTimestamp": T0,
            "labels": {labels.KUEUE_JOB_UID: meta["uid"]} if by_label else {},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": meta["name"], "uid": meta["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"queueName": "team-a-queue", "podSets": pod_sets, "priority": 0, "active": True},
        "status": {"conditions": []},
    }
    conds = wl["status"]["conditions"]
    pending_msg = message or ("couldn't assign flavors to pod set gpu-group: insufficient unused quota for "
                              "nvidia.com/gpu in flavor a100, 4 more needed")
    admission = {"clusterQueue": "gpu-cq", "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"],
         "flavors": {"cpu": "default", "memory": "default",
                     **({"nvidia.com/gpu": "a100"} if ps["name"] != "head" else {})},
         "resourceUsage": {"cpu": str(ps["count"]), "memory": f"{8 * ps['count']}G"}} for ps in pod_sets]}
    if state == "pending":
        conds.append(_cond("QuotaReserved", "False", "Pending", pending_msg, "2026-11-29T10:00:05Z"))
    elif state == "reserved":
        wl["status"]["admission"] = admission
        conds.append(_cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq",
                           "2026-11-29T10:02:00Z"))
        wl["status"]["admissionChecks"] = [{"name": "dws-prov", "state": "Pending", "message": "",
                                             "lastTransitionTime": "2026-11-29T10:02:00Z"}]
    elif state in ("admitted", "finished", "finished-failed"):
        wl["status"]["admission"] = admission
        conds.append(_cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq",
                           "2026-11-29T10:02:00Z"))
        conds.append(_cond("Admitted", "True", "Admitted", "The workload is admitted", "2026-11-29T10:02:00Z"))
        if state.startswith("finished"):
            ok = state == "finished"
            conds.append(_cond("Finished", "True", "Succeeded" if ok else "Failed",
                               "Job finished successfully" if ok else "Job failed", "2026-11-29T11:00:00Z"))
    elif state == "evicted":
        conds.append(_cond("QuotaReserved", "False", "Pending", "Preempted to accommodate a higher priority workload",
                           "2026-11-29T10:30:00Z"))
        conds.append(_cond("Admitted", "False", "NoReservation", "The workload has no reservation",
                           "2026-11-29T10:30:00Z"))
        conds.append(_cond("Evicted", "True", "Preempted",
                           "Preempted to accommodate a workload (UID: 7d1e) due to prioritization in the ClusterQueue",
                           "2026-11-29T10:30:00Z"))
        conds.append(_cond("Preempted", "True", "InClusterQueue",
                           "Preempted to accommodate a workload (UID: 7d1e) due to prioritization in the ClusterQueue",
                           "2026-11-29T10:30:00Z"))
        wl["status"]["requeueState"] = {"count": 1, "requeueAt": "2026-11-29T10:31:00Z"}
    else:
        raise ValueError(state)
    return wl


def _cond(t: str, s: str, reason: str, message: str, when: str) -> dict:
    return {"type": t, "status": s, "reason": reason, "message": message, "lastTransitionTime": when,
            "observedGeneration": 1}


def pod(owner: dict, role: str, index: int = 0, *, node: str | None = None, phase: str = "Pending",
        unschedulable: str | None = None, terminated: dict | None = None, last_terminated: dict | None = None,
        scheduled_at: str = "2026-11-29T10:03:00Z", pod_reason: str | None = None) -> dict:
    """A KubeRay pod of ``owner`` (role ``head`` or ``worker``)."""
    meta = owner["metadata"]
    cluster = f"{meta['name']}-raycluster-x7k2p"
    name = f"{cluster}-head" if role == "head" else f"{cluster}-gpu-group-worker-{index}"
    container = "ray-head" if role == "head" else "ray-worker"
    p = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"pod-{name}",
                     "labels": {labels.RUN_ID: meta["labels"][labels.RUN_ID], "ray.io/cluster": cluster,
                                "ray.io/node-type": role,
                                "ray.io/group": "headgroup" if role == "head" else "gpu-group"},
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
                                          "uid": f"rc-{meta['uid']}", "controller": True}]},
        "spec": {"containers": [{"name": container, "image": "rayproject/ray:2.46.0"}], "restartPolicy": "Always"},
        "status": {"phase": phase, "conditions": []},
    }
    if node:
        p["spec"]["nodeName"] = node
        p["status"]["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at})
    elif unschedulable:
        p["status"]["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                          "message": unschedulable, "lastTransitionTime": scheduled_at})
    cs = {"name": container, "image": "rayproject/ray:2.46.0", "imageID": "", "ready": phase == "Running",
          "restartCount": 1 if last_terminated else 0, "started": phase == "Running", "state": {}, "lastState": {}}
    if terminated:
        cs["state"] = {"terminated": terminated}
        cs["ready"] = False
    elif phase == "Running":
        cs["state"] = {"running": {"startedAt": "2026-11-29T10:04:00Z"}}
    elif node:
        cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
    if last_terminated:
        cs["lastState"] = {"terminated": last_terminated}
        cs["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}}
    if node:
        p["status"]["containerStatuses"] = [cs]
    if pod_reason:
        p["status"]["reason"] = pod_reason
        p["status"]["message"] = "The node was low on resource: memory."
    return p


def raycluster(owner: dict) -> dict:
    """The RayCluster KubeRay makes for RayJob ``owner`` (controller ownerReference to it, the
    run-id taugate's webhook gives children), the owner of ``pod(owner, ...)``'s pods."""
    meta = owner["metadata"]
    name = f"{meta['name']}-raycluster-x7k2p"
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"rc-{meta['uid']}",
                         "labels": {labels.RUN_ID: meta["labels"][labels.RUN_ID],
                                    "ray.io/originated-from-crd": "RayJob",
                                    "ray.io/originated-from-cr-name": meta["name"]},
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy(owner["spec"]["rayClusterSpec"])}


def oom(finished: str = "2026-11-29T10:20:00Z") -> dict:
    return {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-11-29T10:04:00Z", "finishedAt": finished,
            "containerID": "containerd://4f1c"}


def error_exit(finished: str = "2026-11-29T10:20:05Z", code: int = 1) -> dict:
    return {"exitCode": code, "reason": "Error", "startedAt": "2026-11-29T10:04:00Z", "finishedAt": finished,
            "containerID": "containerd://9a2b"}


def node(name: str, *, gpu_condition: str | None = None, ready: bool = True) -> dict:
    """The DGX A100 node of ``tests/data/nodes`` renamed, optionally with an NPD GPU condition set to True."""
    n = yaml.safe_load(NODE_SAMPLE.read_text())
    n["metadata"]["name"] = name
    n["metadata"]["labels"]["kubernetes.io/hostname"] = name
    conds = n["status"]["conditions"]
    for c in conds:
        if c["type"] == "Ready" and not ready:
            c.update(status="False", reason="KubeletNotReady", message="container runtime is down")
    if gpu_condition:
        conds.append({"type": gpu_condition, "status": "True", "reason": f"{gpu_condition}HasIssues",
                      "message": "Xid 79: GPU has fallen off the bus", "lastTransitionTime": "2026-11-29T10:10:00Z"})
    return n


JOB_SAMPLE = KUEUE_JOB


def job(name: str = "eval-batch", run_id: str = "0a1b2c3d4e5f60718293a4b5",
        uid: str = "c0ffee00-0000-4000-8000-0000000000b1",
        parallelism: int = 1, owner: dict | None = None) -> dict:
    """Kueue's example batch/v1 Job (``KUEUE_JOB``) with taugate's labels; ``owner`` makes it a child
    (KubeRay's submitter Job is controlled by its RayJob)."""
    obj = yaml.safe_load(JOB_SAMPLE.read_text())
    obj["metadata"] = {"name": name, "namespace": NS, "uid": uid, "creationTimestamp": T0,
                       "labels": {labels.RUN_ID: run_id, labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
                                  labels.WORKSPACE: "team-a", labels.KUEUE_QUEUE_NAME: "team-a-queue"}}
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                               "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                               "controller": True}]
    obj["spec"]["parallelism"] = obj["spec"]["completions"] = parallelism
    obj["spec"]["suspend"] = True
    obj["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[labels.RUN_ID] = run_id
    return obj


def job_workload(owner: dict, admitted: bool) -> dict:
    """The Kueue Workload of a Job (one pod set ``main``)."""
    meta = owner["metadata"]
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": f"job-{meta['name']}-8c1d2", "namespace": meta["namespace"], "uid": f"wl-{meta['uid']}",
                       "labels": {labels.KUEUE_JOB_UID: meta["uid"]},
                       "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                            "uid": meta["uid"], "controller": True}]},
          "spec": {"queueName": "team-a-queue", "podSets": [{"name": "main", "count": owner["spec"]["parallelism"],
                                                             "template": copy.deepcopy(owner["spec"]["template"])}]},
          "status": {"conditions": []}}
    if admitted:
        wl["status"]["admission"] = {"clusterQueue": "cpu-cq", "podSetAssignments": [
            {"name": "main", "count": owner["spec"]["parallelism"],
             "flavors": {"cpu": "default", "memory": "default"}}]}
        wl["status"]["conditions"] = [_cond("QuotaReserved", "True", "QuotaReserved",
                                            "Quota reserved in ClusterQueue cpu-cq", T0),
                                      _cond("Admitted", "True", "Admitted", "The workload is admitted", T0)]
    return wl


def job_pod(owner: dict, index: int = 0, *, node: str | None = None, phase: str = "Pending",
            scheduled_at: str = T0, terminated: dict | None = None) -> dict:
    meta = owner["metadata"]
    container = owner["spec"]["template"]["spec"]["containers"][0]
    name = f"{meta['name']}-{index}-x2v9k"
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"pod-{name}",
                      "labels": {labels.RUN_ID: meta["labels"][labels.RUN_ID],
                                 "batch.kubernetes.io/job-name": meta["name"]},
                      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                           "uid": meta["uid"], "controller": True}]},
         "spec": {"containers": [{"name": container["name"], "image": container["image"]}],
                  "restartPolicy": "Never"},
         "status": {"phase": phase, "conditions": []}}
    if node:
        p["spec"]["nodeName"] = node
        p["status"]["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at})
        state = {"terminated": terminated} if terminated else {"running": {"startedAt": scheduled_at}}
        p["status"]["containerStatuses"] = [{"name": container["name"], "image": container["image"], "imageID": "",
                                             "ready": not terminated,
                                             "restartCount": 0, "state": state, "lastState": {}}]
    return p
