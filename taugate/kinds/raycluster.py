"""KubeRay ``ray.io/v1`` RayCluster, and the RayCluster spec a RayJob embeds.

Upstream rules followed here:

- worker pods: the larger of what KubeRay creates (ray-operator v1.5
  ``controllers/ray/utils/util.go`` ``GetWorkerGroupDesiredReplicas``) and what Kueue reserves
  (kueue v0.17 ``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets``);
- structure: ray-operator v1.5 ``apis/ray/v1/raycluster_types.go``;
- Kueue's RayCluster webhook (kueue v0.17 ``pkg/controller/jobs/raycluster/raycluster_webhook.go``
  ``validateCreate``): at most 7 worker groups, no in-tree autoscaling outside an elastic job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Required

from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.fieldpath import Path
from taugate.kinds.base import WorkloadKind, cel_templates
from taugate.outcome import Outcome, conditions_of, is_true
from taugate.pods import INT32_MAX, PodTemplate, as_int
from taugate.structure import Int32, PodTemplateSpec, PositiveInt32, StringMap
from taugate.violation import Violation

# Kueue: a Workload has at most 8 PodSets; a RayCluster's head takes one, so at most 7 worker
# groups can be queued.
MAX_WORKER_GROUPS = 7


def worker_group_pods(group: dict[str, Any]) -> int:
    """Pods of one Ray worker group admission must hold GPUs for: the larger of what KubeRay
    creates, clamp(replicas, minReplicas, maxReplicas) x numOfHosts, maxReplicas when minReplicas >
    maxReplicas, 0 when suspended (ray-operator v1.5 ``controllers/ray/utils/util.go``
    ``GetWorkerGroupDesiredReplicas``), and what Kueue reserves, replicas x numOfHosts (kueue v0.17
    ``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets``).

    Missing fields take the CRD defaults the API server applies before admission (replicas 0,
    minReplicas 0, maxReplicas 2147483647, numOfHosts 1), so an object read offline counts as the
    stored one will."""
    replicas = as_int(group.get("replicas"), 0)
    lo, hi = as_int(group.get("minReplicas"), 0), as_int(group.get("maxReplicas"), INT32_MAX)
    hosts = max(as_int(group.get("numOfHosts"), 1), 1)
    if group.get("suspend") is True:
        kuberay = 0
    elif lo > hi:
        kuberay = hi
    else:
        kuberay = min(max(replicas, lo), hi)
    return max(kuberay, replicas) * hosts


def cluster_templates(spec: dict[str, Any], prefix: Path) -> list[PodTemplate]:
    out: list[PodTemplate] = []
    head = spec.get("headGroupSpec")
    if type(head) is dict and type(head.get("template")) is dict:
        params = head.get("rayStartParams")
        out.append(PodTemplate.of("head", "head", prefix + ("headGroupSpec", "template"),
                                  prefix + ("headGroupSpec",), 1, head["template"],
                                  params if type(params) is dict else {}))
    groups = spec.get("workerGroupSpecs")
    for i, group in enumerate(groups if type(groups) is list else ()):
        if type(group) is not dict or type(group.get("template")) is not dict:
            continue
        params = group.get("rayStartParams")
        gpath = prefix + ("workerGroupSpecs", i)
        out.append(PodTemplate.of("worker", str(group.get("groupName") or f"group-{i}"), gpath + ("template",),
                                  gpath, worker_group_pods(group), group["template"],
                                  params if type(params) is dict else {}))
    return out


def cel_cluster_templates(*path: str) -> str:
    """CEL (``WorkloadKind.cel_pod_templates``): the head's and the worker groups' pod templates of the
    RayCluster spec at ``object.<path>``."""
    return (f"{cel_templates(*path, 'headGroupSpec', 'template')} + "
            f"{cel_templates(*path, 'workerGroupSpecs', each='template')}")


class HeadGroupSpec(TypedDict, total=False):
    """KubeRay ``HeadGroupSpec``."""

    rayStartParams: StringMap | None
    template: Required[PodTemplateSpec]


class WorkerGroupSpec(TypedDict, total=False):
    """KubeRay ``WorkerGroupSpec``."""

    groupName: str | None
    replicas: Int32 | None
    minReplicas: Int32 | None
    maxReplicas: Int32 | None
    numOfHosts: PositiveInt32 | None
    rayStartParams: StringMap | None
    template: Required[PodTemplateSpec]


class RayClusterSpec(TypedDict, total=False):
    """KubeRay ``RayClusterSpec`` (ray-operator v1.5 ``apis/ray/v1/raycluster_types.go``), as far as
    admission reads it."""

    headGroupSpec: Required[HeadGroupSpec]
    workerGroupSpecs: list[WorkerGroupSpec] | None
    suspend: bool | None


def check_worker_groups(templates: list[PodTemplate], where: str) -> list[Violation]:
    """Kueue rule: at most ``MAX_WORKER_GROUPS`` worker groups (8 PodSets per Workload)."""
    workers = sum(1 for t in templates if t.role == "worker")
    if workers <= MAX_WORKER_GROUPS:
        return []
    return [Violation("kueue-worker-groups", where,
        f"has {workers} worker groups; allowed: at most {MAX_WORKER_GROUPS} under Kueue (a Workload holds "
        f"8 PodSets, one is the head); fix: merge worker groups with the same pod template")]


def autoscaled_worker_pods(cluster_spec: dict[str, Any], t: PodTemplate) -> int:
    """The most pods of ``t`` KubeRay's in-tree autoscaler may reach: ``maxReplicas`` x
    ``numOfHosts`` when larger than now (``GetWorkerGroupDesiredReplicas`` bounds the autoscaler
    by ``maxReplicas``); the head's 1."""
    groups = cluster_spec.get("workerGroupSpecs")
    index = t.group_path[-1] if t.role == "worker" else None
    if type(groups) is not list or type(index) is not int or index >= len(groups):
        return t.replicas
    group = as_dict(groups[index])
    most = as_int(group.get("maxReplicas"), 0) * max(as_int(group.get("numOfHosts"), 1), 1)
    return max(t.replicas, most)


def cluster_autoscaling(cluster_spec: Any) -> bool:
    return as_dict(cluster_spec).get("enableInTreeAutoscaling") is True


ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"
"""Read only with the ElasticJobsViaWorkloadSlices feature gate on (kueue v0.17 ``pkg/workloadslicing``)."""


def check_autoscaling(obj: dict[str, Any], cluster_spec: dict[str, Any], where: str,
                      elastic_jobs: bool) -> list[Violation]:
    """Kueue: a queued RayCluster or RayJob sets ``enableInTreeAutoscaling: true`` only as an
    elastic job, with ``elastic_jobs`` on (kueue v0.17
    ``pkg/controller/jobs/raycluster/raycluster_webhook.go`` ``validateCreate``, and
    ``rayjob_webhook.go`` through ``raycluster.ValidateCreate``)."""
    kind = obj.get("kind")
    if not cluster_autoscaling(cluster_spec):
        return []
    notes = as_dict(as_dict(obj.get("metadata")).get("annotations"))
    if elastic_jobs and notes.get(ELASTIC_JOB) == "true":
        return []
    how = (f'add the annotation {ELASTIC_JOB}: "true"' if elastic_jobs else
           "ask the platform team to turn on Kueue's ElasticJobsViaWorkloadSlices feature gate "
           f'(taugate setting TAUGATE_KUEUE_ELASTIC_JOBS) and add the annotation {ELASTIC_JOB}: "true"')
    return [Violation("kueue-autoscaling", f"{where}.enableInTreeAutoscaling",
        f"is true on a queued {kind}; Kueue: \"a kueue managed job can use autoscaling only when the "
        f"ElasticJobsViaWorkloadSlices feature gate is on and the job is an elastic job\"; allowed: false, or an "
        f"elastic job; fix: set {where}.enableInTreeAutoscaling: false and size the worker groups with replicas, "
        f"or {how}")]


class RayCluster(WorkloadKind):
    """KubeRay ``ray.io/v1`` RayCluster."""

    group, version, resource, kind = "ray.io", "v1", "rayclusters", "RayCluster"
    cel_pod_templates = cel_cluster_templates("spec")
    default_lane = "interactive"
    spec_model = RayClusterSpec
    upstream = ("ray-operator v1.5 controllers/ray/utils/util.go GetWorkerGroupDesiredReplicas; "
                "kueue v0.17 pkg/controller/jobs/raycluster/common.go BuildPodSets, "
                "raycluster_webhook.go validateCreate")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The head group's template, then each worker group's (``cluster_templates``)."""
        return cluster_templates(as_dict(obj.get("spec")), ("spec",))

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """Kueue: at most ``MAX_WORKER_GROUPS`` worker groups; a queued RayCluster autoscales only
        as an elastic job (``check_autoscaling``)."""
        out = check_worker_groups(templates, "spec.workerGroupSpecs")
        if queued:
            out += check_autoscaling(obj, as_dict(obj.get("spec")), "spec", elastic_jobs)
        return out

    def autoscaling(self, obj: dict[str, Any]) -> bool:
        """``spec.enableInTreeAutoscaling: true``."""
        return cluster_autoscaling(obj.get("spec"))

    def most_pods(self, obj: dict[str, Any], template: PodTemplate) -> int:
        """A worker group's ``maxReplicas`` x ``numOfHosts`` (``autoscaled_worker_pods``)."""
        return autoscaled_worker_pods(as_dict(obj.get("spec")), template)


    serving = True

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """A RayCluster run on its own (ray-operator v1.5 ``apis/ray/v1/raycluster_types.go``
        ``ClusterState``): ``failed`` is failure, ``ready`` running; it ends only when deleted."""
        state = str(status.get("state") or "")
        if state == "failed":
            return Outcome("failed", str(status.get("reason") or "RayClusterFailed"),
                           f"RayCluster state failed: {status.get('reason') or ''}".strip())
        if state == "ready" or is_true(conditions_of(obj).get("RayClusterProvisioned")):
            return Outcome("running", "Ready", f"RayCluster state {state or 'provisioned'}")
        if state == "suspended" or as_dict(obj.get("spec")).get("suspend"):
            return Outcome("pending", "Suspended", "RayCluster is suspended (waiting for Kueue)")
        return Outcome("pending", "NotReady", f"RayCluster state {state or '(none)'}")


class EmbeddedRayCluster(WorkloadKind):
    """A kind carrying a RayCluster spec under ``spec.<cluster_key>`` (a RayJob, a RayService)."""

    cluster_key: ClassVar[str]

    def autoscaling(self, obj: dict[str, Any]) -> bool:
        """``spec.<cluster_key>.enableInTreeAutoscaling: true`` (``cluster_autoscaling``)."""
        return cluster_autoscaling(as_dict(obj.get("spec")).get(self.cluster_key))

    def most_pods(self, obj: dict[str, Any], template: PodTemplate) -> int:
        """A worker group's ``maxReplicas`` x ``numOfHosts`` (``autoscaled_worker_pods``)."""
        return autoscaled_worker_pods(as_dict(as_dict(obj.get("spec")).get(self.cluster_key)), template)

KIND = RayCluster()
