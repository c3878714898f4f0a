"""Pure derivation of a run's six states (and its two release lines) from plain observed objects.

Everything here is a function over dicts as the API server returns them (Kueue ``Workload``,
KubeRay ``RayJob``, ``batch/v1`` ``Job``, core ``Pod`` and ``Node``) plus what the probes read
from the run's data path; no I/O, no clock (``now`` is an argument). The recorder
(``controllers/recorder.py``) gathers the objects and writes the result.

The six states, in the order a run goes through them (``STATE_ORDER``):

1. ``Admitted``: the Kueue Workload holds a quota reservation and is admitted (Kueue conditions
   ``QuotaReserved`` / ``Admitted`` / ``Evicted`` / ``Preempted``).
2. ``Scheduled``: every pod of the run is bound to a node (``spec.nodeName``; the pod's
   ``PodScheduled`` condition says why not).
3. ``GPUHealthy``: no node the run's pods run on has a Node Problem Detector GPU condition that is
   ``True`` (``Settings.gpu_health_conditions``), and every such node is ``Ready``.
4. ``Progressing``: training metrics advance (metrics JSONL or log lines); ``False`` with reason
   ``Stalled`` after a quiet period.
5. ``Completed`` or ``Failed`` (one slot): KubeRay ``jobDeploymentStatus``/``jobStatus`` or the
   Job's ``Complete``/``Failed`` conditions; the failure reason comes from pod termination
   records (e.g. ``OOMKilled``), captured while the pods still exist.
6. ``ArtifactSaved``: an artifact index or files under the run's output path.

Then the two release lines (``RELEASE_TYPES``): ``QuotaReleased`` (the Workload is ``Finished``
or gone) and ``GPUsReleased`` (no pod of the run is left running on a node).

A derivation returns ``None`` when its evidence is gone (pods deleted after the end, the
Workload garbage-collected): the previous condition then stands, so a finished run keeps its
history after Kubernetes deletes the objects that proved it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from taugate import labels
from taugate.kinds import KIND_NAMES, kind_for

ADMITTED = "Admitted"
SCHEDULED = "Scheduled"
GPU_HEALTHY = "GPUHealthy"
PROGRESSING = "Progressing"
COMPLETED = "Completed"
FAILED = "Failed"
ARTIFACT_SAVED = "ArtifactSaved"
QUOTA_RELEASED = "QuotaReleased"
GPUS_RELEASED = "GPUsReleased"

STATE_ORDER: tuple[str, ...] = (ADMITTED, SCHEDULED, GPU_HEALTHY, PROGRESSING, COMPLETED, ARTIFACT_SAVED)
"""The six states in lifecycle order; the fifth slot is ``Completed`` or, for a failed run, ``Failed``."""
RELEASE_TYPES: tuple[str, ...] = (QUOTA_RELEASED, GPUS_RELEASED)
ALL_TYPES: tuple[str, ...] = STATE_ORDER + RELEASE_TYPES

RUN_ID_RE = re.compile(r"^[0-9a-f]{%d}$" % labels.RUN_ID_LENGTH)

# Reasons a container terminated that are failures even with exit code 0 unknown; "Completed" is
# the kubelet's reason for exit code 0 (Kubernetes ContainerStateTerminated).
_FAILURE_RANK = {"OOMKilled": 0, "Evicted": 1, "ContainerCannotRun": 2, "DeadlineExceeded": 3,
                 "StartError": 4, "Error": 5}


# --------------------------------------------------------------------------------------------
# time helpers


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it (``2024-05-01T10:00:00Z``) -> aware UTC
    datetime; None when absent or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def format_time(dt: datetime) -> str:
    """An aware datetime -> RFC 3339 UTC with second precision (``metav1.Time`` format)."""
    return dt.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(dt: datetime) -> str:
    """An aware datetime -> RFC 3339 UTC with microseconds (``metav1.MicroTime`` format)."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------------------------
# value types


@dataclass(frozen=True)
class Finding:
    """One derived condition before it is merged with the previous ones.

    ``status`` is ``"True"``/``"False"``/``"Unknown"``; ``reason`` is CamelCase; ``source`` the
    object that proves it (``{"kind", "name", "namespace"?, "uid"?, "path"?}``); ``since`` the
    source's own transition time (RFC 3339) when it has one, else the recorder uses "now".
    """

    type: str
    status: str
    reason: str
    message: str
    source: dict | None = None
    since: str | None = None


@dataclass(frozen=True)
class ProgressState:
    """What the recorder knows about a run's training progress.

    - ``source``: where the metrics came from (``{"kind": "File", "path": ...}`` or a Pod log).
    - ``records``: metric records (JSONL lines, or matching log lines) seen so far.
    - ``step``: the largest step seen (``None`` if the records carry none).
    - ``last_advance``: RFC 3339 time the recorder last saw ``records`` or ``step`` grow.
    - ``first_advance``: RFC 3339 time of the first record seen.
    """

    source: dict
    records: int
    step: float | None
    last_advance: str
    first_advance: str

    def wire(self) -> dict:
        """As stored in ``TauRun.status.progress`` (None fields left out)."""
        out = {"source": self.source, "records": self.records, "step": self.step,
               "lastAdvanceTime": self.last_advance, "firstAdvanceTime": self.first_advance}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_wire(cls, data: Any) -> ProgressState | None:
        """Tolerant inverse of :meth:`wire`; None for anything malformed."""
        if not isinstance(data, Mapping):
            return None
        try:
            step = data.get("step")
            return cls(source=dict(data.get("source") or {}), records=int(data.get("records") or 0),
                       step=float(step) if step is not None else None,
                       last_advance=str(data["lastAdvanceTime"]), first_advance=str(data["firstAdvanceTime"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class ProgressSample:
    """One reading of the run's metrics: ``records`` count and largest ``step`` (or None)."""

    source: dict
    records: int
    step: float | None


@dataclass(frozen=True)
class ArtifactListing:
    """What the artifact probe found under the run's output path.

    ``root`` is the output path; ``index`` the parsed artifact index (None when there is none);
    ``files`` a list of ``{"path": relative path, "size": bytes, "sha256": hex}``.
    """

    root: str
    index: dict | None = None
    files: tuple[dict, ...] = ()


@dataclass
class RunView:
    """Everything observed about one run at one moment (plain data).

    - ``owner``: the run's RayJob or Job (None once deleted).
    - ``workloads``: the Kueue Workloads of the owner (by ``kueue.x-k8s.io/job-uid`` label or
      owner reference).
    - ``pods``: live pods carrying the run-id label; ``nodes``: Node objects by name.
    - ``failures``: termination records captured so far (see :func:`pod_terminations`).
    - ``progress``: the progress state; ``artifacts``: the latest artifact listing.
    - ``owner_deleted``: the owner was seen before and is gone now (deleted before it finished:
      the run ends as ``Failed``/``Deleted``).
    """

    run_id: str
    namespace: str
    owner: dict | None = None
    workloads: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    nodes: dict[str, dict] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    progress: ProgressState | None = None
    artifacts: ArtifactListing | None = None
    log_pattern: str | None = None
    metrics_path: str | None = None
    owner_deleted: bool = False


@dataclass(frozen=True)
class DeriveOptions:
    """Tunables of the derivation.

    - ``gpu_health_conditions``: NPD condition types that mark a GPU node unhealthy when True.
    - ``stall_after``: seconds without progress before ``Progressing=False/Stalled``.
    """

    gpu_health_conditions: tuple[str, ...]
    stall_after: float = 600.0


# --------------------------------------------------------------------------------------------
# small readers


def _d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list:
    return value if isinstance(value, list) else []


def _meta(obj: Mapping | None) -> dict:
    return _d((obj or {}).get("metadata"))


def object_ref(obj: Mapping) -> dict:
    """``{"apiVersion", "kind", "name", "namespace", "uid"}`` of an object (missing keys left out)."""
    meta = _meta(obj)
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
           "namespace": meta.get("namespace"), "uid": meta.get("uid")}
    return {k: v for k, v in ref.items() if v}


def source_of(obj: Mapping, kind: str | None = None) -> dict:
    """The ``source`` of a condition: kind, name, namespace of ``obj`` (no apiVersion/uid)."""
    meta = _meta(obj)
    src = {"kind": kind or obj.get("kind"), "name": meta.get("name"), "namespace": meta.get("namespace")}
    return {k: v for k, v in src.items() if v}


def _conditions(obj: Mapping | None) -> dict[str, dict]:
    """``status.conditions`` by type (the last entry of a type wins)."""
    out: dict[str, dict] = {}
    for c in _l(_d((obj or {}).get("status")).get("conditions")):
        if isinstance(c, dict) and isinstance(c.get("type"), str):
            out[c["type"]] = c
    return out


def _is_true(cond: dict | None) -> bool:
    return bool(cond) and cond.get("status") == "True"


def _pod_phase(pod: Mapping) -> str:
    return str(_d(pod.get("status")).get("phase") or "Pending")


def _node_name(pod: Mapping) -> str | None:
    name = _d(pod.get("spec")).get("nodeName")
    return name if isinstance(name, str) and name else None


def _pod_name(pod: Mapping) -> str:
    return str(_meta(pod).get("name") or "?")


def _terminal_pod(pod: Mapping) -> bool:
    return _pod_phase(pod) in ("Succeeded", "Failed")


# --------------------------------------------------------------------------------------------
# owner outcome (RayJob / Job)


@dataclass(frozen=True)
class Outcome:
    """The run's end state as its owner object reports it.

    ``state`` is ``"succeeded"``, ``"failed"``, ``"running"`` or ``"pending"``; ``reason`` and
    ``message`` are the owner's own (KubeRay ``status.reason``/``message``, Job condition);
    ``since`` the owner's end time when known.
    """

    state: str
    reason: str
    message: str
    since: str | None = None

    @property
    def terminal(self) -> bool:
        """True for ``succeeded`` and ``failed``."""
        return self.state in ("succeeded", "failed")


def owner_outcome(owner: Mapping | None) -> Outcome | None:
    """Read the end state of a RayJob (KubeRay ``ray.io/v1``) or Job (``batch/v1``).

    KubeRay rule: a RayJob succeeded when ``jobDeploymentStatus`` is ``Complete`` and
    ``jobStatus`` is ``SUCCEEDED``; it failed when ``jobDeploymentStatus`` is ``Failed`` or
    ``ValidationFailed``, or ``Complete`` with ``jobStatus`` ``FAILED``/``STOPPED``.
    Kubernetes Job rule: condition ``Complete`` (or ``SuccessCriteriaMet``) True is success,
    ``Failed`` (or ``FailureTarget``) True is failure, ``spec.suspend`` means not started.
    Returns None when ``owner`` is None (deleted: the previous state stands).
    """
    if owner is None:
        return None
    kind = owner.get("kind")
    status = _d(owner.get("status"))
    if kind == "RayJob":
        dep = str(status.get("jobDeploymentStatus") or "")
        job = str(status.get("jobStatus") or "")
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
        end = status.get("endTime") if isinstance(status.get("endTime"), str) else None
        detail = f"RayJob jobDeploymentStatus={dep or '(none)'}, jobStatus={job or '(none)'}"
        if dep == "Complete" and job == "SUCCEEDED":
            return Outcome("succeeded", "Succeeded", detail, end)
        if dep in ("Failed", "ValidationFailed") or (dep == "Complete" and job in ("FAILED", "STOPPED")):
            why = reason or (dep if dep != "Complete" else ("JobStopped" if job == "STOPPED" else "AppFailed"))
            return Outcome("failed", why, f"{detail}" + (f": {message}" if message else ""), end)
        if dep in ("Running", "Retrying") or job == "RUNNING":
            return Outcome("running", dep or "Running", detail)
        return Outcome("pending", dep or "NotStarted", detail)
    if kind == "Job":
        conds = _conditions(owner)
        for t in ("Complete", "SuccessCriteriaMet"):
            if _is_true(conds.get(t)):
                c = conds[t]
                return Outcome("succeeded", "Succeeded", f"Job condition {t}: {c.get('message') or c.get('reason') or 'True'}",
                               status.get("completionTime") or c.get("lastTransitionTime"))
        for t in ("Failed", "FailureTarget"):
            if _is_true(conds.get(t)):
                c = conds[t]
                return Outcome("failed", str(c.get("reason") or "JobFailed"),
                               f"Job condition {t}: {c.get('reason') or ''} {c.get('message') or ''}".strip(),
                               c.get("lastTransitionTime"))
        if _d(owner.get("spec")).get("suspend"):
            return Outcome("pending", "Suspended", "Job spec.suspend is true (waiting for Kueue)")
        if int(status.get("active") or 0) > 0:
            return Outcome("running", "Running", f"Job has {status.get('active')} active pod(s)")
        return Outcome("pending", "NotStarted", "Job has no active pod")
    return Outcome("pending", "UnknownKind", f"unsupported owner kind {kind!r}")


# --------------------------------------------------------------------------------------------
# pod terminations (failure evidence)


def pod_terminations(pod: Mapping) -> list[dict]:
    """Failure records of one pod, from its container statuses and pod-level status.

    Kubernetes rule (``ContainerStateTerminated``): a container terminated with ``reason`` such
    as ``OOMKilled`` or ``Error`` and an ``exitCode``; ``Completed`` with exit code 0 is success.
    Both ``state.terminated`` and ``lastState.terminated`` (a restarted container's previous
    run) are read; a pod-level ``status.reason`` (``Evicted``, ``DeadlineExceeded``) on a
    ``Failed`` pod is a record too. Each record: ``{"key", "pod", "podUid", "container", "node",
    "reason", "exitCode", "signal", "message", "startedAt", "finishedAt"}``; ``key`` is stable
    across observations, so a record is stored once.
    """
    meta = _meta(pod)
    status = _d(pod.get("status"))
    name = str(meta.get("name") or "?")
    uid = str(meta.get("uid") or name)
    node = _node_name(pod)
    out: list[dict] = []
    seen: set[str] = set()
    for list_name in ("initContainerStatuses", "containerStatuses"):
        for cs in _l(status.get(list_name)):
            if not isinstance(cs, dict):
                continue
            for which in ("state", "lastState"):
                term = _d(_d(cs.get(which)).get("terminated"))
                if not term:
                    continue
                code = term.get("exitCode")
                reason = str(term.get("reason") or ("Error" if code not in (0, None) else "Completed"))
                if reason == "Completed" and code in (0, None):
                    continue
                finished = term.get("finishedAt") if isinstance(term.get("finishedAt"), str) else None
                key = f"{uid}/{cs.get('name')}/{finished or cs.get('restartCount', 0)}/{which if not finished else ''}"
                if key in seen:
                    continue
                seen.add(key)
                rec = {"key": key, "pod": name, "podUid": uid, "container": cs.get("name"), "node": node,
                       "reason": reason, "exitCode": code, "signal": term.get("signal"),
                       "message": term.get("message"), "startedAt": term.get("startedAt"), "finishedAt": finished}
                out.append({k: v for k, v in rec.items() if v is not None})
    if _pod_phase(pod) == "Failed" and status.get("reason"):
        key = f"{uid}/pod/{status.get('reason')}"
        rec = {"key": key, "pod": name, "podUid": uid, "node": node, "reason": str(status["reason"]),
               "message": status.get("message")}
        out.append({k: v for k, v in rec.items() if v is not None})
    return out


def root_failure(failures: Sequence[Mapping]) -> Mapping | None:
    """The failure record most likely to be the root cause: the earliest to finish, ties broken
    by severity (``OOMKilled`` before ``Evicted`` before a plain ``Error``)."""
    if not failures:
        return None

    def key(f: Mapping) -> tuple:
        t = parse_time(f.get("finishedAt"))
        return (t is None, t or datetime.max.replace(tzinfo=UTC), _FAILURE_RANK.get(str(f.get("reason")), 9))

    return min(failures, key=key)


def describe_failure(f: Mapping) -> str:
    """One line for a failure record: pod, container, node, reason, exit code, time."""
    where = f"pod {f.get('pod')}" + (f" container {f['container']}" if f.get("container") else "")
    where += f" on node {f['node']}" if f.get("node") else ""
    code = f" (exit code {f['exitCode']})" if f.get("exitCode") is not None else ""
    when = f" at {f['finishedAt']}" if f.get("finishedAt") else ""
    msg = f": {f['message']}" if f.get("message") else ""
    return f"{where}: {f.get('reason')}{code}{when}{msg}"


# --------------------------------------------------------------------------------------------
# Kueue workloads


def workload_owner_uid(workload: Mapping) -> str | None:
    """The UID of the job a Kueue Workload belongs to: the ``kueue.x-k8s.io/job-uid`` label,
    else the controller owner reference's uid (Kueue sets both; its name hash is never rebuilt)."""
    lbl = _d(_meta(workload).get("labels")).get(labels.KUEUE_JOB_UID)
    if isinstance(lbl, str) and lbl:
        return lbl
    refs = [r for r in _l(_meta(workload).get("ownerReferences")) if isinstance(r, dict)]
    for r in refs:
        if r.get("controller") and r.get("uid"):
            return str(r["uid"])
    for r in refs:
        if r.get("kind") in KIND_NAMES and r.get("uid"):
            return str(r["uid"])
    return None


def _current_workload(workloads: Sequence[Mapping]) -> Mapping | None:
    """The live Workload of a run (several only briefly, e.g. after a re-create): prefer one
    not finished, then the newest by creationTimestamp."""
    live = [w for w in workloads if not _meta(w).get("deletionTimestamp")] or list(workloads)
    if not live:
        return None
    return sorted(live, key=lambda w: (not _is_true(_conditions(w).get("Finished")),
                                       str(_meta(w).get("creationTimestamp") or "")))[-1]


def expected_pod_count(owner: Mapping | None, workloads: Sequence[Mapping]) -> int | None:
    """Pods the run needs at once: the admitted Workload's ``status.admission.podSetAssignments
    [].count`` (partial admission may lower them), else ``spec.podSets[].count`` (Kueue), else the
    owner's pod templates (head + workers x numOfHosts + submitter; Job parallelism). None when
    unknown."""
    wl = _current_workload(workloads)
    if wl is not None:
        psa = _l(_d(_d(wl.get("status")).get("admission")).get("podSetAssignments"))
        counts = [p.get("count") for p in psa if isinstance(p, dict)]
        if counts and all(isinstance(c, int) for c in counts):
            return sum(counts)
        podsets = _l(_d(wl.get("spec")).get("podSets"))
        counts = [p.get("count") for p in podsets if isinstance(p, dict)]
        if counts and all(isinstance(c, int) for c in counts):
            return sum(counts)
    if owner is not None:
        kind = kind_for(owner.get("apiVersion"), owner.get("kind"))
        if kind is not None:
            try:
                return sum(t.replicas for t in kind.pod_templates(dict(owner))) or None
            except (TypeError, ValueError, AttributeError):
                return None
    return None


def derive_admitted(owner: Mapping | None, workloads: Sequence[Mapping]) -> Finding | None:
    """``Admitted`` from the Kueue Workload.

    Kueue rule: a Workload is admitted when ``QuotaReserved`` and ``Admitted`` are True
    (admission checks pass); ``Evicted`` True (reason ``Preempted``, ``PodsReadyTimeout``,
    ``InactiveWorkload``...) takes it back; while pending, ``QuotaReserved`` is False with reason
    ``Pending`` and a message naming the missing quota. Returns None when there is no Workload
    and no owner (nothing to say: the previous condition stands).
    """
    wl = _current_workload(workloads)
    if wl is None:
        if owner is None:
            return None
        q = _d(_meta(owner).get("labels")).get(labels.KUEUE_QUEUE_NAME)
        if not q:
            suspended = bool(_d(owner.get("spec")).get("suspend"))
            if not suspended:
                return Finding(ADMITTED, "True", "NotQueued",
                               f"{owner.get('kind')} has no {labels.KUEUE_QUEUE_NAME} label and is not suspended: "
                               "it runs without Kueue admission", source_of(owner))
        return Finding(ADMITTED, "Unknown", "WorkloadNotFound",
                       f"no Kueue Workload with label {labels.KUEUE_JOB_UID}={_meta(owner).get('uid')} yet"
                       + (f" (LocalQueue {q})" if q else ""), source_of(owner))
    conds = _conditions(wl)
    src = source_of(wl, "Workload")
    qr, adm, ev, pre = conds.get("QuotaReserved"), conds.get("Admitted"), conds.get("Evicted"), conds.get("Preempted")
    cq = _d(_d(wl.get("status")).get("admission")).get("clusterQueue")
    if _is_true(ev) and not _is_true(adm):
        reason = str(ev.get("reason") or "Evicted")
        msg = f"evicted: {ev.get('message') or reason}"
        if _is_true(pre):
            msg += f"; preempted ({pre.get('reason')}): {pre.get('message') or ''}".rstrip(": ")
        return Finding(ADMITTED, "False", reason, msg, src, ev.get("lastTransitionTime"))
    if _is_true(adm):
        flavors = sorted({f for p in _l(_d(_d(wl.get("status")).get("admission")).get("podSetAssignments"))
                          for f in _d(_d(p).get("flavors")).values() if isinstance(f, str)})
        msg = f"admitted by ClusterQueue {cq or '?'}" + (f" (ResourceFlavors {', '.join(flavors)})" if flavors else "")
        return Finding(ADMITTED, "True", "Admitted", msg, src, adm.get("lastTransitionTime"))
    if _is_true(qr):
        checks = [c for c in _l(_d(wl.get("status")).get("admissionChecks")) if isinstance(c, dict)]
        waiting = [f"{c.get('name')}={c.get('state')}" for c in checks if c.get("state") != "Ready"]
        msg = f"quota reserved in ClusterQueue {cq or '?'}" + (f"; waiting for admission checks {', '.join(waiting)}" if waiting else "")
        return Finding(ADMITTED, "False", "AdmissionChecksPending" if waiting else "QuotaReserved", msg, src,
                       qr.get("lastTransitionTime"))
    if _is_true(conds.get("Finished")):
        return None  # finished before we ever saw it admitted: keep what we have
    if qr is not None:
        reason = str(qr.get("reason") or "Pending")
        msg = str(qr.get("message") or "waiting for quota")
        if pre is not None and pre.get("status") == "True":
            msg += f"; preempted earlier ({pre.get('reason')}): {pre.get('message') or ''}"
        requeue = _d(_d(wl.get("status")).get("requeueState"))
        if requeue.get("requeueAt"):
            msg += f"; requeued at {requeue['requeueAt']} (count {requeue.get('count', 0)})"
        return Finding(ADMITTED, "False", reason, msg, src, qr.get("lastTransitionTime"))
    if _d(wl.get("spec")).get("active") is False:
        return Finding(ADMITTED, "False", "Inactive", "Workload spec.active is false", src)
    return Finding(ADMITTED, "False", "Pending", "Workload created, not yet considered by Kueue", src)


# --------------------------------------------------------------------------------------------
# pods and nodes


def derive_scheduled(pods: Sequence[Mapping], expected: int | None, *, admitted: bool, terminal: bool) -> Finding | None:
    """``Scheduled``: every pod of the run is bound to a node.

    Kubernetes rule: a pod is bound when ``spec.nodeName`` is set (``PodScheduled`` True); a pod
    the scheduler could not place has ``PodScheduled`` False with reason ``Unschedulable`` and a
    message like ``0/3 nodes are available: 3 Insufficient nvidia.com/gpu``. ``expected`` is the
    pod count the run needs (see :func:`expected_pod_count`; ``None``: the pods that exist).
    Returns None after the end (pods finish and are deleted one by one: the condition as it was
    while the run ran stands).
    """
    if terminal:
        return None
    if not pods:
        if admitted:
            return Finding(SCHEDULED, "False", "PodsNotCreated",
                           "admitted, but no pod with the run-id label exists yet")
        return Finding(SCHEDULED, "Unknown", "AwaitingAdmission", "no pods until Kueue admits the run")
    unsched = []
    for p in pods:
        c = _conditions(p).get("PodScheduled")
        if not _node_name(p) and c is not None and c.get("status") == "False":
            unsched.append((p, c))
    bound = [p for p in pods if _node_name(p)]
    need = expected if expected is not None else len(pods)
    if unsched:
        p, c = unsched[0]
        more = f" (and {len(unsched) - 1} more pod(s))" if len(unsched) > 1 else ""
        return Finding(SCHEDULED, "False", str(c.get("reason") or "Unschedulable"),
                       f"pod {_pod_name(p)}: {c.get('message') or 'not schedulable'}{more}; {len(bound)}/{need} pods bound",
                       source_of(p, "Pod"), c.get("lastTransitionTime"))
    if len(bound) >= need:
        def bound_at(p: Mapping) -> str:
            return str(_conditions(p).get("PodScheduled", {}).get("lastTransitionTime") or "")
        last = max(bound, key=bound_at)
        nodes = sorted({_node_name(p) for p in bound if _node_name(p)})
        return Finding(SCHEDULED, "True", "AllPodsBound",
                       f"{len(bound)}/{need} pods bound to node(s) {', '.join(nodes)}",
                       source_of(last, "Pod"), bound_at(last) or None)
    waiting = [p for p in pods if not _node_name(p)]
    src = source_of(waiting[0], "Pod") if waiting else None
    return Finding(SCHEDULED, "False", "WaitingForPods", f"{len(bound)}/{need} pods bound to nodes", src)


def run_nodes(pods: Sequence[Mapping]) -> list[str]:
    """Names of the nodes the run's non-terminated pods are bound to, sorted."""
    return sorted({n for p in pods if not _terminal_pod(p) for n in [_node_name(p)] if n})


def derive_gpu_healthy(pods: Sequence[Mapping], nodes: Mapping[str, Mapping], health_types: Iterable[str],
                       *, terminal: bool, all_scheduled: bool = True) -> Finding | None:
    """``GPUHealthy``: no node of the run has an NPD GPU condition that is True, and all are Ready.

    Node Problem Detector rule (OKE GPU health checks): a custom condition such as ``GpuXid`` or
    ``GpuEcc`` with status ``True`` means the problem is present. The nodes are those the run's
    running pods are bound to. A problem is reported as soon as one such node has it; True needs
    ``all_scheduled`` (every pod of the run bound), until then it is Unknown. Returns None after
    the end (the state while it ran stands).
    """
    if terminal:
        return None
    names = run_nodes(pods)
    if not names:
        if any(_node_name(p) for p in pods):
            return None
        return Finding(GPU_HEALTHY, "Unknown", "NoNodesYet", "no pod of the run is on a node yet")
    types = tuple(health_types)
    for n in names:
        node = nodes.get(n)
        if node is None:
            continue
        conds = _conditions(node)
        for t in types:
            c = conds.get(t)
            if _is_true(c):
                return Finding(GPU_HEALTHY, "False", t,
                               f"node {n}: {t}=True ({c.get('reason') or ''}: {c.get('message') or ''})".replace("(: )", "").strip(),
                               source_of(node, "Node"), c.get("lastTransitionTime"))
        ready = conds.get("Ready")
        if ready is not None and ready.get("status") != "True":
            return Finding(GPU_HEALTHY, "False", "NodeNotReady",
                           f"node {n}: Ready={ready.get('status')} ({ready.get('message') or ready.get('reason') or ''})",
                           source_of(node, "Node"), ready.get("lastTransitionTime"))
    missing = [n for n in names if n not in nodes]
    if len(missing) == len(names):
        return Finding(GPU_HEALTHY, "Unknown", "NodesNotObserved", f"node(s) {', '.join(missing)} not observed yet")
    first = nodes[next(n for n in names if n in nodes)]
    if not all_scheduled:
        return Finding(GPU_HEALTHY, "Unknown", "NotAllScheduled",
                       f"node(s) {', '.join(names)} healthy so far; not every pod of the run is bound yet",
                       source_of(first, "Node"))
    return Finding(GPU_HEALTHY, "True", "NoGpuProblems",
                   f"node(s) {', '.join(names)}: Ready, no GPU health condition True", source_of(first, "Node"))


# --------------------------------------------------------------------------------------------
# progress


def parse_metrics_jsonl(text: str, step_keys: Sequence[str] = ("step", "global_step", "iteration", "epoch")) -> tuple[int, float | None]:
    """Count metric records in JSONL text and find the largest step.

    Each non-empty line that parses as a JSON object is a record; the step is the first of
    ``step_keys`` holding a number. A last line without a newline (being written) and lines that
    do not parse are skipped. Returns ``(records, max step or None)``.
    """
    records, step = 0, None
    lines = text.split("\n")
    if lines and not text.endswith("\n"):
        lines = lines[:-1]
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        records += 1
        for k in step_keys:
            v = obj.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                step = float(v) if step is None else max(step, float(v))
                break
    return records, step


def parse_log_progress(text: str, pattern: str) -> tuple[int, float | None]:
    """Count log lines matching ``pattern`` (a Python regex) and the largest number its first
    group captures. Returns ``(matching lines, max step or None)``; raises ``re.error`` on a bad
    pattern."""
    rx = re.compile(pattern)
    count, step = 0, None
    for line in text.splitlines():
        m = rx.search(line)
        if not m:
            continue
        count += 1
        if m.groups():
            try:
                v = float(m.group(1))
            except (TypeError, ValueError):
                continue
            step = v if step is None else max(step, v)
    return count, step


def advance_progress(prev: ProgressState | None, sample: ProgressSample | None, now: datetime) -> ProgressState | None:
    """Fold one metrics reading into the progress state.

    Progress advanced when the reading has more records or a larger step than before (a log
    read through ``tailLines`` may count fewer lines: then only the step decides). A reading that
    did not advance keeps ``last_advance``.
    """
    if sample is None or sample.records <= 0:
        return prev
    t = format_micro(now)
    if prev is None:
        return ProgressState(sample.source, sample.records, sample.step, t, t)
    if sample.step is not None and prev.step is not None:
        advanced = sample.step > prev.step
    else:
        advanced = sample.records > prev.records or (sample.step is not None and prev.step is None)
    if not advanced:
        return prev
    return ProgressState(sample.source, sample.records, sample.step if sample.step is not None else prev.step,
                         t, prev.first_advance)


def _src_text(src: Mapping) -> str:
    if src.get("kind") == "File":
        return str(src.get("path"))
    return f"{src.get('kind')} {src.get('name')}" + (f" container {src['container']}" if src.get("container") else "")


def derive_progressing(progress: ProgressState | None, now: datetime, stall_after: float, *,
                       running_since: str | None, terminal: bool, expect: str = "") -> Finding | None:
    """``Progressing``: the training metrics advance.

    True (``MetricsAdvancing``) while the last advance is within ``stall_after`` seconds; False
    with reason ``Stalled`` after that quiet period (counted from the last advance, or from
    ``running_since``, the time all pods were scheduled, when no metric was ever seen).
    Unknown before the run runs. After the end, None (stall detection does not apply).
    """
    if terminal:
        return None
    quiet = timedelta(seconds=stall_after)
    if progress is None:
        start = parse_time(running_since)
        if start is None:
            return Finding(PROGRESSING, "Unknown", "NotRunning", "the run's pods are not all scheduled yet")
        if now - start > quiet:
            return Finding(PROGRESSING, "False", "Stalled",
                           f"no training metrics {int(stall_after)}s after the pods were scheduled ({running_since})"
                           + (f"; expected {expect}" if expect else ""), None, format_time(start + quiet))
        return Finding(PROGRESSING, "Unknown", "AwaitingMetrics",
                       "pods scheduled; no training metrics yet" + (f" (expected {expect})" if expect else ""))
    last = parse_time(progress.last_advance) or now
    step = f"step {progress.step:g}, " if progress.step is not None else ""
    if now - last > quiet:
        return Finding(PROGRESSING, "False", "Stalled",
                       f"no progress for {int((now - last).total_seconds())}s (> {int(stall_after)}s): last advance at "
                       f"{progress.last_advance} ({step}{progress.records} records) from {_src_text(progress.source)}",
                       progress.source, format_time(last + quiet))
    return Finding(PROGRESSING, "True", "MetricsAdvancing",
                   f"{step}{progress.records} records; last advance at {progress.last_advance} from {_src_text(progress.source)}",
                   progress.source, progress.first_advance)


# --------------------------------------------------------------------------------------------
# outcome, artifacts, releases


def derive_outcome(owner: Mapping | None, failures: Sequence[Mapping]) -> Finding | None:
    """The fifth slot: ``Completed`` (True on success, False while not finished) or ``Failed``.

    The failure reason is the root pod termination record (``OOMKilled``, ``Evicted``...) when
    there is one, else the owner's own reason (KubeRay ``AppFailed``/``DeadlineExceeded``, Job
    ``BackoffLimitExceeded``). Returns None once the owner is deleted.
    """
    out = owner_outcome(owner)
    if out is None:
        return None
    assert owner is not None
    src = source_of(owner)
    if out.state == "succeeded":
        return Finding(COMPLETED, "True", "Succeeded", out.message, src, out.since)
    if out.state == "failed":
        root = root_failure(failures)
        if root is not None:
            return Finding(FAILED, "True", str(root.get("reason")),
                           f"{describe_failure(root)}; {out.reason}: {out.message}",
                           {"kind": "Pod", "name": root.get("pod"), "namespace": _meta(owner).get("namespace")},
                           out.since)
        return Finding(FAILED, "True", out.reason, out.message, src, out.since)
    return Finding(COMPLETED, "False", out.reason or "NotStarted", out.message, src)


def derive_artifact_saved(listing: ArtifactListing | None, *, terminal: bool) -> Finding | None:
    """``ArtifactSaved``: an artifact index, or at least one file, under the run's output path.

    True (``IndexWritten`` / ``FilesWritten``) as soon as there is one; before the end Unknown,
    after the end False (``NoArtifacts``). None when no probe result is available.
    """
    if listing is None:
        return None
    src = {"kind": "Path", "path": listing.root}
    if listing.index is not None:
        items = listing.index.get("artifacts") if isinstance(listing.index.get("artifacts"), list) else []
        return Finding(ARTIFACT_SAVED, "True", "IndexWritten",
                       f"artifact index under {listing.root} lists {len(items)} artifact(s)", src)
    if listing.files:
        size = sum(int(f.get("size") or 0) for f in listing.files)
        return Finding(ARTIFACT_SAVED, "True", "FilesWritten",
                       f"{len(listing.files)} file(s), {size} bytes under {listing.root}", src)
    if terminal:
        return Finding(ARTIFACT_SAVED, "False", "NoArtifacts", f"the run ended but {listing.root} has no files", src)
    return Finding(ARTIFACT_SAVED, "Unknown", "AwaitingArtifacts", f"nothing under {listing.root} yet", src)


def derive_quota_released(workloads: Sequence[Mapping], *, terminal: bool, ever_admitted: bool) -> Finding | None:
    """``QuotaReleased``: Kueue gave the run's quota back.

    Kueue rule: a Workload's ``Finished`` condition True means its quota is released; so does a
    deleted Workload. While the run is active and the quota reserved: False (``QuotaHeld``).
    """
    wl = _current_workload(workloads)
    if wl is None:
        if terminal and ever_admitted:
            return Finding(QUOTA_RELEASED, "True", "WorkloadDeleted", "the run's Kueue Workload is gone")
        return None if ever_admitted else Finding(QUOTA_RELEASED, "Unknown", "NotReserved", "no quota reserved yet")
    conds = _conditions(wl)
    src = source_of(wl, "Workload")
    fin = conds.get("Finished")
    if _is_true(fin):
        return Finding(QUOTA_RELEASED, "True", "WorkloadFinished",
                       f"Workload finished ({fin.get('reason') or ''}): {fin.get('message') or ''}".replace(" ()", ""),
                       src, fin.get("lastTransitionTime"))
    if _is_true(conds.get("QuotaReserved")):
        cq = _d(_d(wl.get("status")).get("admission")).get("clusterQueue")
        return Finding(QUOTA_RELEASED, "False", "QuotaHeld", f"quota reserved in ClusterQueue {cq or '?'}", src)
    if terminal and ever_admitted:
        return Finding(QUOTA_RELEASED, "True", "QuotaNotReserved", "the Workload no longer holds a reservation", src)
    return Finding(QUOTA_RELEASED, "Unknown", "NotReserved", "no quota reserved", src)


def derive_gpus_released(pods: Sequence[Mapping], *, terminal: bool, ever_scheduled: bool) -> Finding | None:
    """``GPUsReleased``: no pod of the run is left running on a node.

    Kubernetes rule: a pod in phase ``Succeeded`` or ``Failed`` no longer holds its devices (the
    scheduler and kubelet stop counting it); any other bound pod still does.
    """
    holding = [p for p in pods if _node_name(p) and not _terminal_pod(p)]
    if holding:
        names = ", ".join(f"{_pod_name(p)} ({_node_name(p)})" for p in holding[:5])
        return Finding(GPUS_RELEASED, "False", "PodsOnNodes", f"{len(holding)} pod(s) still on nodes: {names}",
                       source_of(holding[0], "Pod"))
    if terminal:
        return Finding(GPUS_RELEASED, "True", "NoPodsOnNodes", "no pod of the run is left running on a node")
    if not ever_scheduled:
        return Finding(GPUS_RELEASED, "Unknown", "NotScheduled", "the run holds no GPUs yet")
    return None


# --------------------------------------------------------------------------------------------
# all together


def _by_type(conditions: Iterable[Mapping]) -> dict[str, dict]:
    return {str(c.get("type")): dict(c) for c in conditions if isinstance(c, Mapping) and c.get("type")}


def derive_findings(view: RunView, previous: Sequence[Mapping], now: datetime, options: DeriveOptions) -> list[Finding]:
    """Every finding for ``view``, in ``ALL_TYPES`` order (missing ones: evidence gone).

    ``previous`` (the run's current conditions) supplies what the objects no longer show: was it
    ever admitted / scheduled, and since when were all pods scheduled.
    """
    prev = _by_type(previous)
    outcome = owner_outcome(view.owner)
    ended_before = prev.get(COMPLETED, {}).get("status") == "True" or prev.get(FAILED, {}).get("status") == "True"
    deleted = view.owner is None and view.owner_deleted and not ended_before
    terminal = outcome.terminal if outcome is not None else (ended_before or deleted)
    admitted_f = derive_admitted(view.owner, view.workloads)
    admitted = (admitted_f.status == "True") if admitted_f is not None else prev.get(ADMITTED, {}).get("status") == "True"
    ever_admitted = (admitted or prev.get(ADMITTED, {}).get("status") == "True"
                     or prev.get(QUOTA_RELEASED, {}).get("reason") in ("QuotaHeld", "WorkloadFinished")
                     or prev.get(SCHEDULED, {}).get("status") == "True")
    expected = expected_pod_count(view.owner, view.workloads)
    sched_f = derive_scheduled(view.pods, expected, admitted=admitted, terminal=terminal)
    sched_prev = prev.get(SCHEDULED, {})
    if sched_f is not None and sched_f.status == "True":
        running_since = (sched_prev.get("lastTransitionTime") if sched_prev.get("status") == "True" else None) \
            or sched_f.since or format_time(now)
    else:
        running_since = None
    ever_scheduled = (sched_f is not None and sched_f.status == "True") or sched_prev.get("status") == "True"
    expect = " or ".join(x for x in (view.metrics_path, f"log lines matching {view.log_pattern!r}" if view.log_pattern else "") if x)
    findings = [
        admitted_f,
        sched_f,
        derive_gpu_healthy(view.pods, view.nodes, options.gpu_health_conditions, terminal=terminal,
                           all_scheduled=sched_f is not None and sched_f.status == "True"),
        derive_progressing(view.progress, now, options.stall_after, running_since=running_since,
                           terminal=terminal, expect=expect),
        derive_outcome(view.owner, view.failures) if not deleted else Finding(
            FAILED, "True", "Deleted", "the run's object was deleted before it finished"
            + (f" ({describe_failure(root_failure(view.failures) or {})})" if view.failures else "")),
        derive_artifact_saved(view.artifacts, terminal=terminal),
        derive_quota_released(view.workloads, terminal=terminal, ever_admitted=ever_admitted),
        derive_gpus_released(view.pods, terminal=terminal, ever_scheduled=ever_scheduled),
    ]
    return [f for f in findings if f is not None]


_PLACEHOLDER = {
    ADMITTED: ("Unknown", "NotObserved", "no Kueue Workload observed yet"),
    SCHEDULED: ("Unknown", "AwaitingAdmission", "no pods until Kueue admits the run"),
    GPU_HEALTHY: ("Unknown", "NoNodesYet", "no pod of the run is on a node yet"),
    PROGRESSING: ("Unknown", "NotRunning", "the run is not running yet"),
    COMPLETED: ("False", "NotStarted", "the run has not finished"),
    ARTIFACT_SAVED: ("Unknown", "AwaitingArtifacts", "no artifacts yet"),
    QUOTA_RELEASED: ("Unknown", "NotReserved", "no quota reserved yet"),
    GPUS_RELEASED: ("Unknown", "NotScheduled", "the run holds no GPUs yet"),
}


_REASON_BAD = re.compile(r"[^A-Za-z0-9_]")


def condition_reason(value: Any) -> str:
    """A reason usable in a ``metav1.Condition`` (pattern ``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$``):
    external reasons (KubeRay, pod termination) are CamelCased and stripped of other characters."""
    words = [w for w in re.split(r"[^A-Za-z0-9_]+", str(value or "")) if w]
    out = "".join(w[:1].upper() + w[1:] for w in words) if len(words) > 1 else (words[0] if words else "")
    out = _REASON_BAD.sub("", out).lstrip("0123456789_")
    return out[:1024] or "Unknown"


def _slot(t: str) -> str:
    return COMPLETED if t in (COMPLETED, FAILED) else t


def merge_conditions(previous: Sequence[Mapping], findings: Sequence[Finding], now: datetime) -> tuple[list[dict], list[dict]]:
    """Merge findings into the previous conditions, Kubernetes style.

    Returns ``(conditions, transitions)``: ``conditions`` has one entry per slot in
    ``ALL_TYPES`` order (``Completed`` or ``Failed`` in the fifth); ``transitions`` the entries
    whose ``(type, status, reason)`` changed (what the evidence timeline records).
    ``lastTransitionTime`` changes only when the status changes (metav1.Condition rule): it is the
    finding's ``since`` (the source's own time, never later than ``now``) or ``now``. A slot
    without a finding keeps its previous entry; a slot never seen gets a placeholder.
    """
    prev_by_slot = {_slot(t): c for t, c in _by_type(previous).items()}
    found = {_slot(f.type): f for f in findings}
    now_s = format_time(now)
    out: list[dict] = []
    transitions: list[dict] = []
    for slot in ALL_TYPES:
        p = prev_by_slot.get(slot)
        f = found.get(slot)
        if f is None:
            if p is not None:
                out.append(dict(p))
                continue
            status, reason, message = _PLACEHOLDER[slot]
            f = Finding(slot, status, reason, message)
        since = f.since
        st = parse_time(since)
        if st is None or st > now:
            since = now_s
        else:
            since = format_time(st)
        cond = {"type": f.type, "status": f.status, "reason": condition_reason(f.reason), "message": f.message[:32768]}
        if f.source:
            cond["source"] = dict(f.source)
        if p is not None and p.get("type") == f.type and p.get("status") == f.status:
            cond["lastTransitionTime"] = p.get("lastTransitionTime") or since
        else:
            cond["lastTransitionTime"] = since
        out.append(cond)
        if p is None or (p.get("type"), p.get("status"), p.get("reason")) != (f.type, f.status, cond["reason"]):
            transitions.append(dict(cond))
    return out, transitions


def derive(view: RunView, previous: Sequence[Mapping], now: datetime, options: DeriveOptions) -> tuple[list[dict], list[dict]]:
    """Conditions and transitions for one run: :func:`derive_findings` then :func:`merge_conditions`."""
    return merge_conditions(previous, derive_findings(view, previous, now, options), now)


# --------------------------------------------------------------------------------------------
# summaries for people


def phase(conditions: Sequence[Mapping]) -> str:
    """One word for the run: ``Failed``, ``Succeeded``, ``Running``, ``Scheduling``, ``Queued``."""
    c = _by_type(conditions)
    if c.get(FAILED, {}).get("status") == "True":
        return "Failed"
    if c.get(COMPLETED, {}).get("status") == "True":
        return "Succeeded"
    if c.get(SCHEDULED, {}).get("status") == "True":
        return "Running"
    if c.get(ADMITTED, {}).get("status") == "True":
        return "Scheduling"
    return "Queued"


@dataclass(frozen=True)
class Diagnosis:
    """Where a run stands: ``stage`` (a condition type, or ``Done``), a short ``summary``,
    the stage condition's ``status``/``reason``/``message``/``source`` and ``next_checks``
    (commands or things to look at, most useful first)."""

    stage: str
    summary: str
    status: str
    reason: str
    message: str
    source: dict | None
    next_checks: tuple[str, ...]


_SUMMARY = {
    ADMITTED: "waiting for Kueue admission",
    SCHEDULED: "waiting for the pods to be scheduled",
    GPU_HEALTHY: "a node of the run reports a GPU problem",
    PROGRESSING: "training is not (yet) making progress",
    COMPLETED: "running",
    FAILED: "failed",
    ARTIFACT_SAVED: "finished; waiting for artifacts",
    "Done": "finished; artifacts saved",
}


def _kubectl_for(src: Mapping | None) -> str | None:
    if not src or not src.get("name"):
        return None
    kind = str(src.get("kind"))
    ns = f" -n {src['namespace']}" if src.get("namespace") else ""
    res = {"Workload": "workload.kueue.x-k8s.io", "RayJob": "rayjob.ray.io", "Job": "job", "Pod": "pod", "Node": "node"}.get(kind)
    if res is None:
        return None
    return f"kubectl describe {res} {src['name']}{ns}"


def _hints(stage: str, reason: str, cond: Mapping) -> list[str]:
    src = cond.get("source") if isinstance(cond.get("source"), Mapping) else None
    msg = str(cond.get("message") or "")
    h: list[str] = []
    if stage == ADMITTED:
        if reason in ("Pending", "NotObserved"):
            m = re.search(r"ClusterQueue (\S+)", msg)
            h.append("compare the Workload's request with the ClusterQueue's free quota: "
                     + (f"kubectl describe clusterqueue {m.group(1)}" if m else "kubectl get clusterqueues"))
            h.append("check the LocalQueue exists and points at an active ClusterQueue: kubectl get localqueues -n <NAMESPACE>")
        elif reason in ("Preempted", "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing"):
            h.append("the run was preempted by a higher-priority workload; it is re-queued automatically; "
                     "check the WorkloadPriorityClass of the run's profile")
        elif reason == "WorkloadNotFound":
            h.append("check that Kueue manages this kind (Kueue Configuration integrations.frameworks) and the "
                     "kueue.x-k8s.io/queue-name label is set")
        elif reason == "AdmissionChecksPending":
            h.append("check the AdmissionChecks listed (e.g. ProvisioningRequest): kubectl get admissionchecks")
        elif reason == "PodsReadyTimeout":
            h.append("the pods did not become Ready in time (waitForPodsReady); check image pulls and node capacity")
    elif stage == SCHEDULED:
        if reason == "Unschedulable":
            h.append("read the scheduler's message above; compare the pod's nodeSelector/tolerations and nvidia.com/gpu "
                     "request with the nodes: kubectl get nodes -L tau.azure.com/gpu-class")
        elif reason == "PodsNotCreated":
            h.append("check the KubeRay operator / Job controller events: kubectl get events -n <NAMESPACE>")
        else:
            h.append("check which pods are still Pending: kubectl get pods -n <NAMESPACE> -l tau.azure.com/run-id=<RUN>")
    elif stage == GPU_HEALTHY:
        h.append(f"the node reports {reason}; cordon and drain it, then let the run restart: "
                 f"kubectl cordon {src.get('name') if src else 'NODE'}")
        h.append("check Node Problem Detector / DCGM output on that node")
    elif stage == PROGRESSING:
        if reason == "Stalled":
            h.append("read the training logs: kubectl logs -n <NAMESPACE> -l tau.azure.com/run-id=<RUN> --tail=100")
            h.append("look for a hung collective (NCCL timeout) or a data loader waiting on storage")
        else:
            h.append("the run is scheduled; the first metrics usually appear after data loading and compilation")
    elif stage == FAILED:
        if reason == "OOMKilled":
            h.append("the container ran out of memory: raise its memory request/limit or lower the batch size")
        elif reason == "Evicted":
            h.append("the pod was evicted (node pressure or preemption): check the node's conditions")
        elif reason in ("AppFailed", "Error"):
            h.append("the training code exited with an error: read the driver/submitter logs")
        elif reason in ("DeadlineExceeded", "BackoffLimitExceeded"):
            h.append("the run hit its deadline or retry limit: check activeDeadlineSeconds/backoffLimit and the pod logs")
        h.append("the full termination record: taugate evidence show <RUN>")
    elif stage == ARTIFACT_SAVED:
        h.append("check that the training code writes to the run's output path (under /data) and that the "
                 "workspace volume is mounted")
    elif stage == COMPLETED:
        h.append("the run is running normally; follow it with: kubectl get tauruns -n <NAMESPACE> -w")
    cmd = _kubectl_for(src)
    if cmd:
        h.append(cmd)
    return h


def diagnose(conditions: Sequence[Mapping], *, namespace: str | None = None, run_id: str | None = None) -> Diagnosis:
    """The stage a run is in and what to check next.

    The stage is ``Failed`` for a failed run, else the first of ``STATE_ORDER`` whose status is
    not True (``Done`` when all six are True). ``next_checks`` are concrete commands with the
    run's namespace and run-id filled in when given.
    """
    c = _by_type(conditions)
    if c.get(FAILED, {}).get("status") == "True":
        stage = FAILED
    else:
        stage = next((t for t in STATE_ORDER if c.get(t, {}).get("status") != "True"), "Done")
    cond = c.get(stage, {})
    reason = str(cond.get("reason") or "")
    hints = _hints(stage, reason, cond) if stage != "Done" else []
    hints = [h.replace("<NAMESPACE>", namespace or "<NAMESPACE>").replace("<RUN>", run_id or "<RUN>") for h in hints]
    return Diagnosis(stage=stage, summary=_SUMMARY.get(stage, stage), status=str(cond.get("status") or ""),
                     reason=reason, message=str(cond.get("message") or ""),
                     source=cond.get("source") if isinstance(cond.get("source"), dict) else None,
                     next_checks=tuple(hints))

