"""Pure readers of the objects the recorder watches: the admission record, the admitted object as
kept in evidence, run-ids, names and Nodes as the recorder keeps them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from taugate import labels
from taugate import record as admission_record
from taugate.controllers.recorder.run.values import RUN_ID_RE
from taugate.devices import asks_through_dra
from taugate.kinds import KINDS, WorkloadKind, kind_of

_DROP_META = ("managedFields", "resourceVersion", "generation", "selfLink")


def parse_admission_record(obj: dict, key: bytes | None = None) -> dict:
    """The webhook's record of what it changed and why, kept only when it can be trusted.

    The annotation ``tau.azure.com/admission`` holds JSON ``{"profile", "profileSetHash",
    "workspace", "queue", "changes": [...], "policyDigest", "decisions": [...], "object",
    "runId", "signature"}``. When ``taugate.record.verify`` trusts it (signed with ``key``, bound
    to ``obj``) it is returned with ``"trusted": true``; otherwise only ``{"trusted": false,
    "untrusted": <why>, "claimed": <the annotation, at most 4 KiB>}`` (nothing of it is used).
    Either way, missing keys fall back to the labels the webhook pins on the object
    (``tau.azure.com/workload-profile``, ``tau.azure.com/workload-profile-set-hash``,
    ``tau.azure.com/workspace``, ``kueue.x-k8s.io/queue-name``).
    """
    meta = obj.get("metadata") or {}
    lbl = meta.get("labels") or {}
    raw = (meta.get("annotations") or {}).get(labels.ADMISSION_RECORD)
    rec: dict[str, Any] = {}
    if isinstance(raw, str) and raw.strip():
        check = admission_record.verify(admission_record.decode(raw), obj, key)
        if check.trusted:
            rec = {**json.loads(raw), "trusted": True}
        else:
            rec = {"trusted": False, "untrusted": check.reason, "claimed": raw[:4096]}
    else:
        rec = {"trusted": False, "untrusted": f"the object carries no {labels.ADMISSION_RECORD} annotation"}
    for name, label in (("profile", labels.WORKLOAD_PROFILE), ("profileSetHash", labels.PROFILE_SET_HASH),
                        ("workspace", labels.WORKSPACE), ("queue", labels.KUEUE_QUEUE_NAME)):
        if (not isinstance(rec.get(name), str) or not rec.get(name)) and lbl.get(label):
            rec[name] = lbl[label]
    for name in ("changes", "decisions"):
        if name in rec and not isinstance(rec[name], list):
            rec[name] = [rec[name]]
    return rec


def trimmed_object(obj: dict) -> dict:
    """The object without ``status`` and server bookkeeping (managedFields, resourceVersion)."""
    out = copy.deepcopy({k: v for k, v in obj.items() if k != "status"})
    meta = out.get("metadata") or {}
    for k in _DROP_META:
        meta.pop(k, None)
    return out


def gvr(kind: WorkloadKind) -> tuple[str, str, str]:
    """``(group, version, resource)`` of a workload kind (``taugate.kinds``), as kopf names it."""
    return (kind.group, kind.version, kind.resource)


MEMBER_OWNER_KINDS: frozenset[tuple[str, str]] = frozenset(
    {(k.group, k.kind) for k in KINDS} | {("apps", "ReplicaSet")})
"""``(group, kind)`` of the controllers whose children belong to their owner's run: every
registered kind (``taugate.kinds.KINDS``: KubeRay's RayCluster and submitter Job of a RayJob, a
JobSet's Jobs, an LWS's StatefulSets, a RayService's RayClusters, the pods of each) and the
ReplicaSet a Deployment's pods hang from (kube-controller-manager's deployment controller)."""

CHILD_RESOURCES: tuple[tuple[str, str, str], ...] = tuple(dict.fromkeys(r for k in KINDS for r in k.run_children))
"""Intermediate controllers of no registered kind the recorder follows as run members
(``WorkloadKind.run_children``: a Deployment's ReplicaSets, with the run-id label the deployment
controller copies from the pod template)."""


def is_member_child(obj: dict) -> bool:
    """True when ``obj``'s controller ownerReference is of a governed kind (``MEMBER_OWNER_KINDS``):
    it belongs to its owner's run and is never a run's root."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("apiVersion"), str):
            api_version = ref["apiVersion"]
            group = api_version.split("/")[0] if "/" in api_version else ""
            if (group, ref.get("kind")) in MEMBER_OWNER_KINDS:
                return True
    return False


def is_root(obj: dict) -> bool:
    """True when ``obj`` may be a run's root: an object of a registered kind no governed
    controller owns (``is_member_child``) that taugate governs (``WorkloadKind.governs``, or GPUs
    through DRA: a CPU-only Pod or Deployment passes admission unchanged, so it never was a run)."""
    kind = kind_of(obj)
    if kind is None or is_member_child(obj):
        return False
    try:
        templates = kind.pod_templates(obj)
        # GPUs through DRA are counted from the cluster's claim templates at admission; a pod spec
        # that may hold them is a GPU workload here (taugate.devices.asks_through_dra).
        return kind.governs(templates) or any(asks_through_dra(t.spec) for t in templates)
    except (TypeError, ValueError, AttributeError):
        return False  # a malformed object the webhook would have refused


def run_id_of(obj: dict) -> str | None:
    rid = ((obj.get("metadata") or {}).get("labels") or {}).get(labels.RUN_ID)
    return rid if isinstance(rid, str) and RUN_ID_RE.match(rid) else None


RunKey = tuple[str, str]
"""A run: ``(namespace, run-id)``. A run-id is a label anyone in any namespace can write, so the
same run-id in another namespace is another run (issue 27): it joins nothing and moves nothing."""


def run_key(obj: dict) -> RunKey | None:
    """The run ``obj`` claims by its labels: its namespace and run-id, or None (no valid run-id,
    or a cluster-scoped object)."""
    rid, ns = run_id_of(obj), namespace_of(obj)
    return (ns, rid) if rid is not None and ns else None


def name_of(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def namespace_of(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def uid_of(obj: dict) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def trim_node(node: dict) -> dict:
    """What the recorder keeps of a Node: name, labels and conditions without the kubelet's
    heartbeat times (so a heartbeat is not a change)."""
    meta = node.get("metadata") or {}
    conds = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
             for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    return {"kind": "Node", "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
            "status": {"conditions": conds}}

