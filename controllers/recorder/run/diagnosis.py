"""Summaries for people: a run's phase in one word, the stage it is in and what to check next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from taugate.controllers.recorder.run.values import (
    ADMITTED,
    ARTIFACT_SAVED,
    COMPLETED,
    FAILED,
    GPU_HEALTHY,
    PROGRESSING,
    SCHEDULED,
    STATE_ORDER,
    by_type,
)
from taugate.kinds import KINDS


def phase(conditions: Sequence[Mapping]) -> str:
    """One word for the run: ``Failed``, ``Succeeded``, ``Running``, ``Scheduling``, ``Queued``."""
    c = by_type(conditions)
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


_KUBECTL_RESOURCE = {**{k.kind: f"{k.resource}.{k.group}" if k.group else k.resource for k in KINDS},
                     "Workload": "workload.kueue.x-k8s.io", "RayJob": "rayjob.ray.io", "Job": "job", "Pod": "pod",
                     "Node": "node"}
"""What ``kubectl describe`` calls a condition's source: every registered kind (``rayservices.ray.io``)."""


def _kubectl_for(src: Mapping | None) -> str | None:
    if not src or not src.get("name"):
        return None
    ns = f" -n {src['namespace']}" if src.get("namespace") else ""
    res = _KUBECTL_RESOURCE.get(str(src.get("kind")))
    if res is None:
        return None
    return f"kubectl describe {res} {src['name']}{ns}"


# What to check next, per stage: each takes the stage condition's reason, message and source.

def _admission_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    if reason in ("Pending", "NotObserved"):
        m = re.search(r"ClusterQueue (\S+)", msg)
        return ["compare the Workload's request with the ClusterQueue's free quota: "
                + (f"kubectl describe clusterqueue {m.group(1)}" if m else "kubectl get clusterqueues"),
                "check the LocalQueue exists and points at an active ClusterQueue: "
                "kubectl get localqueues -n <NAMESPACE>"]
    if reason in ("Preempted", "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing"):
        return ["the run was preempted by a higher-priority workload; it is re-queued automatically; "
                "check the WorkloadPriorityClass of the run's profile"]
    return {
        "WorkloadNotFound": ["check that Kueue manages this kind (Kueue Configuration integrations.frameworks) and "
                             "the kueue.x-k8s.io/queue-name label is set"],
        "AdmissionChecksPending": ["check the AdmissionChecks listed (e.g. ProvisioningRequest): "
                                   "kubectl get admissionchecks"],
        "PodsReadyTimeout": ["the pods did not become Ready in time (waitForPodsReady); check image pulls and node "
                             "capacity"],
    }.get(reason, [])


def _scheduling_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    if reason == "Unschedulable":
        return ["read the scheduler's message above; compare the pod's nodeSelector/tolerations and nvidia.com/gpu "
                "request with the nodes: kubectl get nodes -L tau.azure.com/gpu-class"]
    if reason == "PodsNotCreated":
        return ["check the KubeRay operator / Job controller events: kubectl get events -n <NAMESPACE>"]
    return ["check which pods are still Pending: kubectl get pods -n <NAMESPACE> -l tau.azure.com/run-id=<RUN>"]


def _gpu_health_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    return [f"the node reports {reason}; cordon and drain it, then let the run restart: "
            f"kubectl cordon {src.get('name') if src else 'NODE'}",
            "check Node Problem Detector / DCGM output on that node"]


def _progress_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    if reason == "Stalled":
        return ["read the training logs: kubectl logs -n <NAMESPACE> -l tau.azure.com/run-id=<RUN> --tail=100",
                "look for a hung collective (NCCL timeout) or a data loader waiting on storage"]
    return ["the run is scheduled; the first metrics usually appear after data loading and compilation"]


def _failure_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    if reason == "OOMKilled":
        h = ["the container ran out of memory: raise its memory request/limit or lower the batch size"]
    elif reason == "Evicted":
        h = ["the pod was evicted (node pressure or preemption): check the node's conditions"]
    elif reason in ("AppFailed", "Error"):
        h = ["the training code exited with an error: read the driver/submitter logs"]
    elif reason in ("DeadlineExceeded", "BackoffLimitExceeded"):
        h = ["the run hit its deadline or retry limit: check activeDeadlineSeconds/backoffLimit and the pod logs"]
    else:
        h = []
    return [*h, "the full termination record: taugate evidence show <RUN>"]


def _artifact_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    return ["check that the training code writes to the run's output path (under /data) and that the "
            "workspace volume is mounted"]


def _running_hints(reason: str, msg: str, src: Mapping | None) -> list[str]:
    return ["the run is running normally; follow it with: kubectl get tauruns -n <NAMESPACE> -w"]


_STAGE_HINTS: dict[str, Callable[[str, str, Mapping | None], list[str]]] = {
    ADMITTED: _admission_hints, SCHEDULED: _scheduling_hints, GPU_HEALTHY: _gpu_health_hints,
    PROGRESSING: _progress_hints, FAILED: _failure_hints, ARTIFACT_SAVED: _artifact_hints, COMPLETED: _running_hints,
}


def _hints(stage: str, reason: str, cond: Mapping) -> list[str]:
    """The stage's own hints, then a ``kubectl describe`` of the condition's source object."""
    src = cond.get("source") if isinstance(cond.get("source"), Mapping) else None
    stage_hints = _STAGE_HINTS.get(stage)
    h = stage_hints(reason, str(cond.get("message") or ""), src) if stage_hints else []
    cmd = _kubectl_for(src)
    return [*h, cmd] if cmd else h


def diagnose(conditions: Sequence[Mapping], *, namespace: str | None = None,
             run_id: str | None = None) -> Diagnosis:
    """The stage a run is in and what to check next.

    The stage is ``Failed`` for a failed run, else the first of ``STATE_ORDER`` whose status is
    not True (``Done`` when all six are True); for a completed run only ``ArtifactSaved`` is left
    to wait for (``Done`` once it is True), whatever the running stages last said. ``next_checks``
    are concrete commands with the run's namespace and run-id filled in when given.
    """
    c = by_type(conditions)
    if c.get(FAILED, {}).get("status") == "True":
        stage = FAILED
    else:
        # A completed run is past the running stages: a batch Job that wrote no metrics never
        # had Progressing True, and its GPUs may be gone, but it is not "not making progress".
        done = c.get(COMPLETED, {}).get("status") == "True"
        order = STATE_ORDER[STATE_ORDER.index(COMPLETED):] if done else STATE_ORDER
        stage = next((t for t in order if c.get(t, {}).get("status") != "True"), "Done")
    cond = c.get(stage, {})
    reason = str(cond.get("reason") or "")
    hints = _hints(stage, reason, cond) if stage != "Done" else []
    hints = [h.replace("<NAMESPACE>", namespace or "<NAMESPACE>").replace("<RUN>", run_id or "<RUN>") for h in hints]
    return Diagnosis(stage=stage, summary=_SUMMARY.get(stage, stage), status=str(cond.get("status") or ""),
                     reason=reason, message=str(cond.get("message") or ""),
                     source=cond.get("source") if isinstance(cond.get("source"), dict) else None,
                     next_checks=tuple(hints))
