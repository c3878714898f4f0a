"""TauWorkspace controller: a workspace's namespace, LocalQueue, access, service account and data
(ARCHITECTURE.md section 4).

An existing LocalQueue is adopted as it is (Kueue makes ``spec.clusterQueue`` immutable). Objects
taugate finds are adopted and never changed or deleted; on deletion the finalizer deletes what
taugate created and keeps the Namespace and the data PVC (the data outlives the workspace).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from taugate import labels
from taugate.controllers import resources as R
from taugate.controllers.conditions import (
    carry_transition_times,
    condition,
    now_rfc3339,
    owned_patch,
    selector_matches,
    subset_patch,
)
from taugate.controllers.resources import Action
from taugate.controllers.taugrid.execute import execute
from taugate.models import TauWorkspace, WorkspaceDefaults
from taugate.settings import Settings
from taugate.structure import first_problem
from taugate.tau_admission import adoption_refusal, namespace_refusal

log = logging.getLogger("taugate.controllers.taugrid.workspace")

FINALIZER = "tau.azure.com/workspace-cleanup"
ROLE_BINDING = "tau-researcher"
RESEARCHER_CLUSTER_ROLE = "tau-researcher-v1"
DEFAULT_SERVICE_ACCOUNT = "tau-workload"
WORKLOAD_IDENTITY_CLIENT_ID = "azure.workload.identity/client-id"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class WorkspaceNames:

    namespace: str
    local_queue: str
    cluster_queue: str | None  # the one a new LocalQueue would point at
    service_account: str
    data_claim: str | None


@dataclass(frozen=True)
class WorkspaceObservation:

    workspace: dict
    default_queue: str = "jobqueue"  # the TauCluster's spec.workspaceDefaults.defaultQueue
    namespace: dict | None = None
    other_workspaces: list[dict] = field(default_factory=list)  # read only when ``namespace`` is not yet ours
    local_queue: dict | None = None
    cluster_queue: dict | None = None
    role_binding: dict | None = None
    service_account: dict | None = None
    pvc: dict | None = None


@dataclass(frozen=True)
class WorkspacePlan:
    """Writes in order (finalizer, namespace, children, status); status None while deleting."""

    actions: list[Action]
    status: dict | None


def workspace_names(ws: TauWorkspace, default: str, local_queue: dict | None = None) -> WorkspaceNames:
    """The ClusterQueue is the existing LocalQueue's, else ``spec.clusterQueue``, else the
    TauCluster's ``workspaceDefaults.defaultQueue`` (``default``)."""
    existing_cq = ((local_queue or {}).get("spec") or {}).get("clusterQueue")
    sa = ws.spec.workload_identity.service_account_name if ws.spec.workload_identity else DEFAULT_SERVICE_ACCOUNT
    return WorkspaceNames(namespace=ws.target_namespace, local_queue=ws.local_queue(default),
                          cluster_queue=existing_cq or ws.spec.cluster_queue or default,
                          service_account=sa, data_claim=ws.data_claim_name)


def _owned_by(obj: dict | None, ws_name: str) -> bool:
    lab = R.labels_of(obj)
    return lab.get(labels.MANAGED_BY) == labels.MANAGED_BY_VALUE and lab.get(labels.WORKSPACE) == ws_name


def _creation_key(obj: dict) -> tuple[str, str]:
    return (str(R.metadata_of(obj).get("creationTimestamp") or "~"), R.name_of(obj))


def _rbac_subject(ws: TauWorkspace, namespace: str) -> dict[str, str] | None:
    s = ws.spec.kubernetes_subject
    if s is None:
        return None
    if s.kind == "ServiceAccount":
        name, sa_ns = s.name, namespace
        if s.name.startswith("system:serviceaccount:") and s.name.count(":") == 3:
            _, _, sa_ns, name = s.name.split(":")
        elif "/" in s.name:
            sa_ns, name = s.name.split("/", 1)
        return {"kind": "ServiceAccount", "name": name, "namespace": sa_ns}
    return {"kind": s.kind, "name": s.name, "apiGroup": RBAC_GROUP}


def _child_labels(ws_name: str) -> dict[str, str]:
    return {labels.MANAGED_BY: labels.MANAGED_BY_VALUE, labels.WORKSPACE: ws_name}


def namespace_conflict(ws: dict, namespace_obj: dict | None, others: list[dict], target: str) -> str | None:
    """Why another workspace owns ``target``, or None: the namespace's workspace label names
    another that still exists, or it is unclaimed and an older workspace (creationTimestamp, then
    name) targets it too."""
    me = R.name_of(ws)
    alive = {R.name_of(o): o for o in others if R.name_of(o) != me and not R.metadata_of(o).get("deletionTimestamp")}
    claimant = R.labels_of(namespace_obj).get(labels.WORKSPACE) if namespace_obj else None
    if claimant and claimant != me and claimant in alive:
        return f"namespace {target!r} belongs to TauWorkspace {claimant!r}"
    if claimant == me:
        return None
    rivals = []
    for o in alive.values():
        try:
            t = TauWorkspace.model_validate(o).target_namespace
        except ValidationError:
            continue
        if t == target and _creation_key(o) < _creation_key(ws):
            rivals.append(R.name_of(o))
    if rivals:
        return f"namespace {target!r} is also the target of the older TauWorkspace {sorted(rivals)[0]!r}"
    return None


def _finalizer_actions(ws_obj: dict, want: bool) -> list[Action]:
    finalizers = list(R.metadata_of(ws_obj).get("finalizers") or [])
    has = FINALIZER in finalizers
    if want and not has:
        return [Action("patch", R.TAU_WORKSPACES, R.name_of(ws_obj), R.namespace_of(ws_obj),
                       {"metadata": {"finalizers": finalizers + [FINALIZER]}}, reason="add cleanup finalizer")]
    if not want and has:
        return [Action("patch", R.TAU_WORKSPACES, R.name_of(ws_obj), R.namespace_of(ws_obj),
                       {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER]}},
                       reason="cleanup done, remove finalizer")]
    return []


def _status_action(ws_obj: dict, status: dict) -> list[Action]:
    patch = owned_patch(ws_obj.get("status") or {}, status)
    if not patch:
        return []
    return [Action("patch", R.TAU_WORKSPACES, R.name_of(ws_obj), R.namespace_of(ws_obj), {"status": patch},
                   subresource="status", reason="status")]


def _finish(obs: WorkspaceObservation, conds: list[dict], phase: str, now: str, generation: int | None,
            extra: dict[str, Any]) -> dict:
    problems = [c for c in conds if c["status"] != "True"]
    ready = condition("Ready", not problems and phase == "Ready",
                      "Ready" if not problems else problems[0]["reason"],
                      "every workspace object is in place" if not problems else problems[0]["message"],
                      now, generation)
    old_conditions = (obs.workspace.get("status") or {}).get("conditions")
    status: dict[str, Any] = {"phase": phase, "conditions": carry_transition_times([ready, *conds], old_conditions)}
    if generation is not None:
        status["observedGeneration"] = generation
    status.update(extra)
    return status


@dataclass
class _Draft:
    """A workspace plan being built; ``waiting``: a child is awaited (Pending), ``degraded``: one is
    broken."""

    ws: TauWorkspace
    ws_name: str
    names: WorkspaceNames
    now: str
    generation: int | None
    actions: list[Action]
    conds: list[dict] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    waiting: bool = False
    degraded: bool = False

    @property
    def target(self) -> str:
        return self.names.namespace

    def condition(self, type_: str, ok: bool, reason: str, message: str) -> None:
        self.conds.append(condition(type_, ok, reason, message, self.now, self.generation))


def plan_workspace(obs: WorkspaceObservation, settings: Settings, now: str | None = None) -> WorkspacePlan:
    """Desired children, finalizer and status for one workspace (pure)."""
    now = now or now_rfc3339()
    ws_obj = obs.workspace
    if R.metadata_of(ws_obj).get("deletionTimestamp"):
        return plan_cleanup(obs)
    generation = R.metadata_of(ws_obj).get("generation")
    actions = _finalizer_actions(ws_obj, True)
    try:
        ws = TauWorkspace.model_validate(ws_obj)
    except ValidationError as e:
        msg = f"the TauWorkspace does not match the TauGrid schema: {first_problem(e)}"
        status = _finish(obs, [condition("SpecValid", False, "InvalidSpec", msg, now, generation)], "Degraded", now,
                         generation, {})
        return WorkspacePlan(actions + _status_action(ws_obj, status), status)

    names = workspace_names(ws, obs.default_queue, obs.local_queue)
    draft = _Draft(ws, R.name_of(ws_obj), names, now, generation, actions,
                   extra={"target": {"resolvedNamespace": names.namespace}})
    refusal = (namespace_refusal(draft.target, settings)
               or namespace_conflict(ws_obj, obs.namespace, obs.other_workspaces, draft.target)
               or adoption_refusal(obs.namespace, draft.ws_name))
    if refusal:
        draft.condition("NamespaceReady", False, "NamespaceRefused", f"{refusal}; nothing was created")
        status = _finish(obs, draft.conds, "Degraded", now, generation, draft.extra)
        return WorkspacePlan(draft.actions + _status_action(ws_obj, status), status)

    ns_labels = _plan_namespace(draft, obs)
    if ns_labels is None:  # missing, and the workspace may not create it
        phase = "Pending"
    else:
        _plan_local_queue(draft, obs, ns_labels)
        _plan_role_binding(draft, obs)
        _plan_service_account(draft, obs)
        _plan_data_volume(draft, obs)
        phase = "Degraded" if draft.degraded else ("Pending" if draft.waiting else "Ready")
    status = _finish(obs, draft.conds, phase, now, generation, draft.extra)
    return WorkspacePlan(draft.actions + _status_action(ws_obj, status), status)


def _plan_namespace(draft: _Draft, obs: WorkspaceObservation) -> dict[str, str] | None:
    """The namespace's labels as they will be, or None when it is missing and may not be created."""
    target, ws_name = draft.target, draft.ws_name
    claim = {labels.WORKSPACE: ws_name, labels.KUEUE_QUEUE_NAME: draft.names.local_queue}
    ns_labels = dict(R.labels_of(obs.namespace))
    if obs.namespace is None:
        if draft.ws.spec.target.create_namespace is False:
            draft.condition("NamespaceReady", False, "NamespaceMissing",
                            f"namespace {target!r} does not exist and spec.target.createNamespace is false")
            return None
        ns_labels = {**_child_labels(ws_name), **claim}
        draft.actions.append(Action("create", R.NAMESPACES, target, body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target, "labels": ns_labels}},
            reason="workspace namespace"))
    else:
        patch = subset_patch(ns_labels, claim)
        if patch:
            draft.actions.append(Action("patch", R.NAMESPACES, target, body={"metadata": {"labels": patch}},
                                        reason="workspace and queue labels"))
            ns_labels.update(patch)
    # the same words whether just created or found, so the next pass writes nothing
    draft.condition("NamespaceReady", True, "NamespaceReady",
                    f"namespace {target!r} carries the workspace and queue labels")
    return ns_labels


def _plan_local_queue(draft: _Draft, obs: WorkspaceObservation, ns_labels: dict[str, str]) -> None:
    """The ClusterQueue's ``namespaceSelector`` must select the namespace: Kueue admits nothing
    otherwise."""
    names, target, ws = draft.names, draft.target, draft.ws
    queue_status: dict[str, Any] = {"localQueue": names.local_queue, "clusterQueue": names.cluster_queue}
    cq_uid = R.metadata_of(obs.cluster_queue).get("uid") if obs.cluster_queue else None
    if cq_uid:
        queue_status["clusterQueueUID"] = cq_uid
    draft.extra["queue"] = queue_status
    if obs.local_queue is None:
        draft.actions.append(Action("create", R.LOCAL_QUEUES, names.local_queue, target, body={
            "apiVersion": R.LOCAL_QUEUES.api_version, "kind": "LocalQueue",
            "metadata": {"name": names.local_queue, "namespace": target, "labels": _child_labels(draft.ws_name)},
            "spec": {"clusterQueue": names.cluster_queue}}, reason="workspace LocalQueue"))
    queue_problem = None
    if obs.local_queue is not None and ws.spec.cluster_queue and names.cluster_queue != ws.spec.cluster_queue:
        queue_problem = ("ClusterQueueMismatch",
                         f"LocalQueue {target}/{names.local_queue} points at ClusterQueue {names.cluster_queue!r}, not "
                         f"spec.clusterQueue {ws.spec.cluster_queue!r}; Kueue does not allow changing it: delete the "
                         f"LocalQueue or fix spec.clusterQueue")
        draft.degraded = True
    elif obs.cluster_queue is None:
        queue_problem = ("ClusterQueueNotFound",
                         f"ClusterQueue {names.cluster_queue!r} (behind LocalQueue {target}/{names.local_queue}) "
                         f"not found")
        draft.waiting = True
    else:
        ns_sel = (obs.cluster_queue.get("spec") or {}).get("namespaceSelector")
        visible = {**ns_labels, "kubernetes.io/metadata.name": target}
        if not selector_matches(ns_sel, visible):
            queue_problem = ("NamespaceNotSelected",
                             f"ClusterQueue {names.cluster_queue!r} has a namespaceSelector that does not select "
                             f"namespace {target!r}, so Kueue admits nothing from it")
            draft.degraded = True
    if queue_problem:
        draft.condition("QueueReady", False, queue_problem[0], queue_problem[1])
    else:
        ours = obs.local_queue is None or _owned_by(obs.local_queue, draft.ws_name)
        how = "managed by taugate" if ours else "adopted"
        draft.condition("QueueReady", True, "QueueReady",
                        f"LocalQueue {target}/{names.local_queue} ({how}) feeds ClusterQueue {names.cluster_queue!r}")


def _plan_role_binding(draft: _Draft, obs: WorkspaceObservation) -> None:
    """None when authorization is cluster-wide; a changed ``roleRef`` is delete + create."""
    ws, target, ws_name = draft.ws, draft.target, draft.ws_name
    cluster_wide = ws.spec.authorization is not None and ws.spec.authorization.mode == "cluster-wide"
    subject = _rbac_subject(ws, target)
    if cluster_wide or subject is None:
        draft.condition("AccessReady", True, "ClusterWide" if cluster_wide else "NoSubject",
                        "authorization is cluster-wide: no RoleBinding" if cluster_wide
                        else "no spec.kubernetesSubject: no RoleBinding")
        return
    want_rb = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": ROLE_BINDING, "namespace": target, "labels": _child_labels(ws_name)},
               "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": RESEARCHER_CLUSTER_ROLE},
               "subjects": [subject]}
    bound = f"{subject['kind']} {subject['name']!r} bound to ClusterRole {RESEARCHER_CLUSTER_ROLE!r}"
    rb = obs.role_binding
    if rb is None:
        draft.actions.append(Action("create", R.ROLE_BINDINGS, ROLE_BINDING, target, body=want_rb,
                                    reason="researcher access"))
        draft.condition("AccessReady", True, "RoleBindingReady", bound)
    elif not _owned_by(rb, ws_name):
        draft.condition("AccessReady", False, "RoleBindingConflict",
                        f"RoleBinding {target}/{ROLE_BINDING} exists and is not managed by taugate for this "
                        f"workspace; rename or remove it")
        draft.degraded = True
    else:
        if rb.get("roleRef") != want_rb["roleRef"]:  # roleRef is immutable (Kubernetes RBAC rule)
            draft.actions.append(Action("delete", R.ROLE_BINDINGS, ROLE_BINDING, target, reason="roleRef changed"))
            draft.actions.append(Action("create", R.ROLE_BINDINGS, ROLE_BINDING, target, body=want_rb,
                                        reason="roleRef changed"))
        elif rb.get("subjects") != want_rb["subjects"]:
            draft.actions.append(Action("patch", R.ROLE_BINDINGS, ROLE_BINDING, target,
                                        body={"subjects": want_rb["subjects"]}, reason="subject changed"))
        draft.condition("AccessReady", True, "RoleBindingReady", bound)
    draft.extra["roleBinding"] = ROLE_BINDING


def _plan_service_account(draft: _Draft, obs: WorkspaceObservation) -> None:
    names, target, ws_name = draft.names, draft.target, draft.ws_name
    sa_meta: dict[str, Any] = {"name": names.service_account, "namespace": target, "labels": _child_labels(ws_name)}
    if draft.ws.spec.workload_identity is not None:
        sa_meta["annotations"] = {WORKLOAD_IDENTITY_CLIENT_ID: draft.ws.spec.workload_identity.client_id}
    sa = obs.service_account
    if sa is None:
        draft.actions.append(Action("create", R.SERVICE_ACCOUNTS, names.service_account, target,
                                    body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": sa_meta},
                                    reason="workload service account"))
        sa_msg = f"ServiceAccount {target}/{names.service_account} ready"
    elif _owned_by(sa, ws_name):
        patch = subset_patch(R.metadata_of(sa), {k: v for k, v in sa_meta.items() if k in ("labels", "annotations")})
        if patch:
            draft.actions.append(Action("patch", R.SERVICE_ACCOUNTS, names.service_account, target,
                                        body={"metadata": patch}, reason="workload identity"))
        sa_msg = f"ServiceAccount {target}/{names.service_account} ready"
    else:
        sa_msg = f"ServiceAccount {target}/{names.service_account} exists (adopted as is)"
    draft.condition("ServiceAccountReady", True, "ServiceAccountReady", sa_msg)
    draft.extra["serviceAccount"] = names.service_account


def _plan_data_volume(draft: _Draft, obs: WorkspaceObservation) -> None:
    dv, claim, target = draft.ws.spec.data_volume, draft.names.data_claim, draft.target
    if dv is None or not claim:
        return
    pvc = obs.pvc
    if pvc is None:
        spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": dv.size}}}
        if dv.storage_class_name:
            spec["storageClassName"] = dv.storage_class_name
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": claim, "namespace": target, "labels": _child_labels(draft.ws_name)},
               "spec": spec}
        draft.actions.append(Action("create", R.PVCS, claim, target, body=pvc, reason="workspace data volume"))
    pspec = pvc.get("spec") or {}
    size = ((pspec.get("resources") or {}).get("requests") or {}).get("storage")
    sc = pspec.get("storageClassName")
    phase = (pvc.get("status") or {}).get("phase")
    draft.extra["dataVolume"] = {k: v for k, v in {"claimName": claim, "size": size,
                                                   "storageClassName": sc, "phase": phase}.items() if v}
    mismatch = []
    if dv.storage_class_name and sc and sc != dv.storage_class_name:
        mismatch.append(f"storage class {sc!r}, not {dv.storage_class_name!r}")
    if size and size != dv.size:
        mismatch.append(f"size {size}, not {dv.size}")
    if phase == "Lost":
        draft.condition("DataVolumeReady", False, "ClaimLost", f"PVC {target}/{claim} lost its volume")
        draft.degraded = True
    else:
        note = f" (differs from spec.dataVolume: {', '.join(mismatch)}; the PVC is kept as it is)" if mismatch else ""
        draft.condition("DataVolumeReady", True, "DataVolumeReady",
                        f"PVC {target}/{claim} is {phase or 'present'}; runs mount it at /data{note}")


def plan_cleanup(obs: WorkspaceObservation) -> WorkspacePlan:
    """What the finalizer does (pure): delete what taugate created, release the namespace's claim
    labels, keep the Namespace and the data PVC, then remove the finalizer."""
    ws_obj = obs.workspace
    if FINALIZER not in (R.metadata_of(ws_obj).get("finalizers") or []):
        return WorkspacePlan([], None)
    ws_name = R.name_of(ws_obj)
    actions: list[Action] = []
    for res, obj in ((R.LOCAL_QUEUES, obs.local_queue), (R.ROLE_BINDINGS, obs.role_binding),
                     (R.SERVICE_ACCOUNTS, obs.service_account)):
        if obj is not None and _owned_by(obj, ws_name):
            actions.append(Action("delete", res, R.name_of(obj), R.namespace_of(obj), reason="workspace deleted"))
    if obs.namespace is not None and R.labels_of(obs.namespace).get(labels.WORKSPACE) == ws_name:
        actions.append(Action("patch", R.NAMESPACES, R.name_of(obs.namespace),
                              body={"metadata": {"labels": {labels.WORKSPACE: None, labels.KUEUE_QUEUE_NAME: None}}},
                              reason="release the namespace (kept, with its data PVC)"))
    actions += _finalizer_actions(ws_obj, False)
    return WorkspacePlan(actions, None)


def observe_workspace(kube: Any, namespace: str, name: str,
                      default_queue: str | None = None) -> WorkspaceObservation | None:
    """Read one workspace and what it owns. ``default_queue``: the TauCluster's
    ``workspaceDefaults.defaultQueue`` as the caller's watch last saw it (the operator re-queues
    every workspace when it changes); None reads the TauCluster."""
    ws_obj = kube.get(R.TAU_WORKSPACES, name, namespace)
    if ws_obj is None:
        return None
    default = (default_queue if default_queue is not None
               else WorkspaceDefaults.default_queue_of(kube.get(R.TAU_CLUSTERS, R.CLUSTER_NAME)))
    try:
        ws = TauWorkspace.model_validate(ws_obj)
    except ValidationError:
        return WorkspaceObservation(workspace=ws_obj, default_queue=default)
    names = workspace_names(ws, default)
    target = names.namespace
    lq = kube.get(R.LOCAL_QUEUES, names.local_queue, target)
    names = workspace_names(ws, default, lq)
    cq = kube.get(R.CLUSTER_QUEUES, names.cluster_queue) if names.cluster_queue else None
    ns = kube.get(R.NAMESPACES, target)
    # namespace_conflict reads the other workspaces only for a namespace not yet labelled ours:
    # listing every TauWorkspace on every reconcile made a fleet's cold start quadratic.
    others = [] if R.labels_of(ns).get(labels.WORKSPACE) == name else [
        o for o in kube.list(R.TAU_WORKSPACES) if R.name_of(o) != name or R.namespace_of(o) != namespace]
    return WorkspaceObservation(
        workspace=ws_obj, default_queue=default, namespace=ns, other_workspaces=others,
        local_queue=lq, cluster_queue=cq, role_binding=kube.get(R.ROLE_BINDINGS, ROLE_BINDING, target),
        service_account=kube.get(R.SERVICE_ACCOUNTS, names.service_account, target),
        pvc=kube.get(R.PVCS, names.data_claim, target) if names.data_claim else None)


def reconcile_workspace(kube: Any, settings: Settings, namespace: str, name: str,
                        *, now: str | None = None, default_queue: str | None = None) -> WorkspacePlan | None:
    """Returns the plan (None when the workspace does not exist). Raises
    ``taugate.kube.KubeError`` when the API fails (the caller retries). ``default_queue``: as
    ``observe_workspace``."""
    obs = observe_workspace(kube, namespace, name, default_queue)
    if obs is None:
        return None
    plan = plan_workspace(obs, settings, now)
    for action in plan.actions:
        execute(kube, action)
    return plan
