"""Workloads for the end-to-end tests: every RayJob, RayCluster and batch/v1 Job among KubeRay's
and Kueue's own samples, read from their Go modules (``tests/upstream``), and what a stored
workload must look like after taugate admitted it."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from tests.paths import KUBERAY_SAMPLES, KUEUE

WORKLOAD_KINDS = ("RayJob", "RayCluster", "Job")
QUEUE = "kueue.x-k8s.io/queue-name"
RUN_ID = "tau.azure.com/run-id"
GPU_CLASS_SELECTOR = "tau.azure.com/gpu-class"
WORKSPACE = "vision"
WORKSPACE_QUEUE = "vision-queue"


def _docs(path: Path) -> list[dict]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except yaml.YAMLError:  # Kueue's Go-templated performance manifests are not YAML
        return []


def sample_workloads() -> list[tuple[str, dict]]:
    """``[(id, object)]``: each workload document of KubeRay's ``config/samples`` and of the
    Kueue module's YAML files (CRDs, charts and webhooks left out), in file order."""
    roots = [("kuberay", KUBERAY_SAMPLES), ("kueue", KUEUE)]
    out = []
    for name, root in roots:
        for path in sorted(root.rglob("*.yaml")):
            rel = path.relative_to(root)
            if any(part in ("crd", "charts", "webhook", "components") for part in rel.parts):
                continue
            for i, doc in enumerate(_docs(path)):
                group = str(doc.get("apiVersion", "")).split("/")[0]
                if doc.get("kind") in WORKLOAD_KINDS and group in ("ray.io", "batch"):
                    out.append((f"{name}/{rel}#{i}", doc))
    return out


def into_workspace(doc: dict, namespace: str = WORKSPACE, name: str | None = None) -> dict:
    """A copy of ``doc`` in ``namespace``; named ``name`` when given (``generateName`` dropped)."""
    obj = copy.deepcopy(doc)
    meta = obj.setdefault("metadata", {})
    meta["namespace"] = namespace
    if name:
        meta["name"] = name
        meta.pop("generateName", None)
    return obj


def pod_templates(obj: dict) -> list[tuple[str, dict]]:
    """``[(field path, pod template)]`` of a workload, as its controller creates pods from them:
    a RayJob's, RayCluster's or RayService's head group, each worker group and the submitter; a
    Job's, Deployment's, StatefulSet's, ReplicaSet's or DaemonSet's ``spec.template``; each
    JobSet replicated Job's pod template; a LeaderWorkerSet's leader and worker templates; each
    PyTorchJob replica type's template; a bare Pod is its own template (``""``)."""
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    if kind == "Pod":
        return [("", obj)]
    if kind in ("Job", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        return [("spec.template", spec["template"])]
    if kind == "JobSet":
        return [(f"spec.replicatedJobs[{i}].template.spec.template", r["template"]["spec"]["template"])
                for i, r in enumerate(spec.get("replicatedJobs") or [])]
    if kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        out = [("spec.leaderWorkerTemplate.leaderTemplate", lwt["leaderTemplate"])] if lwt.get("leaderTemplate") else []
        return out + [("spec.leaderWorkerTemplate.workerTemplate", lwt["workerTemplate"])]
    if kind == "PyTorchJob":
        return [(f"spec.pytorchReplicaSpecs.{role}.template", r["template"])
                for role, r in (spec.get("pytorchReplicaSpecs") or {}).items()]
    prefix, cluster = {"RayJob": ("spec.rayClusterSpec", spec.get("rayClusterSpec")),
                       "RayService": ("spec.rayClusterConfig", spec.get("rayClusterConfig"))}.get(kind, ("spec", spec))
    out = []
    if cluster:
        out.append((f"{prefix}.headGroupSpec.template", cluster["headGroupSpec"]["template"]))
        for i, g in enumerate(cluster.get("workerGroupSpecs") or []):
            out.append((f"{prefix}.workerGroupSpecs[{i}].template", g["template"]))
    if kind == "RayJob" and spec.get("submitterPodTemplate"):
        out.append(("spec.submitterPodTemplate", spec["submitterPodTemplate"]))
    return out


def template_gpus(template: dict) -> int:
    """``nvidia.com/gpu`` limits of a pod template's containers (the device plugin's resource)."""
    total = 0
    for c in (template.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get("nvidia.com/gpu")
        total += int(value or 0)
    return total


SUSPEND_PATHS = {"RayJob": ("spec", "suspend"), "RayCluster": ("spec", "suspend"), "Job": ("spec", "suspend"),
                 "JobSet": ("spec", "suspend"), "PyTorchJob": ("spec", "runPolicy", "suspend"),
                 "RayService": ("spec", "rayClusterConfig", "suspend")}
"""Where each kind that Kueue suspends until it admits it says so (Kueue's ``IsSuspended`` of
``pkg/controller/jobs/<kind>``); serving kinds (Pod, Deployment, StatefulSet, LeaderWorkerSet)
have none: their pods are gated instead."""


def admitted_problems(stored: dict, *, suspended: bool = True) -> list[str]:
    """What is wrong with a workload taugate admitted into the ``vision`` workspace, as stored by
    the API server: the queue label, suspend (for kinds of ``SUSPEND_PATHS``, while ``suspended``:
    before Kueue admits it), one run-id on the object and every pod template, the GPU class only
    on GPU templates."""
    problems = []
    labels = stored["metadata"].get("labels") or {}
    queued = not (stored["kind"] == "RayJob" and stored["spec"].get("clusterSelector"))
    if queued and labels.get(QUEUE) != WORKSPACE_QUEUE:
        problems.append(f"queue label {labels.get(QUEUE)!r}")
    if queued and suspended and stored["kind"] in SUSPEND_PATHS:
        value: object = stored
        for key in SUSPEND_PATHS[stored["kind"]]:
            value = (value or {}).get(key) if isinstance(value, dict) else None
        if value is not True:
            problems.append(f"{'.'.join(SUSPEND_PATHS[stored['kind']])} {value!r}")
    run_id = labels.get(RUN_ID, "")
    if not re.fullmatch(r"[0-9a-f]{24}", run_id):
        problems.append(f"run-id {run_id!r}")
    for path, tpl in pod_templates(stored):
        tpl_labels = (tpl.get("metadata") or {}).get("labels") or {}
        if path and tpl_labels.get(RUN_ID) != run_id:
            problems.append(f"{path}: run-id {tpl_labels.get(RUN_ID)!r}, object's {run_id!r}")
        selector = (tpl.get("spec") or {}).get("nodeSelector") or {}
        if template_gpus(tpl) and GPU_CLASS_SELECTOR not in selector:
            problems.append(f"{path}: GPU template without the profile's GPU class selector")
        if not template_gpus(tpl) and GPU_CLASS_SELECTOR in selector:
            problems.append(f"{path}: CPU-only template placed on GPU class {selector[GPU_CLASS_SELECTOR]!r}")
    return problems
