"""What the recorder holds between reconciles: one entry per run, the kopf index ids, and the
snapshot of a run's objects taken from the indices for the worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taugate.controllers import run_membership as members
from taugate.controllers.recorder_objects import (
    name_of,
    namespace_of,
    uid_of,
)
from taugate.controllers.run_values import ArtifactListing, ProgressState

log = logging.getLogger("taugate.recorder")


@dataclass
class RunEntry:
    """What the recorder holds about one run between reconciles (the objects themselves are in
    kopf's indices, read when the run is reconciled)."""

    run_id: str
    namespace: str
    owner_uid: str | None = None  # the root object the run is bound to (run_membership)
    member_uids: set[str] = field(default_factory=set)  # the root and its children, as ever seen
    # failure key -> (failure record, the uid of its pod's controller)
    pending_failures: dict[str, tuple[dict, str | None]] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)  # uids of intruders already logged
    progress: ProgressState | None = None
    progress_loaded: bool = False
    artifacts: ArtifactListing | None = None
    terminal_since: datetime | None = None
    last_log_read: datetime | None = None
    final: bool = False
    last_status: dict | None = None


@dataclass(frozen=True)
class Snapshot:
    """A copy of one run's observed objects, taken on the event loop for the worker thread."""

    owner: dict | None
    pods: list[dict]
    workloads: list[dict]
    pending_failures: dict[str, dict]  # the run's own (pod controller among its members)
    nodes: dict[str, dict]
    workload_names: list[str]


# kopf index ids (also the names under which kopf passes them to handlers)
IX_RAYJOBS = "recorder_rayjobs"      # run-id -> RayJob
IX_JOBS = "recorder_jobs"            # run-id -> Job (not KubeRay's submitter Job)
IX_WORKLOADS = "recorder_workloads"  # owner uid -> Kueue Workload
IX_PODS = "recorder_pods"            # run-id -> Pod
IX_CLUSTERS = "recorder_rayclusters"  # run-id -> RayCluster (KubeRay's, for a RayJob)
IX_CHILD_JOBS = "recorder_child_jobs"  # run-id -> Job owned by a controller (KubeRay's submitter)
IX_NODES = "recorder_nodes"          # node name -> Node (name, labels, conditions)
INDEX_IDS = (IX_RAYJOBS, IX_JOBS, IX_WORKLOADS, IX_PODS, IX_NODES, IX_CLUSTERS, IX_CHILD_JOBS)


def take_snapshot(ix: dict[str, Any], e: RunEntry) -> Snapshot:
    """The run's objects from kopf's indices ``ix`` (index id -> kopf index; call on the event
    loop): its root object (binding ``e`` to its first root), member children, pods, Workloads,
    the Nodes its pods are on and its pending failure records. Objects carrying the run-id
    without belonging to the run are logged once and left out."""
    roots = [o for k in (IX_RAYJOBS, IX_JOBS) if k in ix for o in ix[k].get(e.run_id, ())]
    owner, intruders = members.choose_owner(roots, e.owner_uid)
    if owner is not None and e.owner_uid is None:
        e.owner_uid = uid_of(owner)  # the run is bound to its first root (the worker checks the evidence)
    uid = e.owner_uid
    children = [o for k in (IX_CLUSTERS, IX_CHILD_JOBS) if k in ix for o in ix[k].get(e.run_id, ())]
    e.member_uids |= members.members(uid, children)
    labelled = ix[IX_PODS].get(e.run_id, ()) if IX_PODS in ix else ()
    pods, strays = members.run_pods(labelled, frozenset(e.member_uids))
    for other in [*intruders, *strays]:
        other_uid = uid_of(other) or ""
        if other_uid not in e.ignored:
            e.ignored.add(other_uid)
            log.warning("run %s: %s %s/%s (uid %s) carries the run-id but is not the run's (bound to uid %s); "
                        "it is not recorded", e.run_id, other.get("kind") or "Pod", namespace_of(other),
                        name_of(other), other_uid, uid)
    workloads = list(ix[IX_WORKLOADS].get(uid, ())) if IX_WORKLOADS in ix and uid else []
    nodes: dict[str, dict] = {}
    if IX_NODES in ix:
        for n in {name for p in pods if (name := (p.get("spec") or {}).get("nodeName"))}:
            found = list(ix[IX_NODES].get(n, ()))
            if found:
                nodes[n] = found[0]
    failures = {k: f for k, (f, ctl) in e.pending_failures.items() if ctl in e.member_uids}
    return Snapshot(owner=owner, pods=pods, workloads=workloads, pending_failures=failures,
                    nodes=nodes, workload_names=sorted(name_of(w) for w in workloads))
