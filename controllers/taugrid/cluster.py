"""TauCluster controller: the singleton ``cluster``'s profiles resolved into status with
``profileSetHash`` (the hash admission checks, so a stale status fails closed there), its GPU
inventory, and its node label rules (TauGrid's ``match.vmSizes`` on ``node.kubernetes.io/instance-type``,
taugate's ``gpuProducts`` on GPU Feature Discovery's ``nvidia.com/gpu.product``): patched onto the
nodes in ``managementMode: Reconcile``, only counted as drift in ``Observe``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from taugate.controllers import resources as R
from taugate.controllers.admission_policy import keep_parameters
from taugate.controllers.conditions import carry_transition_times, condition, now_rfc3339, owned_patch
from taugate.controllers.resources import Action
from taugate.controllers.taugrid.execute import execute_plan
from taugate.models import NodeLabelRule, TauCluster
from taugate.profiles import profile_set_hash, resolve_profile
from taugate.settings import Settings
from taugate.snapshot import rule_matches, summarise_gpu_classes
from taugate.structure import first_problem


@dataclass(frozen=True)
class ClusterObservation:
    """What the controller read: the TauCluster and every Node, LocalQueue, ClusterQueue,
    ResourceFlavor and WorkloadPriorityClass (plain API dicts; ``priority_classes`` None when
    they were not read, and then profiles are not checked against them)."""

    cluster: dict
    nodes: list[dict] = field(default_factory=list)
    local_queues: list[dict] = field(default_factory=list)
    cluster_queues: list[dict] = field(default_factory=list)
    flavors: list[dict] = field(default_factory=list)
    priority_classes: list[dict] | None = None


@dataclass(frozen=True)
class ClusterPlan:
    """The desired ``status`` and the writes (node label patches, then the status patch; empty
    when nothing differs); ``cluster`` the TauCluster as validated (None when its spec is invalid)."""

    status: dict
    actions: list[Action]
    cluster: TauCluster | None = None


def desired_node_labels(rules: list[NodeLabelRule], node_labels: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The labels the rules want on one node, and conflicts (two rules, two values for one key:
    the first rule wins)."""
    want: dict[str, str] = {}
    conflicts: list[str] = []
    for i, rule in enumerate(rules):
        if not rule_matches(rule, node_labels):
            continue
        for k, v in rule.labels.items():
            if k in want and want[k] != v:
                conflicts.append(f"labelRules[{i}] wants {k}={v} but an earlier rule set {want[k]}")
                continue
            want[k] = v
    return want, conflicts


def _selected(node: dict, selector: dict[str, str]) -> bool:
    node_labels = R.labels_of(node)
    return all(node_labels.get(k) == v for k, v in selector.items())


def _invalid_spec_status(obs: ClusterObservation, error: ValidationError, now: str) -> dict:
    message = f"the TauCluster does not match the TauGrid schema: {first_problem(error)}"
    old = (obs.cluster.get("status") or {}).get("conditions")
    conds = carry_transition_times([condition("Ready", False, "InvalidSpec", message, now)], old)
    return {"phase": "Degraded", "conditions": conds}


def plan_cluster(obs: ClusterObservation, settings: Settings, now: str | None = None, *,
                 may_label_nodes: bool = True) -> ClusterPlan:
    """Desired status and writes for the TauCluster (pure; ``now`` is RFC 3339, used only for
    conditions whose status changed). ``may_label_nodes`` False (the API refused a node patch:
    RBAC) reports the missing labels instead of planning node patches."""
    now = now or now_rfc3339()
    name = R.name_of(obs.cluster)
    generation = R.metadata_of(obs.cluster).get("generation")
    old_status = obs.cluster.get("status") or {}
    try:
        cluster = TauCluster.model_validate(obs.cluster)
    except ValidationError as e:
        invalid = _invalid_spec_status(obs, e, now)
        patch = owned_patch(old_status, invalid)
        return ClusterPlan(invalid, [Action("patch", R.TAU_CLUSTERS, name, body={"status": patch},
                                            subresource="status", reason="invalid spec")] if patch else [])

    spec = cluster.spec
    rules = list(spec.nodes.label_rules) if spec.nodes else []
    selector = dict(spec.nodes.selector) if spec.nodes else {}
    reconcile = spec.management_mode == "Reconcile" and may_label_nodes
    forbidden = spec.management_mode == "Reconcile" and not may_label_nodes

    actions: list[Action] = []
    effective_nodes: list[dict] = []
    drifted: list[str] = []
    conflicts: list[str] = []
    selected = 0
    for node in sorted(obs.nodes, key=R.name_of):
        node_name = R.name_of(node)
        if rules and _selected(node, selector):
            selected += 1
            want, clash = desired_node_labels(rules, R.labels_of(node))
            conflicts += [f"node {node_name}: {c}" for c in clash]
            have = R.labels_of(node)
            missing = {k: v for k, v in want.items() if have.get(k) != v}
            if missing:
                if reconcile:
                    actions.append(Action("patch", R.NODES, node_name, body={"metadata": {"labels": missing}},
                                          reason="TauCluster node label rules"))
                    node = {**node, "metadata": {**R.metadata_of(node), "labels": {**have, **missing}}}
                else:
                    drifted.append(node_name)
        elif not rules and _selected(node, selector):
            selected += 1
        effective_nodes.append(node)

    inventory = summarise_gpu_classes(effective_nodes, settings, rules)
    lqs = {(R.namespace_of(lq) or "default", R.name_of(lq)): lq for lq in obs.local_queues}
    cqs = {R.name_of(cq): cq for cq in obs.cluster_queues}
    rfs = {R.name_of(rf): rf for rf in obs.flavors}
    wpcs = None if obs.priority_classes is None else {R.name_of(c) for c in obs.priority_classes}

    old_profiles = {p.get("name"): p for p in ((old_status.get("workloadProfiles") or {}).get("profiles") or [])
                    if isinstance(p, dict)}
    resolved = []
    for p in spec.workload_profiles:
        rp = resolve_profile(p, local_queues=lqs, cluster_queues=cqs, flavors=rfs, gpu_classes=set(inventory),
                             now=now, gpu_class_label=settings.gpu_class_label, workload_priority_classes=wpcs)
        wire = rp.model_dump(by_alias=True, exclude_none=True, mode="json")
        wire["conditions"] = carry_transition_times(wire.get("conditions") or [],
                                                    (old_profiles.get(p.name) or {}).get("conditions"))
        resolved.append(wire)
    resolved.sort(key=lambda d: d["name"])
    ready_names = [r["name"] for r in resolved
                   if any(c["type"] == "Ready" and c["status"] == "True" for c in r["conditions"])]
    unready = [r for r in resolved if r["name"] not in ready_names]

    conds = []
    if unready:
        detail = "; ".join(f"{r['name']}: {next(c['message'] for c in r['conditions'] if c['type'] == 'Ready')}"
                           for r in unready)
        conds.append(condition("ProfilesResolved", False, "ProfilesUnresolved",
                               f"{len(unready)} of {len(resolved)} profile(s) not ready: {detail}", now, generation))
    else:
        conds.append(condition("ProfilesResolved", True, "ProfilesResolved",
                               f"all {len(resolved)} profile(s) resolved", now, generation))
    if conflicts:
        conds.append(condition("NodeLabelsApplied", False, "LabelRuleConflict", "; ".join(conflicts), now, generation))
    elif drifted and forbidden:
        conds.append(condition("NodeLabelsApplied", False, "Forbidden",
                               f"{len(drifted)} node(s) lack the labels of spec.nodes.labelRules "
                               f"({', '.join(drifted[:10])}{', ...' if len(drifted) > 10 else ''}); managementMode is "
                               f"Reconcile but the API refused the operator's node patch: grant it patch on nodes",
                               now, generation))
    elif drifted:
        conds.append(condition("NodeLabelsApplied", False, "ObserveOnly",
                               f"{len(drifted)} node(s) lack the labels of spec.nodes.labelRules "
                               f"({', '.join(drifted[:10])}{', ...' if len(drifted) > 10 else ''}); "
                               f"managementMode is Observe, so taugate does not label them", now, generation))
    else:
        conds.append(condition("NodeLabelsApplied", True, "NodeLabelsApplied",
                               f"{selected} selected node(s) carry the labels of spec.nodes.labelRules"
                               if rules else "no node label rules", now, generation))
    problems = [c for c in conds if c["status"] != "True"]
    phase = "Degraded" if problems else "Ready"
    ready = condition("Ready", not problems, "Ready" if not problems else problems[0]["reason"],
                      "the profile set is resolved" if not problems else problems[0]["message"], now, generation)
    conditions = carry_transition_times([ready, *conds], old_status.get("conditions"))

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "workloadProfiles": {
            "observed": len(resolved), "ready": len(ready_names), "drifted": len(unready),
            "profileSetHash": profile_set_hash(spec.workload_profiles),
            "profiles": resolved,
        },
        "nodes": {"observed": selected, "ready": selected - len(drifted), "drifted": len(drifted)},
        "gpuInventory": [s.as_input() for s in inventory.values()],
    }
    if generation is not None:
        status["observedGeneration"] = generation
        status["workloadProfiles"]["observedGeneration"] = generation
    patch = owned_patch(old_status, status)
    if patch:
        actions.append(Action("patch", R.TAU_CLUSTERS, name, body={"status": patch}, subresource="status",
                              reason="status"))
    return ClusterPlan(status, actions, cluster)


def observe_cluster(kube: Any, name: str = R.CLUSTER_NAME) -> ClusterObservation | None:
    """Read the TauCluster and the objects it resolves against (None when it does not exist)."""
    cluster = kube.get(R.TAU_CLUSTERS, name)
    if cluster is None:
        return None
    return ClusterObservation(cluster=cluster, nodes=kube.list(R.NODES), local_queues=kube.list(R.LOCAL_QUEUES),
                              cluster_queues=kube.list(R.CLUSTER_QUEUES), flavors=kube.list(R.RESOURCE_FLAVORS),
                              priority_classes=kube.list(R.WORKLOAD_PRIORITY_CLASSES))


def reconcile_cluster(kube: Any, settings: Settings, *, name: str = R.CLUSTER_NAME,
                      now: str | None = None) -> ClusterPlan | None:
    """Read the TauCluster, keep the API server policy's parameter made from its profiles
    (``controllers/admission_policy.py``), then plan and apply; returns the plan (None when there
    is no TauCluster). Raises ``taugate.kube.KubeError`` when the API fails (the caller retries)."""
    obs = observe_cluster(kube, name)
    # The API server's policy reads the profiles before the webhook admits by them (from the
    # status); with no TauCluster both refuse. An invalid spec is the status's to report (the
    # webhook refuses by it): the policy keeps the last valid profiles.
    if obs is None:
        keep_parameters(kube, settings, None)
        return None
    now = now or now_rfc3339()
    plan = plan_cluster(obs, settings, now)
    if plan.cluster is not None:
        keep_parameters(kube, settings, plan.cluster)
    return execute_plan(kube, plan, R.NODES, lambda: plan_cluster(obs, settings, now, may_label_nodes=False))
