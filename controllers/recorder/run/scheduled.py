"""The ``Scheduled`` condition: every pod of the run bound to a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from taugate.controllers.recorder.run.values import SCHEDULED, Finding, node_name, pod_name, source_of
from taugate.outcome import conditions_of


def derive_scheduled(pods: Sequence[Mapping], expected: int | None, *, admitted: bool,
                     terminal: bool) -> Finding | None:
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
        c = conditions_of(p).get("PodScheduled")
        if not node_name(p) and c is not None and c.get("status") == "False":
            unsched.append((p, c))
    bound = [p for p in pods if node_name(p)]
    need = expected if expected is not None else len(pods)
    if unsched:
        p, c = unsched[0]
        more = f" (and {len(unsched) - 1} more pod(s))" if len(unsched) > 1 else ""
        return Finding(SCHEDULED, "False", str(c.get("reason") or "Unschedulable"),
                       f"pod {pod_name(p)}: {c.get('message') or 'not schedulable'}{more}; "
                       f"{len(bound)}/{need} pods bound",
                       source_of(p, "Pod"), c.get("lastTransitionTime"))
    if len(bound) >= need:
        def bound_at(p: Mapping) -> str:
            return str(conditions_of(p).get("PodScheduled", {}).get("lastTransitionTime") or "")
        last = max(bound, key=bound_at)
        nodes = sorted({n for p in bound if (n := node_name(p))})
        return Finding(SCHEDULED, "True", "AllPodsBound",
                       f"{len(bound)}/{need} pods bound to node(s) {', '.join(nodes)}",
                       source_of(last, "Pod"), bound_at(last) or None)
    waiting = [p for p in pods if not node_name(p)]
    src = source_of(waiting[0], "Pod") if waiting else None
    return Finding(SCHEDULED, "False", "WaitingForPods", f"{len(bound)}/{need} pods bound to nodes", src)
