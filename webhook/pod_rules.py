"""What a pod template in a workspace may not say about its own scheduling (ARCHITECTURE.md
section 2, "Pod priority and node"): a class other than the profile's, a ``system-`` class, a
``nodeName``; and a Pod UPDATE may not remove Kueue's scheduling gates (``gate_removals``).
Pure: pod templates in, ``Violation``s out.
"""

from __future__ import annotations

from collections.abc import Callable

from taugate.access import as_dict
from taugate.fieldpath import Path, field_path
from taugate.kinds import kind_for
from taugate.models import WorkloadProfile
from taugate.pods import PodTemplate
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.unmanaged import unmanaged_kind_for
from taugate.violation import Violation
from taugate.webhook import mutation

SYSTEM_PREFIX = "system-"
"""The PriorityClass name prefix Kubernetes reserves (``scheduling.SystemPriorityClassPrefix``)."""
PROFILE_PRIORITY = "pod-priority-class"
SYSTEM_PRIORITY = "system-priority-class"
NODE_NAME = "node-name"
GATE_REMOVED = "kueue-gate-removed"
KUEUE_GATE_PREFIX = "kueue.x-k8s.io/"
SELF_EXCUSED = frozenset({SYSTEM_PRIORITY, NODE_NAME})
"""Policies whose check already compares with the stored object on UPDATE, so validation's
UPDATE excuse (same policy at the same field before) does not apply to them: a changed node name
or system class is refused even where the stored one had another."""


def _spec_of(t: PodTemplate) -> tuple[dict, Path]:
    return t.spec, t.path + ("spec",)


def _stored(old: Callable[[], list[PodTemplate]] | None, path: Path, key: str) -> object:
    if old is None:
        return None
    for t in old():
        if t.path == path:
            return t.spec.get(key)
    return None


def bypass_violations(templates: list[PodTemplate], old: Callable[[], list[PodTemplate]] | None,
                      what: str = "workload") -> list[Violation]:
    """A ``system-`` PriorityClass (``pkg/apis/scheduling/types.go`` ``SystemPriorityClassPrefix``,
    ``validation.ValidatePriorityClass``: the kubelet evicts other pods for it) or a ``nodeName``
    (no scheduler, so no taints and no scheduling gates: a gated pod is never bound, KEP-3521), unless
    the stored template at the same path (``old()``, on UPDATE) had the same value: the API server
    makes both immutable on a Pod, so a bound Pod's later updates keep working."""
    out: list[Violation] = []
    for t in templates:
        spec, at = _spec_of(t)
        cls = spec.get("priorityClassName")
        if isinstance(cls, str) and cls.startswith(SYSTEM_PREFIX) and _stored(old, t.path, "priorityClassName") != cls:
            out.append(Violation(SYSTEM_PRIORITY, field_path(at + ("priorityClassName",)),
                f"asks for the system PriorityClass {cls!r}, which outranks every workload and makes the kubelet "
                f"evict other pods for it; allowed: no system-* class in a workspace (Kubernetes reserves the prefix "
                f"for the cluster's own components); fix: remove priorityClassName, the {what}'s workload profile "
                f"sets the pod priority"))
        node = spec.get("nodeName")
        if node not in (None, "") and _stored(old, t.path, "nodeName") != node:
            out.append(Violation(NODE_NAME, field_path(at + ("nodeName",)),
                f"binds the pods to node {node!r} directly, bypassing the scheduler, the profile's placement and "
                f"Kueue's admission; allowed: no nodeName in a workspace; fix: remove nodeName (the profile's node "
                f"selector and tolerations place the pods)"))
    return out


def priority_violations(templates: list[PodTemplate], profile: WorkloadProfile) -> list[Violation]:
    """A ``priorityClassName`` other than the profile's ``priorities.podPriorityClassName`` (a
    ``system-`` class is ``bypass_violations``' to report). The class is also Kueue's queueing
    priority without a ``kueue.x-k8s.io/priority-class`` label (kueue v0.17
    ``pkg/controller/jobframework/reconciler.go`` ``ExtractPriority`` ->
    ``pkg/util/priority/priority.go`` ``GetPriorityFromPriorityClass``)."""
    allowed = profile.priorities.pod_priority_class_name
    out: list[Violation] = []
    for t in templates:
        spec, at = _spec_of(t)
        cls = spec.get("priorityClassName")
        if cls is None or cls == allowed or (isinstance(cls, str) and cls.startswith(SYSTEM_PREFIX)):
            continue
        fix = f"set it to {allowed!r} or remove it (taugate sets it)" if allowed else "remove it"
        out.append(Violation(PROFILE_PRIORITY, field_path(at + ("priorityClassName",)),
            f"asks for PriorityClass {cls!r}; allowed: {allowed!r} (workload profile {profile.name!r}, "
            f"priorities.podPriorityClassName), the pod priority of the profile's runs, which Kueue also "
            f"queues by; fix: {fix}" if allowed else
            f"asks for PriorityClass {cls!r}; allowed: none (workload profile {profile.name!r} sets no "
            f"priorities.podPriorityClassName), the pod priority is the profile's; fix: {fix}"))
    return out


def unjudged_bypasses(request: dict, old: dict | None, state: ClusterState, settings: Settings) -> list[Violation]:
    """``bypass_violations`` of a workload in a workspace that validation does not otherwise judge
    (a CPU-only Pod or Deployment, a kind taugate does not manage); nothing for a child, taugate's
    own service account, or outside a workspace. ``old``: the stored object of an UPDATE."""
    obj = request.get("object")
    user = (request.get("userInfo") or {}).get("username")
    if (request.get("subResource") or request.get("operation") not in ("CREATE", "UPDATE")
            or not isinstance(obj, dict) or user == settings.service_account):
        return []
    namespace = request.get("namespace") or as_dict(obj.get("metadata")).get("namespace")
    if not isinstance(namespace, str) or state.workspace_for(namespace) is None:
        return []
    gvk = request.get("kind") or {}
    kind = kind_for(gvk.get("group") or obj.get("apiVersion"), gvk.get("kind") or obj.get("kind")) or \
        unmanaged_kind_for(gvk.get("group"), gvk.get("kind"))
    if kind is None or mutation.is_child(request, obj, settings):
        return []
    return bypass_violations(kind.pod_templates(obj), (lambda: kind.pod_templates(old)) if old is not None else None,
                             kind.kind)


def _gates(pod: object) -> list[str]:
    spec = pod.get("spec") if isinstance(pod, dict) else None
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return [g["name"] for g in gates if isinstance(g, dict) and isinstance(g.get("name"), str)] \
        if isinstance(gates, list) else []


def gate_removals(request: dict, old: dict | None, state: ClusterState, settings: Settings) -> list[Violation]:
    """Kueue's scheduling gates (``kueue.x-k8s.io/admission``, the pod integration's hold until the
    Workload is admitted, kueue v0.17 ``pkg/controller/jobs/pod/constants``; ``kueue.x-k8s.io/topology``,
    ``pkg/controller/tas/topology_ungater.go``) that an UPDATE of a Pod in a workspace removes,
    unless Kueue (or another of ``settings.controller_users``) or taugate makes it. Kubernetes lets
    anyone who may update a Pod remove a gate (KEP-3521) and Kueue's pod webhook does not check it
    (``pod_webhook.go`` ``ValidateUpdate``): a ``kubectl patch`` would start a queued pod outside
    the quota."""
    gvk = request.get("kind") or {}
    user = (request.get("userInfo") or {}).get("username")
    if (request.get("operation") != "UPDATE" or request.get("subResource") or gvk.get("group")
            or gvk.get("kind") != "Pod" or user == settings.service_account or user in settings.controller_users):
        return []
    namespace = request.get("namespace")
    if not isinstance(namespace, str) or state.workspace_for(namespace) is None:
        return []
    kept = set(_gates(request.get("object")))
    removed = [g for g in _gates(old) if g.startswith(KUEUE_GATE_PREFIX) and g not in kept]
    return [Violation(GATE_REMOVED, "spec.schedulingGates",
                      f"removes Kueue's scheduling gate {gate!r}, which holds the pod until Kueue admits its "
                      f"workload within the queue's quota; allowed: only Kueue removes its gates, when it admits the "
                      f"workload; fix: leave spec.schedulingGates as they are and let Kueue admit it (kubectl get "
                      f"workloads -n {namespace} says why it waits)") for gate in removed]
