"""Kubeflow ``kubeflow.org/v1`` PyTorchJob: a ``Master`` and ``Worker`` replica spec, each a pod template.

Upstream rules followed here:

- pod templates: ``spec.pytorchReplicaSpecs.Master.template`` (role ``master``) and
  ``...Worker.template`` (role ``worker``), in that order and only those present, with
  ``replicas`` pods each, 1 when unset (kueue v0.17 ``pkg/controller/jobs/kubeflow/kubeflowjob/
  kubeflowjob_controller.go`` ``PodSets``, ``podsCount``, ``OrderedReplicaTypes``;
  ``kubeflow/jobs/pytorchjob/pytorchjob_controller.go`` ``OrderedReplicaTypes``);
- queued with the ``kueue.x-k8s.io/queue-name`` label and suspended through
  ``spec.runPolicy.suspend`` (``kubeflowjob_controller.go`` ``Suspend``, ``IsSuspended``), so
  ``suspend_path`` is that field;
- training-operator's PyTorchJob webhook (training-operator v1.9.3
  ``pkg/webhooks/pytorch/pytorchjob_webhook.go`` ``validatePyTorchReplicaSpecs``, ``validateSpec``):
  only ``Master`` and ``Worker`` replica types, ``Master`` replicas exactly 1, ``Worker`` replicas
  at least 1, a ``Worker`` when ``elasticPolicy`` is set;
- ``elasticPolicy`` with ``metrics`` makes training-operator create a HorizontalPodAutoscaler that
  scales the ``Worker`` replicas up to ``elasticPolicy.maxReplicas`` (v1.9.3
  ``pkg/apis/kubeflow.org/v1/pytorch_types.go`` ``ElasticPolicy.Metrics``: "If not set, the HPA
  will not be created"), which Kueue does not reserve quota for: ``autoscaling``/``most_pods``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required

from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.kinds.base import WorkloadKind, cel_templates
from taugate.outcome import Outcome, by_conditions
from taugate.pods import PodTemplate, Role, as_int
from taugate.structure import Int32, PodTemplateSpec
from taugate.violation import Violation

REPLICA_TYPES: dict[str, Role] = {"Master": "master", "Worker": "worker"}
"""PyTorchJob replica types, in Kueue's PodSet order, and their roles."""


def replica_pods(replica_spec: dict[str, Any]) -> int:
    """Pods of one replica spec: ``replicas``, 1 when unset (kueue v0.17
    ``kubeflowjob_controller.go`` ``podsCount``: ``ptr.Deref(replicas, 1)``)."""
    return max(as_int(replica_spec.get("replicas"), 1), 0)



class ReplicaSpec(TypedDict, total=False):
    """training-operator v1.9.3 ``ReplicaSpec``: ``replicas`` (int32) and the pod template."""

    replicas: Int32 | None
    template: Required[PodTemplateSpec]


class RunPolicy(TypedDict, total=False):
    """training-operator ``RunPolicy``: ``suspend``, where Kueue suspends the job."""

    suspend: bool | None


class ElasticPolicy(TypedDict, total=False):
    """training-operator ``ElasticPolicy``: ``minReplicas``/``maxReplicas`` (int32)."""

    minReplicas: Int32 | None
    maxReplicas: Int32 | None


class PyTorchJobSpec(TypedDict, total=False):
    """training-operator v1.9.3 ``pkg/apis/kubeflow.org/v1/pytorch_types.go`` ``PyTorchJobSpec``
    as far as admission reads it: the replica specs by type (required), ``runPolicy``,
    ``elasticPolicy``."""

    pytorchReplicaSpecs: Required[dict[str, ReplicaSpec]]
    runPolicy: RunPolicy | None
    elasticPolicy: ElasticPolicy | None


class PyTorchJob(WorkloadKind):
    """Kubeflow ``kubeflow.org/v1`` PyTorchJob: ``Master`` (role ``master``) and ``Worker`` (role
    ``worker``) pod templates, ``replica_pods`` each; suspended at ``spec.runPolicy.suspend``."""

    group, version, resource, kind = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
    cel_pod_templates = cel_templates("spec", "pytorchReplicaSpecs", each="template", keyed=True)
    spec_model = PyTorchJobSpec
    suspend_path = ("spec", "runPolicy", "suspend")
    scale_path = ("spec", "pytorchReplicaSpecs", "Worker", "replicas")
    upstream = ("kueue v0.17 pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go PodSets, podsCount, "
                "Suspend; training-operator v1.9.3 pkg/webhooks/pytorch/pytorchjob_webhook.go "
                "validatePyTorchReplicaSpecs")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """``spec.pytorchReplicaSpecs.{Master,Worker}.template`` (group the replica type),
        ``replica_pods`` pods each, in Kueue's order."""
        specs = as_dict(as_dict(obj.get("spec")).get("pytorchReplicaSpecs"))
        out: list[PodTemplate] = []
        for name, role in REPLICA_TYPES.items():
            rspec = specs.get(name)
            if type(rspec) is dict and type(rspec.get("template")) is dict:
                at = ("spec", "pytorchReplicaSpecs", name)
                out.append(PodTemplate.of(role, name, at + ("template",), at, replica_pods(rspec), rspec["template"],
                                          {}))
        return out

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """training-operator's ``validatePyTorchReplicaSpecs`` and ``validateSpec``, which it
        checks in its own webhook, so a PyTorchJob it would refuse is refused here with the field
        (messages in its words)."""
        spec = as_dict(obj.get("spec"))
        specs = as_dict(spec.get("pytorchReplicaSpecs"))
        out: list[Violation] = []
        for name in specs:
            if name not in REPLICA_TYPES:
                out.append(Violation("pytorchjob-replica-specs", f"spec.pytorchReplicaSpecs.{name}",
                    f"is not a PyTorchJob replica type; training-operator: Unsupported value {name!r}; allowed: "
                    f"Master, Worker; fix: rename it Worker (or Master)"))
        master = specs.get("Master")
        if type(master) is dict and master.get("replicas") != 1:
            out.append(Violation("pytorchjob-replica-specs", "spec.pytorchReplicaSpecs.Master.replicas",
                f"is {master.get('replicas', 'unset')}; training-operator: \"must be 1\"; allowed: 1; fix: set "
                f"Master replicas to 1 and put the other pods in Worker"))
        worker = specs.get("Worker")
        if type(worker) is dict and type(worker.get("replicas")) is int and worker["replicas"] < 1:
            out.append(Violation("pytorchjob-replica-specs", "spec.pytorchReplicaSpecs.Worker.replicas",
                f"is {worker['replicas']}; training-operator: \"must be at least 1\"; fix: set it to 1 or more, or "
                f"remove the Worker replica spec"))
        if spec.get("elasticPolicy") is not None and type(worker) is not dict:
            out.append(Violation("pytorchjob-replica-specs", "spec.pytorchReplicaSpecs.Worker",
                "is missing with an elasticPolicy; training-operator: \"must be configured if elastic policy is "
                "used\"; fix: add a Worker replica spec or remove spec.elasticPolicy"))
        return out

    def autoscaling(self, obj: dict[str, Any]) -> bool:
        """``spec.elasticPolicy.metrics`` set: training-operator's HorizontalPodAutoscaler may grow
        the Worker replicas up to ``elasticPolicy.maxReplicas``."""
        metrics = as_dict(as_dict(obj.get("spec")).get("elasticPolicy")).get("metrics")
        return type(metrics) is list and bool(metrics)

    def most_pods(self, obj: dict[str, Any], template: PodTemplate) -> int:
        """The Worker's ``elasticPolicy.maxReplicas`` when larger than its replicas (the HPA's
        upper bound); any other template's replicas."""
        if template.role != "worker":
            return template.replicas
        most = as_int(as_dict(as_dict(obj.get("spec")).get("elasticPolicy")).get("maxReplicas"), 0)
        return max(template.replicas, most)

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Kubeflow training-operator v1.9.3 ``pkg/apis/kubeflow.org/v1/common_types.go``
        ``JobConditionType``: ``Succeeded`` True is success, ``Failed`` True is failure (reason
        ``PyTorchJobFailed``...), ``Suspended`` True means Kueue holds it, ``Running`` True (or
        ``replicaStatuses[].active`` above 0) is running; ``status.completionTime`` is the end."""
        return by_conditions(obj, success="Succeeded", failure="Failed", suspended="Suspended", running="Running",
                             end_field="completionTime")


KIND = PyTorchJob()
