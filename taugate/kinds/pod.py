"""Kubernetes core ``v1`` Pod created bare in a workspace: the object is its own pod template.
Governed only when it asks for GPUs; a GPU Pod whose controller is a kind taugate does not manage
is refused or warned (``taugate.unmanaged``).

Upstream rules followed here:

- Kueue's pod integration (kueue v0.17 ``pkg/controller/jobs/pod/pod_webhook.go``
  ``PodWebhook.Default``): a queued Pod is gated (a Pod has no ``suspend``); a Pod whose owner
  Kueue already manages is skipped (``jobframework.FindAncestorJobManagedByKueue``);
- pod groups (``pod_webhook.go`` ``validatePodGroupMetadata``, ``pod_controller.go``
  ``Pod.groupTotalCount``): one PodSet of that many pods shaped like the first runnable one
  (``pod_controller.go`` ``constructGroupPodSetsFast``);
- the pod spec is immutable except what a scheduling-gated pod may gain (Kubernetes v1.37
  ``pkg/apis/core/validation/validation.go`` ``ValidatePodUpdate``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from taugate.access import as_dict, as_list
from taugate.fieldpath import annotation_field, label_field
from taugate.kinds.base import WorkloadKind
from taugate.outcome import Outcome
from taugate.pods import PodTemplate, asks_for_gpus
from taugate.structure import PodSpecWithContainers
from taugate.violation import Violation

POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
"""``podconstants.GroupNameLabel``."""
POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
"""``podconstants.GroupTotalCountAnnotation``."""


def group_total_count(obj: dict[str, Any]) -> int | None:
    """The pod group's size, as Go's ``strconv.Atoi`` reads the annotation, when the Pod also has a
    ``pod-group-name`` label and the count is above 0 (kueue v0.17 ``pod_controller.go``
    ``Pod.groupTotalCount``); else None (``check_pod_group`` reports a bad one)."""
    meta = as_dict(obj.get("metadata"))
    if not as_dict(meta.get("labels")).get(POD_GROUP_NAME):
        return None
    raw = as_dict(meta.get("annotations")).get(POD_GROUP_TOTAL_COUNT)
    if not isinstance(raw, str):
        return None
    digits = raw[1:] if raw[:1] in ("+", "-") else raw
    if not digits.isascii() or not digits.isdigit():
        return None
    count = int(raw)
    return count if 0 < count <= 2**31 - 1 else None


def check_pod_group(obj: dict[str, Any]) -> list[Violation]:
    """Kueue (v0.17 ``pod_webhook.go`` ``validatePodGroupMetadata``): the group label and count
    annotation go together, the count above 0 (``Pod.groupTotalCount``)."""
    meta = as_dict(obj.get("metadata"))
    name = as_dict(meta.get("labels")).get(POD_GROUP_NAME)
    raw = as_dict(meta.get("annotations")).get(POD_GROUP_TOTAL_COUNT)
    if not name and raw is None:
        return []
    if not name:
        return [Violation("kueue-pod-group", label_field(POD_GROUP_NAME),
            f"is missing while the annotation {POD_GROUP_TOTAL_COUNT} is set; Kueue: \"both the "
            f"'{POD_GROUP_TOTAL_COUNT}' annotation and the '{POD_GROUP_NAME}' label should be set\"; fix: add the "
            f"label {POD_GROUP_NAME}: <group name> to every pod of the group, or remove the annotation")]
    if raw is None:
        return [Violation("kueue-pod-group", annotation_field(POD_GROUP_TOTAL_COUNT),
            f"is missing on a pod of group {name!r}; Kueue: \"both the '{POD_GROUP_TOTAL_COUNT}' annotation and "
            f"the '{POD_GROUP_NAME}' label should be set\"; fix: add the annotation {POD_GROUP_TOTAL_COUNT}: "
            f"\"<pods in the group>\" (a whole number above 0)")]
    if group_total_count(obj) is None:
        return [Violation("kueue-pod-group", annotation_field(POD_GROUP_TOTAL_COUNT),
            f"is {json.dumps(raw)}; allowed: a whole number above 0 (the pods in group {name!r}); Kueue: \"group "
            f"total count should be greater than zero\"; fix: set it to the number of pods in the group, e.g. \"2\"")]
    return []


KUEUE_MANAGED = "kueue.x-k8s.io/managed"
"""Kueue's label on a Pod it manages (``pkg/constants`` ``ManagedByKueueLabelKey``), and its
finalizer (``pod/podconstants`` ``PodFinalizer``)."""
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""``podconstants.SchedulingGateName``."""


class Pod(WorkloadKind):
    """Kubernetes core ``v1`` Pod."""

    group, version, resource, kind = "", "v1", "pods", "Pod"
    cel_pod_templates = "(has(object.spec) ? [object] : [])"  # the Pod is its own template
    spec_model = PodSpecWithContainers
    templates_from_spec = False  # pod_templates reads the pod group's annotations
    default_lane = "interactive"
    suspend_path = None
    # The Priority admission plugin resolves a Pod's spec.priority before the webhooks and re-runs
    # after them, refusing a class added in between (kubernetes
    # plugin/pkg/admission/priority/admission.go admitPod). Another class is refused (webhook.pod_rules).
    pod_priority_field = False
    upstream = ("kueue v0.17 pkg/controller/jobs/pod/pod_webhook.go Default, validatePodGroupMetadata; "
                "pod_controller.go groupTotalCount, constructGroupPodSetsFast; "
                "kubernetes v1.37 pkg/apis/core/validation/validation.go ValidatePodUpdate")

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """Kueue's pod webhook (``pod_webhook.go`` ``PodWebhook.Default``):
        ``kueue.x-k8s.io/managed: "true"`` on the Pod itself."""
        return {KUEUE_MANAGED: "true"}, {}

    def kueue_holds(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Kueue's pod webhook (``PodWebhook.Default``): the ``kueue.x-k8s.io/admission`` scheduling
        gate and the ``kueue.x-k8s.io/managed`` finalizer. Kueue's role-hash annotation is not
        set: Kueue computes it when missing (``pod_controller.go`` ``getRoleHash``)."""
        return (KUEUE_ADMISSION_GATE,), (KUEUE_MANAGED,)

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The Pod itself: 1 pod, or ``group_total_count`` for a Kueue pod group (one PodSet)."""
        if not isinstance(obj.get("spec"), dict):
            return []
        return [PodTemplate.of("pod", "pod", (), (), group_total_count(obj) or 1, obj, {})]

    def governs(self, templates: list[PodTemplate]) -> bool:
        """Only a Pod that asks for GPUs: a CPU-only Pod (a notebook) passes unchanged."""
        return asks_for_gpus(templates)

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """Never: a Pod's spec is immutable (Kubernetes ``ValidatePodUpdate``)."""
        return False

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """Kueue's pod-group rule (``check_pod_group``), on CREATE and on an UPDATE changing it."""
        if old is not None and check_pod_group(old) == check_pod_group(obj):
            return []
        return check_pod_group(obj)

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Kubernetes ``k8s.io/api/core/v1/types.go`` ``PodPhase``: ``Succeeded``/``Failed`` are
        terminal (reason ``status.reason``, else ``PodFailed``); a Pending pod with
        ``spec.schedulingGates`` is held by Kueue."""
        phase = str(status.get("phase") or "")
        if phase == "Succeeded":
            return Outcome("succeeded", "Succeeded", "Pod phase Succeeded")
        if phase == "Failed":
            why = str(status.get("reason") or "PodFailed")
            return Outcome("failed", why, f"Pod phase Failed: {status.get('message') or why}")
        if phase == "Running":
            return Outcome("running", "Running", "Pod phase Running")
        if as_list(as_dict(obj.get("spec")).get("schedulingGates")):
            return Outcome("pending", "SchedulingGated", "the Pod is held by scheduling gates (waiting for Kueue)")
        return Outcome("pending", phase or "NotStarted", f"Pod phase {phase or '(none)'}")


KIND = Pod()
