"""The Kubernetes resources the controllers read and write, and the write actions they plan (pure
data): the reconcile modules return ``Action`` lists and never touch the API; ``taugrid/execute.py``
applies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from taugate import labels
from taugate.access import annotations_of, labels_of, metadata_of, name_of, namespace_of
from taugate.kubeaccess import Resource
from taugate.state_objects import (
    CLUSTER_NAME,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    RESOURCE_FLAVORS,
    STATE_RESOURCES,
    TAU_CLUSTERS,
    TAU_WORKSPACES,
    WORKLOAD_PRIORITY_CLASSES,
)

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)
TAU_QUOTA_REQUESTS = Resource(labels.GROUP, labels.VERSION, "quotarequests", "TauQuotaRequest", True)
TAU_PROFILE_PLACEMENTS = Resource(labels.GROUP, labels.VERSION, "profileplacements", "TauProfilePlacement", False)

__all__ = [
    "Action", "Resource", "annotations_of", "labels_of", "metadata_of", "name_of", "namespace_of", "CLUSTER_NAME",
    "CLUSTER_QUEUES", "LOCAL_QUEUES", "NODES", "RESOURCE_FLAVORS", "STATE_RESOURCES", "TAU_CLUSTERS",
    "TAU_WORKSPACES", "WORKLOAD_PRIORITY_CLASSES", "NAMESPACES", "SERVICE_ACCOUNTS", "PVCS", "ROLE_BINDINGS",
    "TAU_QUOTA_REQUESTS", "TAU_PROFILE_PLACEMENTS",
]


@dataclass(frozen=True)
class Action:
    """One planned write.

    ``verb``: ``create`` (``body`` is the whole object), ``patch`` (``body`` is a JSON merge patch,
    RFC 7386: ``None`` deletes a key, lists are replaced whole), ``delete``. ``subresource`` is
    ``status`` for status patches. ``reason`` says why, for logs.
    """

    verb: Literal["create", "patch", "delete"]
    resource: Resource
    name: str
    namespace: str | None = None
    body: dict[str, Any] | None = field(default=None, compare=False)
    subresource: str | None = None
    reason: str = field(default="", compare=False)

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource.kind} {where}{sub}" + (f" ({self.reason})" if self.reason else "")

