"""LeaderWorkerSet ``leaderworkerset.x-k8s.io/v1``: ``spec.replicas`` groups of ``size`` pods, a serving workload.

Upstream rules followed here:

- pods: each of ``spec.replicas`` groups (default 1) runs ``spec.leaderWorkerTemplate.size`` pods
  (default 1): one leader from ``leaderTemplate`` and size-1 workers from ``workerTemplate``, or,
  without a ``leaderTemplate``, all size pods from ``workerTemplate`` (lws v0.8.0
  ``api/leaderworkerset/v1/leaderworkerset_types.go``, ``+kubebuilder:default=1`` on both);
- Kueue queues each group as its own Workload with a ``leader`` PodSet of 1 and a ``worker``
  PodSet of size-1 (or one PodSet of size without a leader template), so a group is the fewest
  pods Kueue admits (kueue v0.17 ``pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go``
  ``podSets``, ``leaderworkerset_webhook.go`` ``GetWorkloadName``);
- a serving workload has no ``suspend``: Kueue gates its pods instead, through the annotations its
  webhook puts on both pod templates when the LeaderWorkerSet has a queue name
  (``leaderworkerset_webhook.go`` ``Default``, ``podTemplateSpecDefault``:
  ``kueue.x-k8s.io/pod-suspending-parent``, ``kueue.x-k8s.io/pod-group-serving: "true"`` and the
  object's ``kueue.x-k8s.io/priority-class``), which taugate sets too (``kueue_template_metadata``);
- the pod templates' node selector, affinity, tolerations and container requests are immutable on
  a queued LeaderWorkerSet (``leaderworkerset_webhook.go`` ``ValidateUpdate``,
  ``validateImmutablePodTemplateSpec``; kueue v0.17 ``pkg/util/pod/pod.go`` ``SpecShape``);
- LWS: replicas x size within int32 (lws v0.8.0 ``pkg/webhooks/leaderworkerset_webhook.go``
  ``generalValidate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required

from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.kinds.base import WorkloadKind, cel_templates
from taugate.outcome import Outcome, conditions_of, is_true, serving_outcome
from taugate.pods import INT32_MAX, PodTemplate, as_int
from taugate.structure import Int32, PodTemplateSpec, PositiveInt32
from taugate.violation import Violation

SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
"""Kueue's pod annotation naming the framework whose parent holds the pod gated (kueue v0.17
``pkg/controller/jobs/pod/constants`` ``SuspendedByParentAnnotation``)."""
FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
"""Kueue's name of the LeaderWorkerSet integration (``leaderworkerset_controller.go`` ``FrameworkName``)."""
GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
"""Kueue's pod annotation of a serving pod group (``GroupServingAnnotationKey``), value ``"true"``."""
PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
"""Kueue's WorkloadPriorityClass label (``constants.WorkloadPriorityClassLabel``)."""


def group_pods(spec: dict[str, Any]) -> tuple[int, int]:
    """``(groups, pods per group)`` of a LeaderWorkerSet spec: ``replicas`` (default 1) and
    ``leaderWorkerTemplate.size`` (default 1), as the CRD defaults them before admission (lws
    v0.8.0 ``leaderworkerset_types.go``)."""
    size = as_int(as_dict(spec.get("leaderWorkerTemplate")).get("size"), 1)
    return max(as_int(spec.get("replicas"), 1), 0), max(size, 1)



class LeaderWorkerTemplate(TypedDict, total=False):
    """lws v0.8.0 ``LeaderWorkerTemplate``: ``size`` (int32, 1 or more), an optional leader pod
    template and the worker pod template (required)."""

    size: PositiveInt32 | None
    leaderTemplate: PodTemplateSpec | None
    workerTemplate: Required[PodTemplateSpec]


class LeaderWorkerSetSpec(TypedDict, total=False):
    """lws v0.8.0 ``api/leaderworkerset/v1/leaderworkerset_types.go`` ``LeaderWorkerSetSpec`` as
    far as admission reads it: ``replicas`` (int32) and the leader-worker template (required)."""

    replicas: Int32 | None
    leaderWorkerTemplate: Required[LeaderWorkerTemplate]


class LeaderWorkerSet(WorkloadKind):
    """LeaderWorkerSet ``leaderworkerset.x-k8s.io/v1``: a leader template (role ``leader``) and a
    worker template (role ``worker``), ``group_pods`` pods per group, queued per group, never
    suspended."""

    group, version, resource, kind = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"
    cel_pod_templates = (f'{cel_templates("spec", "leaderWorkerTemplate", "leaderTemplate")} + '
                     f'{cel_templates("spec", "leaderWorkerTemplate", "workerTemplate")}')
    spec_model = LeaderWorkerSetSpec
    default_lane = "serving"
    suspend_path = None
    scale_path = ("spec", "replicas")
    upstream = ("kueue v0.17 pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go podSets, "
                "leaderworkerset_webhook.go Default, ValidateUpdate; "
                "lws v0.8.0 pkg/webhooks/leaderworkerset_webhook.go generalValidate")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """``spec.leaderWorkerTemplate.leaderTemplate`` (role ``leader``: one pod per group) when
        present, then ``workerTemplate`` (role ``worker``: size-1 pods per group, or size without a
        leader template), each ``replicas`` groups; ``min_replicas`` is one group's pods (Kueue
        admits group by group). Both hold their count in ``spec.replicas`` (``group_path``
        ``spec``)."""
        spec = as_dict(obj.get("spec"))
        lwt = as_dict(spec.get("leaderWorkerTemplate"))
        groups, size = group_pods(spec)
        at = ("spec", "leaderWorkerTemplate")
        out: list[PodTemplate] = []
        leader = lwt.get("leaderTemplate")
        if type(leader) is dict:
            out.append(PodTemplate.of("leader", "leader", at + ("leaderTemplate",), ("spec",), groups, leader, {},
                                      min(groups, 1)))
            size -= 1
        worker = lwt.get("workerTemplate")
        if type(worker) is dict:
            out.append(PodTemplate.of("worker", "worker", at + ("workerTemplate",), ("spec",), groups * size, worker,
                                      {}, size if groups else 0))
        return out

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """False: Kueue holds a queued LeaderWorkerSet's pod template specs immutable
        (``leaderworkerset_webhook.go`` ``ValidateUpdate``, ``validateImmutablePodTemplateSpec``:
        node selector, affinity, tolerations, requests), so taugate restores nothing there on
        UPDATE (placement added there would fail the UPDATE); every LeaderWorkerSet taugate
        admits is queued."""
        return False

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """What Kueue's ``podTemplateSpecDefault`` writes on both pod templates of a queued
        LeaderWorkerSet: the annotations that make Kueue's pod integration gate every pod
        (``kueue.x-k8s.io/pod-suspending-parent``, ``kueue.x-k8s.io/pod-group-serving``) and the
        object's WorkloadPriorityClass label, when it has one."""
        return ({PRIORITY_CLASS: priority_class} if priority_class else {},
                {SUSPENDING_PARENT: FRAMEWORK, GROUP_SERVING: "true"})

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """LWS: replicas x size within int32 ("the product of replicas and worker replicas must
        not exceed 2147483647", ``generalValidate``)."""
        groups, size = group_pods(as_dict(obj.get("spec")))
        if groups * size <= INT32_MAX:
            return []
        return [Violation("leaderworkerset-replicas", "spec.replicas",
            f"is {groups} groups of {size} pods: {groups * size} pods; LeaderWorkerSet: \"the product of replicas and "
            f"worker replicas must not exceed {INT32_MAX}\"; fix: lower spec.replicas or leaderWorkerTemplate.size")]

    serving = True

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """LeaderWorkerSet v0.8.0 ``api/leaderworkerset/v1/leaderworkerset_types.go``
        ``LeaderWorkerSetAvailable``: the ``Available`` condition (at least the minimum of groups
        ready)."""
        available = is_true(conditions_of(obj).get("Available"))
        return serving_outcome(obj, "condition Available is true" if available else None)


KIND = LeaderWorkerSet()
