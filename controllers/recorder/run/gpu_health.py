"""The ``GPUHealthy`` condition from the Node conditions of the nodes a run's pods are on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from taugate.controllers.recorder.run.values import GPU_HEALTHY, Finding, node_name, source_of, terminal_pod
from taugate.outcome import conditions_of, is_true


def run_nodes(pods: Sequence[Mapping]) -> list[str]:
    """Names of the nodes the run's non-terminated pods are bound to, sorted."""
    return sorted({n for p in pods if not terminal_pod(p) for n in [node_name(p)] if n})


def derive_gpu_healthy(pods: Sequence[Mapping], nodes: Mapping[str, Mapping], health_types: Iterable[str],
                       *, terminal: bool, all_scheduled: bool = True) -> Finding | None:
    """``GPUHealthy``: no node of the run has an NPD GPU condition that is True, and all are Ready.

    Node Problem Detector rule (OKE GPU health checks): a custom condition such as ``GpuXid`` or
    ``GpuEcc`` with status ``True`` means the problem is present. The nodes are those the run's
    running pods are bound to. A problem is reported as soon as one such node has it; True needs
    ``all_scheduled`` (every pod of the run bound), until then it is Unknown. Returns None after
    the end (the state while it ran stands).
    """
    if terminal:
        return None
    names = run_nodes(pods)
    if not names:
        if any(node_name(p) for p in pods):
            return None
        return Finding(GPU_HEALTHY, "Unknown", "NoNodesYet", "no pod of the run is on a node yet")
    types = tuple(health_types)
    for n in names:
        node = nodes.get(n)
        if node is None:
            continue
        conds = conditions_of(node)
        for t in types:
            c = conds.get(t)
            if is_true(c):
                said = f"({c.get('reason') or ''}: {c.get('message') or ''})".replace("(: )", "")
                return Finding(GPU_HEALTHY, "False", t, f"node {n}: {t}=True {said}".strip(),
                               source_of(node, "Node"), c.get("lastTransitionTime"))
        ready = conds.get("Ready")
        if ready is not None and ready.get("status") != "True":
            return Finding(GPU_HEALTHY, "False", "NodeNotReady",
                           f"node {n}: Ready={ready.get('status')} "
                           f"({ready.get('message') or ready.get('reason') or ''})",
                           source_of(node, "Node"), ready.get("lastTransitionTime"))
    missing = [n for n in names if n not in nodes]
    if len(missing) == len(names):
        return Finding(GPU_HEALTHY, "Unknown", "NodesNotObserved", f"node(s) {', '.join(missing)} not observed yet")
    first = nodes[next(n for n in names if n in nodes)]
    if not all_scheduled:
        return Finding(GPU_HEALTHY, "Unknown", "NotAllScheduled",
                       f"node(s) {', '.join(names)} healthy so far; not every pod of the run is bound yet",
                       source_of(first, "Node"))
    return Finding(GPU_HEALTHY, "True", "NoGpuProblems",
                   f"node(s) {', '.join(names)}: Ready, no GPU health condition True", source_of(first, "Node"))
