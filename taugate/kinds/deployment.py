"""Kubernetes ``apps/v1`` Deployment: one pod template, ``spec.replicas`` serving pods.

Upstream rules followed here:

- Kueue's Deployment integration (kueue v0.17 ``pkg/controller/jobs/deployment/deployment_webhook.go``
  ``Webhook.Default``): a Deployment with the ``kueue.x-k8s.io/queue-name`` label is never
  suspended (a serving workload stays running); its pod template gets the queue-name and
  priority-class labels, ``kueue.x-k8s.io/managed: "true"`` and the annotation
  ``kueue.x-k8s.io/pod-suspending-parent: deployment``, and Kueue's pod integration then queues
  each pod as a Workload of one pod (``pod_webhook.go`` ``PodWebhook.Default``), so the
  Deployment holds ``replicas`` x GPUs per pod when all its pods are admitted;
- pods at a time: ``spec.replicas``, default 1 (Kubernetes ``apps/v1`` ``DeploymentSpec``;
  a rolling update may add ``maxSurge`` more, each queued on its own);
- structure: ``apps/v1`` ``DeploymentSpec`` (replicas ``*int32``, template a pod template).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required

from typing_extensions import TypedDict

from taugate import labels
from taugate.kinds.base import WorkloadKind, cel_templates
from taugate.outcome import Outcome, conditions_of, is_true, serving_outcome
from taugate.pods import PodTemplate, asks_for_gpus, replicated_template
from taugate.structure import Int32, PodTemplateSpec

KUEUE_MANAGED = "kueue.x-k8s.io/managed"
"""Kueue's label on a pod it manages (``constants.ManagedByKueueLabelKey``), value ``"true"``."""
KUEUE_SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
"""Kueue's annotation on a pod template whose pods Kueue gates for their parent
(``podconstants.SuspendedByParentAnnotation``): the parent's framework name."""



class ReplicatedPodsSpec(TypedDict, total=False):
    """apps/v1 ``DeploymentSpec`` / ``StatefulSetSpec`` as far as admission reads them:
    ``replicas`` (``*int32``) and the pod template (required)."""

    replicas: Int32 | None
    template: Required[PodTemplateSpec]

class ReplicatedPods(WorkloadKind):
    """A workload of ``spec.replicas`` identical pods from ``spec.template`` (role ``replica``):
    an ``apps/v1`` Deployment or StatefulSet. Governed only when the template asks for GPUs; no
    ``suspend``."""

    group, version = "apps", "v1"
    cel_pod_templates = cel_templates("spec", "template")
    default_lane = "interactive"
    suspend_path = None
    scale_path = ("spec", "replicas")
    spec_model = ReplicatedPodsSpec

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """``spec.template`` (role ``replica``): ``spec.replicas`` pods, default 1 (the API
        server's default for ``apps/v1``)."""
        return replicated_template(obj, self.kind.lower())

    def governs(self, templates: list[PodTemplate]) -> bool:
        """Only when the pod template asks for GPUs (``taugate.pods.asks_for_gpus``): a CPU-only
        Deployment or StatefulSet passes admission unchanged."""
        return asks_for_gpus(templates)

    serving = True

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Deployment (``k8s.io/api/apps/v1/types.go`` ``DeploymentAvailable`` condition,
        ``availableReplicas``) and StatefulSet (``availableReplicas``): running while at least one
        replica is available."""
        if is_true(conditions_of(obj).get("Available")):
            return serving_outcome(obj, "condition Available is true")
        n = status.get("availableReplicas")
        return serving_outcome(obj, f"{n} available replica(s)" if isinstance(n, int) and n > 0 else None)


class Deployment(ReplicatedPods):
    """Kubernetes ``apps/v1`` Deployment: ``spec.replicas`` serving pods, each queued by Kueue
    as a Workload of one pod."""

    run_children = (("apps", "v1", "replicasets"),)

    resource, kind = "deployments", "Deployment"
    upstream = ("kueue v0.17 pkg/controller/jobs/deployment/deployment_webhook.go Default; "
                "pkg/controller/jobs/pod/pod_webhook.go Default")

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """What Kueue's Deployment webhook (``deployment_webhook.go`` ``Webhook.Default``) puts on
        the pod template of a queued Deployment: the queue-name and priority-class labels,
        ``kueue.x-k8s.io/managed: "true"``, and ``kueue.x-k8s.io/pod-suspending-parent:
        deployment``."""
        wanted = {KUEUE_MANAGED: "true", labels.KUEUE_QUEUE_NAME: queue}
        if priority_class:
            wanted[labels.KUEUE_PRIORITY_CLASS] = priority_class
        return wanted, {KUEUE_SUSPENDING_PARENT: "deployment"}


KIND = Deployment()
