"""The Kubernetes resources the controllers read and write, and the write actions they plan.

Pure data: the reconcile modules (``taucluster``, ``tauworkspace``, ``tauquotarequest``) return
lists of ``Action`` and never touch the API; ``controllers.kube`` executes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from taugate import labels


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``group`` ('' for core), ``version``, ``plural``, ``kind``, ``namespaced``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path (Kubernetes API conventions): ``/api/v1/...`` for core, ``/apis/G/V/...``
        otherwise; a namespaced resource without ``namespace`` addresses all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}"


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
NODES = Resource("", "v1", "nodes", "Node", False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)
# Kueue's storage version since v0.15; v1beta1 is deprecated in v0.17 ("This version is
# deprecated. Use v1beta2 instead.") and, read without Kueue's conversion webhook, loses the
# fields v1beta2 renamed (ClusterQueue ``cohort`` is ``cohortName``).
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue", True)
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", False)
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", False)
WORKLOAD_PRIORITY_CLASSES = Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", False)
TAU_CLUSTERS = Resource(labels.GROUP, labels.VERSION, "clusters", "TauCluster", False)
TAU_WORKSPACES = Resource(labels.GROUP, labels.VERSION, "workspaces", "TauWorkspace", True)
TAU_QUOTA_REQUESTS = Resource(labels.GROUP, labels.VERSION, "quotarequests", "TauQuotaRequest", True)

# The objects a ClusterState is built from (taugate.snapshot.build_state), in snapshot order.
STATE_RESOURCES = (TAU_CLUSTERS, TAU_WORKSPACES, NODES, LOCAL_QUEUES, CLUSTER_QUEUES, RESOURCE_FLAVORS,
                   WORKLOAD_PRIORITY_CLASSES)

CLUSTER_NAME = "cluster"  # the TauCluster singleton


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


def meta(obj: dict | None) -> dict:
    """``obj.metadata`` or an empty dict (never None)."""
    return (obj or {}).get("metadata") or {}


def name_of(obj: dict | None) -> str:
    return str(meta(obj).get("name") or "")


def namespace_of(obj: dict | None) -> str | None:
    return meta(obj).get("namespace")


def labels_of(obj: dict | None) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: dict | None) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})
