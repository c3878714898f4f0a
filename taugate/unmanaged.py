"""Workload kinds taugate does not manage that a workspace may still use to run GPU pods (a bare
ReplicaSet, a DaemonSet, a ReplicationController): the one table the webhook's rules and
``webhook.ungoverned`` derive from. Their objects are judged when created, so their pods are
children, not judged again.

Upstream rules followed here: Kubernetes ``apps/v1`` ``ReplicaSetSpec``/``DaemonSetSpec`` and
core ``v1`` ``ReplicationControllerSpec`` (``spec.template``; ``spec.replicas`` default 1); a
Deployment's controller creates its ReplicaSets with a controller ownerReference to the
Deployment (Kubernetes ``pkg/controller/deployment/sync.go`` ``getNewReplicaSet``), which is how
such a ReplicaSet is told from a bare one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from taugate.kinds.base import cel_templates
from taugate.pods import PodTemplate, replicated_template


@dataclass(frozen=True, slots=True)
class UnmanagedKind:
    """A kind whose GPU workloads taugate does not manage: ``group``, ``version``, ``resource``
    (the plural, as webhook rules name it), ``kind``, and ``parent``: the ``(group, kind)`` of the
    governed workload whose controller creates objects of this kind (a Deployment for a
    ReplicaSet), or None. An object whose controller owner is its ``parent``, created by a
    trusted controller, is that workload's child, not an unmanaged workload."""

    group: str
    version: str
    resource: str
    kind: str
    parent: tuple[str, str] | None = None
    cel_pod_templates: ClassVar[str] = cel_templates("spec", "template")
    """CEL: ``spec.template``, the pod template, for the API server's own policy (``taugate/admission_policy.py``)."""

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """``spec.template`` (role ``replica``) with ``spec.replicas`` pods (default 1; a
        DaemonSet counts 1, a pod per node); empty when it has none."""
        return replicated_template(obj, self.kind.lower())


UNMANAGED_KINDS: tuple[UnmanagedKind, ...] = (
    UnmanagedKind("apps", "v1", "replicasets", "ReplicaSet", parent=("apps", "Deployment")),
    UnmanagedKind("apps", "v1", "daemonsets", "DaemonSet"),
    UnmanagedKind("", "v1", "replicationcontrollers", "ReplicationController"),
)
"""The kinds the webhook sees so that their GPU workloads in a workspace are refused or warned."""

RELAY_OWNER_KINDS: frozenset[tuple[str, str]] = frozenset((u.group, u.kind) for u in UNMANAGED_KINDS)
"""``(group, kind)`` of the unmanaged kinds, whose own admission judges the pods they will make: a
pod one of them owns, created by a trusted controller, is that object's child (it inherits the
run-id its template carries, and is not judged again). A Deployment's ReplicaSet is its
Deployment's child; a bare GPU ReplicaSet was refused, or warned, when it was created."""

_BY_GROUP_KIND = {(u.group, u.kind): u for u in UNMANAGED_KINDS}


def unmanaged_kind_for(group: str | None, kind: str | None) -> UnmanagedKind | None:
    """The ``UnmanagedKind`` of an API ``group`` (``apps``; ``""`` for the core group) and
    ``kind``, or None."""
    if not isinstance(group, str) or not isinstance(kind, str):
        return None
    return _BY_GROUP_KIND.get((group, kind))
