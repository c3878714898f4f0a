"""How the run's root object says it is doing: one rule per registered workload kind, each following
its upstream's status (the source file is named on each reader).

Batch kinds end on their own (``succeeded`` / ``failed``); serving kinds (``SERVING_KINDS``:
Deployment, StatefulSet, LeaderWorkerSet, RayService) never do: they are ``running`` while
available, and their run ends when the object is deleted (``run.merge``: ``Completed`` with reason
``Deleted``). ``tests/recorder/test_run_outcomes.py`` checks every kind of ``taugate.kinds.KINDS``
has a rule here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from taugate.access import as_dict, as_list
from taugate.controllers.recorder.run.values import conditions_of, is_true


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


def _rayjob(owner: Mapping, status: dict) -> Outcome:
    """KubeRay ray-operator v1.5 ``apis/ray/v1/rayjob_types.go`` (``JobDeploymentStatus``,
    ``JobStatus``): succeeded when ``jobDeploymentStatus`` is ``Complete`` and ``jobStatus``
    ``SUCCEEDED``; failed when ``Failed``/``ValidationFailed``, or ``Complete`` with ``jobStatus``
    ``FAILED``/``STOPPED``."""
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


def _job(owner: Mapping, status: dict) -> Outcome:
    """Kubernetes ``k8s.io/api/batch/v1/types.go`` ``JobConditionType``: ``Complete`` (or
    ``SuccessCriteriaMet``) True is success, ``Failed`` (or ``FailureTarget``) True is failure,
    ``spec.suspend`` means not started."""
    conds = conditions_of(owner)
    for t in ("Complete", "SuccessCriteriaMet"):
        if is_true(conds.get(t)):
            c = conds[t]
            said = c.get('message') or c.get('reason') or 'True'
            return Outcome("succeeded", "Succeeded", f"Job condition {t}: {said}",
                           status.get("completionTime") or c.get("lastTransitionTime"))
    for t in ("Failed", "FailureTarget"):
        if is_true(conds.get(t)):
            c = conds[t]
            return Outcome("failed", str(c.get("reason") or "JobFailed"),
                           f"Job condition {t}: {c.get('reason') or ''} {c.get('message') or ''}".strip(),
                           c.get("lastTransitionTime"))
    if as_dict(owner.get("spec")).get("suspend"):
        return Outcome("pending", "Suspended", "Job spec.suspend is true (waiting for Kueue)")
    if int(status.get("active") or 0) > 0:
        return Outcome("running", "Running", f"Job has {status.get('active')} active pod(s)")
    return Outcome("pending", "NotStarted", "Job has no active pod")


def _by_conditions(owner: Mapping, *, success: str, failure: str, suspended: str, running: str | None,
                   end_field: str | None) -> Outcome:
    """An outcome from an operator's ``status.conditions`` (``success``/``failure``/``suspended``
    condition types); running when ``running`` is True (or, without one, when not suspended and
    not ended) or any replicated job / replica / child Job (a TrainJob's ``jobsStatus``) reports
    active pods."""
    kind = str(owner.get("kind"))
    conds = conditions_of(owner)
    status = as_dict(owner.get("status"))
    end = status.get(end_field) if end_field and isinstance(status.get(end_field), str) else None
    for t, state in ((success, "succeeded"), (failure, "failed")):
        c = conds.get(t)
        if is_true(c):
            assert c is not None
            said = f"{c.get('reason') or ''} {c.get('message') or ''}".strip() or "True"
            reason = "Succeeded" if state == "succeeded" else str(c.get("reason") or f"{kind}Failed")
            return Outcome(state, reason, f"{kind} condition {t}: {said}", end or c.get("lastTransitionTime"))
    if is_true(conds.get(suspended)):
        return Outcome("pending", "Suspended", f"{kind} condition {suspended} is true (waiting for Kueue)")
    if running is not None and is_true(conds.get(running)):
        return Outcome("running", "Running", f"{kind} condition {running} is true")
    active = sum(int(as_dict(r).get("active") or 0) for r in as_list(status.get("replicatedJobsStatus")))
    active += sum(int(as_dict(r).get("active") or 0) for r in as_list(status.get("jobsStatus")))
    active += sum(int(as_dict(r).get("active") or 0) for r in as_dict(status.get("replicaStatuses")).values())
    if active > 0:
        return Outcome("running", "Running", f"{kind} has {active} active pod(s)")
    return Outcome("pending", "NotStarted", f"{kind} has no active pod")


def _jobset(owner: Mapping, status: dict) -> Outcome:
    """JobSet v0.11.1 ``api/jobset/v1alpha2/jobset_types.go`` ``JobSetConditionType``:
    ``Completed`` True is success, ``Failed`` True is failure (reason e.g. ``FailedJobs``,
    ``ReachedMaxRestarts``), ``Suspended`` True means Kueue holds it; running while any
    ``replicatedJobsStatus[].active`` is above 0."""
    return _by_conditions(owner, success="Completed", failure="Failed", suspended="Suspended", running=None,
                          end_field=None)


def _pytorchjob(owner: Mapping, status: dict) -> Outcome:
    """Kubeflow training-operator v1.9.3 ``pkg/apis/kubeflow.org/v1/common_types.go``
    ``JobConditionType``: ``Succeeded`` True is success, ``Failed`` True is failure (reason
    ``PyTorchJobFailed``...), ``Suspended`` True means Kueue holds it, ``Running`` True (or
    ``replicaStatuses[].active`` above 0) is running; ``status.completionTime`` is the end."""
    return _by_conditions(owner, success="Succeeded", failure="Failed", suspended="Suspended", running="Running",
                          end_field="completionTime")


def _trainjob(owner: Mapping, status: dict) -> Outcome:
    """Kubeflow Trainer v2.2.0 ``pkg/apis/trainer/v1alpha1/trainjob_types.go``: condition
    ``Complete`` True is success, ``Failed`` True is failure (reason e.g. ``DeadlineExceeded``),
    ``Suspended`` True means Kueue holds it; running while any ``jobsStatus[].active`` (child
    Jobs with running or pending pods) is above 0. Kueue reads the same conditions (kueue v0.17
    ``trainjob_controller.go`` ``Finished``)."""
    return _by_conditions(owner, success="Complete", failure="Failed", suspended="Suspended", running=None,
                          end_field=None)


def _pod(owner: Mapping, status: dict) -> Outcome:
    """A bare Pod, Kubernetes ``k8s.io/api/core/v1/types.go`` ``PodPhase``: ``Succeeded`` and
    ``Failed`` are terminal (the reason is ``status.reason``, e.g. ``Evicted``, else
    ``PodFailed``), ``Running`` is running; a Pending pod with ``spec.schedulingGates`` is held by
    Kueue (pod integration)."""
    phase = str(status.get("phase") or "")
    if phase == "Succeeded":
        return Outcome("succeeded", "Succeeded", "Pod phase Succeeded")
    if phase == "Failed":
        why = str(status.get("reason") or "PodFailed")
        return Outcome("failed", why, f"Pod phase Failed: {status.get('message') or why}")
    if phase == "Running":
        return Outcome("running", "Running", "Pod phase Running")
    if as_list(as_dict(owner.get("spec")).get("schedulingGates")):
        return Outcome("pending", "SchedulingGated", "the Pod is held by scheduling gates (waiting for Kueue)")
    return Outcome("pending", phase or "NotStarted", f"Pod phase {phase or '(none)'}")


def _serving(available: Callable[[Mapping, dict], str | None]) -> Callable[[Mapping, dict], Outcome]:
    """A serving kind's reader: ``running`` while ``available`` finds it serving (and says how),
    else ``pending``; never terminal."""
    def read(owner: Mapping, status: dict) -> Outcome:
        said = available(owner, status)
        kind = str(owner.get("kind"))
        if said:
            return Outcome("running", "Available", f"{kind} is available: {said}")
        return Outcome("pending", "NotAvailable", f"{kind} is not available yet")
    return read


def _replicas_available(owner: Mapping, status: dict) -> str | None:
    """Deployment (``k8s.io/api/apps/v1/types.go`` ``DeploymentAvailable`` condition,
    ``availableReplicas``) and StatefulSet (``availableReplicas``): at least one replica
    available."""
    if is_true(conditions_of(owner).get("Available")):
        return "condition Available is true"
    n = status.get("availableReplicas")
    return f"{n} available replica(s)" if isinstance(n, int) and n > 0 else None


def _lws_available(owner: Mapping, status: dict) -> str | None:
    """LeaderWorkerSet v0.8.0 ``api/leaderworkerset/v1/leaderworkerset_types.go``
    ``LeaderWorkerSetAvailable``: the ``Available`` condition (at least the minimum of groups
    ready)."""
    return "condition Available is true" if is_true(conditions_of(owner).get("Available")) else None


def _rayservice_available(owner: Mapping, status: dict) -> str | None:
    """KubeRay ray-operator v1.5 ``apis/ray/v1/rayservice_types.go``: the ``Ready`` condition
    (``RayServiceReady``), or the deprecated ``serviceStatus`` ``Running`` it is equivalent to."""
    if is_true(conditions_of(owner).get("Ready")):
        return "condition Ready is true"
    return "serviceStatus Running" if status.get("serviceStatus") == "Running" else None


def _raycluster(owner: Mapping, status: dict) -> Outcome:
    """A RayCluster run on its own (an interactive cluster), KubeRay ray-operator v1.5
    ``apis/ray/v1/raycluster_types.go`` ``ClusterState``: ``failed`` is failure, ``ready`` is
    running; a cluster never completes on its own (it ends when deleted)."""
    state = str(status.get("state") or "")
    if state == "failed":
        return Outcome("failed", str(status.get("reason") or "RayClusterFailed"),
                       f"RayCluster state failed: {status.get('reason') or ''}".strip())
    if state == "ready" or is_true(conditions_of(owner).get("RayClusterProvisioned")):
        return Outcome("running", "Ready", f"RayCluster state {state or 'provisioned'}")
    if state == "suspended" or as_dict(owner.get("spec")).get("suspend"):
        return Outcome("pending", "Suspended", "RayCluster is suspended (waiting for Kueue)")
    return Outcome("pending", "NotReady", f"RayCluster state {state or '(none)'}")


OUTCOMES: dict[tuple[str, str], Callable[[Mapping, dict], Outcome]] = {
    ("ray.io", "RayJob"): _rayjob,
    ("ray.io", "RayCluster"): _raycluster,
    ("batch", "Job"): _job,
    ("jobset.x-k8s.io", "JobSet"): _jobset,
    ("kubeflow.org", "PyTorchJob"): _pytorchjob,
    ("trainer.kubeflow.org", "TrainJob"): _trainjob,
    ("", "Pod"): _pod,
    ("apps", "Deployment"): _serving(_replicas_available),
    ("apps", "StatefulSet"): _serving(_replicas_available),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _serving(_lws_available),
    ("ray.io", "RayService"): _serving(_rayservice_available),
}
"""The outcome reader of each kind by ``(group, kind)``."""

SERVING_KINDS: frozenset[tuple[str, str]] = frozenset({
    ("apps", "Deployment"), ("apps", "StatefulSet"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ("ray.io", "RayService"), ("ray.io", "RayCluster")})
"""Kinds that never end on their own: deleting the object ends the run (``Completed``/``Deleted``)."""


def group_kind(obj: Mapping | None) -> tuple[str, str] | None:
    """``(group, kind)`` of an object or object reference (``apiVersion``, ``kind``), or None."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
        return None
    api_version = obj.get("apiVersion")
    group = api_version.split("/")[0] if isinstance(api_version, str) and "/" in api_version else ""
    return group, str(obj["kind"])


def owner_outcome(owner: Mapping | None) -> Outcome | None:
    """The state of the run's root object ``owner`` by its kind's rule (``OUTCOMES``); ``pending``
    / ``UnknownKind`` for a kind without one. Returns None when ``owner`` is None (deleted: the
    previous state stands)."""
    if owner is None:
        return None
    read = OUTCOMES.get(group_kind(owner) or ("", ""))
    if read is None:
        return Outcome("pending", "UnknownKind", f"unsupported owner kind {owner.get('kind')!r}")
    return read(owner, as_dict(owner.get("status")))
