"""Kubernetes ``apps/v1`` StatefulSet: one pod template, ``spec.replicas`` pods queued as one pod
group.

Upstream rules followed here:

- Kueue's StatefulSet integration (kueue v0.17 ``pkg/controller/jobs/statefulset/statefulset_webhook.go``
  ``Webhook.Default``): a StatefulSet with the ``kueue.x-k8s.io/queue-name`` label is never
  suspended; its pod template gets the annotation ``kueue.x-k8s.io/pod-suspending-parent:
  statefulset``; Kueue's StatefulSet pod reconciler (``statefulset_pod_reconciler.go``) puts each
  pod in one serving pod group (``kueue.x-k8s.io/pod-group-name``, the queue-name label,
  ``kueue.x-k8s.io/pod-group-total-count`` = ``spec.replicas``, default 1,
  ``kueue.x-k8s.io/pod-group-serving: "true"``), reserved as one PodSet of ``replicas`` pods;
- structure: ``apps/v1`` ``StatefulSetSpec`` (replicas ``*int32``, template a pod template).
"""

from __future__ import annotations

from taugate.kinds.deployment import KUEUE_SUSPENDING_PARENT, ReplicatedPods


class StatefulSet(ReplicatedPods):
    """Kubernetes ``apps/v1`` StatefulSet: ``spec.replicas`` pods (default 1), one Kueue pod
    group."""

    resource, kind = "statefulsets", "StatefulSet"
    upstream = ("kueue v0.17 pkg/controller/jobs/statefulset/statefulset_webhook.go Default; "
                "statefulset_pod_reconciler.go (pod group of spec.replicas pods)")

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """What Kueue's StatefulSet webhook (``statefulset_webhook.go`` ``Webhook.Default``) puts
        on the pod template of a queued StatefulSet: ``kueue.x-k8s.io/pod-suspending-parent:
        statefulset`` (Kueue's pod reconciler labels the pods with the queue from the object)."""
        return {}, {KUEUE_SUSPENDING_PARENT: "statefulset"}


KIND = StatefulSet()
