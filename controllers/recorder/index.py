"""What the recorder holds between reconciles: one entry per run, the kopf index ids, and the
snapshot of a run's objects taken from the indices for the worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taugate.controllers.recorder.objects import (
    CHILD_RESOURCES,
    name_of,
    namespace_of,
    uid_of,
)
from taugate.controllers.recorder.run import membership as members
from taugate.controllers.recorder.run.logtails import LogTarget
from taugate.controllers.recorder.run.values import ArtifactListing, ProgressState
from taugate.kinds import KINDS, WorkloadKind, pod

log = logging.getLogger("taugate.recorder")


@dataclass
class RunEntry:
    """What the recorder holds about one run between reconciles (the objects themselves are in
    kopf's indices, read when the run is reconciled)."""

    run_id: str
    namespace: str
    owner_uid: str | None = None  # the root object the run is bound to (recorder.run.membership)
    member_uids: set[str] = field(default_factory=set)  # the root and its children, as ever seen
    # failure key -> (failure record, the uid of its pod's controller)
    pending_failures: dict[str, tuple[dict, str | None]] = field(default_factory=dict)
    # log key -> (ended container instance whose tail is to be kept, the uid of its pod's controller)
    pending_logs: dict[str, tuple[LogTarget, str | None]] = field(default_factory=dict)
    log_attempts: dict[str, int] = field(default_factory=dict)  # log key -> failed reads so far
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
    pending_logs: tuple[LogTarget, ...] = ()  # the run's own ended container instances


# kopf index ids (also the names under which kopf passes them to handlers)
IX_WORKLOADS = "recorder_workloads"  # owner uid -> Kueue Workload
IX_PODS = "recorder_pods"            # (namespace, run-id) -> Pod
IX_NODES = "recorder_nodes"          # node name -> Node (name, labels, conditions)


def root_index(kind: WorkloadKind) -> str:
    """The index of ``kind``'s roots: (namespace, run-id) -> object of that kind no governed
    controller owns."""
    return f"recorder_roots_{kind.resource}"


def child_index(resource: str) -> str:
    """The index of a resource's members: (namespace, run-id) -> object whose controller is governed."""
    return f"recorder_children_{resource}"


ROOT_INDEXES: tuple[str, ...] = tuple(root_index(k) for k in KINDS)
CHILD_INDEXES: tuple[str, ...] = (*(child_index(k.resource) for k in KINDS if k is not pod.KIND),
                                  *(child_index(r) for _, _, r in CHILD_RESOURCES))
"""A Pod's children index is ``IX_PODS`` (every pod with the run-id, whatever its controller)."""
INDEX_IDS = (IX_WORKLOADS, IX_PODS, IX_NODES, *ROOT_INDEXES, *CHILD_INDEXES)


def take_snapshot(ix: dict[str, Any], e: RunEntry) -> Snapshot:
    """The run's objects from kopf's indices ``ix`` (index id -> kopf index; call on the event
    loop): its root object (binding ``e`` to its first root), member children, pods, Workloads,
    the Nodes its pods are on and its pending failure records. Objects carrying the run-id
    without belonging to the run are logged once and left out."""
    key = (e.namespace, e.run_id)  # the indices are keyed by run (recorder.objects.run_key)
    roots = [o for k in ROOT_INDEXES if k in ix for o in ix[k].get(key, ())]
    owner, intruders = members.choose_owner(roots, e.owner_uid)
    if owner is not None and e.owner_uid is None:
        e.owner_uid = uid_of(owner)  # the run is bound to its first root (the worker checks the evidence)
    uid = e.owner_uid
    labelled = ix[IX_PODS].get(key, ()) if IX_PODS in ix else ()
    children = [o for k in CHILD_INDEXES if k in ix for o in ix[k].get(key, ())]
    e.member_uids |= members.members(uid, [*children, *labelled])  # an LWS's chain runs through its leader pods
    pods, strays = members.run_pods(labelled, frozenset(e.member_uids))
    for other in [*intruders, *strays]:
        other_uid = uid_of(other) or ""
        if other_uid not in e.ignored:
            e.ignored.add(other_uid)
            log.warning("run %s: %s %s/%s (uid %s) carries the run-id but is not the run's (bound to uid %s); "
                        "it is not recorded", e.run_id, other.get("kind") or "Pod", namespace_of(other),
                        name_of(other), other_uid, uid)
    workloads = _workloads(ix, uid, e.member_uids)
    nodes: dict[str, dict] = {}
    if IX_NODES in ix:
        for n in {name for p in pods if (name := (p.get("spec") or {}).get("nodeName"))}:
            found = list(ix[IX_NODES].get(n, ()))
            if found:
                nodes[n] = found[0]
    failures = {k: f for k, (f, ctl) in e.pending_failures.items() if ctl in e.member_uids}
    tails = tuple(t for t, ctl in e.pending_logs.values() if ctl in e.member_uids)
    return Snapshot(owner=owner, pods=pods, workloads=workloads, pending_failures=failures,
                    nodes=nodes, workload_names=sorted(name_of(w) for w in workloads), pending_logs=tails)


def _workloads(ix: dict[str, Any], root_uid: str | None, member_uids: set[str]) -> list[dict]:
    """The run's Kueue Workloads: the root's (a RayJob, Job, JobSet, PyTorchJob, a suspended
    RayService's RayCluster...), else its members' (Kueue's pod integration makes the Workload
    of a Deployment's, StatefulSet's or LeaderWorkerSet's pods, owned by the pods; a RayService's
    is its RayCluster's), each Workload once."""
    if IX_WORKLOADS not in ix or not root_uid:
        return []
    own = list(ix[IX_WORKLOADS].get(root_uid, ()))
    if own:
        return own
    found: dict[str, dict] = {}
    for uid in sorted(member_uids - {root_uid}):
        for w in ix[IX_WORKLOADS].get(uid, ()):
            found.setdefault(uid_of(w) or name_of(w), w)
    return list(found.values())
