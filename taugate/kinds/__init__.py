"""The registry of workload kinds taugate admits: one module per kind, every kind table derived here.

A kind module (``rayjob``, ``raycluster``, ``job``, ``pod``, ``deployment``, ``statefulset``,
``jobset``, ``leaderworkerset``, ``pytorchjob``, ``rayservice``, ``trainjob``) holds all taugate knows about one
kind, as a ``taugate.kinds.base.WorkloadKind`` subclass and its one instance ``KIND``:

- its API group, version, resource (plural) and kind;
- pod-template access: the path of every pod template, its role, replicas and GPU demand
  (``pod_templates``; the GPU arithmetic itself is shared, in ``taugate.pods``);
- the pydantic model of its ``spec`` (``spec_model``, checked by ``malformed``; ``taugate.structure``
  says how to write one), its built-in rules
  (``checks``), the defaults mutation sets on CREATE (``create_defaults``; ``create_overrides``: what it
  sets over the client's value, with a warning), whether Kueue queues
  an object (``queued``), where Kueue suspends it (``suspend_path``; None for a serving kind whose
  pods Kueue gates instead, ``kueue_template_metadata``, ``kueue_holds``), whether an UPDATE may change its pod
  templates (``templates_mutable``) and how far an autoscaler may grow them (``autoscaling``,
  ``most_pods``);
- the upstream rule each follows (the KubeRay, Kueue or Kubernetes source file and function),
  named in its docstrings and in ``upstream``.

``KINDS`` lists them; every other table derives from it: the webhook's rules
(``taugate.webhook.routes``, and from there the Helm chart's webhook configurations, checked by
``tests/install/test_webhook_configurations.py``), the AdmissionRequest resource of ``taugate
admit`` (``review.request_for``), the owner kinds whose children are trusted
(``mutation.controller_owner``), the kind label of the server's metrics, the default lanes
(``Settings.default_lanes``), the recorder's owner kinds and the test doubles' discovery
(``tests/kubedouble.py``).

How to add a workload kind (e.g. Kubeflow's ``TFJob``, after ``pytorchjob``):

1. Write ``taugate/kinds/<kind>.py``: a ``WorkloadKind`` subclass setting ``group``, ``version``,
   ``resource``, ``kind`` and ``upstream``, overriding ``pod_templates`` (every pod template,
   with the pods Kueue reserves for it: read the kind's Kueue integration,
   ``pkg/controller/jobs/<kind>``, ``PodSets``), setting ``spec_model`` (a ``TypedDict`` of every
   field ``pod_templates`` reads, typed as the kind's Go API types, pod templates as
   ``taugate.structure.PodTemplateSpec``), and, where the kind differs from the defaults,
   ``governs``, ``suspend_path``, ``queued``, ``kueue_template_metadata``, ``templates_mutable``,
   ``checks``, ``create_defaults``,
   ``kueue_holds``, ``autoscaling`` and ``most_pods``; a new ``pods.Role`` needs
   its words in ``policies/lib/taugate.rego`` (``describe``) and ``policies/input.schema.json``;
   end with ``KIND = <Class>()``.
2. Add ``<kind>.KIND`` to ``KINDS`` below.
3. Regenerate the chart's routes (``python scripts/chart_routes.py``) and give the chart's RBAC
   the new resource (``tests/install`` says where it is missing). The kind's module also says how
   its run ends (``outcome``, after the kind's status types; ``serving`` for a kind that never ends on
   its own; ``run_children`` for objects of no registered kind its controller makes):
   ``tests/recorder/test_runs_of_every_kind.py`` fails without one.
4. Write its tests: the registry tests (``tests/admission/test_kind_registry.py``) check the
   module is complete and every table derived; add a real upstream sample of the kind to
   ``tests/data/admission`` and tests of its pod templates, GPU demand and checks, named as
   sentences.
"""

from __future__ import annotations

from taugate.kinds import (
    deployment,
    job,
    jobset,
    leaderworkerset,
    pod,
    pytorchjob,
    raycluster,
    rayjob,
    rayservice,
    statefulset,
    trainjob,
)
from taugate.kinds.base import WorkloadKind

KINDS: tuple[WorkloadKind, ...] = (rayjob.KIND, raycluster.KIND, job.KIND,
                                   pod.KIND, deployment.KIND, statefulset.KIND,
                                   jobset.KIND, leaderworkerset.KIND, pytorchjob.KIND, rayservice.KIND,
                                   trainjob.KIND)
"""Every workload kind taugate admits, in the order webhook rules list them."""

_BY_GROUP_KIND: dict[tuple[str, str], WorkloadKind] = {(k.group, k.kind): k for k in KINDS}

KIND_NAMES: frozenset[str] = frozenset(k.kind for k in KINDS)
"""The kinds' names: ``RayJob``, ``RayCluster``, ``Job``, ``JobSet``, ``LeaderWorkerSet``,
``PyTorchJob``, ``RayService``, ``TrainJob``."""


_CORE_VERSIONS = frozenset(k.version for k in KINDS if not k.group)


def group_of(api_version_or_group: str) -> str:
    """The API group of an ``apiVersion`` (``ray.io/v1`` -> ``ray.io``; the core group's bare
    ``v1`` -> ``""``) or of a bare group (``ray.io``)."""
    if "/" in api_version_or_group:
        return api_version_or_group.split("/")[0]
    return "" if api_version_or_group in _CORE_VERSIONS else api_version_or_group


def kind_for(api_version_or_group: str | None, kind: str | None) -> WorkloadKind | None:
    """The workload kind of an object's ``apiVersion`` (``ray.io/v1``, a Pod's ``v1``; or a bare
    group, ``ray.io``) and ``kind``; None if taugate does not admit that kind (or either is not a
    string)."""
    if not isinstance(api_version_or_group, str) or not isinstance(kind, str):
        return None
    return _BY_GROUP_KIND.get((group_of(api_version_or_group), kind))


def kind_of(obj: object) -> WorkloadKind | None:
    """The workload kind of a raw object (its ``apiVersion`` and ``kind``), or None."""
    return kind_for(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None


def resources_by_group_version() -> dict[tuple[str, str], tuple[str, ...]]:
    """The resources (plurals) of every kind by ``(group, version)``, in ``KINDS`` order:
    ``{("ray.io", "v1"): ("rayjobs", "rayclusters"), ("batch", "v1"): ("jobs",)}``, as webhook
    rules list them."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for k in KINDS:
        out[(k.group, k.version)] = out.get((k.group, k.version), ()) + (k.resource,)
    return out


__all__ = ["KINDS", "KIND_NAMES", "WorkloadKind", "group_of", "kind_for", "kind_of", "resources_by_group_version"]
