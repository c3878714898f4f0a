"""The API objects a ``ClusterState`` is built from (pure): their resources, models, trimming and
sorting, shared by the webhook's state watch and ``taugate snapshot export`` so both read the
cluster alike."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Required

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from taugate import labels
from taugate.access import metadata_of, name_of, namespace_of
from taugate.kubeaccess import Resource
from taugate.models import TauCluster, TauWorkspace
from taugate.structure import (
    BoundedQuantity,
    NamedMeta,
    StringMap,
    Toleration,
    first_problem,
    problems,
    whole_number,
)

NODES = Resource("", "v1", "nodes", "Node", False)
# Kueue's storage version since v0.15; v1beta1 is deprecated in v0.17 and, read without Kueue's
# conversion webhook, loses the fields v1beta2 renamed (ClusterQueue ``cohort`` is ``cohortName``).
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue", True)
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", False)
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", False)
WORKLOAD_PRIORITY_CLASSES = Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass",
                                     False)
TAU_CLUSTERS = Resource(labels.GROUP, labels.VERSION, "clusters", "TauCluster", False)
TAU_WORKSPACES = Resource(labels.GROUP, labels.VERSION, "workspaces", "TauWorkspace", True)

# Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)

DRA_RESOURCES = (DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS)

STATE_RESOURCES = (TAU_CLUSTERS, TAU_WORKSPACES, NODES, LOCAL_QUEUES, CLUSTER_QUEUES, RESOURCE_FLAVORS,
                   WORKLOAD_PRIORITY_CLASSES, *DRA_RESOURCES)
"""In snapshot order."""

CLUSTER_NAME = "cluster"

_DROP_META = ("managedFields", "selfLink", "resourceVersion")
"""What no decision reads and every write changes: dropped, an update that changes nothing else
(a kubelet's or kwok's heartbeat, Kueue's counters) is no change and rebuilds no state."""
_CLUSTER_QUEUE_STATUS = ("flavorsUsage", "flavorsReservation")
"""The part of a ClusterQueue's status admission reads (``snapshot.cluster_queue_quotas``): Kueue
rewrites its pending and admitted counts on every workload it sees."""

Obj = dict[str, Any]


def trim(res: Resource, obj: Obj) -> Obj:
    """The part of an object admission needs (memory: Nodes are large and numerous), and nothing
    that changes without changing a decision, so that a watch event of such a change leaves the
    store as it is (``WatchStateProvider._event``): a state rebuild takes about a second at 5,000
    Nodes and 500 workspaces (docs/performance.md), and kwok's or a kubelet's Node heartbeats and
    Kueue's queue counters arrive several times a second in a fleet. A claim the resource-claim
    controller made for a pod (it has an owner) keeps nothing: no workload names it."""
    kept_meta = {k: v for k, v in metadata_of(obj).items() if k not in _DROP_META}
    if res in (DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS):
        return _trim_dra(res, obj, kept_meta)
    out = dict(obj, apiVersion=obj.get("apiVersion") or res.api_version, kind=obj.get("kind") or res.kind,
               metadata=kept_meta)
    if res is NODES:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        out = {"apiVersion": "v1", "kind": "Node",
               "metadata": {k: kept_meta[k] for k in ("name", "labels") if k in kept_meta},
               "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
               "status": {"allocatable": status.get("allocatable") or {},
                          "conditions": [{"type": c.get("type"), "status": c.get("status")}
                                         for c in status.get("conditions") or [] if isinstance(c, dict)]}}
    elif res is LOCAL_QUEUES:
        out.pop("status", None)
    elif res is CLUSTER_QUEUES and isinstance(out.get("status"), dict):
        out["status"] = {k: v for k, v in out["status"].items() if k in _CLUSTER_QUEUE_STATUS}
    return out


def _trim_dra(res: Resource, obj: Obj, kept_meta: dict[str, Any]) -> Obj:
    spec = found if isinstance(found := obj.get("spec"), dict) else {}
    out: Obj = {"apiVersion": res.api_version, "kind": res.kind,
                "metadata": {k: kept_meta[k] for k in ("name", "namespace") if k in kept_meta}}
    if res is DEVICE_CLASSES:
        out["spec"] = {k: spec[k] for k in ("extendedResourceName",) if k in spec}
    elif res is RESOURCE_CLAIM_TEMPLATES:
        inner = found if isinstance(found := spec.get("spec"), dict) else {}
        out["spec"] = {"spec": {k: inner[k] for k in ("devices",) if k in inner}}
    elif not kept_meta.get("ownerReferences"):
        out["spec"] = {k: spec[k] for k in ("devices",) if k in spec}
    return out


def _where(obj: Obj) -> str:
    namespace = namespace_of(obj)
    return f"{obj.get('kind')} {namespace + '/' if namespace else ''}{name_of(obj)}"


def _cluster_problem(obj: Obj) -> str | None:
    if name_of(obj) != CLUSTER_NAME:
        return f"{_where(obj)}: only the TauCluster named {CLUSTER_NAME!r} is read"
    try:
        TauCluster.model_validate(obj)
    except ValidationError as e:
        return f"{_where(obj)}: {first_problem(e)} (no profile set: admission fails closed)"
    return None


def _age_key(obj: Obj) -> tuple[str, str]:
    """Older first: creationTimestamp (none sorts last), then name."""
    return (str(metadata_of(obj).get("creationTimestamp") or "~"), name_of(obj))


def usable_objects(objects: Iterable[Obj], system_namespace: str | None = None) -> tuple[list[Obj], list[str]]:
    """Objects ``build_state`` can take, and why others were left out (pure). A TauWorkspace outside
    ``system_namespace`` is left out: the operator serves only those, so only those may claim a
    namespace; of two targeting one namespace the younger is."""
    kept: list[Obj] = []
    skipped: list[str] = []
    by_target: dict[str, Obj] = {}
    for obj in objects:
        kind = obj.get("kind")
        if kind == "TauCluster":
            problem = _cluster_problem(obj)
            if problem:
                skipped.append(problem)
                continue
        elif kind == "TauWorkspace":
            if system_namespace and namespace_of(obj) != system_namespace:
                skipped.append(f"{_where(obj)}: TauWorkspaces live in the system namespace {system_namespace!r}")
                continue
            try:
                target = TauWorkspace.model_validate(obj).target_namespace
            except ValidationError as e:
                skipped.append(f"{_where(obj)}: {first_problem(e)}")
                continue
            other = by_target.get(target)
            if other is not None:
                older, younger = (other, obj) if _age_key(other) <= _age_key(obj) else (obj, other)
                skipped.append(f"TauWorkspace {name_of(younger)}: namespace {target!r} already belongs to "
                               f"TauWorkspace {name_of(older)}")
                if younger is other:
                    kept.remove(other)
                    by_target[target] = obj
                    kept.append(obj)
                continue
            by_target[target] = obj
        kept.append(obj)
    return kept, skipped


# Types follow the Go API types (k8s.io/api core/v1; sigs.k8s.io/kueue apis/kueue/v1beta2; a
# snapshot may still hold v1beta1 objects, whose ClusterQueue names its cohort ``cohort``).


class Taint(TypedDict, total=False):
    """core/v1 Taint."""

    key: Required[str]
    value: str | None
    effect: str | None


class NodeCondition(TypedDict):
    """core/v1 NodeCondition."""

    type: str
    status: str


class NodeSpec(TypedDict, total=False):
    """core/v1 NodeSpec."""

    unschedulable: bool | None
    taints: list[Taint] | None


class NodeStatus(TypedDict, total=False):
    """core/v1 NodeStatus."""

    allocatable: dict[str, BoundedQuantity | None] | None
    capacity: dict[str, BoundedQuantity | None] | None
    conditions: list[NodeCondition] | None


class Node(TypedDict, total=False):
    """core/v1 Node."""

    metadata: Required[NamedMeta]
    spec: NodeSpec | None
    status: NodeStatus | None


class LocalQueueSpec(TypedDict):
    """Kueue LocalQueueSpec."""

    clusterQueue: str


class LocalQueue(TypedDict, total=False):
    """Kueue LocalQueue."""

    metadata: Required[NamedMeta]
    spec: Required[LocalQueueSpec]


class LabelSelectorRequirement(TypedDict, total=False):
    """meta/v1 LabelSelectorRequirement."""

    key: Required[str]
    operator: Required[str]
    values: list[str] | None


class LabelSelector(TypedDict, total=False):
    """meta/v1 LabelSelector."""

    matchLabels: StringMap | None
    matchExpressions: list[LabelSelectorRequirement] | None


class ResourceQuota(TypedDict, total=False):
    """Kueue ResourceQuota."""

    name: Required[str]
    nominalQuota: BoundedQuantity | None
    borrowingLimit: BoundedQuantity | None
    lendingLimit: BoundedQuantity | None


class FlavorQuotas(TypedDict, total=False):
    """Kueue FlavorQuotas."""

    name: Required[str]
    resources: list[ResourceQuota] | None


class ResourceGroup(TypedDict, total=False):
    """Kueue ResourceGroup."""

    coveredResources: list[str] | None
    flavors: list[FlavorQuotas] | None


class ClusterQueueSpec(TypedDict, total=False):
    """Kueue ClusterQueueSpec (v1beta2, ``cohort`` from v1beta1): cohort, selector, quotas."""

    cohort: str | None
    cohortName: str | None
    queueingStrategy: str | None
    namespaceSelector: LabelSelector | None
    resourceGroups: list[ResourceGroup] | None


class ResourceUsage(TypedDict, total=False):
    """Kueue ResourceUsage: a resource's ``total`` and ``borrowed`` quantities."""

    name: Required[str]
    total: BoundedQuantity | None
    borrowed: BoundedQuantity | None


class FlavorUsage(TypedDict, total=False):
    """Kueue FlavorUsage."""

    name: Required[str]
    resources: list[ResourceUsage] | None


class ClusterQueueStatus(TypedDict, total=False):
    """Kueue ClusterQueueStatus."""

    flavorsUsage: list[FlavorUsage] | None
    flavorsReservation: list[FlavorUsage] | None


class ClusterQueue(TypedDict, total=False):
    """Kueue ClusterQueue."""

    metadata: Required[NamedMeta]
    spec: ClusterQueueSpec | None
    status: ClusterQueueStatus | None


class ResourceFlavorSpec(TypedDict, total=False):
    """Kueue ResourceFlavorSpec."""

    nodeLabels: StringMap | None
    nodeTaints: list[Taint] | None
    tolerations: list[Toleration] | None
    topologyName: str | None


class ResourceFlavor(TypedDict, total=False):
    """Kueue ResourceFlavor."""

    metadata: Required[NamedMeta]
    spec: ResourceFlavorSpec | None


class Named(TypedDict):
    """An object cluster state reads only by name (Kueue WorkloadPriorityClass), or names before
    its own model reads it (TauCluster, TauWorkspace: ``taugate.models``)."""

    metadata: NamedMeta



class DeviceClassSpec(TypedDict, total=False):
    """resource.k8s.io/v1 DeviceClassSpec."""

    extendedResourceName: str | None


class DeviceClass(TypedDict, total=False):
    """resource.k8s.io/v1 DeviceClass."""

    metadata: Required[NamedMeta]
    spec: DeviceClassSpec | None


class DeviceSubRequest(TypedDict, total=False):
    """resource.k8s.io/v1 ExactDeviceRequest and DeviceSubRequest."""

    deviceClassName: Required[str]
    allocationMode: str | None
    count: Annotated[int, whole_number(0, 2**63 - 1, "a whole number (int64)")] | None
    adminAccess: bool | None


class DeviceRequest(TypedDict, total=False):
    """resource.k8s.io/v1 DeviceRequest."""

    name: str
    exactly: DeviceSubRequest | None
    firstAvailable: list[DeviceSubRequest] | None


class DeviceClaim(TypedDict, total=False):
    """resource.k8s.io/v1 DeviceClaim."""

    requests: list[DeviceRequest] | None


class ClaimSpec(TypedDict, total=False):
    """resource.k8s.io/v1 ResourceClaimSpec."""

    devices: DeviceClaim | None


class ResourceClaim(TypedDict, total=False):
    """resource.k8s.io/v1 ResourceClaim: asked for once, by name, shared by its pods."""

    metadata: Required[NamedMeta]
    spec: ClaimSpec | None


class ClaimTemplateSpec(TypedDict, total=False):
    """resource.k8s.io/v1 ResourceClaimTemplateSpec."""

    spec: ClaimSpec | None


class ResourceClaimTemplate(TypedDict, total=False):
    """resource.k8s.io/v1 ResourceClaimTemplate: a claim made for each pod that names it."""

    metadata: Required[NamedMeta]
    spec: ClaimTemplateSpec | None


STATE_KINDS: dict[str, TypeAdapter[Any]] = {
    kind: TypeAdapter(model) for kind, model in (
        ("Node", Node), ("LocalQueue", LocalQueue), ("ClusterQueue", ClusterQueue),
        ("ResourceFlavor", ResourceFlavor), ("WorkloadPriorityClass", Named), ("TauCluster", Named),
        ("TauWorkspace", Named), ("DeviceClass", DeviceClass), ("ResourceClaim", ResourceClaim),
        ("ResourceClaimTemplate", ResourceClaimTemplate))}


def state_object_problem(obj: dict[str, Any]) -> str | None:
    """The first type problem of a ``STATE_KINDS`` object as one line, ``field: problem``; None
    when it has the structure cluster state reads, and for other kinds."""
    kind = obj.get("kind")
    adapter = STATE_KINDS.get(kind) if isinstance(kind, str) else None
    found = problems(adapter, obj) if adapter is not None else []
    return f"{found[0][0]}: {found[0][1]}" if found else None
