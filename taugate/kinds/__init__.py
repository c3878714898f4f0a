"""The registry of workload kinds taugate admits: one module per kind, every kind table derived
from ``KINDS`` (ARCHITECTURE.md section 6 says how to add a kind)."""

from __future__ import annotations

from taugate.kinds import (
    deployment,
    job,
    jobset,
    leaderworkerset,
    pod,
    pytorchjob,
    raycluster,
    rayjob,
    rayservice,
    statefulset,
    trainjob,
)
from taugate.kinds.base import WorkloadKind

KINDS: tuple[WorkloadKind, ...] = (rayjob.KIND, raycluster.KIND, job.KIND,
                                   pod.KIND, deployment.KIND, statefulset.KIND,
                                   jobset.KIND, leaderworkerset.KIND, pytorchjob.KIND, rayservice.KIND,
                                   trainjob.KIND)
"""Every workload kind taugate admits, in the order webhook rules list them."""

_BY_GROUP_KIND: dict[tuple[str, str], WorkloadKind] = {(k.group, k.kind): k for k in KINDS}

KIND_NAMES: frozenset[str] = frozenset(k.kind for k in KINDS)


_CORE_VERSIONS = frozenset(k.version for k in KINDS if not k.group)


def group_of(api_version_or_group: str) -> str:
    """The API group of an ``apiVersion`` (the core group's bare ``v1`` -> ``""``) or of a bare group."""
    if "/" in api_version_or_group:
        return api_version_or_group.split("/")[0]
    return "" if api_version_or_group in _CORE_VERSIONS else api_version_or_group


def kind_for(api_version_or_group: str | None, kind: str | None) -> WorkloadKind | None:
    """The workload kind of an ``apiVersion`` (or bare group) and ``kind``; None if taugate does not
    admit it (or either is not a string)."""
    if not isinstance(api_version_or_group, str) or not isinstance(kind, str):
        return None
    return _BY_GROUP_KIND.get((group_of(api_version_or_group), kind))


def kind_of(obj: object) -> WorkloadKind | None:
    return kind_for(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None


def resources_by_group_version() -> dict[tuple[str, str], tuple[str, ...]]:
    """``{("ray.io", "v1"): ("rayjobs", "rayclusters"), ...}`` in ``KINDS`` order, as webhook rules
    list them."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for k in KINDS:
        out[(k.group, k.version)] = out.get((k.group, k.version), ()) + (k.resource,)
    return out


__all__ = ["KINDS", "KIND_NAMES", "WorkloadKind", "group_of", "kind_for", "kind_of", "resources_by_group_version"]
