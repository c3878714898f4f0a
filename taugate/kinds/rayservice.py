"""KubeRay ``ray.io/v1`` RayService: Ray Serve on a RayCluster spec (``spec.rayClusterConfig``).

Upstream rules followed here:

- pod templates: the RayCluster's (``raycluster.cluster_templates`` under ``spec.rayClusterConfig``:
  the head, then each worker group with ``raycluster.worker_group_pods`` pods), as Kueue builds
  its PodSets (kueue v0.17 ``pkg/controller/jobs/rayservice/rayservice_controller.go``
  ``PodSets``: ``raycluster.BuildPodSets(&j.Spec.RayClusterSpec)``);
- queued with the ``kueue.x-k8s.io/queue-name`` label and suspended through
  ``spec.rayClusterConfig.suspend`` (``rayservice_controller.go`` ``Suspend``, ``IsSuspended``;
  ``rayservice_webhook.go`` ``Default``: ``ApplyDefaultForSuspend``), so ``suspend_path`` is that
  field: the serving workload starts once Kueue admits it;
- Kueue's RayService webhook (``rayservice_webhook.go`` ``validateCreate``, through
  ``raycluster.ValidateCreate`` on ``spec.rayClusterConfig``): at most 7 worker groups, in-tree
  autoscaling only for an elastic job;
- KubeRay's ``ValidateRayServiceSpec`` (ray-operator v1.5 ``controllers/ray/utils/validation.go``):
  no head service name under ``rayClusterConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required

from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.kinds.raycluster import (
    EmbeddedRayCluster,
    RayClusterSpec,
    cel_cluster_templates,
    check_autoscaling,
    check_worker_groups,
    cluster_templates,
)
from taugate.outcome import Outcome, conditions_of, is_true, serving_outcome
from taugate.pods import PodTemplate
from taugate.violation import Violation

CLUSTER = ("spec", "rayClusterConfig")
"""Where a RayService holds its RayCluster spec (KubeRay ``RayServiceSpec.RayClusterSpec``, JSON
``rayClusterConfig``)."""



class RayServiceSpec(TypedDict, total=False):
    """KubeRay ``RayServiceSpec`` (ray-operator v1.5 ``apis/ray/v1/rayservice_types.go``) as far as
    admission reads it: the RayCluster spec (required; its ``suspend`` is where Kueue suspends)."""

    rayClusterConfig: Required[RayClusterSpec]


class RayService(EmbeddedRayCluster):
    """KubeRay ``ray.io/v1`` RayService: the RayCluster spec at ``spec.rayClusterConfig``, queued and
    suspended there."""

    group, version, resource, kind = "ray.io", "v1", "rayservices", "RayService"
    cluster_key = "rayClusterConfig"
    cel_pod_templates = cel_cluster_templates("spec", "rayClusterConfig")
    spec_model = RayServiceSpec
    default_lane = "serving"
    suspend_path = CLUSTER + ("suspend",)
    upstream = ("kueue v0.17 pkg/controller/jobs/rayservice/rayservice_controller.go PodSets, Suspend, "
                "rayservice_webhook.go validateCreate; ray-operator v1.5 controllers/ray/utils/validation.go "
                "ValidateRayServiceSpec")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The RayCluster's templates under ``spec.rayClusterConfig`` (head, then worker groups)."""
        return cluster_templates(as_dict(as_dict(obj.get("spec")).get("rayClusterConfig")), CLUSTER)

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """Kueue's RayService rules on ``spec.rayClusterConfig`` (``raycluster.check_worker_groups``,
        ``raycluster.check_autoscaling``) and KubeRay's on its head service name."""
        cluster = as_dict(as_dict(obj.get("spec")).get("rayClusterConfig"))
        out = check_worker_groups(templates, "spec.rayClusterConfig.workerGroupSpecs")
        if queued:
            out += check_autoscaling(obj, cluster, "spec.rayClusterConfig", elastic_jobs)
        service = as_dict(as_dict(cluster.get("headGroupSpec")).get("headService"))
        if as_dict(service.get("metadata")).get("name"):
            out.append(Violation("rayservice-head-service",
                "spec.rayClusterConfig.headGroupSpec.headService.metadata.name",
                "is set; KubeRay: \"spec.rayClusterConfig.headGroupSpec.headService.metadata.name should not be set\" "
                "(the RayService names the services of each RayCluster it creates); fix: remove it"))
        return out

    serving = True

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """KubeRay ray-operator v1.5 ``apis/ray/v1/rayservice_types.go``: the ``Ready`` condition
        (``RayServiceReady``), or the deprecated ``serviceStatus`` ``Running`` it is equivalent to."""
        if is_true(conditions_of(obj).get("Ready")):
            return serving_outcome(obj, "condition Ready is true")
        return serving_outcome(obj, "serviceStatus Running" if status.get("serviceStatus") == "Running" else None)


KIND = RayService()
