"""Profile set resolution: pure functions shared by the TauCluster controller and admission.

``profile_set_hash`` is the SHA-256 of the canonical JSON (sorted keys, no spaces) of the
normalised profiles (defaults filled, sorted by name), so the controller that writes
``status.workloadProfiles.profileSetHash`` and the webhook that checks it agree byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from taugate.models import Condition, ResolvedLocalQueue, ResolvedProfile, WorkloadProfile


def normalise(profiles: list[WorkloadProfile]) -> list[dict[str, Any]]:
    """Profiles as wire dicts with defaults filled, sorted by name."""
    return sorted((p.model_dump(by_alias=True, exclude_none=True, mode="json") for p in profiles),
                  key=lambda d: d["name"])


def profile_set_hash(profiles: list[WorkloadProfile]) -> str:
    """SHA-256 hex of the canonical JSON of the normalised profiles."""
    canonical = json.dumps(normalise(profiles), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def resolve_profile(profile: WorkloadProfile, *, local_queues: dict[tuple[str, str], dict],
                    cluster_queues: dict[str, dict], flavors: dict[str, dict],
                    gpu_classes: set[str], now: str) -> ResolvedProfile:
    """Resolve one profile against observed Kueue objects and GPU classes.

    Ready is True when some LocalQueue named ``defaultLocalQueue`` exists, its ClusterQueue
    exists, every ResourceFlavor that ClusterQueue names exists, and (for a profile with
    ``gpuClass``) at least one node carries that class. ``local_queues`` is keyed by
    (namespace, name); ``now`` is an RFC 3339 timestamp for ``lastTransitionTime``.
    """
    problems: list[str] = []
    lqs = [ResolvedLocalQueue(name=n, namespace=ns, cluster_queue=str((lq.get("spec") or {}).get("clusterQueue", "")))
           for (ns, n), lq in sorted(local_queues.items()) if n == profile.default_local_queue]
    if not lqs:
        problems.append(f"LocalQueue {profile.default_local_queue!r} not found in any namespace")
    cqs = sorted({lq.cluster_queue for lq in lqs if lq.cluster_queue})
    rfs: set[str] = set()
    for cq in cqs:
        if cq not in cluster_queues:
            problems.append(f"ClusterQueue {cq!r} (behind LocalQueue {profile.default_local_queue!r}) not found")
            continue
        for group in (cluster_queues[cq].get("spec") or {}).get("resourceGroups") or []:
            for fl in group.get("flavors") or []:
                rfs.add(fl.get("name"))
    for rf in sorted(rfs):
        if rf not in flavors:
            problems.append(f"ResourceFlavor {rf!r} not found")
    if profile.gpu_class and profile.gpu_class not in gpu_classes:
        problems.append(f"no node has GPU class {profile.gpu_class!r}")
    ready = Condition(type="Ready", status="False" if problems else "True",
                      reason="Unresolved" if problems else "Resolved",
                      message="; ".join(problems) or "queue, flavors and GPU class found",
                      last_transition_time=now)
    return ResolvedProfile(**profile.model_dump(), conditions=[ready], cluster_queues=cqs,
                           resource_flavors=sorted(rfs), local_queues=lqs)
