"""KubeRay ``ray.io/v1`` RayJob: a RayCluster spec (``spec.rayClusterSpec``) plus the submitter.

Upstream rules followed here:

- KubeRay's default submitter made explicit on CREATE (ray-operator v1.5
  ``controllers/ray/common/job.go`` ``GetSubmitterTemplate``);
- queued unless it runs on an existing cluster (``clusterSelector``): ray-operator
  ``rayjob_controller.go`` and kueue v0.17 ``pkg/controller/jobs/rayjob/rayjob_webhook.go``;
- KubeRay's ``ValidateRayJobSpec`` (ray-operator v1.5 ``controllers/ray/utils/validation.go``);
- Kueue's RayJob webhook (``rayjob_webhook.go`` ``validateCreate``): ``shutdownAfterJobFinishes``,
  at most 7 worker groups, no in-tree autoscaling outside an elastic job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.kinds.base import Override, cel_templates
from taugate.kinds.raycluster import (
    EmbeddedRayCluster,
    RayClusterSpec,
    cel_cluster_templates,
    check_autoscaling,
    check_worker_groups,
    cluster_templates,
)
from taugate.outcome import Outcome
from taugate.pods import PodTemplate, asks_for_gpus
from taugate.structure import PodTemplateSpec, StringMap
from taugate.violation import Violation

# KubeRay builds the RayCluster's name (name + "-" + 5 random characters) and the submitter Job's
# from a RayJob's name; its validation rejects names over 47 characters.
MAX_RAYJOB_NAME = 47
# generateName gets 5 random characters appended by the API server.
MAX_RAYJOB_GENERATE_NAME = MAX_RAYJOB_NAME - 5


def check_rayjob(obj: dict[str, Any], templates: list[PodTemplate], queued: bool,
                 elastic_jobs: bool = False, old: dict[str, Any] | None = None) -> list[Violation]:
    """KubeRay and Kueue rules for a RayJob; ``elastic_jobs``: Kueue's ElasticJobsViaWorkloadSlices
    gate; ``old``: the stored RayJob on UPDATE (a GPU submitter it already had is not judged again)."""
    out: list[Violation] = []
    meta = as_dict(obj.get("metadata"))
    spec = as_dict(obj.get("spec"))
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
    submitter = next((t for t in templates if t.role == "submitter"), None)
    if not queued and submitter is not None and asks_for_gpus([submitter]) and not _gpu_submitter(old):
        out.append(Violation("rayjob-cluster-selector", "spec.submitterPodTemplate",
            "asks for GPUs in the submitter of a RayJob on an existing cluster (clusterSelector), which Kueue does "
            "not queue (kueue v0.17 pkg/controller/jobs/rayjob), so they would run outside the workspace's quota; "
            "allowed: a submitter without GPUs (it only runs `ray job submit`); fix: remove the GPUs from "
            "spec.submitterPodTemplate, or run the job on its own cluster (spec.rayClusterSpec)"))
    if queued:
        out += check_worker_groups(templates, "spec.rayClusterSpec.workerGroupSpecs")
        out += check_rayjob_shutdown(spec)
        out += check_autoscaling(obj, as_dict(spec.get("rayClusterSpec")), "spec.rayClusterSpec", elastic_jobs)
    return out


def _gpu_submitter(old: dict[str, Any] | None) -> bool:
    template = as_dict(as_dict(old).get("spec")).get("submitterPodTemplate") if old is not None else None
    return type(template) is dict and asks_for_gpus([PodTemplate.of("submitter", "submitter", (), (), 1, template, {})])


def check_rayjob_submission(spec: dict[str, Any]) -> list[Violation]:
    """KubeRay rules on the submission mode that KubeRay checks only in its controller, after Kueue
    may already hold quota for the job (ray-operator v1.5 ``controllers/ray/utils/validation.go``
    ``ValidateRayJobSpec``; messages in its words)."""
    mode = spec.get("submissionMode")
    out: list[Violation] = []
    if mode == "InteractiveMode":
        limit = spec.get("backoffLimit")
        if type(limit) is int and limit > 0:
            out.append(Violation("rayjob-submission-mode", "spec.backoffLimit",
                f"is {limit} with submissionMode InteractiveMode; KubeRay: \"The RayJob spec is invalid: "
                f"BackoffLimit is incompatible with InteractiveMode\"; allowed: 0 or unset; fix: remove "
                f"spec.backoffLimit (or use K8sJobMode for retries)"))
    elif mode == "SidecarMode":
        for key, name in (("submitterPodTemplate", "SubmitterPodTemplate"), ("submitterConfig", "SubmitterConfig")):
            if spec.get(key) is not None:
                out.append(Violation("rayjob-submission-mode", f"spec.{key}",
                    f"is set with submissionMode SidecarMode; KubeRay: \"Currently, SidecarMode doesn't support "
                    f"{name}\"; allowed: unset in SidecarMode; fix: remove spec.{key} or use K8sJobMode"))
        cluster = as_dict(spec.get("rayClusterSpec"))
        pod = as_dict(as_dict(as_dict(cluster.get("headGroupSpec")).get("template")).get("spec"))
        policy = pod.get("restartPolicy")
        if policy not in (None, "", "Never"):
            out.append(Violation("rayjob-submission-mode",
                "spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy",
                f"is {json.dumps(policy)} with submissionMode SidecarMode; KubeRay: \"restartPolicy for head "
                f"Pod should be Never or unset when using SidecarMode\"; allowed: Never or unset; fix: set it to "
                f"Never"))
    return out


def check_rayjob_shutdown(spec: dict[str, Any]) -> list[Violation]:
    """Kueue: a queued RayJob's ``shutdownAfterJobFinishes`` must be true (a RayCluster that outlives
    its job keeps the quota). KubeRay: true is not allowed beside ``deletionStrategy.deletionRules``
    nor with a ``DeleteNone`` policy. Mutation sets true unless a ``deletionStrategy`` is given, so
    this refuses a false only where the platform says ``refuse``."""
    shutdown = spec.get("shutdownAfterJobFinishes")
    strategy = as_dict(spec.get("deletionStrategy"))
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
            f"quota of a RayCluster that outlives its job); fix: set spec.shutdownAfterJobFinishes: true "
            f"(`kubectl ray job submit`: add --ttl-seconds-after-finished=0, which sets it)")]
    return []


SHUTDOWN_SETTINGS = ("set", "refuse")
"""``Settings.ray_shutdown_after_job_finishes``: ``set`` (with a warning) or ``refuse``."""


def shutdown_override(spec: dict[str, Any], *, queued: bool, ray_shutdown: str) -> Override | None:
    """``shutdownAfterJobFinishes: true`` for a queued RayJob without ``deletionStrategy`` that
    says false (unless ``refuse``) or nothing, with its warning; else None.

    True is not a choice: Kueue refuses a queued RayJob without it (kueue v0.17
    ``pkg/controller/jobs/rayjob/rayjob_webhook.go`` ``validateCreate``) and KubeRay refuses to
    suspend one (ray-operator v1.5 ``controllers/ray/utils/validation.go`` ``ValidateRayJobSpec``),
    while a queued RayJob is created suspended. ``kubectl ray job submit`` (kubectl-plugin v1.5.0
    ``pkg/cmd/job/job_submit.go`` ``Run``) writes false unless given
    ``--ttl-seconds-after-finished``. With true the RayCluster is deleted
    ``ttlSecondsAfterFinished`` after the job ends (``rayjob_controller.go``
    ``handleShutdownAfterJobFinishes``), in ``InteractiveMode`` when the submitted job ends."""
    if not queued or spec.get("deletionStrategy") is not None:
        return None
    was = spec.get("shutdownAfterJobFinishes")
    if was is True or (was is False and ray_shutdown == "refuse"):
        return None
    ttl = spec.get("ttlSecondsAfterFinished")
    after = f"{ttl} s after" if type(ttl) is int and ttl > 0 else "as soon as"
    said = "false" if was is False else "not set (KubeRay's default: false)"
    return Override("shutdownAfterJobFinishes", True, said,
        f"Kueue refuses a queued RayJob that keeps "
        f"its RayCluster after the job (\"a kueue managed job should delete the cluster after finishing\", kueue "
        f"pkg/controller/jobs/rayjob/rayjob_webhook.go), and KubeRay does not suspend one; the RayCluster is deleted "
        f"{after} the job finishes. To keep a cluster, create a RayCluster (kubectl ray create cluster) and submit "
        f"jobs to it")


SUBMITTER_CONTAINER = "ray-job-submitter"
"""KubeRay's submitter container name (ray-operator ``utils.SubmitterContainerName``)."""


def kuberay_default_submitter(spec: dict[str, Any]) -> dict[str, Any] | None:
    """KubeRay's submitter pod template for a ``K8sJobMode`` RayJob that names none, made explicit
    so the submitter pod carries the run-id: KubeRay copies none of the RayJob's labels onto it
    (``rayjob_controller.go`` ``createNewK8sJob``). None when the RayJob has one, submits otherwise,
    or has no head image.

    ray-operator v1.5 ``controllers/ray/common/job.go`` ``GetSubmitterTemplate`` and
    ``GetDefaultSubmitterContainer``; KubeRay fills the empty command
    (``configureSubmitterContainer``), and Kueue sizes the submitter pod set from the same
    template (``pkg/controller/jobs/rayjob``), so quota is unchanged."""
    if spec.get("submitterPodTemplate") is not None:
        return None
    if (spec.get("submissionMode") or "K8sJobMode") != "K8sJobMode":
        return None
    try:
        image = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(image, str) or not image:
        return None
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": SUBMITTER_CONTAINER, "image": image,
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


class _RayJobSpec(TypedDict, total=False):
    """KubeRay RayJobSpec fields admission reads."""

    rayClusterSpec: RayClusterSpec | None
    clusterSelector: StringMap | None
    submitterPodTemplate: PodTemplateSpec | None
    suspend: bool | None
    shutdownAfterJobFinishes: bool | None


def _runs_somewhere(spec: _RayJobSpec) -> _RayJobSpec:
    """KubeRay: a RayJob needs ``rayClusterSpec`` or ``clusterSelector``."""
    if spec.get("rayClusterSpec") is None and not spec.get("clusterSelector"):
        raise PydanticCustomError("rayjob_cluster", "is missing; a RayJob needs rayClusterSpec (or clusterSelector, "
                                  "which Kueue does not queue)", {"at": "rayClusterSpec"})
    return spec


RayJobSpec = Annotated[_RayJobSpec, AfterValidator(_runs_somewhere)]
"""KubeRay ``RayJobSpec`` (ray-operator v1.5 ``apis/ray/v1/rayjob_types.go``) as far as admission
reads it."""


class RayJob(EmbeddedRayCluster):
    """KubeRay ``ray.io/v1`` RayJob."""

    group, version, resource, kind = "ray.io", "v1", "rayjobs", "RayJob"
    cluster_key = "rayClusterSpec"
    cel_pod_templates = (f'{cel_cluster_templates("spec", "rayClusterSpec")} + '
                         f'{cel_templates("spec", "submitterPodTemplate")}')
    spec_model = RayJobSpec
    upstream = ("ray-operator v1.5 controllers/ray/utils/validation.go ValidateRayJobSpec, "
                "controllers/ray/common/job.go GetSubmitterTemplate; kueue v0.17 pkg/controller/jobs/rayjob")

    def queued(self, obj: dict[str, Any]) -> bool:
        """False on an existing RayCluster (``clusterSelector``): KubeRay forbids suspending one and
        Kueue does not manage it; the RayCluster it runs on was queued itself."""
        spec = as_dict(obj.get("spec"))
        return spec.get("rayClusterSpec") is not None or not spec.get("clusterSelector")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The RayCluster's templates (head, then worker groups), then the submitter's, when present."""
        spec = as_dict(obj.get("spec"))
        out = cluster_templates(as_dict(spec.get("rayClusterSpec")), ("spec", "rayClusterSpec"))
        if isinstance(spec.get("submitterPodTemplate"), dict):
            out.append(PodTemplate.of("submitter", "submitter", ("spec", "submitterPodTemplate"),
                                      ("spec",), 1, spec["submitterPodTemplate"], {}))
        return out

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """KubeRay's and Kueue's RayJob rules (``check_rayjob``)."""
        return check_rayjob(obj, templates, queued, elastic_jobs, old)

    def create_defaults(self, spec: dict[str, Any], *, queued: bool) -> list[tuple[str, Any]]:
        """KubeRay's default submitter pod template made explicit (``kuberay_default_submitter``)."""
        submitter = kuberay_default_submitter(spec)
        return [] if submitter is None else [("submitterPodTemplate", submitter)]

    def create_overrides(self, spec: dict[str, Any], *, queued: bool, ray_shutdown: str) -> list[Override]:
        """``shutdownAfterJobFinishes: true`` on a queued RayJob that needs it (``shutdown_override``)."""
        found = shutdown_override(spec, queued=queued, ray_shutdown=ray_shutdown)
        return [] if found is None else [found]

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """KubeRay ray-operator v1.5 ``apis/ray/v1/rayjob_types.go`` (``JobDeploymentStatus``,
        ``JobStatus``): succeeded when ``jobDeploymentStatus`` is ``Complete`` and ``jobStatus``
        ``SUCCEEDED``; failed when ``Failed``/``ValidationFailed``, or ``Complete`` with ``jobStatus``
        ``FAILED``/``STOPPED``."""
        dep = str(status.get("jobDeploymentStatus") or "")
        job = str(status.get("jobStatus") or "")
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
        end = status.get("endTime") if isinstance(status.get("endTime"), str) else None
        detail = f"RayJob jobDeploymentStatus={dep or '(none)'}, jobStatus={job or '(none)'}"
        if dep == "Complete" and job == "SUCCEEDED":
            return Outcome("succeeded", "Succeeded", detail, end)
        if dep in ("Failed", "ValidationFailed") or (dep == "Complete" and job in ("FAILED", "STOPPED")):
            why = reason or (dep if dep != "Complete" else ("JobStopped" if job == "STOPPED" else "AppFailed"))
            return Outcome("failed", why, f"{detail}" + (f": {message}" if message else ""), end)
        if dep in ("Running", "Retrying") or job == "RUNNING":
            return Outcome("running", dep or "Running", detail)
        return Outcome("pending", dep or "NotStarted", detail)


KIND = RayJob()
