"""Kubernetes core ``v1`` Pod created bare in a workspace: the object is its own pod template.

A Pod is governed only when it asks for GPUs (``governs``): a CPU-only Pod (a notebook, a debug
shell) passes admission unchanged. A Pod whose controller is a governed workload (a Job's,
RayCluster's, StatefulSet's pods, a Deployment's through its ReplicaSet) is a child and only
inherits the parent's run-id (``taugate.webhook.mutation.is_child``); a GPU Pod whose controller
is of a kind taugate does not manage is refused or warned (``taugate.unmanaged``).

Upstream rules followed here:

- Kueue's pod integration (kueue v0.17 ``pkg/controller/jobs/pod/pod_webhook.go``
  ``PodWebhook.Default``): a Pod with the ``kueue.x-k8s.io/queue-name`` label is gated until
  admitted (a scheduling gate, never ``suspend``: a Pod has none); a Pod whose owner Kueue
  already manages is skipped (``jobframework.FindAncestorJobManagedByKueue``);
- pod groups: the ``kueue.x-k8s.io/pod-group-name`` label and the
  ``kueue.x-k8s.io/pod-group-total-count`` annotation go together, the count a whole number
  above 0 (``pod_webhook.go`` ``validatePodGroupMetadata``, ``pod_controller.go``
  ``Pod.groupTotalCount``); Kueue reserves the group as one PodSet of that many pods shaped like
  the first runnable one (``pod_controller.go`` ``constructGroupPodSetsFast``);
- the pod spec is immutable once created, except what a scheduling-gated pod may gain
  (Kubernetes v1.37 ``pkg/apis/core/validation/validation.go`` ``ValidatePodUpdate``), so an
  UPDATE never touches it (``templates_mutable``);
- structure: core/v1 ``PodSpec`` with at least one container (``structure.PodSpecWithContainers``).
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
"""Kueue's label naming the pod group a Pod belongs to (``podconstants.GroupNameLabel``)."""
POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
"""Kueue's annotation giving a pod group's size (``podconstants.GroupTotalCountAnnotation``)."""


def group_total_count(obj: dict[str, Any]) -> int | None:
    """The size of the Kueue pod group ``obj`` belongs to: its ``pod-group-total-count``
    annotation as Go's ``strconv.Atoi`` reads it, when the Pod also has a ``pod-group-name``
    label and the count is above 0 (kueue v0.17 ``pod_controller.go`` ``Pod.groupTotalCount``);
    None for a Pod outside a group or with a bad count (``check_pod_group`` reports it)."""
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
    """Kueue rules for a pod group (kueue v0.17 ``pod_webhook.go`` ``validatePodGroupMetadata``):
    the ``pod-group-name`` label and the ``pod-group-total-count`` annotation are set together,
    and the count is a whole number above 0 (``Pod.groupTotalCount``: "group total count should be
    greater than zero")."""
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
"""Kueue's label on a Pod it manages (``pkg/constants`` ``ManagedByKueueLabelKey``), and the name of
its finalizer on such a Pod (``pod/podconstants`` ``PodFinalizer``)."""
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's pod webhook holds a queued Pod with (``podconstants.SchedulingGateName``)."""


class Pod(WorkloadKind):
    """Kubernetes core ``v1`` Pod: one pod template, the Pod itself (path ``()``), one pod, or
    the whole Kueue pod group it belongs to (``group_total_count`` pods like it)."""

    group, version, resource, kind = "", "v1", "pods", "Pod"
    spec_model = PodSpecWithContainers
    templates_from_spec = False  # pod_templates reads the pod group's annotations
    default_lane = "interactive"
    suspend_path = None
    # The API server's Priority admission plugin resolves spec.priority of a Pod before the webhooks
    # and is re-run after them: a class a webhook adds then disagrees with the priority already set
    # and the Pod is refused (kubernetes plugin/pkg/admission/priority/admission.go admitPod: "the
    # integer value of priority must not be provided"). A bare Pod keeps the default priority; a
    # class other than the profile's is still refused (webhook.pod_rules).
    pod_priority_field = False
    upstream = ("kueue v0.17 pkg/controller/jobs/pod/pod_webhook.go Default, validatePodGroupMetadata; "
                "pod_controller.go groupTotalCount, constructGroupPodSetsFast; "
                "kubernetes v1.37 pkg/apis/core/validation/validation.go ValidatePodUpdate")

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """What Kueue's pod webhook (``pod_webhook.go`` ``PodWebhook.Default``) labels a queued Pod
        with: ``kueue.x-k8s.io/managed: "true"`` (on the Pod itself, its own template)."""
        return {KUEUE_MANAGED: "true"}, {}

    def kueue_holds(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What Kueue's pod webhook (``PodWebhook.Default``) puts on a queued Pod so that it waits
        for admission: the scheduling gate ``kueue.x-k8s.io/admission`` (``gate``, removed by
        Kueue when the Workload is admitted) and the finalizer ``kueue.x-k8s.io/managed``
        (``podconstants.PodFinalizer``). Kueue's role-hash annotation is not set: Kueue computes
        it from the spec when it is missing (``pod_controller.go`` ``getRoleHash``)."""
        return (KUEUE_ADMISSION_GATE,), (KUEUE_MANAGED,)

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The Pod itself (role ``pod``, path ``()``): 1 pod, or ``group_total_count`` pods for a
        pod of a Kueue pod group (Kueue reserves the group as one PodSet of that size)."""
        if not isinstance(obj.get("spec"), dict):
            return []
        return [PodTemplate.of("pod", "pod", (), (), group_total_count(obj) or 1, obj, {})]

    def governs(self, templates: list[PodTemplate]) -> bool:
        """Only a Pod that asks for GPUs (``taugate.pods.asks_for_gpus``): a CPU-only Pod passes
        admission unchanged."""
        return asks_for_gpus(templates)

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """Never: a Pod's spec is immutable once created (Kubernetes ``ValidatePodUpdate``), so
        an UPDATE restores taugate's labels on the Pod's metadata and places nothing."""
        return False

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """Kueue's pod-group metadata rule (``check_pod_group``), on CREATE and whenever the
        UPDATE changes the group's label or annotation."""
        if old is not None and check_pod_group(old) == check_pod_group(obj):
            return []
        return check_pod_group(obj)

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """A bare Pod, Kubernetes ``k8s.io/api/core/v1/types.go`` ``PodPhase``: ``Succeeded`` and
        ``Failed`` are terminal (the reason is ``status.reason``, e.g. ``Evicted``, else
        ``PodFailed``), ``Running`` is running; a Pending pod with ``spec.schedulingGates`` is held by
        Kueue (pod integration)."""
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
