"""Kubernetes ``batch/v1`` Job: one pod template, ``spec.template``.

Upstream rules followed here:

- pods at a time: min(parallelism, completions) (Kubernetes Job controller; kueue v0.17
  ``pkg/controller/jobs/job/job_controller.go`` ``Job.podsCount``), down to
  ``kueue.x-k8s.io/job-min-parallelism`` under Kueue's partial admission (``Job.minPodsCount``,
  ``job_webhook.go`` ``validatePartialAdmissionCreate``);
- the pod template is immutable once the Job started (Kubernetes v1.37
  ``pkg/apis/batch/validation/validation.go`` ``validatePodTemplateUpdate``,
  ``pkg/registry/batch/job/strategy.go`` ``validationOptionsForJob``);
- structure: batch/v1 ``JobSpec`` (parallelism, completions ``*int32``; suspend a boolean).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Required

from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.fieldpath import annotation_field
from taugate.kinds.base import WorkloadKind, cel_templates
from taugate.outcome import Outcome, conditions_of, is_true
from taugate.pods import PodTemplate, as_int
from taugate.structure import Int32, PodTemplateSpec
from taugate.violation import Violation


class JobSpec(TypedDict, total=False):
    """batch/v1 ``JobSpec`` as far as admission reads it: ``parallelism`` and ``completions``
    (``*int32``), ``suspend``, and the pod template (required)."""

    parallelism: Int32 | None
    completions: Int32 | None
    suspend: bool | None
    template: Required[PodTemplateSpec]


def job_pods(spec: dict[str, Any]) -> int:
    """Pods a batch/v1 Job runs at a time: min(parallelism, completions), parallelism defaulting
    to 1 (Kubernetes Job controller; kueue v0.17 ``pkg/controller/jobs/job/job_controller.go``
    ``Job.podsCount``, the PodSet count Kueue reserves)."""
    pods = as_int(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if type(completions) is int and completions < pods:
        pods = completions
    return max(pods, 0)


JOB_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
"""Kueue's partial-admission annotation on a batch/v1 Job (PartialAdmission, beta, on by default
since Kueue 0.5)."""


def job_min_pods(obj: dict[str, Any], pods: int) -> int:
    """The fewest pods Kueue may admit a Job with: its ``kueue.x-k8s.io/job-min-parallelism``
    annotation when it is a whole number in 1..pods-1 (kueue v0.17
    ``pkg/controller/jobs/job/job_controller.go`` ``Job.minPodsCount``, checked by
    ``job_webhook.go`` ``validatePartialAdmissionCreate``), else ``pods``."""
    notes = as_dict(as_dict(obj.get("metadata")).get("annotations"))
    raw = notes.get(JOB_MIN_PARALLELISM)
    if type(raw) is str and raw.strip().lstrip("+-").isdigit():
        value = int(raw)
        if 0 < value < pods:
            return value
    return pods


def check_partial_admission(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[Violation]:
    """Kueue rule for a Job's partial admission annotation ``kueue.x-k8s.io/job-min-parallelism``:
    a whole number above 0 and below the pods the Job runs at a time (kueue v0.17
    ``pkg/controller/jobs/job/job_webhook.go`` ``validatePartialAdmissionCreate``: "should be
    between 0 and N"). On UPDATE (``old`` given) only when the annotation changes, as Kueue's
    ``validateUpdate`` does: Kueue itself lowers ``parallelism`` to the admitted count, which may
    be the minimum."""
    notes = as_dict(as_dict(obj.get("metadata")).get("annotations"))
    raw = notes.get(JOB_MIN_PARALLELISM)
    if raw is None:
        return []
    old_notes = as_dict(as_dict(old.get("metadata")).get("annotations")) if isinstance(old, dict) else None
    if old_notes is not None and raw == old_notes.get(JOB_MIN_PARALLELISM):
        return []
    spec = as_dict(obj.get("spec"))
    pods = job_pods(spec)
    f = annotation_field(JOB_MIN_PARALLELISM)
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


class Job(WorkloadKind):
    """Kubernetes ``batch/v1`` Job: one pod template, ``job_pods`` pods at a time (fewer, down to
    ``job_min_pods``, under Kueue's partial admission)."""

    group, version, resource, kind = "batch", "v1", "jobs", "Job"
    cel_pod_templates = cel_templates("spec", "template")
    spec_model = JobSpec
    templates_from_spec = False  # pod_templates reads the kueue.x-k8s.io/job-min-parallelism annotation
    upstream = ("kubernetes v1.37 pkg/apis/batch/validation/validation.go validatePodTemplateUpdate; "
                "kueue v0.17 pkg/controller/jobs/job/job_controller.go podsCount, minPodsCount, job_webhook.go")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """``spec.template`` (role ``job``): ``job_pods`` pods at a time, down to ``job_min_pods``
        under Kueue's partial admission."""
        spec = as_dict(obj.get("spec"))
        if not isinstance(spec.get("template"), dict):
            return []
        pods = job_pods(spec)
        return [PodTemplate.of("job", "job", ("spec", "template"), ("spec",), pods, spec["template"], {},
                               job_min_pods(obj, pods))]

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """A Job's pod template is immutable unless the stored Job is suspended, has never
        started (no ``status.startTime``) and has no active pod. Kubernetes v1.37
        ``pkg/apis/batch/validation/validation.go`` ``validatePodTemplateUpdate`` (template
        labels, annotations, node selector, tolerations, scheduling gates mutable only with
        ``AllowMutableSchedulingDirectives``), set in ``pkg/registry/batch/job/strategy.go``
        ``validationOptionsForJob`` to suspended && never started, or, with the
        MutableSchedulingDirectivesForSuspendedJobs gate, ``shouldAllowMutablePodTemplate``
        (suspended, never started or JobSuspended, no active pod): this is true only where both
        agree. Kueue's unsuspend (suspend true -> false with the flavor's node selectors) is
        judged on the stored, suspended Job, so it may carry template changes."""
        spec, status = as_dict(old.get("spec")), as_dict(old.get("status"))
        return spec.get("suspend") is True and not status.get("startTime") and not status.get("active")

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """Kueue's partial-admission annotation rule (``check_partial_admission``)."""
        return check_partial_admission(obj, old)

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Kubernetes ``k8s.io/api/batch/v1/types.go`` ``JobConditionType``: ``Complete`` (or
        ``SuccessCriteriaMet``) True is success, ``Failed`` (or ``FailureTarget``) True is failure,
        ``spec.suspend`` means not started."""
        conds = conditions_of(obj)
        for t in ("Complete", "SuccessCriteriaMet"):
            c = conds.get(t)
            if is_true(c):
                said = c.get("message") or c.get("reason") or "True"
                return Outcome("succeeded", "Succeeded", f"Job condition {t}: {said}",
                               status.get("completionTime") or c.get("lastTransitionTime"))
        for t in ("Failed", "FailureTarget"):
            c = conds.get(t)
            if is_true(c):
                return Outcome("failed", str(c.get("reason") or "JobFailed"),
                               f"Job condition {t}: {c.get('reason') or ''} {c.get('message') or ''}".strip(),
                               c.get("lastTransitionTime"))
        if as_dict(obj.get("spec")).get("suspend"):
            return Outcome("pending", "Suspended", "Job spec.suspend is true (waiting for Kueue)")
        if int(status.get("active") or 0) > 0:
            return Outcome("running", "Running", f"Job has {status.get('active')} active pod(s)")
        return Outcome("pending", "NotStarted", "Job has no active pod")


KIND = Job()
