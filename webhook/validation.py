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
from taugate.fieldpath import field_path, label_field
from taugate.kinds import WorkloadKind
from taugate.pods import MAX_GPUS, PodTemplate
from taugate.violation import Violation
from taugate.webhook import pod_rules
from taugate.webhook.resolution import Resolution


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
            if g.request is None and g.limit is None:  # the usual container: no GPU, nothing to check
                continue
            base = t.resources_path(g.kind, g.index)
            for which, raw, num in (("limits", g.limit, g.limit_n), ("requests", g.request, g.request_n)):
                if raw is None or (num is not None and num >= 0 and num == num.to_integral_value()):
                    continue
                f = field_path(base + (which, labels.GPU_RESOURCE))
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
                out.append(Violation("gpu-request-equals-limit", field_path(base + ("requests", labels.GPU_RESOURCE)),
                    f"requests {_fmt(g.request_n)} GPU(s) but limits {_fmt(g.limit_n)}; allowed: request == limit "
                    f"(Kubernetes does not overcommit extended resources); fix: set both to {_fmt(g.limit_n)}"))
            elif g.request_n is not None and g.limit_n is None and g.request_n > 0:
                out.append(Violation("gpu-request-equals-limit", field_path(base + ("limits", labels.GPU_RESOURCE)),
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


def structural(obj: dict, kind: WorkloadKind, templates: list[PodTemplate], res: Resolution | None,
               old: dict | None, *, elastic_jobs: bool = False) -> list[Violation]:
    """Every built-in structural check that applies to ``obj`` (a well-formed top-level workload of
    ``kind``): the GPU resource rules, the kind's own rules (``kind.checks``), the pod templates'
    node name and pod priority (``pod_rules``), then the priority class, run-id and queue label;
    ``old`` is the stored object on UPDATE, else None; ``elastic_jobs`` says whether Kueue's
    ElasticJobsViaWorkloadSlices feature gate is on (``Settings.kueue_elastic_jobs``)."""
    queued = kind.queued(obj)
    out = check_gpu_resources(templates)
    out += kind.checks(obj, templates, queued=queued, old=old, elastic_jobs=elastic_jobs)
    stored = old if isinstance(old, dict) else None
    out += pod_rules.bypass_violations(templates, (lambda: kind.read(stored)[1]) if stored is not None else None)
    if res is not None:
        out += check_priority(obj, res)
        out += pod_rules.priority_violations(templates, res.profile)
    out += check_run_id(obj, old)
    out += check_queue_kept(obj, old, queued)
    return out
