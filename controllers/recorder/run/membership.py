"""Which objects belong to a run (pure). A run-id is a label anyone who can create a workload may
write (taugate keeps a valid client-chosen one on CREATE, as TauGrid's CLI sets its own), so the
recorder does not take the label's word for membership:

- a run is bound to one root object (an object of a registered workload kind no governed
  controller owns), the first one seen: the uid in the run's evidence, else the oldest root
  carrying the run-id (``choose_owner``); any other root with the same run-id is an intruder,
  recorded as such and never followed;
- a pod or child object belongs to the run only through its controller ownerReference chain
  back to that root (``members``): KubeRay's RayCluster and submitter Job are owned by the
  RayJob (ray-operator v1.5 ``rayjob_controller.go`` sets the controller reference on both), a
  RayService's RayClusters by it (``rayservice_controller.go``), their pods by them; a batch
  Job's pods by the Job (kube-controller-manager's job controller); a JobSet's Jobs by the JobSet
  (jobset v0.11.1 ``jobset_controller.go`` ``constructJob``); a Deployment's ReplicaSets by it
  and their pods by them (the deployment and replicaset controllers); an LWS's leader
  StatefulSet by the LWS, each group's worker StatefulSet by its leader pod (lws v0.8.0
  ``leaderworkerset_controller.go``, ``pod_controller.go``); a PyTorchJob's pods by it
  (training-operator v1.9.3 ``pod.go``). A bare Pod that is a root is its own run's.
  A pod that only copies the label does not join.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def uid_of(obj: Mapping[str, Any]) -> str | None:
    """``metadata.uid``, or None."""
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return str(uid) if uid else None


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of ``obj``'s controller ownerReference (``controller: true``), or None."""
    meta = obj.get("metadata")
    for ref in (meta.get("ownerReferences") if isinstance(meta, Mapping) else None) or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid"):
            return str(ref["uid"])
    return None


def _created(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("uid") or "")


def choose_owner(roots: Iterable[Mapping[str, Any]], bound_uid: str | None) -> tuple[dict | None, list[dict]]:
    """The run's root and the intruders, among ``roots`` (the objects of registered kinds no
    governed controller owns carrying the run-id): the one with ``bound_uid`` when the run is bound
    (None when it is gone: the owner was deleted), else the oldest (creationTimestamp, then uid)."""
    ordered = sorted((dict(r) for r in roots), key=_created)
    if bound_uid is None:
        return (ordered[0], ordered[1:]) if ordered else (None, [])
    owner = next((r for r in ordered if uid_of(r) == bound_uid), None)
    return owner, [r for r in ordered if uid_of(r) != bound_uid]


def members(root_uid: str | None, children: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The uids of the run: the root and every child (a RayCluster, KubeRay's submitter Job, a
    JobSet's Job, a ReplicaSet, a StatefulSet, a pod) whose controller chain reaches it.
    ``children`` are the candidates carrying the run-id."""
    if root_uid is None:
        return frozenset()
    found = {root_uid}
    pending = [dict(c) for c in children]
    grew = True
    while grew:
        grew = False
        for c in list(pending):
            uid = uid_of(c)
            if uid and controller_uid(c) in found:
                found.add(uid)
                pending.remove(c)
                grew = True
    return frozenset(found)


def run_pods(pods: Iterable[Mapping[str, Any]], uids: frozenset[str]) -> tuple[list[dict], list[dict]]:
    """``pods`` split into (the run's pods: controller owner among ``uids``, or the pod itself
    among them: a bare Pod that is the run's root, an LWS's leader pod; the others)."""
    mine: list[dict] = []
    others: list[dict] = []
    for p in pods:
        (mine if controller_uid(p) in uids or uid_of(p) in uids else others).append(dict(p))
    return mine, others
