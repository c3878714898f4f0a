"""How a run's root object says where it stands: the ``Outcome`` each workload kind reads from its
own status (``WorkloadKind.outcome``), and the readers the kinds share. Pure: objects in, outcomes out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from taugate.access import as_dict, as_list


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


Reader = Callable[[Mapping[str, Any], dict[str, Any]], Outcome]
"""An outcome reader: ``(object, its status) -> Outcome``."""


def conditions_of(obj: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``status.conditions`` by type (the last entry of a type wins)."""
    out: dict[str, dict[str, Any]] = {}
    for c in as_list(as_dict((obj or {}).get("status")).get("conditions")):
        if isinstance(c, dict) and isinstance(c.get("type"), str):
            out[c["type"]] = c
    return out


def is_true(cond: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """A condition that is present with status ``True`` (narrows ``cond`` to a dict)."""
    return bool(cond) and cond is not None and cond.get("status") == "True"


def by_conditions(owner: Mapping[str, Any], *, success: str, failure: str, suspended: str, running: str | None,
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


def serving_outcome(owner: Mapping[str, Any], available: str | None) -> Outcome:
    """A serving kind's outcome: ``running`` while ``available`` says how it serves, else
    ``pending``; never terminal (the run ends when the object is deleted)."""
    kind = str(owner.get("kind"))
    if available:
        return Outcome("running", "Available", f"{kind} is available: {available}")
    return Outcome("pending", "NotAvailable", f"{kind} is not available yet")
