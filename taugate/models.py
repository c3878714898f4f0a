"""Pydantic models of taugate's custom resources (group ``tau.azure.com``, version ``v1alpha1``).

The field names are TauGrid's (``../shared/samples/taugrid``): a TauGrid object loads here
unchanged, and fields taugate does not know are kept (``extra="allow"``), so nothing is lost on
a round trip. taugate's additions are optional fields only: on a workload profile ``gpuClass``,
``nodeSelector``, ``tolerations`` and ``maxGpusPerPod``; on a workspace ``defaults.workloadProfile``
and ``dataVolume``; and the TauRun kind, which is taugate's own (``taugate.run_models``).

Raises ``pydantic.ValidationError`` on objects that break the TauGrid schema (for example a
profile without ``workerCount`` or with ``mode: sometimes``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class TauModel(BaseModel):
    """Base: camelCase on the wire, unknown fields kept, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def wire(self) -> dict[str, Any]:
        """The object as it was written: camelCase keys; fields that were never set (defaults)
        and nulls left out, so a TauGrid object round-trips unchanged."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")


class Applicability(TauModel):
    """Where a profile applies; an empty list means everywhere (TauGrid rule)."""

    teams: list[str] = Field(default_factory=list)
    lanes: list[str] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list)


class Priorities(TauModel):
    """Kueue WorkloadPriorityClass and Kubernetes PriorityClass names for the profile's runs."""

    workload_priority_class_name: str | None = None
    pod_priority_class_name: str | None = None
    disable_default_priorities: bool | None = None


class Toleration(TauModel):
    """A Kubernetes pod toleration (core/v1 Toleration)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class WorkloadProfile(TauModel):
    """One entry of ``TauCluster.spec.workloadProfiles``.

    ``gpus_per_worker`` is GPUs per worker pod; ``worker_count`` the number of worker pods (in
    ``fixed`` mode the exact number, in ``elastic`` mode the maximum). taugate extensions:
    ``gpu_class`` (value of the ``tau.azure.com/gpu-class`` node label the GPU pods must land on),
    ``node_selector`` and ``tolerations`` (added to GPU pod templates only) and
    ``max_gpus_per_pod`` (a cap below ``gpus_per_worker``'s node size, optional).
    """

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    description: str | None = None
    applicability: Applicability = Field(default_factory=Applicability)
    gpus_per_worker: int = Field(ge=0)
    worker_count: int = Field(ge=1)
    mode: Literal["fixed", "elastic"]
    placement: Literal[
        "unconstrained", "same-host", "same-accelerator-domain", "same-network-domain", "same-site"
    ]
    default_local_queue: str = Field(min_length=1)
    execution_target: Literal["singleCluster", "multiKueue"] = "singleCluster"
    priorities: Priorities
    gpu_class: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    max_gpus_per_pod: int | None = Field(default=None, ge=1)

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


class NodeMatch(TauModel):
    vm_sizes: list[str] = Field(default_factory=list)


class NodeLabelRule(TauModel):
    """TauGrid node label rule: nodes matching ``match`` should carry ``labels``."""

    match: NodeMatch = Field(default_factory=NodeMatch)
    labels: dict[str, str]
    # taugate extension: match GPU Feature Discovery products as well as VM sizes.
    gpu_products: list[str] = Field(default_factory=list)


class NodesSpec(TauModel):
    label_rules: list[NodeLabelRule] = Field(default_factory=list)
    selector: dict[str, str] = Field(default_factory=dict)


class ObjectRef(TauModel):
    """A cluster-scoped object by name (TauGrid ``ObjectReference``)."""

    name: str = Field(min_length=1)


class NamespacedObjectRef(TauModel):
    """A namespaced object by namespace and name (TauGrid ``NamespacedObjectReference``)."""

    name: str = Field(min_length=1)
    namespace: str = Field(min_length=1)


class QueuesSpec(TauModel):
    """TauGrid ``spec.queues``: which Kueue objects the platform observes, adopts or manages."""

    cluster_queues: list[ObjectRef] | None = None
    ownership: Literal["External", "Adopt", "Manage"] = "External"
    resource_flavors: list[ObjectRef] | None = None
    shared_local_queues: list[NamespacedObjectRef] | None = None
    topology: ObjectRef | None = None


class TauClusterSpec(TauModel):
    management_mode: Literal["Observe", "Reconcile"] = "Observe"
    deletion_policy: Literal["Retain", "DeleteManaged"] = "Retain"
    nodes: NodesSpec | None = None
    queues: QueuesSpec | None = None
    workload_profiles: list[WorkloadProfile] = Field(default_factory=list)
    workspace_defaults: WorkspaceDefaults = Field(default_factory=WorkspaceDefaults)


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
    status: TauClusterStatus | None = None


class Subject(TauModel):
    kind: Literal["Group", "User", "ServiceAccount"]
    name: str = Field(min_length=1)


class WorkspaceTarget(TauModel):
    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    create_namespace: bool | None = None


class WorkspaceRunDefaults(TauModel):
    output_root: str | None = None
    priority: Literal["default", "priority", "normal"] | None = None
    ttl_seconds_after_finished: int | None = Field(default=None, ge=600)
    # taugate extension: the profile used when neither the label nor the shape picks one.
    workload_profile: str | None = None


class DataVolume(TauModel):
    """taugate extension: the workspace data PVC, mounted at ``/data`` by every run.

    ``size`` is a Kubernetes quantity; ``claim_name`` defaults to ``<workspace>-data``."""

    storage_class_name: str | None = None
    size: str = Field(default="100Gi", pattern=QUANTITY_PATTERN)
    claim_name: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class PrincipalRef(TauModel):
    """The external identity (Entra or GitHub group) behind a workspace (TauGrid)."""

    provider: Literal["entra", "github"]
    name: str = Field(min_length=1)


class WorkloadIdentity(TauModel):
    """Azure Workload Identity for the workspace's workload service account (TauGrid)."""

    client_id: str = Field(min_length=1)
    service_account_name: str = Field(min_length=1)


class WorkspaceAuthorization(TauModel):
    """TauGrid ``spec.authorization``: ``workspace-rbac`` (the controller binds the subject in the
    target namespace) or ``cluster-wide`` (callers bring their own access)."""

    mode: Literal["workspace-rbac", "cluster-wide"] = "workspace-rbac"


class WorkspaceQuota(TauModel):
    """One TauGrid ``spec.quota`` entry: a Kueue quota for ``resource`` on ``flavor`` (quantities)."""

    resource: str = Field(min_length=1)
    flavor: str = Field(min_length=1)
    nominal_quota: int | str
    borrowing_limit: int | str | None = None
    lending_limit: int | str | None = None


class TeamRef(TauModel):
    name: str


class TauWorkspaceSpec(TauModel):
    principal_ref: PrincipalRef | None = None
    kubernetes_subject: Subject | None = None
    role: Literal["researcher", "tau-researcher-v1"] | None = None
    target: WorkspaceTarget = Field(default_factory=WorkspaceTarget)
    queue: str | None = None
    team_ref: TeamRef | None = None
    quota: list[WorkspaceQuota] = Field(default_factory=list)
    defaults: WorkspaceRunDefaults = Field(default_factory=WorkspaceRunDefaults)
    workload_identity: WorkloadIdentity | None = None
    authorization: WorkspaceAuthorization | None = None
    data_volume: DataVolume | None = None
    # taugate extension: the ClusterQueue of the LocalQueue the controller creates (default: the
    # TauCluster's ``workspaceDefaults.defaultQueue``); an existing LocalQueue is adopted as is.
    cluster_queue: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


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
    status: TauWorkspaceStatus | None = None

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
    resource: str
    requested: int | str
    reason: str | None = None
    mutation_mode: Literal["ReportOnly", "Apply"] | None = None
    flavor: str | None = None


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
    status: TauQuotaRequestStatus | None = None
