"""The ``Admitted`` condition from Kueue ``Workload`` objects, and how many pods a run expects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from taugate import labels
from taugate.access import as_dict, as_list, metadata_of
from taugate.controllers.recorder.run.values import ADMITTED, Finding, source_of
from taugate.kinds import KIND_NAMES, kind_for, kind_of
from taugate.outcome import conditions_of, is_true


def workload_owner_uid(workload: Mapping) -> str | None:
    """The UID of the job a Kueue Workload belongs to: the ``kueue.x-k8s.io/job-uid`` label,
    else the controller owner reference's uid (Kueue sets both; its name hash is never rebuilt)."""
    lbl = as_dict(metadata_of(workload).get("labels")).get(labels.KUEUE_JOB_UID)
    if isinstance(lbl, str) and lbl:
        return lbl
    refs = [r for r in as_list(metadata_of(workload).get("ownerReferences")) if isinstance(r, dict)]
    for r in refs:
        if r.get("controller") and r.get("uid"):
            return str(r["uid"])
    for r in refs:
        if r.get("kind") in KIND_NAMES and r.get("uid"):
            return str(r["uid"])
    return None


def current_workload(workloads: Sequence[Mapping]) -> Mapping | None:
    """The live Workload of a run (several only briefly, e.g. after a re-create): prefer one
    not finished, then the newest by creationTimestamp."""
    live = [w for w in workloads if not metadata_of(w).get("deletionTimestamp")] or list(workloads)
    if not live:
        return None
    return sorted(live, key=lambda w: (not is_true(conditions_of(w).get("Finished")),
                                       str(metadata_of(w).get("creationTimestamp") or "")))[-1]


def _current_workloads(workloads: Sequence[Mapping]) -> list[Mapping]:
    """The live Workload of each owner among ``workloads`` (``workload_owner_uid``): one for a
    RayJob, Job, JobSet or PyTorchJob; one per pod or pod group for a kind Kueue's pod
    integration queues (kueue v0.17 ``pkg/controller/jobs/pod``: a Deployment's pods each, a
    StatefulSet's or an LWS group's pods together), in owner-uid order."""
    by_owner: dict[str, list[Mapping]] = {}
    for w in workloads:
        by_owner.setdefault(workload_owner_uid(w) or "", []).append(w)
    return [c for k in sorted(by_owner) if (c := current_workload(by_owner[k])) is not None]


def _least_admitted(workloads: Sequence[Mapping]) -> Mapping | None:
    """The Workload that says whether the run is admitted: the current one, or with several
    owners (pod groups) the first not admitted yet (the run is admitted only when all are)."""
    currents = _current_workloads(workloads)
    if len(currents) <= 1:
        return current_workload(workloads)
    return next((w for w in currents if not is_true(conditions_of(w).get("Admitted"))), currents[0])


def _workload_pods(wl: Mapping) -> int | None:
    psa = as_list(as_dict(as_dict(wl.get("status")).get("admission")).get("podSetAssignments"))
    for pod_sets in (psa, as_list(as_dict(wl.get("spec")).get("podSets"))):
        counts = [p.get("count") for p in pod_sets if isinstance(p, dict)]
        whole = [c for c in counts if isinstance(c, int)]
        if counts and len(whole) == len(counts):
            return sum(whole)
    return None


def expected_pod_count(owner: Mapping | None, workloads: Sequence[Mapping]) -> int | None:
    """Pods the run needs at once: the admitted Workload's ``status.admission.podSetAssignments
    [].count`` (partial admission may lower them), else ``spec.podSets[].count`` (Kueue), summed
    over the current Workload of each owner (``_current_workloads``: a Deployment's pods have one
    each), else the owner's pod templates (head + workers x numOfHosts + submitter; Job
    parallelism). None when unknown."""
    counts = [_workload_pods(w) for w in _current_workloads(workloads)]
    if counts and all(c is not None for c in counts):
        return sum(c for c in counts if c is not None)
    if owner is not None:
        kind = kind_for(owner.get("apiVersion"), owner.get("kind"))
        if kind is not None:
            try:
                return sum(t.replicas for t in kind.pod_templates(dict(owner))) or None
            except (TypeError, ValueError, AttributeError):
                return None
    return None


def suspended(owner: Mapping) -> bool:
    """True when Kueue holds ``owner``: ``suspend`` is true at its kind's ``suspend_path``
    (``spec.suspend``; a PyTorchJob's ``spec.runPolicy.suspend``, a RayService's
    ``spec.rayClusterConfig.suspend``); a kind without one (``suspend_path`` None: a Pod,
    Deployment, StatefulSet, LeaderWorkerSet) is held by Kueue's pod scheduling gates instead,
    so it is never suspended, and its Kueue Workload's ``Admitted`` condition says whether it was
    admitted. A kind taugate does not register reads ``spec.suspend``."""
    kind = kind_of(dict(owner))
    path = kind.suspend_path if kind is not None else ("spec", "suspend")
    if path is None:
        return False
    value: object = owner
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return bool(value)


def derive_admitted(owner: Mapping | None, workloads: Sequence[Mapping]) -> Finding | None:
    """``Admitted`` from the Kueue Workload (with a Workload per pod or pod group, as Kueue's pod
    integration makes for a Deployment, StatefulSet or LeaderWorkerSet: admitted only when every
    owner's current Workload is, else what the first one not admitted says).

    Kueue rule: a Workload is admitted when ``QuotaReserved`` and ``Admitted`` are True
    (admission checks pass); ``Evicted`` True (reason ``Preempted``, ``PodsReadyTimeout``,
    ``InactiveWorkload``...) takes it back; while pending, ``QuotaReserved`` is False with reason
    ``Pending`` and a message naming the missing quota. Returns None when there is no Workload
    and no owner (nothing to say: the previous condition stands).
    """
    wl = _least_admitted(workloads)
    if wl is None:
        if owner is None:
            return None
        q = as_dict(metadata_of(owner).get("labels")).get(labels.KUEUE_QUEUE_NAME)
        if not q and not suspended(owner):
            return Finding(ADMITTED, "True", "NotQueued",
                           f"{owner.get('kind')} has no {labels.KUEUE_QUEUE_NAME} label and is not suspended: "
                           "it runs without Kueue admission", source_of(owner))
        return Finding(ADMITTED, "Unknown", "WorkloadNotFound",
                       f"no Kueue Workload with label {labels.KUEUE_JOB_UID}={metadata_of(owner).get('uid')} yet"
                       + (f" (LocalQueue {q})" if q else ""), source_of(owner))
    conds = conditions_of(wl)
    src = source_of(wl, "Workload")
    qr, adm, ev, pre = conds.get("QuotaReserved"), conds.get("Admitted"), conds.get("Evicted"), conds.get("Preempted")
    cq = as_dict(as_dict(wl.get("status")).get("admission")).get("clusterQueue")
    if is_true(ev) and not is_true(adm):
        reason = str(ev.get("reason") or "Evicted")
        msg = f"evicted: {ev.get('message') or reason}"
        if is_true(pre):
            msg += f"; preempted ({pre.get('reason')}): {pre.get('message') or ''}".rstrip(": ")
        return Finding(ADMITTED, "False", reason, msg, src, ev.get("lastTransitionTime"))
    if is_true(adm):
        assignments = as_list(as_dict(as_dict(wl.get("status")).get("admission")).get("podSetAssignments"))
        flavors = sorted({f for p in assignments
                          for f in as_dict(as_dict(p).get("flavors")).values() if isinstance(f, str)})
        msg = f"admitted by ClusterQueue {cq or '?'}" + (f" (ResourceFlavors {', '.join(flavors)})" if flavors else "")
        return Finding(ADMITTED, "True", "Admitted", msg, src, adm.get("lastTransitionTime"))
    if is_true(qr):
        checks = [c for c in as_list(as_dict(wl.get("status")).get("admissionChecks")) if isinstance(c, dict)]
        waiting = [f"{c.get('name')}={c.get('state')}" for c in checks if c.get("state") != "Ready"]
        msg = f"quota reserved in ClusterQueue {cq or '?'}"
        if waiting:
            msg += f"; waiting for admission checks {', '.join(waiting)}"
        return Finding(ADMITTED, "False", "AdmissionChecksPending" if waiting else "QuotaReserved", msg, src,
                       qr.get("lastTransitionTime"))
    if is_true(conds.get("Finished")):
        return None  # finished before we ever saw it admitted: keep what we have
    if qr is not None:
        reason = str(qr.get("reason") or "Pending")
        msg = str(qr.get("message") or "waiting for quota")
        if pre is not None and pre.get("status") == "True":
            msg += f"; preempted earlier ({pre.get('reason')}): {pre.get('message') or ''}"
        requeue = as_dict(as_dict(wl.get("status")).get("requeueState"))
        if requeue.get("requeueAt"):
            msg += f"; requeued at {requeue['requeueAt']} (count {requeue.get('count', 0)})"
        return Finding(ADMITTED, "False", reason, msg, src, qr.get("lastTransitionTime"))
    if as_dict(wl.get("spec")).get("active") is False:
        return Finding(ADMITTED, "False", "Inactive", "Workload spec.active is false", src)
    return Finding(ADMITTED, "False", "Pending", "Workload created, not yet considered by Kueue", src)
