"""The policy input document: one pure function, documented by ``policies/input.schema.json``.

``input.review`` leaves out only the request's ``uid``: it names the request, never what is asked,
and would make every input unique. Every number a policy compares is precomputed here (GPUs per
container and per pod, pods per template), so policies never parse Kubernetes quantities.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson

from taugate import labels
from taugate.access import as_dict
from taugate.fieldpath import annotation_field, field_path
from taugate.kinds import kind_of
from taugate.kinds.pod import POD_GROUP_TOTAL_COUNT
from taugate.memo import Memo
from taugate.models import ResolvedProfile, TauWorkspace
from taugate.pods import WORKER_ROLES, PodTemplate
from taugate.snapshot import ClusterState

# Never shown to policies: a full copy of the object (input size drives evaluation cost) and
# taugate's own admission record (derived from the decision being made).
_HIDDEN_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration", labels.ADMISSION_RECORD})


_PROFILE_RESOLUTION_FIELDS = {"conditions", "description", "applicability", "local_queues", "cluster_queues",
                              "resource_flavors", "pod_priority_classes", "topologies", "workload_priority_classes"}


def _whole(value: Any) -> int:
    """Fractions round up: a pod holds whole devices."""
    n = int(value)
    return n if n == value else n + 1


def _replicas_field(t: PodTemplate) -> str | None:
    """Where a template's pod count is set: a Job's ``spec.parallelism``, a TrainJob's
    ``spec.trainer.numNodes``, a bare Pod's ``kueue.x-k8s.io/pod-group-total-count``; none for the
    Ray head and the submitter (one pod each); else its group spec's ``replicas``."""
    if t.role == "job":
        return field_path(t.group_path + ("parallelism",))
    if t.role == "node":
        return field_path(t.group_path + ("numNodes",))
    if t.role == "pod":  # its Kueue pod group's size
        return annotation_field(POD_GROUP_TOTAL_COUNT)
    if t.role not in WORKER_ROLES:
        return None
    return field_path(t.group_path + ("replicas",))


def _without_nulls(value: Any) -> Any:
    """``value`` without null fields and items: the API server treats null as unset, and a policy
    iterating a null where Kubernetes allows only a list or an object would fail at run time."""
    if type(value) is dict:
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if type(value) is list:
        return [_without_nulls(v) for v in value if v is not None]
    return value

TEMPLATE_MEMO_SIZE = 1024

_template_memo: Memo[tuple[Any, ...], dict[str, Any]] = Memo(TEMPLATE_MEMO_SIZE)


def _template_key(t: PodTemplate, most: int) -> tuple[Any, ...] | None:
    """What one ``object.podTemplates`` entry is a pure function of; None when orjson could not
    write the pod spec."""
    if t.spec_json is None:
        return None
    return (t.spec_json, t.role, t.group, t.path, t.group_path, t.resources_at, t.replicas, t.min_replicas, most,
            t.ray_start_params.get("num-gpus"), t.gpus_per_pod, t.dra_gpus, t.device_access)


def _template_input(t: PodTemplate, most: int) -> dict[str, Any]:
    """Remembered as a copy holding no reference into the object (mutation edits objects in
    place): shared by every review with the same template, read it, never change it."""
    key = _template_key(t, most)
    hit = _template_memo.get(key) if key is not None else None
    if hit is not None:
        return hit
    doc = _build_template_input(t, most)
    if key is not None:
        doc = _template_memo.put(key, orjson.loads(orjson.dumps(doc)))
    return doc


def _build_template_input(t: PodTemplate, most: int) -> dict[str, Any]:
    spec = t.spec
    containers = []
    for g, (kind, i, c) in zip(t.container_gpus, t.containers(), strict=True):
        res = as_dict(c.get("resources"))
        containers.append({
            "name": c.get("name"),
            "kind": kind,
            "field": field_path(t.path + ("spec", kind, i)),
            "resourcesField": field_path(t.resources_path(kind, i)),
            "requests": res.get("requests") or {},
            "limits": res.get("limits") or {},
            "gpus": _whole(g.effective),
            "sidecar": g.sidecar,
        })
    return {
        "role": t.role,
        "group": t.group,
        "field": field_path(t.path),
        "groupField": field_path(t.group_path),
        "replicasField": _replicas_field(t),
        "replicas": t.replicas,
        "minReplicas": t.min_replicas,
        "maxReplicas": most,
        "gpusPerPod": t.gpus_per_pod,
        "migPerPod": t.mig_per_pod,
        "rayNumGpus": None if t.ray_num_gpus is None else float(t.ray_num_gpus),
        "nodeSelector": spec.get("nodeSelector") or {},
        "affinity": _without_nulls(spec.get("affinity")) or {},
        "tolerations": _without_nulls(spec.get("tolerations")) or [],
        "priorityClassName": spec.get("priorityClassName"),
        "podRequests": _pod_requests(spec),
        "draGpusPerPod": t.dra_gpus,
        "containers": containers,
    }


def _pod_requests(spec: dict[str, Any]) -> dict[str, Any]:
    """Pod-level resources (KEP-2837, beta and on by default since Kubernetes 1.34), a limit standing
    for a missing request (``pkg/apis/core/v1/defaults.go`` ``SetDefaults_Pod``). Kubernetes
    schedules by them and Kueue counts them (kueue ``pkg/util/resource``)."""
    res = as_dict(spec.get("resources"))
    return {**as_dict(res.get("limits")), **as_dict(res.get("requests"))}


REVIEW_FIELDS = ("kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource", "name",
                 "namespace", "operation", "userInfo", "object", "oldObject", "dryRun", "options")
"""The fields of an AdmissionRequest (admission.k8s.io/v1) that ``input.review`` holds: all but ``uid``."""


def review_input(request: dict[str, Any] | None, obj: dict[str, Any], operation: str,
                 user_info: dict[str, Any] | None, namespace: str | None) -> dict[str, Any]:
    """``input.review``; without a request (the CLI's offline tools), the one kube-apiserver would
    send."""
    if request is None:
        request = {"operation": operation, "userInfo": user_info or {}, "namespace": namespace,
                   "name": (obj.get("metadata") or {}).get("name", ""), "oldObject": None, "dryRun": False}
    out = {k: request[k] for k in REVIEW_FIELDS if k in request}
    out["object"] = obj
    return out


def build_policy_input(*, obj: dict[str, Any], templates: list[PodTemplate], operation: str,
                       user_info: dict[str, Any] | None, namespace: str | None,
                       workspace: TauWorkspace | None, profile: ResolvedProfile | None,
                       queue: str | None, state: ClusterState, gpu_class_label: str,
                       request: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``input`` document every policy evaluates (shape: ``policies/input.schema.json``); pure.

    ``cluster.queue.gpu.max`` is what Kueue can ever admit (null when no bound can be stated); a
    container's ``gpus`` is its limit, else request (Kubernetes defaults an extended resource's
    request to its limit), native sidecars adding to the main containers (KEP-753). Per object,
    ``workers`` counts pods now and at the autoscaler's maximum, so a policy can leave early on
    the common, compliant case.
    """
    autoscaling, mosts = _autoscaling(obj, templates)
    pod_templates = [_template_input(t, most) for t, most in zip(templates, mosts, strict=True)]
    mig_names = tuple(sorted({name for t in templates for name in t.mig_per_pod}))
    return {
        "review": review_input(request, obj, operation, user_info, namespace),
        "operation": operation,
        "userInfo": user_info or {},
        "namespace": namespace,
        "object": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": _metadata_input(obj),
            "autoscaling": autoscaling,
            "totalGpus": sum(t.gpus_per_pod * t.replicas for t in templates),
            "minTotalGpus": sum(t.gpus_per_pod * t.min_replicas for t in templates),
            "mig": _mig_totals(templates),
            "maxGpusPerPod": max((t.gpus_per_pod for t in templates), default=0),
            "workers": _workers(pod_templates),
            "podTemplates": pod_templates,
        },
        **_context_input(state, namespace, workspace, profile, queue, gpu_class_label, mig_names),
    }


def _autoscaling(obj: dict[str, Any], templates: list[PodTemplate]) -> tuple[bool, list[int]]:
    """Whether ``obj`` autoscales, and per template the most pods it may reach."""
    kind = kind_of(obj)
    if kind is None or not kind.autoscaling(obj):
        return False, [t.replicas for t in templates]
    return True, [kind.most_pods(obj, t) for t in templates]


def _metadata_input(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        annotations = {k: v for k, v in annotations.items() if k not in _HIDDEN_ANNOTATIONS}
    return {k: v for k, v in (("name", meta.get("name")), ("generateName", meta.get("generateName")),
                              ("namespace", meta.get("namespace")), ("labels", meta.get("labels")),
                              ("annotations", annotations or None)) if v is not None}


CONTEXT_MEMO_SIZE = 4096


def _context_input(state: ClusterState, namespace: str | None, workspace: TauWorkspace | None,
                   profile: ResolvedProfile | None, queue: str | None, gpu_class_label: str,
                   mig_names: tuple[str, ...]) -> dict[str, Any]:
    """The input's ``workspace``, ``profile`` and ``cluster`` parts: a function of the state and
    the resolution (and the MIG resources asked for), so remembered on the state and shared by
    every request that resolves the same way: read it, never change it. The memo keys on the
    identity of ``workspace`` and ``profile`` and keeps both alive, so an identity is never reused."""
    memo = state.memo("policy-input-context", CONTEXT_MEMO_SIZE)
    key = (namespace, id(workspace), id(profile), queue, gpu_class_label, mig_names)
    hit = memo.get(key)
    if hit is not None:
        return hit[2]  # type: ignore[no-any-return]
    quotas = state.queue_quotas.get((namespace or "", queue or ""), ())
    lq = state.local_queues.get((namespace or "", queue or ""))
    part = {
        "workspace": None if workspace is None else {
            "name": workspace.metadata.name, "namespace": workspace.target_namespace,
            "queue": workspace.local_queue(state.default_queue),
            "team": workspace.spec.team_ref.name if workspace.spec.team_ref else None,
        },
        "profile": None if profile is None else profile.model_dump(by_alias=True, exclude_none=True, mode="json",
                                                                   exclude=_PROFILE_RESOLUTION_FIELDS),
        "cluster": {
            "gpuClassLabel": gpu_class_label,
            "gpuClasses": state.classes_input,
            "migResources": state.mig_input,
            "queue": None if lq is None else {
                "localQueue": queue,
                "clusterQueue": (lq.get("spec") or {}).get("clusterQueue"),
                "quotas": [q.as_input() for q in quotas],
                "gpu": gpu_quota(quotas, state, profile.gpu_class if profile else None, gpu_class_label),
                "mig": {name: _quota_of([q for q in quotas if q.resource == name])
                        for name in mig_names if any(q.resource == name for q in quotas)},
            },
        },
    }
    memo.put(key, (workspace, profile, part))
    return part


def _mig_totals(templates: list[PodTemplate]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for t in templates:
        for name, n in t.mig_per_pod.items():
            m = out.setdefault(name, {"total": 0, "minTotal": 0})
            m["total"] += n * t.replicas
            m["minTotal"] += n * t.min_replicas
    return out


def _workers(pod_templates: list[dict[str, Any]]) -> dict[str, int]:
    workers = [t for t in pod_templates if t["role"] in WORKER_ROLES]
    gpu = [t for t in workers if t["gpusPerPod"] > 0]
    return {"pods": sum(t["replicas"] for t in workers), "maxPods": sum(t["maxReplicas"] for t in workers),
            "gpuPods": sum(t["replicas"] for t in gpu), "maxGpuPods": sum(t["maxReplicas"] for t in gpu)}


def gpu_quota(quotas: tuple[Any, ...], state: ClusterState, gpu_class: str | None,
               gpu_class_label: str) -> dict[str, Any]:
    """The ``nvidia.com/gpu`` quota a workload of ``gpu_class`` can draw on: the flavors whose
    ResourceFlavor ``nodeLabels`` name the class, else all of them."""
    gpu = [q for q in quotas if q.resource == labels.GPU_RESOURCE]
    def node_labels(flavor: str) -> dict[str, Any]:
        found = ((state.flavors.get(flavor) or {}).get("spec") or {}).get("nodeLabels")
        return found if isinstance(found, dict) else {}

    chosen = [q for q in gpu if gpu_class is not None and node_labels(q.flavor).get(gpu_class_label) == gpu_class]
    return _quota_of(chosen or gpu)


def _quota_of(chosen: list[Any]) -> dict[str, Any]:
    """``nominal``, ``borrowingLimit``, ``usage`` and ``max``, what Kueue can ever admit (Kueue
    ClusterQueue quota rules): the sum of ``nominalQuota + borrowingLimit``; a flavor without
    ``borrowingLimit`` borrows nothing without a cohort and without bound inside one (``max`` null)."""
    most: Any = 0
    for q in chosen:
        if q.borrowing_limit is not None:
            most = None if most is None else most + q.nominal + q.borrowing_limit
        elif q.cohort is None:
            most = None if most is None else most + q.nominal
        else:
            most = None

    def num(d: Decimal) -> int | float:
        return int(d) if d == d.to_integral_value() else float(d)

    return {"flavors": [q.flavor for q in chosen],
            "nominal": num(sum((q.nominal for q in chosen), Decimal(0))),
            "borrowingLimit": None if any(q.borrowing_limit is None for q in chosen)
            else num(sum((q.borrowing_limit for q in chosen), Decimal(0))),
            "usage": num(sum((q.usage for q in chosen), Decimal(0))),
            "max": None if most is None else num(Decimal(most))}
