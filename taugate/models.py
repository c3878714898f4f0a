"""Pydantic models of taugate's custom resources (group ``tau.azure.com``, version ``v1alpha1``).

Fields taugate does not know are kept (``extra="allow"``), so a TauGrid object round-trips
unchanged. Docstrings here are CRD descriptions (``kubectl explain``): see ``controllers.crds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel


class TauModel(BaseModel):
    """Base: camelCase on the wire, unknown fields kept, snake_case in Python; the docstring
    under a field is its description in the CRD schema."""

    # A field's docstring is its description in the generated CRDs (``kubectl explain``).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow",
                              use_attribute_docstrings=True)

    def wire(self) -> dict[str, Any]:
        """The object as it was written: camelCase keys; fields that were never set (defaults)
        and nulls left out, so a TauGrid object round-trips unchanged."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")


class Applicability(TauModel):
    """Where a profile applies; an empty list means everywhere (TauGrid rule)."""

    teams: list[str] = Field(default_factory=list)
    """Teams (a workspace's spec.teamRef.name) the profile applies to; empty: every team."""
    lanes: list[str] = Field(default_factory=list)
    """Lanes (the tau.azure.com/lane label of a workload, defaulted by kind) the profile applies to; empty: every
    lane."""
    namespaces: list[str] = Field(default_factory=list)
    """Workspace namespaces the profile applies to; empty: every namespace."""


class Priorities(TauModel):
    """Kueue WorkloadPriorityClass and Kubernetes PriorityClass names for the profile's runs."""

    workload_priority_class_name: str | None = None
    """Kueue WorkloadPriorityClass set as the kueue.x-k8s.io/priority-class label of the profile's workloads."""
    pod_priority_class_name: str | None = None
    """Kubernetes PriorityClass set as priorityClassName on every pod template of the profile's workloads."""
    disable_default_priorities: bool | None = None
    """true: the profile names no priority classes (both names must then be absent)."""


class Toleration(TauModel):
    """A Kubernetes pod toleration (core/v1 Toleration)."""

    key: str | None = None
    """Taint key the toleration matches; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = None
    """Taint value the toleration matches (operator Equal)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect matched: NoSchedule, PreferNoSchedule or NoExecute; empty matches all."""
    toleration_seconds: int | None = None
    """With NoExecute: how long the pod stays bound after the taint appears."""


class WorkloadProfile(TauModel):
    """One entry of ``TauCluster.spec.workloadProfiles``.

    ``gpus_per_worker`` is GPUs per worker pod; ``worker_count`` the number of worker pods (in
    ``fixed`` mode the exact number, in ``elastic`` mode the maximum). taugate extensions:
    ``gpu_class`` (value of the ``tau.azure.com/gpu-class`` node label the GPU pods must land on),
    ``node_selector`` and ``tolerations`` (added to GPU pod templates only) and
    ``max_gpus_per_pod`` (a cap below ``gpus_per_worker``'s node size, optional).
    """

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """Profile name, as written in a workload's tau.azure.com/workload-profile label."""
    description: str | None = None
    """Free text shown to users choosing a profile."""
    applicability: Applicability = Field(default_factory=Applicability)
    """Where the profile applies (teams, lanes, namespaces)."""
    gpus_per_worker: int = Field(ge=0)
    """GPUs (nvidia.com/gpu) per worker pod."""
    worker_count: int = Field(ge=1)
    """Worker pods: exactly this many in fixed mode, at most this many in elastic mode."""
    mode: Literal["fixed", "elastic"]
    """fixed (exactly workerCount workers) or elastic (up to workerCount)."""
    placement: Literal[
        "unconstrained", "same-host", "same-accelerator-domain", "same-network-domain", "same-site"
    ]
    """How closely the workers are placed (TauGrid topology levels, unconstrained to same-site)."""
    default_local_queue: str = Field(min_length=1)
    """Name of the LocalQueue the profile resolves through: its ClusterQueues and flavors are read
    from the LocalQueues of that name (the QueueResolved condition)."""
    execution_target: Literal["singleCluster", "multiKueue"] = "singleCluster"
    """singleCluster or multiKueue (TauGrid)."""
    priorities: Priorities
    """Kueue and Kubernetes priority classes of the profile's runs."""
    gpu_class: str | None = None
    """taugate: value of the tau.azure.com/gpu-class node label the GPU pods are placed on."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """taugate: node selector added to GPU pod templates only."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """taugate: tolerations added to GPU pod templates only."""
    max_gpus_per_pod: int | None = Field(default=None, ge=1)
    """taugate: most GPUs one pod may ask for under this profile."""

    @cached_property
    def toleration_dicts(self) -> tuple[dict[str, Any], ...]:
        """``tolerations`` as Kubernetes writes them (computed once; admission adds them to
        every GPU pod template)."""
        return tuple(t.wire() for t in self.tolerations)


# A Kubernetes resource quantity (apimachinery ``resource.Quantity`` syntax, as in TauGrid's CRDs).
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


class WorkspaceDefaults(TauModel):
    """Workspace-wide defaults (TauGrid ``spec.workspaceDefaults``)."""

    default_queue: str = "jobqueue"
    """LocalQueue name of a workspace whose spec.queue is unset."""

    @classmethod
    def default_queue_of(cls, cluster: Mapping[str, Any] | None) -> str:
        """A TauCluster's ``spec.workspaceDefaults.defaultQueue`` ("jobqueue" without a TauCluster
        or the field). Only ``workspaceDefaults`` is validated: the rest of a TauCluster (hundreds
        of profiles and their resolved status in a fleet) is the cluster controller's to judge, and
        a mistake there must not move every workspace's queue."""
        raw = ((cluster or {}).get("spec") or {}).get("workspaceDefaults") or {}
        try:
            return cls.model_validate(raw).default_queue
        except ValidationError:  # another field of workspaceDefaults is wrong: keep the queue if it is one
            queue = raw.get("defaultQueue") if isinstance(raw, dict) else None
            return queue if isinstance(queue, str) and queue else "jobqueue"


class NodeMatch(TauModel):
    vm_sizes: list[str] = Field(default_factory=list)
    """VM sizes (the node.kubernetes.io/instance-type label) the rule matches; empty: every node."""


class NodeLabelRule(TauModel):
    """TauGrid node label rule: nodes matching ``match`` should carry ``labels``."""

    match: NodeMatch = Field(default_factory=NodeMatch)
    """Which nodes the rule is for."""
    labels: dict[str, str]
    """Labels the matching nodes should carry."""
    # taugate extension: match GPU Feature Discovery products as well as VM sizes.
    gpu_products: list[str] = Field(default_factory=list)
    """taugate: GPU Feature Discovery products (nvidia.com/gpu.product) matched as well as VM sizes."""


class NodesSpec(TauModel):
    label_rules: list[NodeLabelRule] = Field(default_factory=list)
    """Rules that say which labels nodes should carry."""
    selector: dict[str, str] = Field(default_factory=dict)
    """Labels (all must match) of the nodes the label rules apply to; empty: every node."""


class ObjectRef(TauModel):
    """A cluster-scoped object by name (TauGrid ``ObjectReference``)."""

    name: str = Field(min_length=1)
    """Name of the object."""


class NamespacedObjectRef(TauModel):
    """A namespaced object by namespace and name (TauGrid ``NamespacedObjectReference``)."""

    name: str = Field(min_length=1)
    """Name of the object."""
    namespace: str = Field(min_length=1)
    """Namespace of the object."""


class QueuesSpec(TauModel):
    """TauGrid ``spec.queues``: which Kueue objects the platform observes, adopts or manages."""

    cluster_queues: list[ObjectRef] | None = None
    """Kueue ClusterQueues the platform observes, adopts or manages."""
    ownership: Literal["External", "Adopt", "Manage"] = "External"
    """External (observe only), Adopt or Manage."""
    resource_flavors: list[ObjectRef] | None = None
    """Kueue ResourceFlavors the platform observes, adopts or manages."""
    shared_local_queues: list[NamespacedObjectRef] | None = None
    """LocalQueues shared by several workspaces."""
    topology: ObjectRef | None = None
    """Kueue Topology used for topology-aware placement."""


class TauClusterSpec(TauModel):
    management_mode: Literal["Observe", "Reconcile"] = "Observe"
    """Observe (report only) or Reconcile."""
    deletion_policy: Literal["Retain", "DeleteManaged"] = "Retain"
    """Retain or DeleteManaged: what happens to managed objects when the TauCluster is deleted."""
    nodes: NodesSpec | None = None
    """The nodes the platform observes and the labels they should carry."""
    queues: QueuesSpec | None = None
    """The Kueue objects the platform observes, adopts or manages."""
    workload_profiles: list[WorkloadProfile] = Field(default_factory=list)
    """The workload profile catalog: the shapes (GPUs per worker, workers, placement, queue, priorities) runs may
    take."""
    workspace_defaults: WorkspaceDefaults = Field(default_factory=WorkspaceDefaults)
    """Defaults for every workspace."""


class Condition(TauModel):
    """A Kubernetes ``metav1.Condition``."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ResolvedLocalQueue(TauModel):
    name: str
    namespace: str
    cluster_queue: str


class ResolvedProfile(WorkloadProfile):
    """A profile as resolved into ``TauCluster.status.workloadProfiles.profiles``."""

    conditions: list[Condition] = Field(default_factory=list)
    cluster_queues: list[str] = Field(default_factory=list)
    resource_flavors: list[str] = Field(default_factory=list)
    local_queues: list[ResolvedLocalQueue] = Field(default_factory=list)
    pod_priority_classes: list[str] | None = None
    topologies: list[str] | None = None
    workload_priority_classes: list[str] | None = None

    def is_ready(self) -> bool:
        """True when the profile's ``Ready`` condition is ``True``."""
        return any(c.type == "Ready" and c.status == "True" for c in self.conditions)


class ProfileSetStatus(TauModel):
    observed: int | None = None
    ready: int | None = None
    drifted: int | None = None
    observed_generation: int | None = None
    profile_set_hash: str | None = None
    profiles: list[ResolvedProfile] = Field(default_factory=list)


class ObservedCounts(TauModel):
    """TauGrid's observed / ready / drifted counters (of nodes or queue objects)."""

    drifted: int | None = None
    observed: int | None = None
    ready: int | None = None


class ManagedResource(TauModel):
    """An object the TauGrid cluster controller owns or adopted."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    ownership: Literal["External", "Adopt", "Manage"]
    uid: str | None = None


class GpuClassInventory(TauModel):
    """taugate extension: one GPU class of ``TauCluster.status.gpuInventory`` (the same fields as
    ``taugate.snapshot.GpuClassSummary.as_input()``): GPUs are allocatable ``nvidia.com/gpu``."""

    name: str
    max_gpus_per_node: int = Field(ge=0)
    max_healthy_gpus_per_node: int = Field(ge=0)
    nodes: int = Field(ge=0)
    healthy_nodes: int = Field(ge=0)
    unhealthy_nodes: int = Field(ge=0)
    healthy_gpus: int = Field(ge=0)
    products: list[str] = Field(default_factory=list)
    problems: dict[str, list[str]] = Field(default_factory=dict)


class TauClusterStatus(TauModel):
    phase: Literal["Pending", "Ready", "Degraded"] | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    workload_profiles: ProfileSetStatus | None = None
    desired_state_hash: str | None = None
    managed_resources: list[ManagedResource] | None = None
    nodes: ObservedCounts | None = None
    queues: ObservedCounts | None = None
    # taugate extension: GPU inventory summary, per GPU class.
    gpu_inventory: list[GpuClassInventory] | None = None


class ObjectMeta(TauModel):
    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
    uid: str | None = None


class TauCluster(TauModel):
    """The cluster-scoped singleton ``cluster``: the profile catalog."""

    api_version: str = "tau.azure.com/v1alpha1"
    kind: Literal["TauCluster"] = "TauCluster"
    metadata: ObjectMeta = Field(default_factory=lambda: ObjectMeta(name="cluster"))
    spec: TauClusterSpec = Field(default_factory=TauClusterSpec)
    """The profile catalog and what the platform observes."""
    status: TauClusterStatus | None = None
    """What the operator observed and resolved (profiles, queues, GPU inventory)."""


class ProfilePlacement(TauModel):
    """Where one workload profile puts its GPU pod templates."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    """The profile's nodeSelector: every entry is on each GPU pod template."""
    gpu_class: str | None = None
    """The profile's GPU class: the value of the GPU class label on each GPU pod template."""


class TauProfilePlacementSpec(TauModel):
    profiles: dict[str, ProfilePlacement] = Field(default_factory=dict)
    """Per workload profile name, where its GPU pod templates go (a name the TauCluster gives twice
    is left out: workloads under it are refused)."""
    toleration_keys: list[str] = Field(default_factory=list)
    """The taint keys the profiles tolerate for their GPU pods (a CPU template that tolerates one
    is refused)."""
    gpu_classes: list[str] = Field(default_factory=list)
    """The profiles' GPU classes (a CPU template that selects one is refused)."""
    profile_set_hash: str = ""
    """The TauCluster's profileSetHash this was made from."""


class TauProfilePlacement(TauModel):
    """The cluster-scoped singleton ``taugate-admitted-workloads``: what the API server's own
    policy (``taugate/admission_policy.py``) reads of the TauCluster's profiles, written by the
    operator before the TauCluster's status. Not for hand edits: the operator puts it back."""

    api_version: str = "tau.azure.com/v1alpha1"
    kind: Literal["TauProfilePlacement"] = "TauProfilePlacement"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TauProfilePlacementSpec = Field(default_factory=TauProfilePlacementSpec)
    """The profiles' placements, toleration keys and GPU classes."""


class Subject(TauModel):
    kind: Literal["Group", "User", "ServiceAccount"]
    """Group, User or ServiceAccount."""
    name: str = Field(min_length=1)
    """Name of the subject."""


class WorkspaceTarget(TauModel):
    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """The workspace's namespace; default: the workspace's name."""
    create_namespace: bool | None = None
    """false: the operator does not create a missing namespace (the workspace is then Degraded)."""


class WorkspaceRunDefaults(TauModel):
    output_root: str | None = None
    """TauGrid: root of the runs' outputs (not read by taugate)."""
    priority: Literal["default", "priority", "normal"] | None = None
    """TauGrid: default priority of runs (not read by taugate)."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=600)
    """TauGrid: seconds a finished run is kept, at least 600 (not read by taugate)."""
    # taugate extension: the profile used when neither the label nor the shape picks one.
    workload_profile: str | None = None
    """taugate: the profile used when neither a workload's label nor its shape picks one."""


class DataVolume(TauModel):
    """taugate extension: the workspace data PVC, mounted at ``/data`` by every run.

    ``size`` is a Kubernetes quantity; ``claim_name`` defaults to ``<workspace>-data``."""

    storage_class_name: str | None = None
    """StorageClass of the data PVC; default: the cluster's default."""
    size: str = Field(default="100Gi", pattern=QUANTITY_PATTERN)
    """Size of the data PVC (a Kubernetes quantity, default 100Gi)."""
    claim_name: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """Name of the data PVC; default <workspace>-data."""


class PrincipalRef(TauModel):
    """The external identity (Entra or GitHub group) behind a workspace (TauGrid)."""

    provider: Literal["entra", "github"]
    """entra or github."""
    name: str = Field(min_length=1)
    """Name of the group at the provider."""


class WorkloadIdentity(TauModel):
    """Azure Workload Identity for the workspace's workload service account (TauGrid)."""

    client_id: str = Field(min_length=1)
    """Client ID of the Azure identity the workload service account federates with."""
    service_account_name: str = Field(min_length=1)
    """The workspace's workload ServiceAccount."""


class WorkspaceAuthorization(TauModel):
    """TauGrid ``spec.authorization``: ``workspace-rbac`` (the controller binds the subject in the
    target namespace) or ``cluster-wide`` (callers bring their own access)."""

    mode: Literal["workspace-rbac", "cluster-wide"] = "workspace-rbac"
    """workspace-rbac (the operator binds kubernetesSubject to role in the namespace) or cluster-wide (no binding)."""


class WorkspaceQuota(TauModel):
    """One TauGrid ``spec.quota`` entry: a Kueue quota for ``resource`` on ``flavor`` (quantities)."""

    resource: str = Field(min_length=1)
    """Resource name, e.g. nvidia.com/gpu, cpu, memory."""
    flavor: str = Field(min_length=1)
    """Kueue ResourceFlavor the quota is for."""
    nominal_quota: int | str
    """Quota the workspace is guaranteed (a quantity)."""
    borrowing_limit: int | str | None = None
    """Most the workspace may borrow beyond its nominal quota (a quantity)."""
    lending_limit: int | str | None = None
    """Most of its nominal quota others may borrow (a quantity)."""


class TeamRef(TauModel):
    name: str
    """Name of the team."""


class TauWorkspaceSpec(TauModel):
    principal_ref: PrincipalRef | None = None
    """The external identity (Entra or GitHub group) behind the workspace."""
    kubernetes_subject: Subject | None = None
    """The Kubernetes subject bound to role in the workspace's namespace."""
    role: Literal["researcher", "tau-researcher-v1"] | None = None
    """The role researchers get there (researcher or tau-researcher-v1)."""
    target: WorkspaceTarget = Field(default_factory=WorkspaceTarget)
    """The workspace's namespace."""
    queue: str | None = None
    """Name of the workspace's LocalQueue; default: the TauCluster's workspaceDefaults.defaultQueue."""
    team_ref: TeamRef | None = None
    """The team the workspace belongs to (matched by profile applicability)."""
    quota: list[WorkspaceQuota] = Field(default_factory=list)
    """Kueue quotas of the workspace, per flavor and resource."""
    defaults: WorkspaceRunDefaults = Field(default_factory=WorkspaceRunDefaults)
    """Defaults for the workspace's runs."""
    workload_identity: WorkloadIdentity | None = None
    """Azure Workload Identity of the workspace's workload ServiceAccount."""
    authorization: WorkspaceAuthorization | None = None
    """How access to the workspace is granted."""
    data_volume: DataVolume | None = None
    """taugate: the data PVC every run mounts at /data."""
    # taugate extension: the ClusterQueue of the LocalQueue the controller creates (default: the
    # TauCluster's ``workspaceDefaults.defaultQueue``); an existing LocalQueue is adopted as is.
    cluster_queue: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """taugate: ClusterQueue of the LocalQueue the operator creates; default: the TauCluster's
    workspaceDefaults.defaultQueue."""


class WorkspaceQueueStatus(TauModel):
    cluster_queue: str | None = None
    cluster_queue_uid: str | None = Field(default=None, alias="clusterQueueUID")
    local_queue: str | None = None


class WorkspaceTargetStatus(TauModel):
    resolved_namespace: str | None = None


class WorkspaceDataVolumeStatus(TauModel):
    """taugate extension: the data PVC as observed (``phase`` is the PVC's, e.g. Pending, Bound)."""

    claim_name: str
    size: str | None = None
    storage_class_name: str | None = None
    phase: str | None = None


class TauWorkspaceStatus(TauModel):
    """TauGrid's workspace status plus taugate's ``serviceAccount``, ``roleBinding`` and
    ``dataVolume`` (the children the controller made)."""

    phase: Literal["Pending", "Ready", "Degraded"] | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    queue: WorkspaceQueueStatus | None = None
    target: WorkspaceTargetStatus | None = None
    service_account: str | None = None
    role_binding: str | None = None
    data_volume: WorkspaceDataVolumeStatus | None = None


class TauWorkspace(TauModel):
    """A workspace: one target namespace, one LocalQueue, one team (namespaced, system namespace)."""

    api_version: str = "tau.azure.com/v1alpha1"
    kind: Literal["TauWorkspace"] = "TauWorkspace"
    metadata: ObjectMeta
    spec: TauWorkspaceSpec = Field(default_factory=TauWorkspaceSpec)
    """The workspace's namespace, subject, queue, quotas and defaults."""
    status: TauWorkspaceStatus | None = None
    """What the operator made for the workspace."""

    @property
    def target_namespace(self) -> str:
        """``spec.target.namespace``, defaulting to the workspace name (TauGrid rule)."""
        return self.spec.target.namespace or self.metadata.name or ""

    @property
    def data_claim_name(self) -> str | None:
        """The data PVC every run mounts at ``/data`` (in the target namespace):
        ``spec.dataVolume.claimName``, default ``<workspace>-data``; None without a data volume."""
        if self.spec.data_volume is None:
            return None
        return self.spec.data_volume.claim_name or f"{self.metadata.name}-data"

    def local_queue(self, default_queue: str) -> str:
        """``spec.queue``, else the TauCluster's ``workspaceDefaults.defaultQueue``."""
        return self.spec.queue or default_queue


class TauQuotaRequestSpec(TauModel):
    workspace: str
    """The workspace whose quota is to change."""
    resource: str
    """Resource name, e.g. nvidia.com/gpu."""
    requested: int | str
    """The nominal quota asked for (a quantity)."""
    reason: str | None = None
    """Why the quota is needed, for the reviewer."""
    mutation_mode: Literal["ReportOnly", "Apply"] | None = None
    """ReportOnly (record the decision) or Apply (an approval changes the ClusterQueue's nominalQuota)."""
    flavor: str | None = None
    """Kueue ResourceFlavor the quota is for."""


class QuotaChange(TauModel):
    """taugate extension: what an approved ``Apply`` request did to a ClusterQueue's
    ``nominalQuota`` for one flavor and resource (quantities as Kueue stores them)."""

    cluster_queue: str
    flavor: str
    resource: str
    before: int | str | None = None
    after: int | str | None = None


class TauQuotaRequestStatus(TauModel):
    """TauGrid's quota request status plus taugate's ``reviewedBy`` and ``quotaChange``."""

    phase: Literal["PendingApproval", "Approved", "Rejected", "Expired"] | None = None
    approved_by: str | None = None
    decision: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    reviewed_by: str | None = None
    quota_change: QuotaChange | None = None


class TauQuotaRequest(TauModel):
    api_version: str = "tau.azure.com/v1alpha1"
    kind: Literal["TauQuotaRequest"] = "TauQuotaRequest"
    metadata: ObjectMeta
    spec: TauQuotaRequestSpec
    """What quota is asked for, and why; once approved, only platform admins may change it."""
    status: TauQuotaRequestStatus | None = None
    """The review's outcome and what it changed."""
