"""Built-in structural validation: rules that come from Kubernetes, KubeRay and Kueue themselves.

Platform policy (GPUs per pod against nodes and profiles, GPU class, queue capacity, requests)
lives in the Rego library under ``policies/``; what is here is what the API, KubeRay or Kueue
would refuse or mishandle anyway, caught at ``kubectl apply`` with a message that says how to
fix it. Each check returns ``Violation``s with the field path, what was asked, what is allowed
and the fix; all are collected, never just the first.
"""

from __future__ import annotations

import json
from decimal import Decimal

from taugate import labels
from taugate.adapters import JOB_MIN_PARALLELISM, MAX_GPUS, PodTemplate, WorkloadAdapter, field_path, job_pods
from taugate.webhook.decision import Violation
from taugate.webhook.resolution import Resolution, label_field

# KubeRay: a RayJob's name is used to build its RayCluster's name (name + "-" + 5 random
# characters) and the submitter Job's; KubeRay's validation rejects names over 47 characters.
MAX_RAYJOB_NAME = 47
# generateName gets 5 random characters appended by the API server.
MAX_RAYJOB_GENERATE_NAME = MAX_RAYJOB_NAME - 5
# Kueue: a Workload has at most 8 PodSets; a RayCluster's head takes one, so at most 7 worker
# groups can be queued.
MAX_WORKER_GROUPS = 7


def _fmt(d: Decimal | None) -> str:
    """A GPU count for a message: ``4``, ``0.5``; never expanded digit by digit (a huge
    exponent stays ``1E+30``)."""
    if d is None:
        return "nothing"
    if d.adjusted() < 20:
        return str(int(d)) if d == d.to_integral_value() else str(d.normalize())
    return str(d)


def check_gpu_resources(templates: list[PodTemplate]) -> list[Violation]:
    """Kubernetes rules for the extended resource ``nvidia.com/gpu``: requests must equal limits
    (extended resources cannot be overcommitted) and be whole numbers; KubeRay rule: Ray's
    ``num-gpus`` may not exceed the GPUs the pod's containers get."""
    out: list[Violation] = []
    for t in templates:
        for g in t.gpus():
            base = field_path(t.path + ("spec", g.kind, g.index, "resources"))
            for which, raw, num in (("limits", g.limit, g.limit_n), ("requests", g.request, g.request_n)):
                if raw is None:
                    continue
                f = f'{base}.{which}["{labels.GPU_RESOURCE}"]'
                if num is None:
                    out.append(Violation("gpu-whole-numbers", f,
                        f"asks for {json.dumps(raw)} GPUs, which is not a usable quantity; allowed: a whole number "
                        f"from 0 to {MAX_GPUS} such as 1; fix: write {which}: {{{labels.GPU_RESOURCE}: 1}}"))
                elif num < 0:
                    out.append(Violation("gpu-whole-numbers", f,
                        f"asks for {json.dumps(raw)} GPUs, a negative number; allowed: a whole number >= 0; "
                        f"fix: request the GPUs the container needs, e.g. 1"))
                elif num != num.to_integral_value():
                    out.append(Violation("gpu-whole-numbers", f,
                        f"asks for {json.dumps(raw)} GPUs; allowed: whole GPUs only (Kubernetes does not split "
                        f"{labels.GPU_RESOURCE}); fix: use {int(num) + 1} or {int(num) or 1}"))
            if g.request_n is not None and g.limit_n is not None and g.request_n != g.limit_n:
                out.append(Violation("gpu-request-equals-limit", f'{base}.requests["{labels.GPU_RESOURCE}"]',
                    f"requests {_fmt(g.request_n)} GPU(s) but limits {_fmt(g.limit_n)}; allowed: request == limit "
                    f"(Kubernetes does not overcommit extended resources); fix: set both to {_fmt(g.limit_n)}"))
            elif g.request_n is not None and g.limit_n is None and g.request_n > 0:
                out.append(Violation("gpu-request-equals-limit", f'{base}.limits["{labels.GPU_RESOURCE}"]',
                    f"requests {_fmt(g.request_n)} GPU(s) with no limit; allowed: extended resources must set a "
                    f"limit equal to the request; fix: add limits: {{{labels.GPU_RESOURCE}: {_fmt(g.request_n)}}}"))
        ray_gpus = t.ray_num_gpus
        raw = t.ray_start_params.get("num-gpus")
        if raw is not None:
            f = field_path(t.group_path + ("rayStartParams", "num-gpus"))
            if ray_gpus is None:
                out.append(Violation("ray-num-gpus", f,
                    f"num-gpus is {json.dumps(raw)}, not a usable number; allowed: a whole number <= the pod's GPU "
                    f"limit ({t.gpus_per_pod}); fix: write \"{t.gpus_per_pod}\" or remove it (KubeRay derives it)"))
            elif ray_gpus > t.gpus_per_pod:
                out.append(Violation("ray-num-gpus", f,
                    f"advertises {_fmt(ray_gpus)} GPU(s) to Ray but the pod's containers get {t.gpus_per_pod}; "
                    f"allowed: at most {t.gpus_per_pod}; fix: set num-gpus to \"{t.gpus_per_pod}\" or raise "
                    f"{labels.GPU_RESOURCE} in the Ray container's limits"))
    return out


def check_rayjob(obj: dict, templates: list[PodTemplate], queued: bool) -> list[Violation]:
    """KubeRay and Kueue rules for a RayJob: name length, worker groups under Kueue,
    ``shutdownAfterJobFinishes``, and no ``clusterSelector`` together with ``rayClusterSpec``."""
    out: list[Violation] = []
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    name, gen = meta.get("name"), meta.get("generateName")
    if isinstance(name, str) and len(name) > MAX_RAYJOB_NAME:
        out.append(Violation("rayjob-name-length", "metadata.name",
            f"name is {len(name)} characters; allowed: at most {MAX_RAYJOB_NAME} (KubeRay derives the "
            f"RayCluster and submitter Job names from it); fix: shorten it to {name[:MAX_RAYJOB_NAME]!r} or less"))
    elif not name and isinstance(gen, str) and len(gen) > MAX_RAYJOB_GENERATE_NAME:
        out.append(Violation("rayjob-name-length", "metadata.generateName",
            f"generateName is {len(gen)} characters; allowed: at most {MAX_RAYJOB_GENERATE_NAME} (5 random "
            f"characters are appended and KubeRay allows {MAX_RAYJOB_NAME}); fix: shorten the prefix"))
    cluster_spec = spec.get("rayClusterSpec")
    if cluster_spec is not None and spec.get("clusterSelector"):
        out.append(Violation("rayjob-cluster-selector", "spec.clusterSelector",
            "sets clusterSelector together with rayClusterSpec; allowed: one of them (KubeRay), and Kueue "
            "does not queue RayJobs that run on an existing cluster; fix: remove spec.clusterSelector"))
    out += check_rayjob_submission(spec)
    if queued:
        out += check_worker_groups(templates, "spec.rayClusterSpec.workerGroupSpecs")
        out += check_rayjob_shutdown(spec)
    return out


def check_rayjob_submission(spec: dict) -> list[Violation]:
    """KubeRay rules on a RayJob's submission mode that KubeRay checks only in its controller,
    after Kueue may already hold quota for the job (ray-operator v1.5
    ``controllers/ray/utils/validation.go`` ``ValidateRayJobSpec``; messages in its words):

    - ``InteractiveMode`` with ``backoffLimit`` > 0 ("BackoffLimit is incompatible with
      InteractiveMode");
    - ``SidecarMode`` with ``submitterPodTemplate`` or ``submitterConfig`` ("SidecarMode doesn't
      support ..."), or with a head pod ``restartPolicy`` other than ``Never`` ("restartPolicy
      for head Pod should be Never or unset when using SidecarMode")."""
    mode = spec.get("submissionMode")
    out: list[Violation] = []
    if mode == "InteractiveMode":
        limit = spec.get("backoffLimit")
        if type(limit) is int and limit > 0:
            out.append(Violation("rayjob-submission-mode", "spec.backoffLimit",
                f"is {limit} with submissionMode InteractiveMode; KubeRay: \"The RayJob spec is invalid: BackoffLimit is "
                f"incompatible with InteractiveMode\"; allowed: 0 or unset; fix: remove spec.backoffLimit (or use "
                f"K8sJobMode for retries)"))
    elif mode == "SidecarMode":
        for key, name in (("submitterPodTemplate", "SubmitterPodTemplate"), ("submitterConfig", "SubmitterConfig")):
            if spec.get(key) is not None:
                out.append(Violation("rayjob-submission-mode", f"spec.{key}",
                    f"is set with submissionMode SidecarMode; KubeRay: \"Currently, SidecarMode doesn't support "
                    f"{name}\"; allowed: unset in SidecarMode; fix: remove spec.{key} or use K8sJobMode"))
        cluster = spec.get("rayClusterSpec") if type(spec.get("rayClusterSpec")) is dict else {}
        head = cluster.get("headGroupSpec") if type(cluster.get("headGroupSpec")) is dict else {}
        template = head.get("template") if type(head.get("template")) is dict else {}
        pod = template.get("spec") if type(template.get("spec")) is dict else {}
        policy = pod.get("restartPolicy")
        if policy not in (None, "", "Never"):
            out.append(Violation("rayjob-submission-mode",
                "spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy",
                f"is {json.dumps(policy)} with submissionMode SidecarMode; KubeRay: \"restartPolicy for head Pod should "
                f"be Never or unset when using SidecarMode\"; allowed: Never or unset; fix: set it to Never"))
    return out


ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"
"""Kueue's annotation marking an elastic job (workload slices), read only with the
ElasticJobsViaWorkloadSlices feature gate on (kueue v0.17 ``pkg/workloadslicing``)."""


def _cluster_spec(obj: dict, kind: str) -> tuple[dict, str]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if kind == "RayJob":
        inner = spec.get("rayClusterSpec")
        return (inner if isinstance(inner, dict) else {}), "spec.rayClusterSpec"
    return spec, "spec"


def check_autoscaling(obj: dict, kind: str, elastic_jobs: bool) -> list[Violation]:
    """Kueue rule for a queued RayCluster or RayJob: ``enableInTreeAutoscaling: true`` only for an
    elastic job, i.e. the annotation ``kueue.x-k8s.io/elastic-job: "true"`` with Kueue's
    ElasticJobsViaWorkloadSlices feature gate on (``elastic_jobs``, setting
    ``TAUGATE_KUEUE_ELASTIC_JOBS``) (kueue v0.17 ``pkg/controller/jobs/raycluster/raycluster_webhook.go``
    ``validateCreate``, and ``rayjob_webhook.go`` through ``raycluster.ValidateCreate``)."""
    spec, where = _cluster_spec(obj, kind)
    if spec.get("enableInTreeAutoscaling") is not True:
        return []
    notes = (obj.get("metadata") or {}).get("annotations") or {}
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


def check_partial_admission(obj: dict, old: dict | None = None) -> list[Violation]:
    """Kueue rule for a Job's partial admission annotation ``kueue.x-k8s.io/job-min-parallelism``:
    a whole number above 0 and below the pods the Job runs at a time (kueue v0.17
    ``pkg/controller/jobs/job/job_webhook.go`` ``validatePartialAdmissionCreate``: "should be
    between 0 and N"). On UPDATE (``old`` given) only when the annotation changes, as Kueue's
    ``validateUpdate`` does: Kueue itself lowers ``parallelism`` to the admitted count, which may
    be the minimum."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    raw = notes.get(JOB_MIN_PARALLELISM)
    if raw is None:
        return []
    if isinstance(old, dict) and raw == ((old.get("metadata") or {}).get("annotations") or {}).get(JOB_MIN_PARALLELISM):
        return []
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    pods = job_pods(spec)
    f = label_field(JOB_MIN_PARALLELISM).replace("metadata.labels", "metadata.annotations")
    text = str(raw).strip()
    value = int(text) if text.lstrip("+-").isdigit() else None
    if value is not None and 0 < value < pods:
        return []
    asked = f"is {json.dumps(raw)}" if value is None else f"is {value}"
    return [Violation("kueue-partial-admission", f,
        f"{asked} for a Job that runs {pods} pod(s) at a time (min(parallelism, completions)); Kueue: \"should be "
        f"between 0 and {pods - 1}\"; allowed: a whole number from 1 to {pods - 1}; fix: "
        + (f"set it to a number from 1 to {pods - 1}, or remove it" if pods > 1 else
           "remove it (a Job of one pod cannot be admitted partially) or raise spec.parallelism"))]


def check_queue_kept(obj: dict, old: dict | None, queued: bool) -> list[Violation]:
    """Kueue rule on UPDATE: a workload keeps its ``kueue.x-k8s.io/queue-name``. Kueue makes the
    label immutable while the job runs and refuses an empty one where a default queue exists
    (kueue v0.17 ``pkg/controller/jobframework/validation.go`` ``validateUpdateForQueueName``;
    the removal from a running RayJob/RayCluster is kubernetes-sigs/kueue PR 13293). In a
    workspace every queued workload belongs to its LocalQueue, so removing it is never allowed:
    without it Kueue no longer manages the job and its pods run outside quota. The mutating
    webhook restores the label; this catches a later webhook or a request that skipped it."""
    if not queued or not isinstance(old, dict):
        return []
    before = ((old.get("metadata") or {}).get("labels") or {}).get(labels.KUEUE_QUEUE_NAME)
    now = ((obj.get("metadata") or {}).get("labels") or {}).get(labels.KUEUE_QUEUE_NAME)
    if not before or now:
        return []
    return [Violation("queue", label_field(labels.KUEUE_QUEUE_NAME),
        f"is removed; Kueue: \"field is immutable\" while the workload runs, and without it Kueue stops managing "
        f"the workload so its pods would run outside quota; allowed: {before!r}; fix: keep the label "
        f"{labels.KUEUE_QUEUE_NAME}={before}")]


def check_rayjob_shutdown(spec: dict) -> list[Violation]:
    """Kueue rule for a queued RayJob: ``shutdownAfterJobFinishes`` must be true ("a kueue
    managed job should delete the cluster after finishing": a RayCluster that outlives its job
    keeps the quota). KubeRay rules it meets: true is not allowed beside
    ``deletionStrategy.deletionRules`` (mutually exclusive) nor with a ``DeleteNone``
    onSuccess/onFailure policy. Mutation sets it to true unless a ``deletionStrategy`` is given."""
    shutdown = spec.get("shutdownAfterJobFinishes")
    strategy = spec.get("deletionStrategy") if isinstance(spec.get("deletionStrategy"), dict) else {}
    if strategy.get("deletionRules") is not None:
        return [Violation("rayjob-shutdown", "spec.deletionStrategy.deletionRules",
            "is set on a queued RayJob; allowed: shutdownAfterJobFinishes: true, which Kueue requires and KubeRay "
            "does not allow beside deletionRules; fix: remove spec.deletionStrategy.deletionRules and set "
            "spec.shutdownAfterJobFinishes: true (optionally with ttlSecondsAfterFinished)")]
    none = [f"spec.deletionStrategy.{k}.policy" for k in ("onSuccess", "onFailure")
            if isinstance(strategy.get(k), dict) and strategy[k].get("policy") == "DeleteNone"]
    if none:
        return [Violation("rayjob-shutdown", none[0],
            "is DeleteNone on a queued RayJob; allowed: DeleteCluster, DeleteWorkers or DeleteSelf (Kueue requires "
            "shutdownAfterJobFinishes: true and KubeRay does not allow it with DeleteNone); fix: use DeleteCluster")]
    if shutdown is not True:
        return [Violation("rayjob-shutdown", "spec.shutdownAfterJobFinishes",
            f"is {'missing' if shutdown is None else 'false'}; allowed: true for a queued RayJob (Kueue keeps the "
            f"quota of a RayCluster that outlives its job); fix: set spec.shutdownAfterJobFinishes: true")]
    return []


def check_worker_groups(templates: list[PodTemplate], where: str) -> list[Violation]:
    """Kueue rule: at most ``MAX_WORKER_GROUPS`` worker groups (8 PodSets per Workload)."""
    workers = sum(1 for t in templates if t.role == "worker")
    if workers <= MAX_WORKER_GROUPS:
        return []
    return [Violation("kueue-worker-groups", where,
        f"has {workers} worker groups; allowed: at most {MAX_WORKER_GROUPS} under Kueue (a Workload holds "
        f"8 PodSets, one is the head); fix: merge worker groups with the same pod template")]


def check_priority(obj: dict, res: Resolution) -> list[Violation]:
    """The Kueue priority-class label must be the profile's WorkloadPriorityClass, so a run
    cannot jump ahead of its team's queue."""
    asked = ((obj.get("metadata") or {}).get("labels") or {}).get(labels.KUEUE_PRIORITY_CLASS)
    allowed = res.profile.priorities.workload_priority_class_name
    if asked is None or asked == allowed:
        return []
    return [Violation("priority-class", label_field(labels.KUEUE_PRIORITY_CLASS),
        f"asks for priority class {asked!r}; allowed: {allowed!r} (workload profile {res.profile.name!r}); "
        f"fix: {'set it to ' + repr(allowed) if allowed else 'remove the label'}")]


def check_run_id(obj: dict, old: dict | None) -> list[Violation]:
    """The run-id is immutable once minted."""
    old_id = (((old or {}).get("metadata") or {}).get("labels") or {}).get(labels.RUN_ID)
    new_id = ((obj.get("metadata") or {}).get("labels") or {}).get(labels.RUN_ID)
    if old_id and new_id != old_id:
        return [Violation("run-id", label_field(labels.RUN_ID),
            f"changes the run-id from {old_id!r} to {new_id!r}; allowed: {old_id!r} (run-ids are immutable); "
            f"fix: keep the label as it is")]
    return []


def structural(obj: dict, adapter: WorkloadAdapter, templates: list[PodTemplate], res: Resolution | None,
               old: dict | None, *, elastic_jobs: bool = False) -> list[Violation]:
    """Every built-in structural check that applies to ``obj`` (a top-level workload of
    ``adapter.kind``); ``old`` is the stored object on UPDATE, else None; ``elastic_jobs`` says
    whether Kueue's ElasticJobsViaWorkloadSlices feature gate is on (``Settings.kueue_elastic_jobs``)."""
    kind = adapter.kind
    queued = adapter.queued(obj)
    out = check_gpu_resources(templates)
    if kind == "RayJob":
        out += check_rayjob(obj, templates, queued=queued)
    elif kind == "RayCluster":
        out += check_worker_groups(templates, "spec.workerGroupSpecs")
    elif kind == "Job":
        out += check_partial_admission(obj, old)
    if queued and kind in ("RayJob", "RayCluster"):
        out += check_autoscaling(obj, kind, elastic_jobs)
    if res is not None:
        out += check_priority(obj, res)
    out += check_run_id(obj, old)
    out += check_queue_kept(obj, old, queued)
    return out
