"""A run's six states and two release lines from plain observed objects, merged into its previous
conditions (``metav1.Condition``: ``lastTransitionTime`` changes only with the status). Pure, no
clock (``now`` is an argument).

A derivation returns ``None`` when its evidence is gone (pods deleted after the end, the Workload
garbage-collected): the previous condition then stands, so a finished run keeps its history after
Kubernetes deletes the objects that proved it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from taugate.controllers.recorder.run.admitted import derive_admitted, expected_pod_count
from taugate.controllers.recorder.run.completion import (
    derive_artifact_saved,
    derive_gpus_released,
    derive_outcome,
    derive_quota_released,
    describe_failure,
    root_failure,
)
from taugate.controllers.recorder.run.gpu_health import derive_gpu_healthy
from taugate.controllers.recorder.run.outcome import owner_outcome
from taugate.controllers.recorder.run.progress import derive_progressing
from taugate.controllers.recorder.run.scheduled import derive_scheduled
from taugate.controllers.recorder.run.values import (
    ADMITTED,
    ALL_TYPES,
    ARTIFACT_SAVED,
    COMPLETED,
    FAILED,
    GPU_HEALTHY,
    GPUS_RELEASED,
    PROGRESSING,
    QUOTA_RELEASED,
    SCHEDULED,
    DeriveOptions,
    Finding,
    RunView,
    by_type,
    format_time,
    parse_time,
)


def derive_findings(view: RunView, previous: Sequence[Mapping], now: datetime, options: DeriveOptions) -> list[Finding]:
    """Every finding for ``view``, in ``ALL_TYPES`` order (missing ones: evidence gone).
    ``previous`` supplies what the objects no longer show (ever admitted, scheduled since when)."""
    prev = by_type(previous)
    outcome = owner_outcome(view.owner)
    ended_before = prev.get(COMPLETED, {}).get("status") == "True" or prev.get(FAILED, {}).get("status") == "True"
    deleted = view.owner is None and view.owner_deleted and not ended_before
    terminal = outcome.terminal if outcome is not None else (ended_before or deleted)
    admitted_f = derive_admitted(view.owner, view.workloads)
    was_admitted = prev.get(ADMITTED, {}).get("status") == "True"
    admitted = (admitted_f.status == "True") if admitted_f is not None else was_admitted
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
    log_lines = f"log lines matching {view.log_pattern!r}" if view.log_pattern else ""
    expect = " or ".join(x for x in (view.metrics_path, log_lines) if x)
    findings = [
        admitted_f,
        sched_f,
        derive_gpu_healthy(view.pods, view.nodes, options.gpu_health_conditions, terminal=terminal,
                           all_scheduled=sched_f is not None and sched_f.status == "True"),
        derive_progressing(view.progress, now, options.stall_after, running_since=running_since,
                           terminal=terminal, expect=expect),
        derive_outcome(view.owner, view.failures) if not deleted else _deleted(view),
        derive_artifact_saved(view.artifacts, terminal=terminal),
        derive_quota_released(view.workloads, terminal=terminal, ever_admitted=ever_admitted),
        derive_gpus_released(view.pods, terminal=terminal, ever_scheduled=ever_scheduled),
    ]
    return [f for f in findings if f is not None]


def _deleted(view: RunView) -> Finding:
    """A serving kind's run ends when its root is deleted (``Completed``/``Deleted``); any other run
    deleted before it ended failed (``Failed``/``Deleted``)."""
    if view.serving:
        return Finding(COMPLETED, "True", "Deleted", "the serving workload was deleted: its run ends with it")
    return Finding(FAILED, "True", "Deleted", "the run's object was deleted before it finished"
                   + (f" ({describe_failure(root_failure(view.failures) or {})})" if view.failures else ""))


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
    """A reason matching ``metav1.Condition``'s pattern ``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$``:
    external reasons (KubeRay, pod termination) CamelCased, other characters stripped."""
    words = [w for w in re.split(r"[^A-Za-z0-9_]+", str(value or "")) if w]
    out = "".join(w[:1].upper() + w[1:] for w in words) if len(words) > 1 else (words[0] if words else "")
    out = _REASON_BAD.sub("", out).lstrip("0123456789_")
    return out[:1024] or "Unknown"


def _slot(t: str) -> str:
    return COMPLETED if t in (COMPLETED, FAILED) else t


def merge_conditions(previous: Sequence[Mapping], findings: Sequence[Finding],
                     now: datetime) -> tuple[list[dict], list[dict]]:
    """``(conditions, transitions)``: one condition per slot (``Completed`` or ``Failed`` in the
    fifth), and those whose ``(type, status, reason)`` changed (the evidence timeline).
    ``lastTransitionTime`` is the finding's ``since`` (the source's time, never later than ``now``)
    or ``now``. A slot without a finding keeps its previous entry."""
    prev_by_slot = {_slot(t): c for t, c in by_type(previous).items()}
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
        since = now_s if st is None or st > now else format_time(st)
        cond: dict[str, Any] = {"type": f.type, "status": f.status, "reason": condition_reason(f.reason),
                                "message": f.message[:32768]}
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


def derive(view: RunView, previous: Sequence[Mapping], now: datetime,
           options: DeriveOptions) -> tuple[list[dict], list[dict]]:
    return merge_conditions(previous, derive_findings(view, previous, now, options), now)
