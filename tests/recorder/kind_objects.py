"""Builders of the runs of the issue 17 kinds, as the API server returns their objects: each kind's
own upstream sample (the JobSet KEP's fine-tune sample in ``tests/data/admission/jobset``,
training-operator's GPU ``pytorch_job_mnist_nccl.yaml``, KubeRay's ``ray-service.stable-diffusion``)
with taugate's labels, the children its controller makes (controller ownerReference to the parent,
the run-id the webhook gives children), its Kueue Workload (pod sets counted by the registry's
``pod_templates``, as Kueue's integrations count them) and its pods.
"""

from __future__ import annotations

import copy

import yaml

from taugate import labels
from taugate.kinds import kind_of
from tests.paths import DATA, PYTORCH_MNIST_NCCL, STABLE_DIFFUSION
from tests.recorder.objects import NS, RUN_ID, T0, _cond

JOBSET_SAMPLE = DATA / "admission" / "jobset" / "fine-tune-llm.yaml"
DEPLOYMENT_SAMPLE = DATA / "admission" / "core" / "sample-deployment.yaml"
GPU_POD_SAMPLE = DATA / "admission" / "core" / "gpu-pod.yaml"


def root(sample: dict, name: str, uid: str, run_id: str = RUN_ID) -> dict:
    """``sample`` as stored after taugate's webhook: run-id, workspace and queue labels (no
    admission record: the evidence keeps it as untrusted, which these tests do not read)."""
    obj = copy.deepcopy(sample)
    obj["metadata"] = {"name": name, "namespace": NS, "uid": uid, "creationTimestamp": T0,
                       "labels": {labels.RUN_ID: run_id, labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
                                  labels.WORKSPACE: "team-a", labels.KUEUE_QUEUE_NAME: "team-a-queue"}}
    return obj


def jobset(name: str = "fine-tune-llm", uid: str = "d5e6f7a8-0000-4000-8000-0000000000d1") -> dict:
    obj = root(yaml.safe_load(JOBSET_SAMPLE.read_text()), name, uid)
    obj["spec"]["suspend"] = True
    return obj


def pytorchjob(name: str = "pytorch-dist-mnist-nccl", uid: str = "e6f7a8b9-0000-4000-8000-0000000000e1") -> dict:
    obj = root(yaml.safe_load(PYTORCH_MNIST_NCCL.read_text()), name, uid)
    obj["spec"].setdefault("runPolicy", {})["suspend"] = True
    return obj


def rayservice(name: str = "stable-diffusion", uid: str = "f7a8b9c0-0000-4000-8000-0000000000f1") -> dict:
    sample = next(d for d in yaml.safe_load_all(STABLE_DIFFUSION.read_text()) if d and d.get("kind") == "RayService")
    return root(sample, name, uid)


def deployment(name: str = "nginx-deployment", uid: str = "a8b9c0d1-0000-4000-8000-0000000000a1") -> dict:
    """Kueue's serving Deployment example asking for a GPU per pod (taugate governs a Deployment
    only when it asks for GPUs); its pod template carries the run-id too (the webhook's rule:
    run-id on the object and every template), so the ReplicaSet and pods inherit it."""
    obj = root(yaml.safe_load(DEPLOYMENT_SAMPLE.read_text()), name, uid)
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": 1}
    obj["spec"]["template"]["metadata"]["labels"][labels.RUN_ID] = RUN_ID
    return obj


def bare_pod(name: str = "example-vector-add", uid: str = "b9c0d1e2-0000-4000-8000-0000000000b1") -> dict:
    """The Kubernetes docs' GPU Pod, created bare (no controller): its own run's root."""
    obj = root(yaml.safe_load(GPU_POD_SAMPLE.read_text()), name, uid)
    obj["status"] = {"phase": "Pending"}
    return obj


def child(owner: dict, api_version: str, kind: str, name: str, spec: dict | None = None) -> dict:
    """An object ``owner``'s controller makes (a JobSet's Job, a RayService's RayCluster), with
    the run-id taugate's webhook gives children."""
    meta = owner["metadata"]
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": NS, "uid": f"{kind.lower()}-{name}", "creationTimestamp": T0,
                         "labels": {labels.RUN_ID: meta["labels"][labels.RUN_ID]},
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": meta["name"], "uid": meta["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": spec or {}}


def pod(owner: dict, name: str, *, node: str | None = None, phase: str = "Pending",
        terminated: dict | None = None) -> dict:
    """A pod controlled by ``owner`` with the run-id; bound to ``node`` when given."""
    p = child(owner, "v1", "Pod", name, {"containers": [{"name": "main", "image": "busybox"}]})
    p["status"] = {"phase": phase, "conditions": []}
    if node:
        p["spec"]["nodeName"] = node
        p["status"]["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": T0})
        state = {"terminated": terminated} if terminated else {"running": {"startedAt": T0}}
        p["status"]["containerStatuses"] = [{"name": "main", "image": "busybox", "imageID": "", "ready": not terminated,
                                             "restartCount": 0, "state": state, "lastState": {}}]
    return p


def workload(owner: dict, *, admitted: bool, pod_sets: list[tuple[str, int]] | None = None) -> dict:
    """The Kueue Workload of ``owner`` (``kueue.x-k8s.io/job-uid`` label, controller reference);
    its pod sets are ``pod_sets`` (name, count), else the registry's pod templates of ``owner``."""
    meta = owner["metadata"]
    if pod_sets is None:
        kind = kind_of(owner)
        assert kind is not None
        pod_sets = [(t.group.lower(), t.replicas) for t in kind.pod_templates(owner)]
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": f"{owner['kind'].lower()}-{meta['name']}-5e1f0", "namespace": NS,
                       "uid": f"wl-{meta['uid']}", "creationTimestamp": T0,
                       "labels": {labels.KUEUE_JOB_UID: meta["uid"]},
                       "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                            "name": meta["name"], "uid": meta["uid"], "controller": True}]},
          "spec": {"queueName": "team-a-queue", "podSets": [{"name": n, "count": c} for n, c in pod_sets]},
          "status": {"conditions": [_cond("QuotaReserved", "False", "Pending", "waiting for quota", T0)]}}
    if admitted:
        wl["status"]["admission"] = {"clusterQueue": "gpu-cq", "podSetAssignments": [
            {"name": n, "count": c, "flavors": {"nvidia.com/gpu": "a100"}} for n, c in pod_sets]}
        wl["status"]["conditions"] = [
            _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq", T0),
            _cond("Admitted", "True", "Admitted", "The workload is admitted", T0)]
    return wl


def condition(type_: str, reason: str, message: str, status: str = "True") -> dict:
    return _cond(type_, status, reason, message, T0)
