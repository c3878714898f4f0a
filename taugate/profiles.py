"""Profile set resolution: pure functions shared by the TauCluster controller and admission.

``profile_set_hash`` is the SHA-256 of the canonical JSON (sorted keys, no spaces) of the
normalised profiles (defaults filled, sorted by name), so the controller that writes
``status.workloadProfiles.profileSetHash`` and the webhook that checks it agree byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from taugate import labels
from taugate.models import Condition, ResolvedLocalQueue, ResolvedProfile, WorkloadProfile


def normalise(profiles: list[WorkloadProfile]) -> list[dict[str, Any]]:
    """Profiles as wire dicts with defaults filled, sorted by name."""
    return sorted((p.model_dump(by_alias=True, exclude_none=True, mode="json") for p in profiles),
                  key=lambda d: d["name"])


def profile_set_hash(profiles: list[WorkloadProfile]) -> str:
    """SHA-256 hex of the canonical JSON of the normalised profiles."""
    canonical = json.dumps(normalise(profiles), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _condition(type_: str, problems: list[str], ok_reason: str, bad_reason: str, ok_message: str,
               now: str) -> Condition:
    return Condition(type=type_, status="False" if problems else "True", reason=bad_reason if problems else ok_reason,
                     message="; ".join(problems) or ok_message, last_transition_time=now)


def _gpu_flavors(cq: dict[str, Any]) -> list[dict[str, Any]]:
    """The flavors of a ClusterQueue's resource groups that cover ``nvidia.com/gpu``."""
    out: list[dict[str, Any]] = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        if labels.GPU_RESOURCE in (group.get("coveredResources") or []):
            out.extend(group.get("flavors") or [])
    return out


def placement_selector(profile: WorkloadProfile, gpu_class_label: str = labels.GPU_CLASS) -> dict[str, str]:
    """The node selector admission puts on the profile's GPU pod templates: the profile's
    ``nodeSelector`` plus its GPU class label (``webhook.mutation`` places it)."""
    wanted = dict(profile.node_selector)
    if profile.gpu_class:
        wanted[gpu_class_label] = profile.gpu_class
    return wanted


def _flavors_match(profile: WorkloadProfile, cq: str, gpu_flavors: list[dict[str, Any]],
                   flavors: dict[str, dict[str, Any]], gpu_class_label: str) -> list[str]:
    """Kueue's flavor assignment for the profile's GPU pods: a ResourceFlavor fits a pod set when
    the pod's node selector matches the flavor's ``nodeLabels`` on the keys that any flavor of
    the resource group labels (kueue v0.17 ``pkg/scheduler/flavorassigner/flavorassigner.go``
    ``flavorSelector`` and ``checkFlavorForPodSets``: "flavor %s doesn't match node affinity").
    When no ``nvidia.com/gpu`` flavor of ClusterQueue ``cq`` fits the profile's placement
    (``placement_selector``), Kueue never finds a flavor and every workload of the profile stays
    Pending forever: that is a problem (one line naming each flavor and the contradiction)."""
    wanted = placement_selector(profile, gpu_class_label)
    known: list[str] = [fl["name"] for fl in gpu_flavors if fl.get("name") in flavors]
    if not wanted or not known:
        return []
    node_labels = {n: ((flavors[n].get("spec") or {}).get("nodeLabels") or {}) for n in known}
    keys = {k for nl in node_labels.values() for k in nl}
    why: dict[str, str] = {}
    for n in known:
        clash = [f"nodeLabels[{k}]: {n}={node_labels[n].get(k, '<unset>')}, the profile places on {v}"
                 for k, v in sorted(wanted.items()) if k in keys and node_labels[n].get(k) != v]
        if not clash:
            return []
        why[n] = "; ".join(clash)
    shown = "; ".join(f"flavor {n} doesn't match node affinity ({w})" for n, w in sorted(why.items()))
    return [f"no nvidia.com/gpu ResourceFlavor of ClusterQueue {cq!r} matches the profile's node selector, so Kueue "
            f"never finds a flavor and its workloads stay Pending: {shown}"]


def resolve_profile(profile: WorkloadProfile, *, local_queues: dict[tuple[str, str], dict[str, Any]],
                    cluster_queues: dict[str, dict[str, Any]], flavors: dict[str, dict[str, Any]],
                    gpu_classes: set[str], now: str, gpu_class_label: str = labels.GPU_CLASS,
                    workload_priority_classes: set[str] | None = None) -> ResolvedProfile:
    """Resolve one profile against observed Kueue objects and GPU classes (pure).

    Ready is True when some LocalQueue named ``defaultLocalQueue`` exists, its ClusterQueue
    exists, every ResourceFlavor that ClusterQueue names exists, the queue agrees with the profile
    (a profile with ``gpusPerWorker > 0`` needs a ClusterQueue resource group covering
    ``nvidia.com/gpu``, and one of its GPU flavors must match the profile's node selector and GPU
    class as Kueue matches them, ``_flavors_match``), and (for
    a profile with ``gpuClass``) at least one node carries that class, and the Kueue
    WorkloadPriorityClass named by ``priorities.workloadPriorityClassName`` exists. The last rule is
    Kueue's: the job reconciler builds a Workload only after it reads that class
    (kueue v0.17 ``pkg/controller/jobframework/reconciler.go`` ``ExtractPriority`` ->
    ``pkg/util/priority/priority.go`` ``GetPriorityFromWorkloadPriorityClass``, a plain ``Get``),
    so a job naming a missing class stays suspended with no Workload until the class exists.
    ``workload_priority_classes``: the names of the WorkloadPriorityClasses in the cluster, or
    None when they are not known (the rule is then not checked). ``local_queues`` is keyed
    by (namespace, name); ``now`` is an RFC 3339 timestamp for ``lastTransitionTime``.

    Conditions: ``Ready`` first (the summary, every problem in its message), then
    ``QueueResolved`` (LocalQueue and ClusterQueue found), ``FlavorsResolved`` (flavors found and
    agree), ``GpuClassAvailable`` and ``PriorityClassFound``.
    """
    queue_problems: list[str] = []
    flavor_problems: list[str] = []
    class_problems: list[str] = []
    lqs = [ResolvedLocalQueue(name=n, namespace=ns, cluster_queue=str((lq.get("spec") or {}).get("clusterQueue", "")))
           for (ns, n), lq in sorted(local_queues.items()) if n == profile.default_local_queue]
    if not lqs:
        queue_problems.append(f"LocalQueue {profile.default_local_queue!r} not found in any namespace")
    cqs = sorted({lq.cluster_queue for lq in lqs if lq.cluster_queue})
    rfs: set[str] = set()
    for cq in cqs:
        if cq not in cluster_queues:
            queue_problems.append(f"ClusterQueue {cq!r} (behind LocalQueue {profile.default_local_queue!r}) not found")
            continue
        for group in (cluster_queues[cq].get("spec") or {}).get("resourceGroups") or []:
            for fl in group.get("flavors") or []:
                rfs.add(fl.get("name"))
        gpu_flavors = _gpu_flavors(cluster_queues[cq])
        if profile.gpus_per_worker > 0 and not gpu_flavors:
            flavor_problems.append(f"ClusterQueue {cq!r} has no resource group covering {labels.GPU_RESOURCE!r}, "
                                   f"but the profile asks for {profile.gpus_per_worker} GPU(s) per worker")
        if profile.gpus_per_worker > 0 and gpu_flavors:
            flavor_problems += _flavors_match(profile, cq, gpu_flavors, flavors, gpu_class_label)
    for rf in sorted(rfs):
        if rf not in flavors:
            flavor_problems.append(f"ResourceFlavor {rf!r} not found")
    if profile.gpu_class and profile.gpu_class not in gpu_classes:
        class_problems.append(f"no node has GPU class {profile.gpu_class!r}")
    priority_problems: list[str] = []
    wpc = profile.priorities.workload_priority_class_name
    if wpc and workload_priority_classes is not None and wpc not in workload_priority_classes:
        priority_problems.append(
            f"WorkloadPriorityClass {wpc!r} (priorities.workloadPriorityClassName) not found: Kueue creates no "
            f"Workload for a job that names it, so the job would stay suspended; create it "
            f"(kubectl get workloadpriorityclasses.kueue.x-k8s.io)")
    problems = queue_problems + flavor_problems + class_problems + priority_problems
    conditions = [
        _condition("Ready", problems, "Resolved", "Unresolved",
                   "queue, flavors, GPU class and priority class found", now),
        _condition("QueueResolved", queue_problems, "QueueFound", "QueueNotFound",
                   f"LocalQueue {profile.default_local_queue!r} and its ClusterQueue found", now),
        _condition("FlavorsResolved", flavor_problems, "FlavorsAgree", "FlavorsDisagree",
                   "every ResourceFlavor exists and agrees with the profile", now),
        _condition("GpuClassAvailable", class_problems, "GpuClassFound", "GpuClassMissing",
                   f"nodes with GPU class {profile.gpu_class!r} found" if profile.gpu_class
                   else "no GPU class required", now),
        _condition("PriorityClassFound", priority_problems, "PriorityClassFound", "PriorityClassMissing",
                   _priority_class_found(wpc, workload_priority_classes), now),
    ]
    return ResolvedProfile(**profile.model_dump(), conditions=conditions, cluster_queues=cqs,
                           resource_flavors=sorted(rfs), local_queues=lqs)


def _priority_class_found(wpc: str | None, known: set[str] | None) -> str:
    """The message of a True ``PriorityClassFound`` condition."""
    if not wpc:
        return "no WorkloadPriorityClass required"
    return f"WorkloadPriorityClass {wpc!r} found" if known is not None else "WorkloadPriorityClasses not observed"


def is_applicable(profile: WorkloadProfile, *, namespace: str, team: str | None, lane: str) -> bool:
    """TauGrid applicability: each non-empty list of ``applicability`` (namespaces, teams,
    lanes) must contain the workspace's namespace, its team and the object's lane; an empty
    list matches everything."""
    app = profile.applicability
    return ((not app.namespaces or namespace in app.namespaces)
            and (not app.teams or team in app.teams)
            and (not app.lanes or lane in app.lanes))
