"""TauQuotaRequest controller: ``status.phase`` from the platform-owned approval annotations
(rejection wins) and, with ``spec.mutationMode: Apply`` (taugate's; TauGrid has only
``ReportOnly``) under a TauCluster in ``managementMode: Reconcile``, the ClusterQueue's
``nominalQuota`` raised to ``spec.requested`` once, never lowered (docs/quotas.md). A
``spec.resource`` naming a flavor of the ClusterQueue (TauGrid's ``resource: h200``) means
``nvidia.com/gpu`` on that flavor.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from taugate import labels
from taugate.controllers import resources as R
from taugate.controllers.conditions import carry_transition_times, condition, merge_patch, now_rfc3339, owned_patch
from taugate.controllers.resources import Action
from taugate.controllers.taugrid.execute import execute_plan
from taugate.models import TauCluster, TauQuotaRequest, TauWorkspace, WorkspaceDefaults
from taugate.pods import quantity
from taugate.settings import Settings
from taugate.structure import first_problem
from taugate.tau_admission import says_true


@dataclass(frozen=True)
class QuotaObservation:
    """What the controller read for one request (plain API dicts, None when absent)."""

    request: dict
    workspace: dict | None = None
    cluster: dict | None = None
    local_queue: dict | None = None
    cluster_queue: dict | None = None


@dataclass(frozen=True)
class QuotaPlan:
    """Writes (a ClusterQueue patch for Apply, the status patch) and the desired status."""

    actions: list[Action]
    status: dict


def decide_phase(annotations: dict[str, str]) -> tuple[str, str | None]:
    """(phase, reviewer) from the approval annotations; rejection wins over approval."""
    reviewer = annotations.get(labels.REVIEWED_BY) or None
    if says_true(annotations.get(labels.REJECTED)):
        return "Rejected", reviewer
    if says_true(annotations.get(labels.APPROVED)):
        return "Approved", reviewer
    return "PendingApproval", reviewer


def _pick_target(cq: dict, resource: str, flavor: str | None) -> tuple[str, str] | str:
    """(flavor, resource) in a ClusterQueue, or a reason why none fits."""
    entries = [(fl.get("name"), r.get("name"))
               for g in (cq.get("spec") or {}).get("resourceGroups") or []
               for fl in g.get("flavors") or [] for r in fl.get("resources") or []]
    flavors = {f for f, _ in entries}
    if flavor:
        if (flavor, resource) in entries:
            return flavor, resource
        return f"ClusterQueue {R.name_of(cq)!r} has no {resource!r} quota on flavor {flavor!r}"
    on = sorted({f for f, r in entries if r == resource})
    if len(on) == 1:
        return on[0], resource
    if len(on) > 1:
        return (f"ClusterQueue {R.name_of(cq)!r} covers {resource!r} on several flavors ({', '.join(on)}); "
                "set spec.flavor")
    if resource in flavors and (resource, labels.GPU_RESOURCE) in entries:
        return resource, labels.GPU_RESOURCE
    return (f"ClusterQueue {R.name_of(cq)!r} has no quota for {resource!r} "
            f"(flavors: {', '.join(sorted(flavors)) or 'none'})")


def _with_nominal(cq: dict, flavor: str, resource: str, value: Any) -> list[dict]:
    groups = copy.deepcopy((cq.get("spec") or {}).get("resourceGroups") or [])
    for g in groups:
        for fl in g.get("flavors") or []:
            if fl.get("name") != flavor:
                continue
            for r in fl.get("resources") or []:
                if r.get("name") == resource:
                    r["nominalQuota"] = value
    return groups


def _nominal(cq: dict, flavor: str, resource: str) -> Any:
    for g in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in g.get("flavors") or []:
            if fl.get("name") == flavor:
                for r in fl.get("resources") or []:
                    if r.get("name") == resource:
                        return r.get("nominalQuota")
    return None


def plan_quota_request(obs: QuotaObservation, settings: Settings, now: str | None = None, *,
                       may_patch_cluster_queues: bool = True) -> QuotaPlan:
    """Desired status and writes for one TauQuotaRequest (pure). ``may_patch_cluster_queues``
    False (the API refused the ClusterQueue patch: RBAC) reports that instead of planning it."""
    now = now or now_rfc3339()
    req = obs.request
    name, ns = R.name_of(req), R.namespace_of(req)
    generation = R.metadata_of(req).get("generation")
    old = req.get("status") or {}
    actions: list[Action] = []
    try:
        model = TauQuotaRequest.model_validate(req)
    except ValidationError as e:
        msg = f"the TauQuotaRequest does not match the TauGrid schema: {first_problem(e)}"
        invalid = {"conditions": carry_transition_times(
            [condition("Reviewed", False, "InvalidSpec", msg, now, generation)], old.get("conditions"))}
        patch = owned_patch(old, invalid)
        if patch:
            actions.append(Action("patch", R.TAU_QUOTA_REQUESTS, name, ns, {"status": patch}, subresource="status"))
        return QuotaPlan(actions, invalid)

    spec = model.spec
    phase, reviewer = decide_phase(R.annotations_of(req))
    status: dict[str, Any] = {"phase": phase}
    if reviewer:
        status["reviewedBy"] = reviewer
    if phase == "Approved":
        status["approvedBy"] = reviewer or "unknown"
        status["decision"] = (f"approved by {reviewer or 'a platform admin'}: {spec.requested} {spec.resource} "
                              f"for workspace {spec.workspace}")
        reviewed = condition("Reviewed", True, "Approved", status["decision"], now, generation)
    elif phase == "Rejected":
        status["decision"] = f"rejected by {reviewer or 'a platform admin'}"
        reviewed = condition("Reviewed", True, "Rejected", status["decision"], now, generation)
    else:
        status["decision"] = (f"waiting for a platform admin ({', '.join(settings.admin_groups) or 'none configured'}) "
                              f"to set {labels.APPROVED} or {labels.REJECTED}")
        reviewed = condition("Reviewed", False, "PendingApproval", status["decision"], now, generation)
    conds = [reviewed]

    mode = spec.mutation_mode or "ReportOnly"
    previous_change = old.get("quotaChange") if isinstance(old.get("quotaChange"), dict) else None
    if mode != "Apply":
        conds.append(condition("QuotaApplied", False, "ReportOnly",
                               "mutationMode ReportOnly: taugate records the decision; "
                               "a platform admin changes the quota",
                               now, generation))
    elif previous_change is not None:
        status["quotaChange"] = previous_change  # applied once; kept as the record
        conds.append(condition("QuotaApplied", True, "Applied",
                               f"ClusterQueue {previous_change.get('clusterQueue')!r} {previous_change.get('flavor')}/"
                               f"{previous_change.get('resource')}: nominalQuota {previous_change.get('before')} -> "
                               f"{previous_change.get('after')}", now, generation))
    elif phase != "Approved":
        conds.append(condition("QuotaApplied", False, "NotApproved", "Apply waits for an approval", now, generation))
    else:
        conds.append(_apply(obs, spec, status, actions, now, generation, may_patch_cluster_queues))

    status["conditions"] = carry_transition_times(conds, old.get("conditions"))
    if generation is not None:
        status["observedGeneration"] = generation
    # The reviewer fields are this controller's even when the decision has none: a withdrawn or
    # rejected approval keeps no approvedBy.
    owned = set(status) | {"approvedBy", "reviewedBy"}
    patch = merge_patch({k: old[k] for k in owned if k in old}, status)
    if patch:
        actions.append(Action("patch", R.TAU_QUOTA_REQUESTS, name, ns, {"status": patch}, subresource="status",
                              reason="status"))
    return QuotaPlan(actions, status)


def _apply(obs: QuotaObservation, spec: Any, status: dict, actions: list[Action], now: str,
           generation: int | None, allowed: bool = True) -> dict:
    """Plan the ClusterQueue raise for an approved Apply request; returns the QuotaApplied condition."""
    def fail(reason: str, msg: str) -> dict:
        return condition("QuotaApplied", False, reason, msg, now, generation)

    try:
        cluster = TauCluster.model_validate(obs.cluster) if obs.cluster else None
    except ValidationError:
        cluster = None
    if cluster is None or cluster.spec.management_mode != "Reconcile":
        return fail("ApplyNotPermitted", "mutationMode Apply needs TauCluster 'cluster' with managementMode Reconcile; "
                                         "a platform admin raises the quota by hand")
    if obs.workspace is None:
        return fail("WorkspaceNotFound", f"TauWorkspace {spec.workspace!r} not found")
    if obs.local_queue is None:
        return fail("QueueNotFound", f"the LocalQueue of workspace {spec.workspace!r} was not found")
    if obs.cluster_queue is None:
        cq_name = (obs.local_queue.get("spec") or {}).get("clusterQueue")
        return fail("QueueNotFound", f"ClusterQueue {cq_name!r} of workspace {spec.workspace!r} was not found")
    cq = obs.cluster_queue
    target = _pick_target(cq, spec.resource, spec.flavor)
    if isinstance(target, str):
        return fail("FlavorNotFound", target)
    flavor, resource = target
    before = _nominal(cq, flavor, resource)
    want, have = quantity(spec.requested), quantity(before)
    if want is None or want <= 0:
        return fail("InvalidQuantity", f"spec.requested {spec.requested!r} is not a positive quantity")
    cq_name = R.name_of(cq)
    if have is not None and have >= want:
        status["quotaChange"] = {"clusterQueue": cq_name, "flavor": flavor, "resource": resource,
                                 "before": before, "after": before}
        return condition("QuotaApplied", True, "AlreadySatisfied",
                         f"ClusterQueue {cq_name!r} {flavor}/{resource} nominalQuota is already "
                         f"{before} >= {spec.requested}",
                         now, generation)
    if not allowed:
        return fail("Forbidden", f"the API refused the operator's patch of ClusterQueue {cq_name!r} (RBAC); enable the "
                                 f"chart's operator.quotaRaise, or a platform admin raises {flavor}/{resource} to "
                                 f"{spec.requested} by hand")
    body: dict[str, Any] = {"spec": {"resourceGroups": _with_nominal(cq, flavor, resource, spec.requested)}}
    rv = R.metadata_of(cq).get("resourceVersion")
    if rv:
        body["metadata"] = {"resourceVersion": rv}  # optimistic concurrency: a concurrent edit makes this 409
    actions.append(Action("patch", R.CLUSTER_QUEUES, cq_name, body=body,
                          reason=f"approved TauQuotaRequest raises {flavor}/{resource} to {spec.requested}"))
    status["quotaChange"] = {"clusterQueue": cq_name, "flavor": flavor, "resource": resource,
                             "before": before, "after": spec.requested}
    return condition("QuotaApplied", True, "Applied",
                     f"ClusterQueue {cq_name!r} {flavor}/{resource}: nominalQuota {before} -> {spec.requested}",
                     now, generation)


def observe_quota_request(kube: Any, namespace: str, name: str) -> QuotaObservation | None:
    """Read one request and the workspace, TauCluster and queues it refers to."""
    req = kube.get(R.TAU_QUOTA_REQUESTS, name, namespace)
    if req is None:
        return None
    ws_name = (req.get("spec") or {}).get("workspace")
    ws = kube.get(R.TAU_WORKSPACES, ws_name, namespace) if isinstance(ws_name, str) and ws_name else None
    cluster = kube.get(R.TAU_CLUSTERS, R.CLUSTER_NAME)
    lq = cq = None
    if ws is not None:
        try:
            model = TauWorkspace.model_validate(ws)
            lq = kube.get(R.LOCAL_QUEUES, model.local_queue(WorkspaceDefaults.default_queue_of(cluster)),
                          model.target_namespace)
        except ValidationError:
            lq = None
        cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        cq = kube.get(R.CLUSTER_QUEUES, cq_name) if cq_name else None
    return QuotaObservation(request=req, workspace=ws, cluster=cluster, local_queue=lq, cluster_queue=cq)


def reconcile_quota_request(kube: Any, settings: Settings, namespace: str, name: str,
                            *, now: str | None = None) -> QuotaPlan | None:
    """Read, plan and apply one request; returns the plan (None when it does not exist)."""
    obs = observe_quota_request(kube, namespace, name)
    if obs is None:
        return None
    now = now or now_rfc3339()
    return execute_plan(kube, plan_quota_request(obs, settings, now), R.CLUSTER_QUEUES,
                        lambda: plan_quota_request(obs, settings, now, may_patch_cluster_queues=False))

