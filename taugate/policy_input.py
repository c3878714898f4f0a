"""The policy input document: one pure function, documented by ``policies/input.schema.json``.

Rego policies see a trimmed object (metadata plus, per pod template, its role, replicas,
resources, node selector, affinity and tolerations; not the whole object, since evaluation cost
grows with input size), the operation, userInfo, namespace, the resolved workspace and profile,
and a summary of live cluster state (GPU classes, the workspace queue's quota and usage).
"""

from __future__ import annotations

from typing import Any

from taugate.adapters import PodTemplate, field_path
from taugate.models import ResolvedProfile, TauWorkspace
from taugate.snapshot import ClusterState


def _template_input(t: PodTemplate) -> dict[str, Any]:
    spec = t.spec
    containers = []
    for kind, i, c in t.containers():
        res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
        containers.append({
            "name": c.get("name"),
            "kind": kind,
            "field": field_path(t.path + ("spec", kind, i)),
            "requests": res.get("requests") or {},
            "limits": res.get("limits") or {},
        })
    return {
        "role": t.role,
        "group": t.group,
        "field": field_path(t.path),
        "replicas": t.replicas,
        "gpusPerPod": t.gpus_per_pod,
        "rayNumGpus": None if t.ray_num_gpus is None else float(t.ray_num_gpus),
        "nodeSelector": spec.get("nodeSelector") or {},
        "affinity": spec.get("affinity") or {},
        "tolerations": spec.get("tolerations") or [],
        "priorityClassName": spec.get("priorityClassName"),
        "containers": containers,
    }


def build_policy_input(*, obj: dict, templates: list[PodTemplate], operation: str,
                       user_info: dict | None, namespace: str | None,
                       workspace: TauWorkspace | None, profile: ResolvedProfile | None,
                       queue: str | None, state: ClusterState, gpu_class_label: str) -> dict[str, Any]:
    """Build the ``input`` document every policy evaluates (shape: ``policies/input.schema.json``).

    ``queue`` is the resolved LocalQueue name; ``cluster.queue`` holds its ClusterQueue's flavor
    quotas (GPUs for ``nvidia.com/gpu``: nominal, borrowingLimit or null, usage).
    """
    meta = obj.get("metadata") or {}
    quotas = state.queue_quotas.get((namespace or "", queue or ""), ())
    lq = state.local_queues.get((namespace or "", queue or ""))
    return {
        "operation": operation,
        "userInfo": user_info or {},
        "namespace": namespace,
        "object": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": {k: meta.get(k) for k in ("name", "generateName", "namespace", "labels", "annotations")
                         if meta.get(k) is not None},
            "podTemplates": [_template_input(t) for t in templates],
        },
        "workspace": None if workspace is None else {
            "name": workspace.metadata.name, "namespace": workspace.target_namespace,
            "queue": workspace.local_queue(state.default_queue),
            "team": workspace.spec.team_ref.name if workspace.spec.team_ref else None,
        },
        "profile": None if profile is None else profile.model_dump(by_alias=True, exclude_none=True, mode="json",
                                                                   exclude={"conditions"}),
        "cluster": {
            "gpuClassLabel": gpu_class_label,
            "gpuClasses": {name: s.as_input() for name, s in state.gpu_classes.items()},
            "queue": None if lq is None else {
                "localQueue": queue,
                "clusterQueue": (lq.get("spec") or {}).get("clusterQueue"),
                "quotas": [q.as_input() for q in quotas],
            },
        },
    }
