"""How a run ended: the owner's outcome (KubeRay ``RayJob`` / ``batch/v1`` ``Job``), pod
termination records (the failure evidence), and the ``Completed``/``Failed``, ``ArtifactSaved``,
``QuotaReleased`` and ``GPUsReleased`` derivations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from taugate.access import as_dict, as_list, metadata_of
from taugate.controllers.recorder.run.admitted import current_workload
from taugate.controllers.recorder.run.outcome import owner_outcome
from taugate.controllers.recorder.run.values import (
    ARTIFACT_SAVED,
    COMPLETED,
    FAILED,
    FAILURE_RANK,
    GPUS_RELEASED,
    QUOTA_RELEASED,
    ArtifactListing,
    Finding,
    node_name,
    parse_time,
    pod_name,
    pod_phase,
    source_of,
    terminal_pod,
)
from taugate.outcome import conditions_of, is_true


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
    meta = metadata_of(pod)
    status = as_dict(pod.get("status"))
    name = str(meta.get("name") or "?")
    uid = str(meta.get("uid") or name)
    node = node_name(pod)
    out: list[dict] = []
    seen: set[str] = set()
    for list_name in ("initContainerStatuses", "containerStatuses"):
        for cs in as_list(status.get(list_name)):
            if not isinstance(cs, dict):
                continue
            for which in ("state", "lastState"):
                term = as_dict(as_dict(cs.get(which)).get("terminated"))
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
    if pod_phase(pod) == "Failed" and status.get("reason"):
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
        return (t is None, t or datetime.max.replace(tzinfo=UTC), FAILURE_RANK.get(str(f.get("reason")), 9))

    return min(failures, key=key)


def describe_failure(f: Mapping) -> str:
    """One line for a failure record: pod, container, node, reason, exit code, time."""
    where = f"pod {f.get('pod')}" + (f" container {f['container']}" if f.get("container") else "")
    where += f" on node {f['node']}" if f.get("node") else ""
    code = f" (exit code {f['exitCode']})" if f.get("exitCode") is not None else ""
    when = f" at {f['finishedAt']}" if f.get("finishedAt") else ""
    msg = f": {f['message']}" if f.get("message") else ""
    return f"{where}: {f.get('reason')}{code}{when}{msg}"



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
                           {"kind": "Pod", "name": root.get("pod"), "namespace": metadata_of(owner).get("namespace")},
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
        items = as_list(listing.index.get("artifacts"))
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
    wl = current_workload(workloads)
    if wl is None:
        if terminal and ever_admitted:
            return Finding(QUOTA_RELEASED, "True", "WorkloadDeleted", "the run's Kueue Workload is gone")
        return None if ever_admitted else Finding(QUOTA_RELEASED, "Unknown", "NotReserved", "no quota reserved yet")
    conds = conditions_of(wl)
    src = source_of(wl, "Workload")
    fin = conds.get("Finished")
    if is_true(fin):
        return Finding(QUOTA_RELEASED, "True", "WorkloadFinished",
                       f"Workload finished ({fin.get('reason') or ''}): {fin.get('message') or ''}".replace(" ()", ""),
                       src, fin.get("lastTransitionTime"))
    if is_true(conds.get("QuotaReserved")):
        cq = as_dict(as_dict(wl.get("status")).get("admission")).get("clusterQueue")
        return Finding(QUOTA_RELEASED, "False", "QuotaHeld", f"quota reserved in ClusterQueue {cq or '?'}", src)
    if terminal and ever_admitted:
        return Finding(QUOTA_RELEASED, "True", "QuotaNotReserved", "the Workload no longer holds a reservation", src)
    return Finding(QUOTA_RELEASED, "Unknown", "NotReserved", "no quota reserved", src)


def derive_gpus_released(pods: Sequence[Mapping], *, terminal: bool, ever_scheduled: bool) -> Finding | None:
    """``GPUsReleased``: no pod of the run is left running on a node.

    Kubernetes rule: a pod in phase ``Succeeded`` or ``Failed`` no longer holds its devices (the
    scheduler and kubelet stop counting it); any other bound pod still does.
    """
    holding = [p for p in pods if node_name(p) and not terminal_pod(p)]
    if holding:
        names = ", ".join(f"{pod_name(p)} ({node_name(p)})" for p in holding[:5])
        return Finding(GPUS_RELEASED, "False", "PodsOnNodes", f"{len(holding)} pod(s) still on nodes: {names}",
                       source_of(holding[0], "Pod"))
    if terminal:
        return Finding(GPUS_RELEASED, "True", "NoPodsOnNodes", "no pod of the run is left running on a node")
    if not ever_scheduled:
        return Finding(GPUS_RELEASED, "Unknown", "NotScheduled", "the run holds no GPUs yet")
    return None
