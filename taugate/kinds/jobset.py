"""JobSet ``jobset.x-k8s.io/v1alpha2``: replicated jobs, each a batch/v1 Job template run ``replicas`` times.

Upstream rules followed here:

- pod templates: ``spec.replicatedJobs[i].template.spec.template`` (role ``replicated-job``), with
  ``replicas`` x min(parallelism, completions) pods each, parallelism defaulting to 1 and
  ``replicas`` to 1 (kueue v0.17 ``pkg/controller/jobs/jobset/jobset_controller.go`` ``PodSets``,
  ``podsCount``, ``PodsCountPerReplica``; jobset v0.11.1 ``api/jobset/v1alpha2/jobset_types.go``
  ``ReplicatedJob.Replicas``, ``+kubebuilder:default=1``);
- queued with the ``kueue.x-k8s.io/queue-name`` label and suspended through ``spec.suspend``
  (kueue v0.17 ``jobset_webhook.go`` ``Default``: ``ApplyDefaultForSuspend``); one PodSet per
  replicated job and a Workload holds at most 8 PodSets (kueue v0.17
  ``apis/kueue/v1beta2/workload_types.go``, ``PodSets`` ``MaxItems=8``);
- the pod templates' labels, annotations, node selector and tolerations may change only while the
  JobSet is suspended, nothing else in ``spec.replicatedJobs`` ever (jobset v0.11.1
  ``pkg/webhooks/jobset_webhook.go`` ``ValidateUpdate``), so taugate's UPDATE edits stay off the
  pod templates (``templates_mutable``);
- replicas x parallelism within int32 (the same ``ValidateCreate``: "the product of replicas and
  parallelism must not exceed 2147483647").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required

from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.kinds.base import WorkloadKind, cel_templates
from taugate.kinds.job import JobSpec, job_pods
from taugate.outcome import Outcome, by_conditions
from taugate.pods import INT32_MAX, PodTemplate, as_int
from taugate.structure import Int32
from taugate.violation import Violation

MAX_POD_SETS = 8
"""Kueue: a Workload has at most 8 PodSets (kueue v0.17 ``apis/kueue/v1beta2/workload_types.go``
``WorkloadSpec.PodSets``, ``MaxItems=8``); a JobSet gets one per replicated job."""


def replicated_job_pods(rjob: dict[str, Any]) -> int:
    """Pods one replicated job of a JobSet runs at a time: ``replicas`` (default 1) Jobs of
    min(parallelism, completions) pods each (``job.job_pods``). kueue v0.17
    ``pkg/controller/jobs/jobset/jobset_controller.go`` ``podsCount`` (``rj.Replicas *
    PodsCountPerReplica(rj)``), the PodSet count Kueue reserves."""
    job_spec = as_dict(as_dict(rjob.get("template")).get("spec"))
    return max(as_int(rjob.get("replicas"), 1), 0) * job_pods(job_spec)



class JobTemplateSpec(TypedDict, total=False):
    """batch/v1 ``JobTemplateSpec``: the Job spec (``job.JobSpec``) of a replicated job."""

    spec: Required[JobSpec]


class ReplicatedJob(TypedDict, total=False):
    """jobset v0.11.1 ``ReplicatedJob``: ``name``, ``replicas`` (int32) and the Job template."""

    name: str | None
    replicas: Int32 | None
    template: Required[JobTemplateSpec]


class JobSetSpec(TypedDict, total=False):
    """jobset v0.11.1 ``api/jobset/v1alpha2/jobset_types.go`` ``JobSetSpec`` as far as admission
    reads it: ``replicatedJobs`` (required) and ``suspend``."""

    replicatedJobs: Required[list[ReplicatedJob]]
    suspend: bool | None


class JobSet(WorkloadKind):
    """JobSet ``jobset.x-k8s.io/v1alpha2``: one pod template per replicated job, each with
    ``replicated_job_pods`` pods."""

    group, version, resource, kind = "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"
    cel_pod_templates = cel_templates("spec", "replicatedJobs", each="template.spec.template")
    spec_model = JobSetSpec
    upstream = ("kueue v0.17 pkg/controller/jobs/jobset/jobset_controller.go PodSets, podsCount, jobset_webhook.go "
                "Default; jobset v0.11.1 pkg/webhooks/jobset_webhook.go ValidateCreate, ValidateUpdate")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """``spec.replicatedJobs[i].template.spec.template`` (role ``replicated-job``, group the
        replicated job's ``name``), ``replicated_job_pods`` pods each, in the order Kueue lists
        its PodSets."""
        out: list[PodTemplate] = []
        rjobs = as_dict(obj.get("spec")).get("replicatedJobs")
        for i, rjob in enumerate(rjobs if type(rjobs) is list else ()):
            template = as_dict(as_dict(rjob).get("template")).get("spec")
            if type(template) is not dict or type(template.get("template")) is not dict:
                continue
            name = rjob.get("name")
            out.append(PodTemplate.of("replicated-job", name if type(name) is str and name else f"replicated-job-{i}",
                                      ("spec", "replicatedJobs", i, "template", "spec", "template"),
                                      ("spec", "replicatedJobs", i), replicated_job_pods(rjob), template["template"],
                                      {}))
        return out

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """False: jobset v0.11.1 ``pkg/webhooks/jobset_webhook.go`` ``ValidateUpdate`` keeps
        ``spec.replicatedJobs`` immutable except, while the old or the new JobSet is suspended,
        the pod templates' labels, annotations, node selector, tolerations and scheduling gates
        ("needed for integration with Kueue"). What taugate restores on UPDATE may also include
        the workspace data volume (``mutation.place_templates``), which JobSet never lets change,
        so the pod templates are left alone on every UPDATE: a patch of ours never fails one."""
        return False

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """JobSet: replicas x parallelism within int32 per replicated job (``ValidateCreate``);
        Kueue: at most ``MAX_POD_SETS`` replicated jobs in a queued JobSet."""
        out: list[Violation] = []
        rjobs = as_dict(obj.get("spec")).get("replicatedJobs")
        for i, rjob in enumerate(rjobs if type(rjobs) is list else ()):
            replicas = as_int(as_dict(rjob).get("replicas"), 1)
            parallelism = as_int(as_dict(as_dict(as_dict(rjob).get("template")).get("spec")).get("parallelism"), 1)
            if replicas * parallelism > INT32_MAX:
                out.append(Violation("jobset-replicas", f"spec.replicatedJobs[{i}].replicas",
                    f"is {replicas} with parallelism {parallelism}: {replicas * parallelism} pods; JobSet: \"the "
                    f"product of replicas and parallelism must not exceed {INT32_MAX}\"; fix: lower replicas or "
                    f"parallelism"))
        if queued and len(templates) > MAX_POD_SETS:
            out.append(Violation("kueue-pod-sets", "spec.replicatedJobs",
                f"has {len(templates)} replicated jobs; allowed: at most {MAX_POD_SETS} under Kueue (a Workload holds "
                f"{MAX_POD_SETS} PodSets, one per replicated job); fix: merge replicated jobs with the same pod "
                f"template (raise their replicas instead)"))
        return out

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """JobSet v0.11.1 ``api/jobset/v1alpha2/jobset_types.go`` ``JobSetConditionType``:
        ``Completed`` True is success, ``Failed`` True is failure (reason e.g. ``FailedJobs``,
        ``ReachedMaxRestarts``), ``Suspended`` True means Kueue holds it; running while any
        ``replicatedJobsStatus[].active`` is above 0."""
        return by_conditions(obj, success="Completed", failure="Failed", suspended="Suspended", running=None,
                             end_field=None)


KIND = JobSet()
